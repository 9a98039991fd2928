package fdbjobs

import (
	"context"
	"errors"
	"time"

	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// ActivityMonitor re-enqueues the running jobs of one type whose worker sent
// no Update for a type timeout. A started Client runs one per type; several
// nodes may run one for the same type (they then conflict harmlessly).
//
// It works on database versions, not clocks, so clock skew between nodes
// does not matter: each period (the type timeout plus a random jitter of
// at most half of it, capped by Config.ActivityMonitorMaxJitter) it reads
// the database's current version, and goes through the type's leases
// written at or before the version it read one period before: it
// re-enqueues every job such a lease still holds (the row running under
// the lease's token and index, with the lease's versionstamp as its seq:
// no Update since) and clears the lease, whose other jobs have finished,
// been lost or moved to a newer lease. A dead worker's job is thus pending
// again between one and a bit over two type timeouts after its last
// Update. The re-enqueued job keeps its data; the old worker's next Update
// or Finish gets ErrHalt. No key is written by every accept or heartbeat
// for it: it needs only the leases.
//
// Re-enqueuing runs in batches of Config.BatchSize leases per transaction,
// growing by Config.BatchIncrement after each full batch up to batchMax
// and shrinking by Config.BatchFactor after transaction_too_large, a
// retryable error or a timeout (AIMD); a batch also ends, between leases,
// once it has read about monitorBatchBytes of job rows, and the next
// starts that size.
//
// The type's ReenqueueHook (SetReenqueueHook) runs in each batch's
// transaction with the jobs it re-enqueues.
//
// Each cycle that re-enqueues jobs logs one info line on Config.Logger
// with the type and how many jobs went back to pending: the sign, seen
// from the job layer, that a worker (usually a whole node) stopped.
type ActivityMonitor struct {
	c   *Client
	typ string
	svc service.Base

	// Owned by the running goroutine (or a caller of Check).
	version int64 // the database version read by the previous check
	haveVS  bool
	timeout time.Duration
	batch   kv.Batch
}

// NewActivityMonitor returns a stopped activity monitor for typ. Most
// programs let Client.Start run monitors; this is for running one alone.
func (c *Client) NewActivityMonitor(typ string) *ActivityMonitor {
	return &ActivityMonitor{c: c, typ: typ, batch: c.cfg.batch(batchMax)}
}

// Start runs the monitor until Stop or until ctx ends. Starting a started
// monitor does nothing.
func (m *ActivityMonitor) Start(ctx context.Context) error {
	_, err := m.svc.Start(ctx, nil, m.run)
	return err
}

// Stop stops the monitor and waits for it. Stop before Start and a second
// Stop do nothing.
func (m *ActivityMonitor) Stop() { m.svc.Stop() }

func (m *ActivityMonitor) run(ctx context.Context) {
	for {
		n, next, err := m.Check(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.c.cfg.Logger.Warn().Err(err).Str("type", m.typ).Msg("fdbjobs: activity monitor check failed")
		}
		if n > 0 {
			m.c.cfg.Logger.Info().Str("type", m.typ).Int("jobs", n).Dur("timeout", m.timeout).
				Msg("fdbjobs: activity monitor re-enqueued running jobs whose worker sent no update for a type timeout")
		}
		t := m.c.cfg.Clock.NewTimer(next)
		if h := m.c.hooks.monitorChecked; h != nil {
			h(m.typ, n)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}

// Check runs one cycle of the monitor: it re-enqueues the jobs inactive
// since the previous cycle's version reading (none on the first cycle, or
// after the type timeout changed), then reads the version again. It returns
// how many jobs it re-enqueued and when the next cycle is due. Check must
// not run concurrently with itself or with a started monitor.
func (m *ActivityMonitor) Check(ctx context.Context) (reenqueued int, next time.Duration, err error) {
	timeout, err := m.c.TypeTimeout(ctx, nil, m.typ)
	if errors.Is(err, ErrNotFound) {
		m.haveVS = false
		return 0, m.c.cfg.MissingTimeoutCheck, nil
	}
	if err != nil {
		return 0, m.c.cfg.MissingTimeoutCheck, err
	}
	if timeout != m.timeout {
		m.timeout, m.haveVS = timeout, false
	}
	maxJitter := min(timeout/2, m.c.cfg.ActivityMonitorMaxJitter)
	next = timeout + jitter(maxJitter)
	if m.haveVS {
		if reenqueued, err = m.reenqueue(ctx, m.version); err != nil {
			return reenqueued, next, err
		}
	}
	m.version, err = kv.ReadTransact(ctx, m.c.db, func(tr kv.ReadTransaction) (int64, error) {
		return tr.GetReadVersion().Get()
	})
	m.haveVS = err == nil
	return reenqueued, next, err
}

// reenqueue re-enqueues every job still held by a lease written at or
// before version, and clears those leases, shard by shard. Leases are in
// base shards; a heartbeat's of a release before 29 November 2026 was in
// its job's lane (shardBase), so the lanes the type has are read too.
func (m *ActivityMonitor) reenqueue(ctx context.Context, version int64) (int, error) {
	type info struct {
		shards, lanes []byte
	}
	v, err := kv.ReadTransact(ctx, m.c.db, func(tr kv.ReadTransaction) (info, error) {
		shards, lanes := tr.Get(m.c.k.shardsKey(m.typ)), tr.Get(m.c.k.lanesKey(m.typ))
		var i info
		var err error
		if i.shards, err = shards.Get(); err != nil {
			return i, err
		}
		i.lanes, err = lanes.Get()
		return i, err
	})
	if err != nil {
		return 0, err
	}
	_, high, err := decodeShards(v.shards)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range decodeLanes(v.lanes).all(high) {
		r := m.c.k.leaseRange(m.typ, s, -1, version)
		r.Begin = m.c.k.leases.Pack(tuple.Tuple{m.typ, s})
		n, err := m.reenqueueRange(ctx, r)
		total += n
		if err != nil {
			return total, err
		}
	}
	// No lease written at or before version is left, so neither is a row
	// running under one: their touch keys, which the clears above missed
	// (one written after its lease went), are of no use.
	_, err = kv.Transact(ctx, m.c.db, func(tr kv.Transaction) (struct{}, error) {
		tr.ClearRange(kv.KeyRange{
			Begin: m.c.k.root.Pack(tuple.Tuple{keyLeaseTouched, m.typ}),
			End:   m.c.k.root.Pack(tuple.Tuple{keyLeaseTouched, m.typ, versionstampAt(version + 1)}),
		})
		return struct{}{}, nil
	})
	return total, err
}

// reenqueueRange goes through the leases of r in AIMD-sized batches.
func (m *ActivityMonitor) reenqueueRange(ctx context.Context, r kv.KeyRange) (int, error) {
	total := 0
	for {
		n, full, err := m.batchOnce(ctx, r, m.batch.Size())
		if err != nil {
			if err := m.batch.Retry(ctx, err); err != nil {
				return total, gaveUp("activity monitor", err)
			}
			continue
		}
		m.batch.Done()
		total += n
		if !full {
			return total, nil
		}
		m.batch.Grow()
	}
}

// batchOnce re-enqueues up to limit inactive jobs in a single transaction
// attempt: errors come back to reenqueue, which sizes the next batch.
func (m *ActivityMonitor) batchOnce(ctx context.Context, r kv.KeyRange, limit int) (int, bool, error) {
	if h := m.c.hooks.monitorBatch; h != nil {
		if err := h(limit); err != nil {
			return 0, false, err
		}
	}
	k, typ := m.c.k, m.typ
	type result struct {
		n      int  // jobs re-enqueued
		leases int  // leases gone through
		full   bool // the limit, or monitorBatchBytes, ended the batch
		cut    bool // ended by monitorBatchBytes, not by limit
	}
	res, err := once(ctx, m.c.db, func(tr kv.Transaction) (result, error) {
		// A snapshot read: leases this old are written by nobody, and two
		// monitors that clear the same one need not conflict (they do on
		// the rows of the jobs they both re-enqueue).
		kvs, err := tr.Snapshot().GetRange(r, kv.RangeOptions{Limit: limit}).GetSliceWithError()
		if err != nil {
			return result{}, err
		}
		var ids []string
		var rows []*row
		var touched []kv.Key // of the leases cleared: after the rows' writes, which touch them
		done := func() error {
			err := m.c.reenqueueRows(tr, typ, ids, rows)
			for _, key := range touched {
				tr.Clear(key)
			}
			return err
		}
		read := 0
		for i, e := range kvs {
			// Leases are read whole, and the batch ends between two once
			// it read about monitorBatchBytes of rows (each is written
			// back as much again): the leases not reached stay for the
			// next.
			if read >= monitorBatchBytes {
				return result{n: len(ids), full: true, cut: true, leases: i}, done()
			}
			vs, token, entries, err := k.decodeLease(e.Key, e.Value)
			if err != nil {
				tr.Clear(e.Key)
				continue
			}
			touched = append(touched, k.touchKey(typ, vs, token))
			futs := make([]kv.FutureByteSlice, len(entries))
			for j, en := range entries {
				futs[j] = tr.Snapshot().Get(k.dataKey(typ, en.id))
			}
			for j, en := range entries {
				v, err := futs[j].Get()
				if err != nil {
					return result{}, err
				}
				read += len(v)
				if v == nil {
					continue
				}
				row, err := decodeRow(v)
				if err != nil {
					return result{}, err
				}
				if row.state != Running || row.seq != vs || !row.lock.equal(lock{token, en.index}) {
					continue // finished, lost or renewed since
				}
				// The job's worker sent nothing for a type timeout: take
				// it back, unless that worker's Update commits first.
				if err := tr.AddReadConflictKey(k.dataKey(typ, en.id)); err != nil {
					return result{}, err
				}
				ids, rows = append(ids, en.id), append(rows, row)
			}
			tr.Clear(e.Key)
		}
		if err := done(); err != nil {
			return result{}, err
		}
		return result{n: len(ids), full: len(kvs) == limit, leases: len(kvs)}, nil
	})
	if res.cut {
		// Leases this size fit about this many to a batch.
		m.batch.Fit(res.leases)
	}
	if err == nil && res.n > 0 {
		m.c.committed(nil, typ)
	}
	return res.n, res.full, err
}

// once runs f in one transaction attempt and commits, without retrying.
func once[T any](ctx context.Context, db kv.Database, f func(kv.Transaction) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	tr, err := db.CreateTransaction()
	if err != nil {
		return zero, err
	}
	stop := context.AfterFunc(ctx, tr.Cancel)
	defer stop()
	v, err := guarded(func() (T, error) { return f(tr) })
	if err == nil {
		_, err = tr.Commit().Get()
	}
	if err != nil {
		tr.Cancel()
		return zero, err
	}
	return v, nil
}

// guarded is kv.Guard for a typed function: a panic with an error (from
// MustGet or Pack) becomes an error.
func guarded[T any](f func() (T, error)) (T, error) {
	v, err := kv.Guard(func() (any, error) { return f() })
	t, _ := v.(T)
	return t, err
}
