package fdbjobs

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// HoldFraction divides the type timeout into the time a worker may act on
// a job after the start of the last transaction known to have renewed its
// hold: half of it, so that a worker that stops acting by its deadline has
// stopped well before any other worker can have the job (see the package
// documentation, "Holding a job").
const HoldFraction = 2

// hold is a worker's claim on a job as far as the worker can trust it:
// from the start of the Accept, or of the last transaction that renewed it
// and is known to have committed.
type hold struct {
	mu      sync.Mutex
	clock   clockwork.Clock
	timeout time.Duration // the type timeout when the job was accepted
	from    time.Time
}

// HoldDeadline returns the instant after which the worker must no longer
// act on the job (reach the outside world for it, or write for it), unless
// a transaction renewing its hold (Renewing) commits before: the start of
// the Accept, or of the last renewal known to have committed, plus the
// type timeout over HoldFraction. ok is false for a Job that did not come
// from Accept. A worker that has stopped acting by then has stopped before
// the activity monitor can hand the job to another worker, whatever
// became of its transactions in between.
func (j *Job) HoldDeadline() (deadline time.Time, ok bool) {
	h := j.hold
	if h == nil {
		return time.Time{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.from.Add(h.timeout / HoldFraction), true
}

// HoldContext returns a context derived from ctx that ends at the job's
// hold deadline as it stands now (by the Client's clock), for a
// transaction that renews the hold or for waiting on the outside world
// for the job: behind a firewall rule FoundationDB's client does not fail,
// its transactions wait out their timeout, far longer than the hold, and
// a worker waiting in one would act on the job past its deadline. For a
// Job without a hold it is ctx, and cancel only releases it.
func (j *Job) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := j.HoldDeadline()
	ctx, cancel := context.WithCancel(ctx)
	if !ok {
		return ctx, cancel
	}
	t := j.hold.clock.AfterFunc(max(0, deadline.Sub(j.hold.clock.Now())), cancel)
	return ctx, func() {
		t.Stop()
		cancel()
	}
}

// Renewing marks the start of a transaction that calls Update for the job
// (a heartbeat: it renews the worker's hold); call done with whether that
// transaction committed. The hold then counts from this start, which no
// attempt of the transaction can precede, so a commit_unknown_result that
// did commit, or a retry that found the heartbeat of an earlier attempt,
// leaves the deadline on the safe side.
func (j *Job) Renewing() (done func(committed bool)) {
	h := j.hold
	if h == nil {
		return func(bool) {}
	}
	start := h.clock.Now()
	return func(committed bool) {
		if !committed {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if start.After(h.from) {
			h.from = start
		}
	}
}

// WatchHold reads, in tr, whether the worker still holds job as far as
// the store says: its row exists, runs, and carries the lock of job's
// Accept. If it does, it also sets a watch on the row, which fires once tr
// has committed and the row changes: the job removed, re-enqueued, taken
// by another worker, resubmitted or finished, and also updated by the
// worker itself. A worker that follows its job this way, calling
// WatchHold again in a new transaction each time the watch fires, hears
// that the job was taken from it within the watch's latency (milliseconds)
// instead of at its next Update: held false is the answer Update would
// give as ErrHalt (see doc.go, "Holding a job"). A job that did not come
// from Accept is never held. The watch is nil when held is false. As any
// FoundationDB watch, it may also end with an error (future_version, too
// many watches, a lost connection) without a change: the worker then
// calls WatchHold again, which reads the row anew.
func (c *Client) WatchHold(tr kv.Transaction, job *Job) (watch kv.FutureNil, held bool, err error) {
	if job == nil || !job.lock.held() {
		return nil, false, nil
	}
	r, err := c.k.readRow(tr, job.Type, job.ID)
	if err != nil || r == nil || r.state != Running || !r.lock.equal(job.lock) {
		return nil, false, err
	}
	return tr.Watch(c.k.dataKey(job.Type, job.ID)), true, nil
}

// earliestHold returns the job among job(0) to job(n-1), n > 0, whose hold
// ends first (the first job when none has a hold): a transaction for them
// all is bounded by its HoldContext.
func earliestHold(n int, job func(i int) *Job) *Job {
	first, deadline := job(0), time.Time{}
	for i := range n {
		if d, ok := job(i).HoldDeadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			first, deadline = job(i), d
		}
	}
	return first
}
