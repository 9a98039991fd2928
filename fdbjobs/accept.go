package fdbjobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// WaitForever as AcceptOptions.Timeout makes Accept wait until a job comes
// or its context ends.
const WaitForever time.Duration = -1

// AcceptOptions tune Accept. The zero value takes any pending job
// scheduled up to now (Config.TimeUnit), without waiting.
type AcceptOptions struct {
	// MaxScheduledTime is the inclusive upper bound of the scheduled times
	// of the jobs taken. Zero means now, in Config.TimeUnit (read at each
	// look, so a job scheduled for later is taken once its time comes,
	// when something wakes the Accept), or 0 with NoSchedule.
	MaxScheduledTime int64
	// NoSchedule takes only jobs scheduled at 0, in O(1) without reading a
	// range of pending keys, by looking next to a random point: it needs
	// job ids that look random (such as UUIDs). MaxScheduledTime must be
	// zero (ErrNoScheduleMaxTime).
	NoSchedule bool
	// Timeout is how long to wait for a job when none is pending: 0 returns
	// ErrNotFound at once, WaitForever waits until ctx ends. A waiting
	// Accept holds a watch on the type's pending counter and wakes as soon
	// as a job is added; it never polls. A job made pending by this
	// Client's own transaction wakes it at once, before the watch fires.
	Timeout time.Duration
}

// Job is a job held by a worker, as returned by Accept. Pass it to Update,
// Finish and Resubmit. It is not safe for concurrent use.
type Job struct {
	Type string
	ID   string
	// Data is the job's data as last read or written by this worker.
	Data json.RawMessage
	// ScheduledTime is the job's scheduled time as last seen by this
	// worker.
	ScheduledTime int64
	// Resubmitted reports, after Update or Resubmit, that the job was
	// resubmitted while running: Finish will make it pending again at
	// ScheduledTime.
	Resubmitted bool

	lock lock
	hold *hold // the worker's claim as far as it can trust it (HoldDeadline)
}

// Lock returns the job's lock (claim token and batch index) as text, for
// logs.
func (j *Job) Lock() string {
	return fmt.Sprintf("%s.%d", hex.EncodeToString(j.lock.token), j.lock.index)
}

// Accept takes one pending job of typ and makes it running with a fresh
// lock (see AcceptBatch). It returns ErrNotFound when no job came before the
// timeout.
func (c *Client) Accept(ctx context.Context, typ string, opts AcceptOptions) (*Job, error) {
	jobs, err := c.AcceptBatch(ctx, typ, 1, opts)
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// AcceptBatch takes up to n pending jobs of typ in one transaction and makes
// them running. Candidates are read with a snapshot range read of at most
// AcceptRangeLimit pending keys and picked at random, adding a read
// conflict on the picked keys only, so concurrent acceptors rarely
// conflict. It returns at least one job, or ErrNotFound when none came
// before opts.Timeout.
//
// The claim token is chosen once per call, and the claims it made are
// recorded under it, so a retry after commit_unknown_result returns the
// jobs the first attempt took instead of taking others.
func (c *Client) AcceptBatch(ctx context.Context, typ string, n int, opts AcceptOptions) ([]*Job, error) {
	if err := checkName("type", typ); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxBatch {
		return nil, fmt.Errorf("%w: batch size %d outside [1, %d]", ErrInvalidArgument, n, MaxBatch)
	}
	if opts.NoSchedule && opts.MaxScheduledTime != 0 {
		return nil, ErrNoScheduleMaxTime
	}
	if err := checkSTime(opts.MaxScheduledTime); err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	clock := c.cfg.Clock
	deadline := clock.Now().Add(opts.Timeout)
	wait := opts.Timeout != 0
	for {
		released, woken := c.claiming.released(), c.wake.wait(typ)
		max := opts.MaxScheduledTime
		if max == 0 && !opts.NoSchedule {
			max = c.cfg.now()
		}
		jobs, watch, busy, err := c.acceptOnce(ctx, typ, n, max, opts.NoSchedule, token, wait)
		if err != nil {
			return nil, err
		}
		if len(jobs) > 0 {
			if watch != nil {
				watch.Cancel()
			}
			return jobs, nil
		}
		if busy {
			// Every pending job seen is being claimed by another acceptor
			// of this node: wait until one of them is done, then look again.
			select {
			case <-released:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if !wait {
			return nil, fmt.Errorf("no pending job of type %q: %w", typ, ErrNotFound)
		}
		if h := c.hooks.acceptWaiting; h != nil {
			h(typ)
		}
		if err := c.awaitPending(ctx, watch, woken, opts.Timeout > 0, deadline); err != nil {
			if err == ErrNotFound {
				return nil, fmt.Errorf("no pending job of type %q: %w", typ, ErrNotFound)
			}
			return nil, err
		}
	}
}

// awaitPending waits for the pending watch, a commit of this Client
// (woken; see wakes), the deadline or ctx.
func (c *Client) awaitPending(ctx context.Context, watch kv.FutureNil, woken <-chan struct{}, timed bool, deadline time.Time) error {
	defer watch.Cancel()
	var timerC <-chan time.Time
	if timed {
		remaining := deadline.Sub(c.cfg.Clock.Now())
		if remaining <= 0 {
			return ErrNotFound
		}
		t := c.cfg.Clock.NewTimer(remaining)
		defer t.Stop()
		timerC = t.Chan()
	}
	select {
	case <-watch.Done():
		if _, err := watch.Get(); err != nil {
			// The watch failed (too_many_watches, a cancelled commit): back
			// off briefly and read again rather than spin.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil
	case <-woken:
		return nil
	case <-timerC:
		return ErrNotFound
	case <-ctx.Done():
		return ctx.Err()
	}
}

// acceptOnce runs one accept transaction. With no job to take and
// wantWatch, it returns a watch on the type's pending counter set in that
// transaction.
//
// busy reports that pending jobs were seen but all were being claimed by
// this node's other acceptors: the caller should wait for one of those to
// finish (claiming.released) and try again.
func (c *Client) acceptOnce(ctx context.Context, typ string, n int, max int64, noSchedule bool, token []byte, wantWatch bool) (jobs []*Job, watch kv.FutureNil, busy bool, err error) {
	type result struct {
		jobs    []*Job
		watch   kv.FutureNil
		timeout time.Duration
	}
	var picked []kv.Key // by the latest attempt, still marked in c.claiming
	defer func() { c.claiming.release(picked) }()
	// The hold of the jobs taken counts from before the first attempt: any
	// attempt may be the one that committed.
	start := c.cfg.Clock.Now()
	attempts := 0
	res, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (result, error) {
		attempts++
		// The previous attempt failed, or committed: either way its picks
		// need no marking any more.
		c.claiming.release(picked)
		picked, busy = nil, false
		// The type timeout the holds count with (no hold for a type
		// without one: no activity monitor takes its jobs back).
		timeout, err := c.typeTimeout(tr.Snapshot(), typ)
		if errors.Is(err, ErrNotFound) {
			timeout, err = 0, nil
		}
		if err != nil {
			return result{}, err
		}
		// Only a retry can find a claim record of this call's token: the
		// first attempt's, if it committed (commit_unknown_result).
		var jobs []*Job
		if attempts > 1 {
			jobs, err = c.reclaim(tr, typ, token)
			if err != nil || len(jobs) > 0 {
				return result{jobs: jobs, timeout: timeout}, err
			}
		}
		var cands []kv.Key
		if noSchedule {
			cands, err = c.pickNoSchedule(tr, typ, n)
		} else {
			cands, busy, err = c.pickScheduled(tr, typ, n, max)
			picked = cands
		}
		if err != nil {
			return result{}, err
		}
		jobs, err = c.claim(tr, typ, token, cands)
		if err != nil {
			return result{}, err
		}
		if len(jobs) == 0 && wantWatch && !busy {
			return result{watch: tr.Watch(c.k.watchesPending(typ))}, nil
		}
		return result{jobs: jobs, timeout: timeout}, nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	if res.timeout > 0 {
		for _, j := range res.jobs {
			j.hold = &hold{clock: c.cfg.Clock, timeout: res.timeout, from: start}
		}
	}
	return res.jobs, res.watch, busy && len(res.jobs) == 0, nil
}

// reclaim returns the jobs an earlier attempt of this accept claimed under
// token and still holds (after commit_unknown_result).
func (c *Client) reclaim(tr kv.Transaction, typ string, token []byte) ([]*Job, error) {
	v, err := tr.Get(c.k.claimKey(typ, token)).Get()
	if err != nil || v == nil {
		return nil, err
	}
	ids, err := tuple.Unpack(v)
	if err != nil {
		return nil, fmt.Errorf("fdbjobs: bad claim record: %w", err)
	}
	var jobs []*Job
	for i, e := range ids {
		id, _ := e.(string)
		r, err := c.k.readRow(tr, typ, id)
		if err != nil {
			return nil, err
		}
		l := lock{token: token, index: int64(i)}
		if r != nil && r.lock.equal(l) {
			jobs = append(jobs, &Job{Type: typ, ID: id, Data: r.data, ScheduledTime: r.stime, lock: l})
		}
	}
	return jobs, nil
}

// pickScheduled picks up to n random keys among the first AcceptRangeLimit
// pending keys scheduled at or before max, read as a snapshot, skipping the
// keys this node's other acceptors are claiming.
//
// The read starts at the node's cursor for the type: the first pending key
// its previous read saw. Every key before it was pending earlier and has
// most likely been accepted since, and on an LSM store (the embedded
// backend) a read from the start of the range would step over all of their
// deletion tombstones, making Accept cost grow with the number of jobs
// accepted. The cursor goes back to the start of the range when the read
// from it finds nothing and at least every CursorReset, so a job added
// before the cursor (a lower scheduled time or id) waits at most that long
// to become a candidate.
func (c *Client) pickScheduled(tr kv.Transaction, typ string, n int, max int64) (picked []kv.Key, busy bool, err error) {
	r := c.pendingRange(typ, max)
	snap := tr.Snapshot()
	begin, fromCursor := c.claiming.cursor(typ, r.Begin.FDBKey(), r.End.FDBKey())
	limit := window(n)
	seen := false
	// Keys marked by this node's other acceptors are skipped; when a whole
	// window is marked, look further (a few windows at most).
	for windows := 0; windows < 8 && len(picked) < n; windows++ {
		kvs, err := snap.GetRange(kv.KeyRange{Begin: begin, End: r.End}, kv.RangeOptions{Limit: limit}).GetSliceWithError()
		if err != nil {
			return nil, false, err
		}
		if windows == 0 {
			if len(kvs) == 0 && fromCursor {
				kvs, err = snap.GetRange(r, kv.RangeOptions{Limit: limit}).GetSliceWithError()
				if err != nil {
					return nil, false, err
				}
			}
			if len(kvs) > 0 {
				c.claiming.setCursor(typ, kvs[0].Key)
			}
		}
		seen = seen || len(kvs) > 0
		picked = append(picked, c.claiming.pick(kvs, n-len(picked))...)
		if len(kvs) < limit {
			break
		}
		begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
	return picked, seen && len(picked) == 0, nil
}

// window is how many pending keys an Accept of n jobs reads to pick from:
// AcceptRangeLimit for one job, as couch_jobs, so that acceptors on
// different nodes rarely pick the same job; for a batch, enough to choose
// from (4n, at least 256) but no more than AcceptRangeLimit, as a batch
// pays for every key it reads.
func window(n int) int {
	if n == 1 {
		return AcceptRangeLimit
	}
	return min(AcceptRangeLimit, max(256, 4*n))
}

// pickNoSchedule picks up to n pending keys scheduled at 0, each the
// nearest one after or before a random point (couch_jobs' no_schedule).
func (c *Client) pickNoSchedule(tr kv.Transaction, typ string, n int) ([]kv.Key, error) {
	r := prefixRange(c.k.pending, tuple.Tuple{typ, int64(0)})
	begin, end := r.Begin.FDBKey(), r.End.FDBKey()
	snap := tr.Snapshot()
	seen := map[string]bool{}
	var out []kv.Key
	inRange := func(k kv.Key) bool {
		return bytes.Compare(k, begin) >= 0 && bytes.Compare(k, end) < 0 && !seen[string(k)]
	}
	for attempt := 0; attempt < 2*n && len(out) < n; attempt++ {
		point := c.k.pending.Pack(tuple.Tuple{typ, int64(0), randomHex()})
		sels := []kv.KeySelector{kv.FirstGreaterOrEqual(point), kv.LastLessOrEqual(point)}
		if mrand.IntN(2) == 0 {
			sels[0], sels[1] = sels[1], sels[0]
		}
		found := false
		for _, sel := range sels {
			k, err := snap.GetKey(sel).Get()
			if err != nil {
				return nil, err
			}
			if inRange(k) {
				seen[string(k)] = true
				out = append(out, k)
				found = true
				break
			}
		}
		if !found {
			break // both directions hit the range ends: nothing (else) pending
		}
	}
	return out, nil
}

// newToken returns 16 random bytes: a claim or add token.
func newToken() ([]byte, error) {
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("fdbjobs: random token: %w", err)
	}
	return token, nil
}

func randomHex() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(mrand.Uint32())
	}
	return hex.EncodeToString(b[:])
}

// claim takes the candidate pending keys: a read conflict on each, then the
// job rows, which must be pending at the key's scheduled time (stale keys
// are dropped). The rows are read as a snapshot: the conflict on the
// pending key covers them, as every write to a pending job's row writes
// that key too (see doc.go, "Pending keys").
func (c *Client) claim(tr kv.Transaction, typ string, token []byte, cands []kv.Key) ([]*Job, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	ids := make([]string, len(cands))
	stimes := make([]int64, len(cands))
	futs := make([]kv.FutureByteSlice, len(cands))
	for i, k := range cands {
		t, err := c.k.pending.Unpack(k)
		if err != nil || len(t) != 3 {
			return nil, fmt.Errorf("fdbjobs: bad pending key %s", k)
		}
		id, _ := t[2].(string)
		stime, _ := intElem(t[1])
		ids[i], stimes[i] = id, stime
		if err := tr.AddReadConflictKey(k); err != nil {
			return nil, err
		}
		tr.Clear(k)
		futs[i] = tr.Snapshot().Get(c.k.dataKey(typ, id))
	}
	rows, err := decodeRows(futs)
	if err != nil {
		return nil, err
	}
	var jobs []*Job
	for i, r := range rows {
		if r == nil || r.state != Pending || r.stime != stimes[i] {
			continue
		}
		l := lock{token: token, index: int64(len(jobs))}
		r.state, r.seqNew, r.lock, r.resubmit = Running, true, l, false
		c.k.writeRow(tr, typ, ids[i], r)
		jobs = append(jobs, &Job{Type: typ, ID: ids[i], Data: r.data, ScheduledTime: r.stime, lock: l})
	}
	if len(jobs) > 0 {
		rec := make(tuple.Tuple, len(jobs))
		for i, j := range jobs {
			rec[i] = j.ID
		}
		tr.Set(c.k.claimKey(typ, token), rec.Pack())
		c.k.bumpActivity(tr, typ)
	}
	return jobs, nil
}
