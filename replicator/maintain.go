package replicator

import (
	"context"

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
		return tr.Get(s.k.indexVersionKey()).Get()
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
		tr.Set(s.k.indexVersionKey(), tuple.Tuple{int64(indexVersion)}.Pack())
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
			if err := s.retention.markDeleted(tr, d.DBUUID, d.DBName); err != nil {
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
// instance's counters are cleared in tr as well (and its deletion mark by
// the caller, Retention).
func (s *Store) removeDBJobs(ctx context.Context, tr kv.Transaction, dbUUID string, c dbCursor, limit int) (removed int, next dbCursor, done bool, err error) {
	docIDs, keys, err := s.dbJobIDs(tr, dbUUID, c.before, !c.moved, limit)
	if err != nil {
		return 0, c, false, err
	}
	ids := make([]string, len(docIDs))
	for i, docID := range docIDs {
		ids[i] = indexJobID(dbUUID, docID)
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
		tr.ClearRange(prefixRange(s.k.dbCounts, tuple.Tuple{dbUUID}))
		return len(gone), c, true, nil
	}
	return len(gone), dbCursor{before: docIDs[len(docIDs)-1], moved: true}, false, nil
}

// RunningOn returns the ids of the jobs the index has running on node,
// read scanBatch keys per transaction (a node runs max_jobs jobs at
// most).
func (s *Store) RunningOn(ctx context.Context, node string) ([]string, error) {
	var out []string
	err := kv.ReadPages(ctx, s.db, prefixRange(s.k.running, tuple.Tuple{node}), scanBatch, func(page []kv.KeyValue) (bool, error) {
		ids, _ := idsOf(s.k.running, page)
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
