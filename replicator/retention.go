package replicator

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Retention removes the jobs of the _replicator databases UnregisterDB
// retired, paged across transactions, whose marks (key 18) it keeps with
// the lease of the node removing them; the replication nodes call it
// every interval (see replicator/scheduler's doc.go). The removals
// themselves are the Store's (job writes with their index entries). The
// finished transient jobs are not its: the index marks each for the job
// layer's retention (fdbjobs RetainTx), whose sweeper removes them
// transient_job_max_age later with the Store's OnRemove; MoveExpiryKeys
// hands over those of older stores.
type Retention struct {
	s     *Store
	marks subspace.Subspace // (18, DBUUID) -> (DBName, Holder, Until)
}

func (r *Retention) key(dbUUID string) kv.Key { return r.marks.Pack(tuple.Tuple{dbUUID}) }

// DeletionLeaseDefault is how long a node holds a deleted database whose
// jobs it removes (RemoveDeletedDBJobs), renewed at half-time: longer than
// a removal transaction with its retries, and how long the others wait
// when the holder died.
const DeletionLeaseDefault = 30 * time.Second

// deletion is a deleted database instance's mark (keyDeletedDBs): its
// name, and the node removing its jobs with its lease (Unix ms), so that
// nodes do not all remove the same jobs at once and conflict.
type deletion struct {
	dbUUID, dbName, holder string
	until                  int64
}

func (d deletion) pack() []byte { return tuple.Tuple{d.dbName, d.holder, d.until}.Pack() }

func (r *Retention) unpackDeletion(k kv.Key, v []byte) (deletion, bool) {
	t, err := r.marks.Unpack(k)
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
func (r *Retention) markDeleted(tr kv.Transaction, dbUUID, dbName string) error {
	v, err := tr.Get(r.key(dbUUID)).Get()
	if err != nil || v != nil {
		return err
	}
	tr.Set(r.key(dbUUID), deletion{dbName: dbName}.pack())
	return nil
}

// takeDeletion makes holder the remover of dbUUID's jobs until now +
// lease, unless the database is done or another node's lease runs.
func (r *Retention) takeDeletion(ctx context.Context, dbUUID, holder string, now time.Time, lease time.Duration) (bool, error) {
	return kv.Transact(ctx, r.s.db, func(tr kv.Transaction) (bool, error) {
		k := r.key(dbUUID)
		v, err := tr.Get(k).Get()
		if err != nil || v == nil {
			return false, err
		}
		d, _ := r.unpackDeletion(k, v)
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
func (r *Retention) RemoveDeletedDBJobs(ctx context.Context, holder string, now func() time.Time, lease time.Duration, batch int) (int, error) {
	if batch <= 0 {
		batch = RemoveBatchDefault
	}
	total := 0
	size := &kv.Batch{Max: batch}
	err := kv.ReadPages(ctx, r.s.db, subspaceRange(r.marks), 16, func(marks []kv.KeyValue) (bool, error) {
		for _, m := range marks {
			d, ok := r.unpackDeletion(m.Key, m.Value)
			if !ok {
				continue
			}
			n, err := r.removeDeleted(ctx, d, holder, now, lease, size)
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
func (r *Retention) removeDeleted(ctx context.Context, d deletion, holder string, now func() time.Time, lease time.Duration, size *kv.Batch) (int, error) {
	total := 0
	var renewAt time.Time
	var c dbCursor
	for {
		if t := now(); !t.Before(renewAt) {
			ok, err := r.takeDeletion(ctx, d.dbUUID, holder, t, lease)
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
		x, err := kv.TransactBatch(ctx, r.s.db, size, func(tr kv.Transaction, n int) (res, error) {
			n, next, done, err := r.s.removeDBJobs(ctx, tr, d.dbUUID, c, n)
			if err == nil && done {
				tr.Clear(r.key(d.dbUUID))
			}
			return res{n, next, done}, err
		})
		if err != nil {
			return total, err
		}
		total += x.n
		if x.done {
			return total, nil
		}
		c = x.c
	}
}

// MoveExpiryKeys hands the finished transient jobs of a store written
// before their retention was the job layer's to the layer: each key of
// the old expiry index (13) becomes the job's mark (fdbjobs RetainTx), if
// the job's index entry still says that time, and goes; batch
// (RemoveBatchDefault when 0) keys per transaction, until none is left or
// ctx ends. It returns how many keys it cleared. A store that has none costs one
// range read: the replication nodes call it every interval, so that the
// keys an older node writes during a rolling upgrade move too.
func (r *Retention) MoveExpiryKeys(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		batch = RemoveBatchDefault
	}
	total := 0
	// The range's start moves past each batch, never back over the
	// deletion tombstones of the keys cleared (see dbCursor).
	rng := subspaceRange(r.s.k.expiry)
	for {
		var last kv.Key
		n, err := kv.Transact(ctx, r.s.db, func(tr kv.Transaction) (int, error) {
			kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: batch}).GetSliceWithError()
			if err != nil {
				return 0, err
			}
			last = nil
			if len(kvs) > 0 {
				last = kvs[len(kvs)-1].Key
			}
			entries := make([]kv.FutureByteSlice, len(kvs))
			ats := make([]int64, len(kvs))
			ids := make([]string, len(kvs))
			for i, k := range kvs {
				t, err := r.s.k.expiry.Unpack(k.Key)
				if err != nil || len(t) != 2 {
					continue
				}
				at, aerr := int64Elem(t[0])
				id, ok := t[1].(string)
				if aerr != nil || !ok {
					continue
				}
				ats[i], ids[i], entries[i] = at, id, tr.Get(r.s.k.entryKey(id))
			}
			for i, k := range kvs {
				tr.Clear(k.Key)
				if entries[i] == nil {
					continue
				}
				v, err := entries[i].Get()
				if err != nil {
					return 0, err
				}
				if v == nil {
					continue
				}
				if e, err := unpackEntry(v); err == nil && e.expires == ats[i] {
					r.s.jobs.RetainTx(tr, JobType, ids[i], time.UnixMilli(ats[i]))
				}
			}
			return len(kvs), nil
		})
		total += n
		if err != nil || n < batch {
			return total, err
		}
		rng.Begin = kv.KeyAfter(last)
	}
}
