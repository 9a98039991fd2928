package fdbjobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
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

	// fence, for a Runtime's accepts of a limited kind, reads its lease
	// of the kind's capacity in each accept transaction (limits.go): it
	// issues the read and returns its wait.
	fence func(kv.Transaction) func() error
	// handicapped bounds, for an OldestFirst fetch, the handicapped due
	// times of the jobs taken by handicap (priority.go, due).
	handicapped bool
	handicap    int64
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
	// Priority is the job's priority as accepted (NewJob.Priority).
	Priority int

	// shard is the pending queue's shard the job was accepted from (its
	// base shard: shardBase).
	shard int64
	lock  lock
	hold  *hold  // the worker's claim as far as it can trust it (HoldDeadline)
	lease *lease // the lease key the job was last written under
	// known is the row as this Job's Accept wrote it, for its first end to
	// write without reading it (batchWith) unless its lease was touched
	// since; nil once used, or unknown (a reclaimed job).
	known atomic.Pointer[row]
}

// lease is a worker's count of the jobs that one LEASES key lists and that
// the worker still holds under it (neither finished, nor moved to a newer
// lease by Update, nor lost). The transaction in which the last of them
// leaves clears the key; a lease the worker abandons is cleared by the
// activity monitor once it is older than a type timeout. Jobs of one lease
// may be used by different goroutines.
type lease struct {
	shard int64
	vs    tuple.Versionstamp // the key's, set once its commit is known

	mu   sync.Mutex
	held int
}

// emptiedBy reports whether n more jobs leaving would leave l empty.
func (l *lease) emptiedBy(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held == n
}

// leave counts n jobs out of l, once their transaction committed.
func (l *lease) leave(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held -= n
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
// them running: the first due jobs of one of the shards this node owns,
// and of others when that one has fewer (see doc.go, "Shards" and
// "Accepting"), and fewer than n when their data passes 400 KB
// (kv.PageBytes), so that its transaction stays small. It returns at least
// one job, or ErrNotFound when none came before opts.Timeout.
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
	if err := c.CheckLayout(ctx); err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	clock := c.cfg.Clock
	deadline := clock.Now().Add(opts.Timeout)
	wait := opts.Timeout != 0
	// After a look that found nothing, the jobs that woke this call may be
	// in any shard: read them all at once rather than its own first.
	scan := false
	sw := &sweep{}
	var released, woken <-chan struct{}
	wb := kv.Backoff{Initial: acceptWatchRetry, Max: acceptWatchRetry, Rand: kv.Full} // after failed watches
	for {
		if sw.pos == 0 {
			// From the start of a look: a release or wake-up during any of
			// its transactions counts.
			released, woken = c.claiming.released(), c.wake.wait(typ)
		}
		max := opts.MaxScheduledTime
		if max == 0 && !opts.NoSchedule {
			max = c.cfg.now()
		}
		d := dueBound{max: max, handicapped: opts.handicapped, handicap: opts.handicap}
		jobs, watch, busy, more, err := c.acceptOnce(ctx, typ, n, d, opts.NoSchedule, opts.fence, token, wait, scan, sw)
		if err != nil {
			return nil, err
		}
		scan = true
		if len(jobs) > 0 {
			if watch != nil {
				watch.Cancel()
			}
			return jobs, nil
		}
		if more {
			continue // shards this look has not read yet
		}
		sw = &sweep{} // the next look starts over
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
		if err := c.awaitPending(ctx, watch, &wb, woken, opts.Timeout > 0, deadline); err != nil {
			if err == ErrNotFound {
				return nil, fmt.Errorf("no pending job of type %q: %w", typ, ErrNotFound)
			}
			return nil, err
		}
	}
}

// claimGrace is how long an accept's transaction goes on once its
// caller's ctx ended, for a commit on its way to resolve (acceptOnce).
const claimGrace = 5 * time.Second

// acceptWatchRetry is how long an accept whose pending watch failed
// (too_many_watches, a cancelled commit) waits before it reads again
// rather than spin.
const acceptWatchRetry = 10 * time.Millisecond

// acceptPageMin is the fewest jobs an accept's attempt is cut to after
// attempts whose reads failed (as AddBatch's pages are, addPageMin).
const acceptPageMin = 50

// awaitPending waits for the pending watch, a commit of this Client
// (woken; see wakes), the deadline or ctx; after a watch that failed it
// waits acceptWatchRetry (wb) before the caller reads again.
func (c *Client) awaitPending(ctx context.Context, watch kv.FutureNil, wb *kv.Backoff, woken <-chan struct{}, timed bool, deadline time.Time) error {
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
			if werr := wb.WaitAny(ctx, err); werr != nil {
				return werr
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
// busy reports that no job was found but shards were skipped because this
// node's other acceptors were claiming from them: the caller should wait
// for one of those to finish (claiming.released) and try again.
func (c *Client) acceptOnce(ctx context.Context, typ string, n int, d dueBound, noSchedule bool, fence func(kv.Transaction) func() error, token []byte, wantWatch, scan bool, sw *sweep) (jobs []*Job, watch kv.FutureNil, busy, more bool, err error) {
	type result struct {
		jobs    []*Job
		watch   kv.FutureNil
		timeout time.Duration
		vs      kv.FutureKey // of the commit that took jobs (nil: reclaimed)
		shard   int64        // of its lease
		look    pick         // what pickScheduled saw
	}
	// A shard on which an attempt failed (most likely a conflict with
	// another node's acceptor) is tried last by the next attempts.
	avoid := map[int64]bool{}
	var marked []int64 // shards marked by the latest attempt, still in c.claiming
	unmark := func(avoided bool) {
		for _, s := range marked {
			c.claiming.release(typ, s)
			if avoided {
				avoid[s] = true
			}
		}
		marked = nil
	}
	defer unmark(false)
	// The hold of the jobs taken counts from before the first attempt: any
	// attempt may be the one that committed.
	start := c.cfg.Clock.Now()
	attempts := 0
	var since int64                 // the first attempt's read version
	leaseShards := map[int64]bool{} // where the attempts wrote their leases
	// When ctx ends (a Runtime stopping) while a claim is on its way, its
	// commit is not cut short: abandoned, it might still take effect, and
	// the jobs it took would stay running with no holder until the
	// activity monitor hands them back, a job timeout later. The
	// transaction's own context ends claimGrace after ctx; each attempt
	// first looks at ctx, and after an attempt whose commit may have gone
	// through, the next one (handBack) only looks for its claims and
	// returns them, for the caller to work or hand back.
	txCtx, cancelTx := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTx()
	stopGrace := context.AfterFunc(ctx, func() {
		t := c.cfg.Clock.AfterFunc(claimGrace, cancelTx)
		context.AfterFunc(txCtx, func() { t.Stop() })
	})
	defer stopGrace()
	handBack := false
	// An attempt after one whose reads failed takes fewer jobs, down to
	// acceptPageMin: an accept of many gets through a cluster whose reads
	// keep failing, each attempt meeting a failure less often. (A commit
	// that fails, a conflict most likely, does not shrink it.)
	take := kv.Batch{Max: n, Min: min(n, acceptPageMin)}
	body := func(tr kv.Transaction) (result, error) {
		attempts++
		if err := ctx.Err(); err != nil {
			if attempts == 1 {
				return result{}, err // not a kv error: the loop ends
			}
			// Until an attempt that looks for the claims gets through
			// (within claimGrace): one that failed may have been the
			// first to find them.
			handBack = true
		}
		// The previous attempt failed, or committed: either way its shards
		// need no marking any more.
		unmark(true)
		busy = false
		info := c.cachedTypeInfo(tr.Snapshot(), typ)
		// Only a retry can find a lease of this call's token: the first
		// attempt's, if it committed (commit_unknown_result).
		var jobs []*Job
		if attempts == 1 {
			if since, err = tr.GetReadVersion().Get(); err != nil {
				return result{}, err
			}
		} else {
			jobs, err = c.reclaim(tr, typ, token, since, leaseShards)
			if err != nil {
				return result{}, err
			}
		}
		// The holds count with the type timeout (no hold for a type
		// without one: no activity monitor takes its jobs back).
		ti, err := info()
		if err != nil || len(jobs) > 0 || handBack {
			return result{jobs: jobs, timeout: ti.timeout}, err
		}
		c.k.knowFeed(tr, typ, ti)
		// A paused type takes no new job; the read conflicts with Pause,
		// so no accept that committed after Pause took one. It is looked
		// at once the pick (read beside it) is back, before any claim.
		paused := tr.Get(c.k.pausedKey(typ))
		fenced := func() error { return nil }
		if fence != nil {
			fenced = fence(tr)
		}
		var runs [][]kv.KeyValue
		var look pick
		if noSchedule {
			var cands []kv.Key
			cands, marked, err = c.pickNoSchedule(tr, typ, take.Size(), ti, avoid)
			if len(cands) > 0 {
				run := make([]kv.KeyValue, len(cands))
				for i, k := range cands {
					run[i].Key = k // no value: claim reads the row
				}
				runs = [][]kv.KeyValue{run}
			}
		} else {
			look, err = c.pickScheduled(tr, typ, take.Size(), d, ti, avoid, scan, sw)
			runs, marked, busy = look.runs, look.shards, look.busy
		}
		if p, perr := paused.Get(); perr != nil || p != nil {
			if perr == nil {
				perr = fmt.Errorf("type %q: %w", typ, ErrPaused)
			}
			return result{}, perr
		}
		if err != nil {
			return result{}, err
		}
		if err := fenced(); err != nil {
			return result{}, err
		}
		var shard int64
		jobs, shard, err = c.claim(tr, typ, token, runs, !noSchedule)
		if err != nil {
			return result{}, err
		}
		if len(jobs) > 0 {
			leaseShards[shard] = true
		}
		if len(jobs) == 0 && wantWatch && !busy && !look.more {
			return result{watch: tr.Watch(c.k.watchesPending(typ)), look: look}, nil
		}
		res := result{jobs: jobs, timeout: ti.timeout, shard: shard, look: look}
		if len(jobs) > 0 {
			res.vs = tr.GetVersionstamp()
		}
		return res, nil
	}
	res, err := kv.Transact(txCtx, c.db, func(tr kv.Transaction) (result, error) {
		res, err := body(tr)
		if err != nil {
			take.Shrink()
		}
		return res, err
	})
	if err == nil && handBack && len(res.jobs) == 0 {
		err = ctx.Err()
	}
	if err != nil {
		return nil, nil, false, false, err
	}
	more = len(res.jobs) == 0 && res.look.more
	if more {
		sw.advance(res.look)
	}
	if res.vs != nil {
		vs, err := res.vs.Get()
		if err != nil {
			return nil, nil, false, false, err
		}
		l := &lease{shard: res.shard, held: len(res.jobs)}
		copy(l.vs.TransactionVersion[:], vs)
		for _, j := range res.jobs {
			j.lease = l
			if r := j.known.Load(); r != nil {
				r.seq, r.seqNew = l.vs, false
				r.storedSeq, r.storedToken = l.vs, r.lock.token
			}
		}
	}
	if res.timeout > 0 {
		for _, j := range res.jobs {
			j.hold = &hold{clock: c.cfg.Clock, timeout: res.timeout, from: start}
		}
	}
	return res.jobs, res.watch, busy && len(res.jobs) == 0 && !more, more, nil
}

// reclaimPage bounds the lease keys a reclaim reads per transaction.
const reclaimPage = 1000

// reclaim returns the jobs an earlier attempt of this accept claimed under
// token and still holds (after commit_unknown_result). That attempt's
// lease, if it committed, was written after since (the first attempt's
// read version) in one of shards: reclaim looks for the token among the
// leases written there since, a snapshot read of the few commits in
// between.
func (c *Client) reclaim(tr kv.Transaction, typ string, token []byte, since int64, shards map[int64]bool) ([]*Job, error) {
	now, err := tr.GetReadVersion().Get()
	if err != nil {
		return nil, err
	}
	for shard := range shards {
		jobs, err := c.reclaimIn(tr, typ, token, c.k.leaseRange(typ, shard, since, now), shard)
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
	}
	return nil, nil
}

func (c *Client) reclaimIn(tr kv.Transaction, typ string, token []byte, r kv.KeyRange, shard int64) ([]*Job, error) {
	for {
		kvs, err := tr.Snapshot().GetRange(r, kv.RangeOptions{Limit: reclaimPage}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		for _, e := range kvs {
			vs, tok, entries, err := c.k.decodeLease(e.Key, e.Value)
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(tok, token) {
				continue
			}
			var jobs []*Job
			l := &lease{shard: shard, vs: vs}
			for _, en := range entries {
				r, err := c.k.readRow(tr, typ, en.id)
				if err != nil {
					return nil, err
				}
				lk := lock{token: token, index: en.index}
				if r != nil && r.lock.equal(lk) && r.seq == vs {
					jobs = append(jobs, &Job{Type: typ, ID: en.id, Data: r.data, ScheduledTime: r.stime, Priority: shardPriority(r.shard),
						shard: shardBase(r.shard), lock: lk, lease: l})
				}
			}
			l.held = len(jobs)
			return jobs, nil
		}
		if len(kvs) < reclaimPage {
			return nil, nil
		}
		r.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
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

// claimBytesMax bounds the job data one accept takes: past it, the
// accept takes no more candidates (at least one), and those it leaves stay
// pending, so that a batch of large jobs keeps its transaction well under
// FoundationDB's limits (each taken row is written again).
const claimBytesMax = kv.PageBytes

// claim takes the candidate pending keys, given as runs: a read conflict
// on them and their clear (with run, each run is the first keys of a
// shard in order, and gets one range for both; otherwise each key its
// own), then the job rows, which must be pending at the key's scheduled
// time (stale keys are dropped). A key's value, when it has one, is its
// row (see doc.go, "Pending keys"); the other rows are read as a
// snapshot. Either way the conflict on the pending key covers the row, as
// every write to a pending job's row writes that key too. The candidates
// past claimBytesMax of the rows' data are left alone.
func (c *Client) claim(tr kv.Transaction, typ string, token []byte, runs [][]kv.KeyValue, run bool) ([]*Job, int64, error) {
	tr, flush := coalesceAdds(tr)
	defer flush()
	var cands []kv.KeyValue
	for _, kvs := range runs {
		cands = append(cands, kvs...)
	}
	if len(cands) == 0 {
		return nil, 0, nil
	}
	ids := make([]string, len(cands))
	stimes := make([]int64, len(cands))
	rows := make([]*row, len(cands))
	var far []int // the candidates whose rows are not inlined, in order
	for i, e := range cands {
		t, err := c.k.pending.Unpack(e.Key)
		if err != nil || len(t) != 4 {
			return nil, 0, fmt.Errorf("fdbjobs: bad pending key %s", e.Key)
		}
		id, _ := t[3].(string)
		stime, _ := intElem(t[2])
		ids[i], stimes[i] = id, stime
		if len(e.Value) == 0 {
			far = append(far, i)
		} else if rows[i], err = decodeRow(e.Value); err != nil {
			return nil, 0, err
		}
	}
	// The candidates taken: a prefix, within claimBytesMax. The rows not
	// inlined are read in waves as the prefix needs them, each of as
	// many as the bytes left would hold at the largest row seen (the
	// largest possible at first), and at most four times those read
	// before: large rows are not read beyond the bound, small ones in a
	// round trip or two.
	take, size, taken := len(cands), 0, 0
	pos, next, biggest, largest := 0, 0, MaxDataSize, 0
	for {
		upto := len(cands)
		if next < len(far) {
			upto = far[next]
		}
		for ; pos < upto; pos++ {
			r := rows[pos]
			if r == nil || r.state != Pending || r.stime != stimes[pos] {
				continue // stale: cleared, not taken
			}
			if size += len(r.data); size > claimBytesMax && taken > 0 {
				take = pos
				break
			}
			taken++
		}
		if take < len(cands) || next == len(far) {
			break
		}
		wave := min(len(far)-next, max(1, (claimBytesMax-size)/biggest))
		if next > 0 {
			wave = min(wave, 4*next)
		}
		futs := make([]kv.FutureByteSlice, wave)
		for i, ci := range far[next : next+wave] {
			futs[i] = tr.Snapshot().Get(c.k.dataKey(typ, ids[ci]))
		}
		read, err := decodeRows(futs)
		if err != nil {
			return nil, 0, err
		}
		for i, ci := range far[next : next+wave] {
			if rows[ci] = read[i]; read[i] != nil {
				largest = max(largest, len(read[i].data))
			}
		}
		next, biggest = next+wave, max(1, largest)
	}
	left := take
	for _, kvs := range runs {
		if left == 0 {
			break
		}
		kvs = kvs[:min(len(kvs), left)]
		left -= len(kvs)
		if len(kvs) == 0 {
			continue
		}
		if !run {
			for _, e := range kvs {
				if err := tr.AddReadConflictKey(e.Key); err != nil {
					return nil, 0, err
				}
				tr.Clear(e.Key)
			}
			continue
		}
		r := kv.KeyRange{Begin: kvs[0].Key, End: kv.KeyAfter(kvs[len(kvs)-1].Key)}
		if err := tr.AddReadConflictRange(r); err != nil {
			return nil, 0, err
		}
		tr.ClearRange(r)
	}
	var jobs []*Job
	var idx []int64
	var held []string
	shard := int64(0) // the lease's: its first job's
	for i, r := range rows[:take] {
		if r == nil || r.state != Pending || r.stime != stimes[i] {
			continue
		}
		if len(jobs) == 0 {
			shard = shardBase(r.shard)
		}
		l := lock{token: token, index: int64(len(jobs))}
		r.state, r.seqNew, r.lock, r.resubmit = Running, true, l, false
		c.k.writeRow(tr, typ, ids[i], r)
		j := &Job{Type: typ, ID: ids[i], Data: r.data, ScheduledTime: r.stime, Priority: shardPriority(r.shard),
			shard: shardBase(r.shard), lock: l}
		known := *r // its seq is the commit's, set once known (acceptOnce)
		known.data = bytes.Clone(r.data)
		known.storedData = known.data
		j.known.Store(&known)
		jobs = append(jobs, j)
		idx, held = append(idx, l.index), append(held, ids[i])
	}
	if len(jobs) > 0 {
		c.k.writeLease(tr, typ, shard, token, idx, held)
	}
	return jobs, shard, nil
}
