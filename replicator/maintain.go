package replicator

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Batch sizes of the Store's paged work. Each transaction stays far below
// FoundationDB's limits: a removed job costs about ten key reads and
// writes, an index key read about 100 bytes.
const (
	// RemoveBatchDefault is how many jobs one transaction removes when a
	// deleted database's jobs or expired transient jobs are removed.
	RemoveBatchDefault = 200
	// indexBatch is how many jobs one transaction of the index backfill
	// indexes.
	indexBatch = 200
	// scanBatch is how many index keys one transaction reads when a list
	// of ids is read from the index (RunningOn).
	scanBatch = 1000
)

// DeletionLeaseDefault is how long a node holds a deleted database whose
// jobs it removes (RemoveDeletedDBJobs), renewed at half-time: longer than
// a removal transaction with its retries, and how long the others wait
// when the holder died.
const DeletionLeaseDefault = 30 * time.Second

// indexVersion is the version of the view index this code keeps; a store
// whose (19) key holds less is indexed by buildIndex. Version 2 added
// the owner keys (20–22).
const indexVersion = 2

// buildIndex indexes the jobs of a store that predates the view index (or
// holds an older version of it): once per store, at the first Setup that
// finds the version key missing, paged across transactions of indexBatch
// jobs (a million jobs take a few thousand transactions, minutes on a
// loaded cluster: views list what is indexed so far meanwhile). Jobs of
// databases deleted before the upgrade are marked for removal, as
// UnregisterDB does. It is idempotent, and several nodes starting at
// once may run it together (their transactions conflict harmlessly).
// Writes by current code keep the index of the jobs they touch, so jobs
// changing during the backfill stay right.
func (s *Store) buildIndex(ctx context.Context) error {
	if s.indexed.Load() {
		return nil
	}
	v, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(s.indexVersionKey()).Get()
	})
	if err != nil {
		return err
	}
	if t, err := tuple.Unpack(v); err == nil && len(t) == 1 {
		if n, err := int64Elem(t[0]); err == nil && n >= indexVersion {
			s.indexed.Store(true)
			return nil
		}
	}
	var batch []string
	size := &kv.Batch{Max: indexBatch}
	flush := func() error {
		for len(batch) > 0 {
			n, err := kv.TransactBatch(ctx, s.db, size, func(tr kv.Transaction, n int) (int, error) {
				return s.indexExisting(ctx, tr, batch[:min(n, len(batch))])
			})
			if err != nil {
				return err
			}
			batch = batch[n:]
		}
		return nil
	}
	err = s.jobs.FoldJobs(ctx, JobType, func(j fdbjobs.JobInfo) error {
		batch = append(batch, j.ID)
		if len(batch) < indexBatch {
			return nil
		}
		return flush()
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return err
	}
	_, err = s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(s.indexVersionKey(), tuple.Tuple{int64(indexVersion)}.Pack())
		return nil, nil
	})
	if err == nil {
		s.indexed.Store(true)
	}
	return err
}

// indexExisting indexes jobs ids as they stand, in tr, and marks the
// databases of orphaned document jobs (their instance is not the one
// registered under their name) as deleted. It returns how many of ids it
// did: a prefix when the read budget ran out (readRows).
func (s *Store) indexExisting(ctx context.Context, tr kv.Transaction, ids []string) (int, error) {
	rows, err := s.readRows(ctx, tr, ids)
	if err != nil {
		return 0, err
	}
	jobs := make([]indexedJob, len(rows))
	registered := map[string]string{}
	for i, r := range rows {
		jobs[i] = indexedJob{id: r.ID, st: r.State}
		if r.State == fdbjobs.NotFound {
			continue
		}
		d, err := DecodeJobData(r.Data)
		if err != nil {
			continue
		}
		jobs[i].d = d
		if d.DBUUID == "" {
			continue
		}
		u, ok := registered[d.DBName]
		if !ok {
			if u, err = s.RegisteredDB(tr, d.DBName); err != nil {
				return 0, err
			}
			registered[d.DBName] = u
		}
		if u != d.DBUUID {
			if err := s.markDeleted(tr, d.DBUUID, d.DBName); err != nil {
				return 0, err
			}
		}
	}
	return len(rows), s.index(tr, jobs)
}

// dbCursor is where the removal of a deleted database's jobs stands. It
// walks the database's (4) keys from the last document id down: never
// from the same end again, which would step over the deletion tombstones
// of every job removed so far (on an LSM store, a cost growing with
// them); and away from the acceptors, which take the oldest jobs first
// (often the first documents) and remove them as they find them
// orphaned, so that the two rarely conflict.
type dbCursor struct {
	before string // the last document id passed
	moved  bool   // before is set
}

// removeDBJobs removes up to limit jobs of database instance dbUUID, which
// UnregisterDB retired, from cursor c on, in tr. It returns how many it
// removed, the cursor after them and whether none are left; then the
// instance's deletion mark and counters are cleared in tr as well.
func (s *Store) removeDBJobs(ctx context.Context, tr kv.Transaction, dbUUID string, c dbCursor, limit int) (removed int, next dbCursor, done bool, err error) {
	docIDs, keys, err := s.dbJobIDs(tr, dbUUID, c.before, !c.moved, limit)
	if err != nil {
		return 0, c, false, err
	}
	ids := make([]string, len(docIDs))
	for i, docID := range docIDs {
		ids[i] = DocJobID(dbUUID, docID)
	}
	gone, examined, err := s.removeJobs(ctx, tr, ids, nil)
	if err != nil {
		return 0, c, false, err
	}
	for _, k := range keys[:examined] {
		tr.Clear(k) // also a stale key with no job
	}
	if examined < len(docIDs) {
		return len(gone), dbCursor{before: docIDs[examined-1], moved: true}, false, nil
	}
	if len(docIDs) < limit {
		tr.Clear(s.deletedDBKey(dbUUID))
		tr.ClearRange(prefixRange(s.dbCounts, tuple.Tuple{dbUUID}))
		return len(gone), c, true, nil
	}
	return len(gone), dbCursor{before: docIDs[len(docIDs)-1], moved: true}, false, nil
}

// deletion is a deleted database instance's mark (keyDeletedDBs): its
// name, and the node removing its jobs with its lease (Unix ms), so that
// nodes do not all remove the same jobs at once and conflict.
type deletion struct {
	dbUUID, dbName, holder string
	until                  int64
}

func (d deletion) pack() []byte { return tuple.Tuple{d.dbName, d.holder, d.until}.Pack() }

func (s *Store) unpackDeletion(k kv.Key, v []byte) (deletion, bool) {
	t, err := s.deletedDBs.Unpack(k)
	uuid, ok := tupleString(t, err)
	if !ok {
		return deletion{}, false
	}
	d := deletion{dbUUID: uuid}
	vt, err := tuple.Unpack(v)
	if err != nil || len(vt) != 3 {
		return d, true // unreadable: free to take
	}
	d.dbName, _ = vt[0].(string)
	d.holder, _ = vt[1].(string)
	d.until, _ = int64Elem(vt[2])
	return d, true
}

// markDeleted marks database instance dbUUID of dbName for the removal of
// its jobs, unless it is marked already.
func (s *Store) markDeleted(tr kv.Transaction, dbUUID, dbName string) error {
	v, err := tr.Get(s.deletedDBKey(dbUUID)).Get()
	if err != nil || v != nil {
		return err
	}
	tr.Set(s.deletedDBKey(dbUUID), deletion{dbName: dbName}.pack())
	return nil
}

// takeDeletion makes holder the remover of dbUUID's jobs until now +
// lease, unless the database is done or another node's lease runs.
func (s *Store) takeDeletion(ctx context.Context, dbUUID, holder string, now time.Time, lease time.Duration) (bool, error) {
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (bool, error) {
		k := s.deletedDBKey(dbUUID)
		v, err := tr.Get(k).Get()
		if err != nil || v == nil {
			return false, err
		}
		d, _ := s.unpackDeletion(k, v)
		if d.holder != "" && d.holder != holder && d.until > now.UnixMilli() {
			return false, nil
		}
		d.holder, d.until = holder, now.Add(lease).UnixMilli()
		tr.Set(k, d.pack())
		return true, nil
	})
}

// RemoveDeletedDBJobs removes the jobs of every database UnregisterDB
// retired, batch (RemoveBatchDefault when 0) per transaction (fewer while
// transactions fail, see kv.TransactBatch), until none is left or ctx ends: a
// database with n documents takes about n/batch transactions. holder
// takes each database for lease (renewed at half-time, by now), so that
// another node calling it at the same time passes that database by
// instead of conflicting on every transaction; a holder that dies leaves
// its database to the others once its lease ran out. It returns how many
// jobs it removed (commits only: an attempt that committed but reported
// commit_unknown_result is not counted).
func (s *Store) RemoveDeletedDBJobs(ctx context.Context, holder string, now func() time.Time, lease time.Duration, batch int) (int, error) {
	if batch <= 0 {
		batch = RemoveBatchDefault
	}
	total := 0
	size := &kv.Batch{Max: batch}
	err := kv.ReadPages(ctx, s.db, subspaceRange(s.deletedDBs), 16, func(marks []kv.KeyValue) (bool, error) {
		for _, m := range marks {
			d, ok := s.unpackDeletion(m.Key, m.Value)
			if !ok {
				continue
			}
			n, err := s.removeDeleted(ctx, d, holder, now, lease, size)
			total += n
			if err != nil {
				return false, err
			}
		}
		return false, nil
	})
	return total, err
}

// removeDeleted removes the jobs of one deleted database while holder
// holds its lease.
func (s *Store) removeDeleted(ctx context.Context, d deletion, holder string, now func() time.Time, lease time.Duration, size *kv.Batch) (int, error) {
	total := 0
	var renewAt time.Time
	var c dbCursor
	for {
		if t := now(); !t.Before(renewAt) {
			ok, err := s.takeDeletion(ctx, d.dbUUID, holder, t, lease)
			if err != nil || !ok {
				return total, err
			}
			renewAt = t.Add(lease / 2)
		}
		type res struct {
			n    int
			c    dbCursor
			done bool
		}
		r, err := kv.TransactBatch(ctx, s.db, size, func(tr kv.Transaction, n int) (res, error) {
			n, next, done, err := s.removeDBJobs(ctx, tr, d.dbUUID, c, n)
			return res{n, next, done}, err
		})
		if err != nil {
			return total, err
		}
		total += r.n
		if r.done {
			return total, nil
		}
		c = r.c
	}
}

// RemoveExpiredJobs removes the finished transient jobs last updated at or
// before before (Unix ms), found through the index, batch
// (RemoveBatchDefault when 0) per transaction, and returns how many it
// removed (commits only, as RemoveDeletedDBJobs).
func (s *Store) RemoveExpiredJobs(ctx context.Context, before int64, batch int) (int, error) {
	if batch <= 0 {
		batch = RemoveBatchDefault
	}
	// The range's start moves past each batch, never back over the
	// deletion tombstones of the keys removed (see dbCursor); a job
	// finished since has a later time than before.
	rng := kv.KeyRange{Begin: subspaceRange(s.expiry).Begin, End: s.expiry.Pack(tuple.Tuple{before + 1})}
	total := 0
	size := &kv.Batch{Max: batch}
	for {
		type res struct {
			n    int
			last kv.Key // the last key examined; nil when the range is done
		}
		r, err := kv.TransactBatch(ctx, s.db, size, func(tr kv.Transaction, batch int) (res, error) {
			ids, keys, err := s.idsIn(tr, s.expiry, rng, batch)
			if err != nil {
				return res{}, err
			}
			var stale []string
			gone, examined, err := s.removeJobs(ctx, tr, ids, func(st fdbjobs.State, d *JobData) bool {
				if e := entryOf("", st, d); e == nil || e.expires == 0 || e.expires > before {
					return true
				}
				return false
			})
			if err != nil {
				return res{}, err
			}
			removed := map[string]bool{}
			for _, id := range gone {
				removed[id] = true
			}
			for i, id := range ids[:examined] {
				if !removed[id] {
					stale = append(stale, id)
					tr.Clear(keys[i])
				}
			}
			out := res{n: len(gone)}
			if examined < len(ids) || len(ids) == batch {
				out.last = keys[examined-1]
			}
			// A kept job's expiry key did not match its row: the key goes
			// and the job is indexed afresh, so the loop moves on.
			return out, s.reindex(ctx, tr, stale...)
		})
		if err != nil {
			return total, err
		}
		total += r.n
		if r.last == nil {
			return total, nil
		}
		rng.Begin = kv.KeyAfter(r.last)
	}
}

// RunningOn returns the ids of the jobs the index has running on node,
// read scanBatch keys per transaction (a node runs max_jobs jobs at
// most).
func (s *Store) RunningOn(ctx context.Context, node string) ([]string, error) {
	var out []string
	err := kv.ReadPages(ctx, s.db, prefixRange(s.running, tuple.Tuple{node}), scanBatch, func(page []kv.KeyValue) (bool, error) {
		ids, _ := idsOf(s.running, page)
		out = append(out, ids...)
		return false, nil
	})
	return out, err
}

// idsIn returns the job ids (the last tuple element) of up to limit keys
// of rng, a range of index subspace ss, with their keys.
func (s *Store) idsIn(tr kv.ReadTransaction, ss subspace.Subspace, rng kv.KeyRange, limit int) ([]string, []kv.Key, error) {
	kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: limit}).GetSliceWithError()
	if err != nil {
		return nil, nil, err
	}
	ids, keys := idsOf(ss, kvs)
	return ids, keys, nil
}

// idsOf returns the job ids (the last tuple element) of the keys of kvs,
// keys of index subspace ss, with those keys.
func idsOf(ss subspace.Subspace, kvs []kv.KeyValue) ([]string, []kv.Key) {
	ids := make([]string, 0, len(kvs))
	keys := make([]kv.Key, 0, len(kvs))
	for _, e := range kvs {
		t, err := ss.Unpack(e.Key)
		if err != nil || len(t) == 0 {
			continue
		}
		if id, ok := t[len(t)-1].(string); ok {
			ids, keys = append(ids, id), append(keys, e.Key)
		}
	}
	return ids, keys
}
