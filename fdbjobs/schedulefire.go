package fdbjobs

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Firing schedules: each Runtime runs one loop (scheduleLoop) for the
// schedules of its kinds. It reads, without conflicts, the index of its
// kinds' next periods up to its clock's now, and takes the due schedules
// in transactions of scheduleBatch (in a random order, so that nodes that
// read the same index meet seldom): each reads the schedules' records with
// conflicts, inserts their periods' jobs and moves their next periods on,
// in one commit. A period is thus inserted once: two nodes that take the
// same schedule conflict on its record, and the one retried finds the
// period gone. A commit_unknown_result retried finds the same.

// scheduleDuePage is the most due schedules one reading of the index takes.
const scheduleDuePage = 1000

// FireSchedules inserts, now, the jobs of kind's schedules that are due
// at now, as a Runtime's schedule loop does at its clock's time, and
// returns how many jobs it saw inserted: for tests (a time of their
// choosing: fdbjobstest.FireSchedules) and for a loop of your own. It is
// safe beside Runtimes: a period still gets one job.
func (c *Client) FireSchedules(ctx context.Context, kind string, now time.Time) (int, error) {
	if err := checkName("kind", kind); err != nil {
		return 0, err
	}
	n, _, err := c.fireDue(ctx, kind, now)
	return n, err
}

// fireDue inserts the jobs of kind's schedules due at now (its node's
// clock), until none is left that it can insert (one an Overlap queue
// holds is left), and reports how many it inserted and the earliest next
// period after now it read, in the index or in a schedule's record (Unix
// ms; 0 when it read none). The records count: a pass that finds its due
// entries stale (a commit that succeeded unseen moved them on) reads no
// later entry of the index, yet its schedules have a next period.
func (c *Client) fireDue(ctx context.Context, kind string, now time.Time) (fired int, next int64, err error) {
	for {
		n, more, nx, err := c.firePage(ctx, kind, now)
		fired, next = fired+n, earliest(next, nx)
		// A schedule may have periods left (CatchUpAll inserts them over
		// several transactions, an Overlap skip or queue one at a time),
		// and a transaction that committed unseen cannot tell: another
		// pass finds them, or nothing.
		if err != nil || (n == 0 && !more) {
			return fired, next, err
		}
	}
}

// firePage is one pass of fireDue over a page of the due index (one range
// read finds the due schedules and the next period after now); more says
// that the page was full.
func (c *Client) firePage(ctx context.Context, kind string, now time.Time) (fired int, more bool, next int64, err error) {
	nowMs := now.UnixMilli()
	rg := c.k.dueRange(kind, math.MaxInt64-1)
	entries, err := kv.ReadTransact(ctx, c.db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.Snapshot().GetRange(rg, kv.RangeOptions{Limit: scheduleDuePage + 1}).GetSliceWithError()
	})
	if err != nil {
		return 0, false, 0, err
	}
	dues := make([]due, 0, len(entries))
	for _, e := range entries {
		t, err := c.k.root.Unpack(e.Key)
		if err != nil || len(t) != 4 {
			continue
		}
		n, _ := intElem(t[2])
		if n > nowMs {
			next = n
			break
		}
		if len(dues) == scheduleDuePage {
			more = true
			break
		}
		name, _ := t[3].(string)
		dues = append(dues, due{name, n})
	}
	var batches [][]due
	for len(dues) > 0 {
		n := min(scheduleBatch, len(dues))
		batches = append(batches, dues[:n])
		dues = dues[n:]
	}
	rand.Shuffle(len(batches), func(i, j int) { batches[i], batches[j] = batches[j], batches[i] })
	// Up to scheduleFirers transactions at once: their schedules differ,
	// and their jobs' writes do not conflict.
	var total atomic.Int64
	var mu sync.Mutex // guards next
	var g errgroup.Group
	g.SetLimit(scheduleFirers)
	for _, b := range batches {
		g.Go(func() error {
			n, nx, err := c.fireBatch(ctx, kind, nowMs, b)
			total.Add(int64(n))
			mu.Lock()
			next = earliest(next, nx)
			mu.Unlock()
			return err
		})
	}
	err = g.Wait()
	return int(total.Load()), more, next, err
}

// earliest is the earlier of two periods (Unix ms), 0 standing for none.
func earliest(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// due is an entry of the due index: a schedule and its next period.
type due struct {
	name string
	next int64
}

// fireBatch fires the schedules of b that are due at nowMs, in one
// transaction, and returns the number of jobs it inserted and the earliest
// next period of the active schedules it read (Unix ms, 0 for none).
func (c *Client) fireBatch(ctx context.Context, kind string, nowMs int64, b []due) (int, int64, error) {
	token, err := c.addToken(ctx)
	if err != nil {
		return 0, 0, err
	}
	var next int64
	n, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (int, error) {
		next = 0
		var jobs []NewJob
		var datas [][]byte
		recs := make([]*scheduleRecord, len(b))
		futs := make([]kv.FutureByteSlice, len(b))
		for i, d := range b {
			futs[i] = tr.Get(c.k.scheduleKey(d.name))
		}
		for i, d := range b {
			v, err := futs[i].Get()
			if err != nil {
				return 0, err
			}
			if v != nil {
				if recs[i], err = decodeSchedule(d.name, v); err != nil {
					return 0, err
				}
			}
			// An entry is stale when this transaction's earlier attempt
			// committed unseen, or another node fired the schedule since
			// the index was read (none is left so): it goes, and the
			// schedule is fired from its record if it is due, once.
			r := recs[i]
			active := r != nil && !r.Paused && r.Kind == kind
			if !active || r.Next != d.next {
				tr.Clear(c.k.dueKey(kind, d.next, d.name))
			}
			if !active || slices.ContainsFunc(b[:i], func(o due) bool { return o.name == d.name }) {
				recs[i] = nil
			}
		}
		// The last jobs of the schedules that mind overlaps.
		rows := make([]*row, len(b))
		for i, r := range recs {
			if r == nil || r.Next > nowMs || r.Overlap == OverlapAllow || r.LastJob == "" {
				continue
			}
			if rows[i], err = c.k.readRow(tr, kind, r.LastJob); err != nil {
				return 0, err
			}
		}
		for i, r := range recs {
			if r != nil && (r.Next > nowMs || len(jobs) >= scheduleTxJobs) {
				next = earliest(next, r.Next)
			}
			if r == nil || r.Next > nowMs || len(jobs) >= scheduleTxJobs {
				continue
			}
			was := *r
			runs, err := r.fire(nowMs, rows[i] != nil && unfinished(rows[i]))
			if err != nil {
				c.cfg.Logger.Warn().Err(err).Str("schedule", b[i].name).Msg("fdbjobs: schedule")
				continue
			}
			for _, p := range runs {
				data, err := json.Marshal(envelope{Args: r.Args, MaxAttempts: r.MaxAttempts, Schedule: b[i].name, Period: p})
				if err != nil {
					return 0, err
				}
				id := randomHex()
				jobs = append(jobs, NewJob{ID: id, Data: data, ScheduledTime: c.cfg.stime(time.UnixMilli(p)), Fresh: true, Priority: r.Priority})
				datas = append(datas, data)
				r.Last, r.LastJob = p, id
			}
			next = earliest(next, r.Next)
			if r.Next == was.Next && r.Queued == was.Queued && r.LastJob == was.LastJob {
				continue
			}
			if err := c.k.writeSchedule(tr, b[i].name, r, &was); err != nil {
				return 0, err
			}
		}
		if len(jobs) > 0 {
			if _, err := c.addPage(tr, kind, jobs, datas, token, false, true, c.insertHook(ctx, kind)); err != nil {
				return 0, err
			}
		}
		return len(jobs), nil
	})
	if err != nil {
		return 0, 0, err
	}
	if n > 0 {
		c.committed(nil, kind)
		c.metrics.Load().count(metricInserted, kind, n)
	}
	return n, next, nil
}

// unfinished reports whether the job of r is pending or running.
func unfinished(r *row) bool {
	s := countState(r.state, r.data)
	return s == StatePending || s == StateRunning
}

// fire plans the schedule's due periods at now (Unix ms; r.Next <= now),
// given whether its last job is unfinished: it returns the periods to
// insert jobs for, oldest first, and moves r.Next (and r.Queued) on,
// which may leave periods due (CatchUpAll's beyond scheduleCatchUpMax,
// and after the one period an Overlap skip or queue inserts at a time).
func (r *scheduleRecord) fire(now int64, lastUnfinished bool) (runs []int64, err error) {
	p, err := r.period()
	if err != nil {
		return nil, err
	}
	missed := func(t int64) bool { return now-t > ScheduleMisfire.Milliseconds() || p.next(t) <= now }
	busy := lastUnfinished && r.Overlap != OverlapAllow
	switch {
	case busy && r.Overlap == OverlapSkip:
		r.Next = p.next(now) // every due period skipped
		return nil, nil
	case busy: // OverlapQueue: wait for it
		r.Queued = true
		return nil, nil
	case r.Queued:
		// Its wait is over: the queued period runs (with CatchUpOne, the
		// latest period due), and the periods that came while it waited
		// follow CatchUp, so that a queue does not fall ever further
		// behind a job that runs longer than its period.
		q := r.Next
		r.Queued, r.Next = false, p.next(q)
		if r.CatchUp == CatchUpOne { // one job, for the latest period due
			q = latestDue(p, q, now)
			r.Next = p.next(q)
		}
		if r.Next <= now {
			latest := latestDue(p, r.Next, now)
			switch r.CatchUp {
			case CatchUpNone:
				r.Next = latest
				if missed(latest) {
					r.Next = p.next(latest)
				}
			case CatchUpAll:
				if from := now - r.WindowMs; r.Next <= from {
					r.Next = p.next(from - 1)
				}
			}
		}
		return []int64{q}, nil
	}
	latest := latestDue(p, r.Next, now)
	switch r.CatchUp {
	case CatchUpNone:
		if !missed(latest) {
			runs = []int64{latest}
		}
	case CatchUpOne:
		runs = []int64{latest}
	case CatchUpAll:
		t := r.Next
		if from := now - r.WindowMs; t <= from {
			t = p.next(from - 1)
		}
		for ; t <= now && len(runs) < scheduleCatchUpMax; t = p.next(t) {
			runs = append(runs, t)
			if r.Overlap != OverlapAllow {
				break // one at a time: the next waits for this one, or is skipped while it runs
			}
		}
		if len(runs) > 0 && runs[len(runs)-1] != latest {
			r.Next = p.next(runs[len(runs)-1])
			return runs, nil
		}
	}
	r.Next = p.next(latest)
	return runs, nil
}

// latestDue returns the latest period of p at or before now that is at or
// after from (from is a period at or before now, so there is one). Periods
// are counted forward from a point close before now, found by looking
// back ever further, so that a schedule down for a long time costs a few
// steps, not one per missed period.
func latestDue(p period, from, now int64) int64 {
	if e, ok := p.(every); ok {
		return max(from, now/int64(e)*int64(e))
	}
	start := from
	for _, back := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		t := now - back.Milliseconds()
		if t <= from {
			break
		}
		if n := p.next(t); n <= now {
			start = n
			break
		}
	}
	latest := start
	for t := start; t <= now; t = p.next(t) {
		latest = t
	}
	return latest
}

// scheduleRetryWait is the longest a schedule loop waits to try again
// after a pass that failed (a failed pass may have left due periods).
const scheduleRetryWait = time.Second

// scheduleLoop fires the due periods of the Runtime's kinds' schedules
// until ctx ends: at the next period it read, at least every
// SchedulePoll, within scheduleRetryWait after a pass that failed, and at
// once when this Client changes a schedule. Idle, it costs one range read
// per kind and SchedulePoll.
func (r *Runtime) scheduleLoop(ctx context.Context) {
	clock, log := r.c.cfg.Clock, r.c.cfg.Logger
	for ctx.Err() == nil {
		wake := r.c.schedWake.wait("")
		wait := r.opts.SchedulePoll
		for _, k := range r.kinds {
			_, next, err := r.c.fireDue(ctx, k.kind, clock.Now())
			if err != nil && ctx.Err() == nil {
				log.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: inserting the jobs of due schedules")
				wait = min(wait, scheduleRetryWait)
			}
			if next != 0 {
				wait = min(wait, max(0, time.UnixMilli(next).Sub(clock.Now())))
			}
		}
		select {
		case <-clock.After(wait):
		case <-wake:
		case <-ctx.Done():
		}
	}
}
