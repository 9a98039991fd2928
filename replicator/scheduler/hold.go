package scheduler

import (
	"errors"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// holdTimer fires at the job's hold deadline (fdbjobs.Job.HoldDeadline):
// past it another node may have the job, so the worker must have stopped
// acting on it. It never fires for a job without a hold.
type holdTimer struct {
	job   *fdbjobs.Job
	clock clockwork.Clock
	t     clockwork.Timer
}

// newHoldTimer times job's hold on clock (the node's).
func newHoldTimer(job *fdbjobs.Job, clock clockwork.Clock) *holdTimer {
	h := &holdTimer{job: job, clock: clock}
	if deadline, ok := job.HoldDeadline(); ok {
		h.t = clock.NewTimer(max(0, deadline.Sub(clock.Now())))
	}
	return h
}

func (w *worker) newHoldTimer() *holdTimer { return newHoldTimer(w.job, w.cfg.Clock) }

// expired is the timer's channel (nil, never ready, without a hold).
func (h *holdTimer) expired() <-chan time.Time {
	if h.t == nil {
		return nil
	}
	return h.t.Chan()
}

// reset moves the timer to the job's current deadline, after a renewal.
func (h *holdTimer) reset() {
	if h.t == nil {
		return
	}
	if !h.t.Stop() {
		select { // it fired while the renewal committed: drop that
		case <-h.t.Chan():
		default:
		}
	}
	deadline, _ := h.job.HoldDeadline()
	h.t.Reset(max(0, deadline.Sub(h.clock.Now())))
}

// lapsed reports whether the job's hold deadline has passed: a renewal
// that did not commit in time (the store did not answer, and Job.HoldContext
// ended it) leaves the worker past it.
func (h *holdTimer) lapsed() bool {
	deadline, ok := h.job.HoldDeadline()
	return ok && !h.clock.Now().Before(deadline)
}

func (h *holdTimer) stop() {
	if h.t != nil {
		h.t.Stop()
	}
}

// logHoldLost logs the stop of a run whose node could not renew its hold
// on the job in time. The job stays running in the store until the
// activity monitor re-enqueues it, a job timeout after the last heartbeat
// that committed; then any node, this one too, may take it.
func (w *worker) logHoldLost() {
	w.n.m.Inc(replicator.MetricJobsHoldsLost)
	w.logEvent(w.cfg.Logger.Warn(), w.data).
		Str("why", "this node could not renew its hold on the job: the store took no heartbeat for half the job timeout; "+
			"the run stopped before another node may take the job").
		Msg("replication stopped")
}

// heartbeat stores the stats (the fdbjobs heartbeat); false on halt.
func (w *worker) heartbeat(d *replicator.JobData, s engine.Stats) bool {
	healed := false
	l := w.lifecycle()
	sy := w.liveSync()
	renewed := w.job.Renewing()
	ctx, done := w.job.HoldContext(w.ctx)
	defer done()
	x, err := kv.Transact(ctx, w.n.store.DB, func(tr kv.Transaction) (*replicator.JobData, error) {
		x := d.Clone()
		now := w.now()
		x.Stats = mergeStats(x.Stats, s)
		if sy != nil {
			x.Sync = sy
		}
		healed = x.ErrorCount > 0 && replicator.Healed(x.LastStart, now, w.cfg.HealthThreshold)
		return x, l.Apply(ctx, tr, w.job, x, replicator.Change{Kind: replicator.Heartbeat, At: now})
	})
	renewed(err == nil)
	if err != nil {
		w.txError(err)
		return !errors.Is(err, fdbjobs.ErrHalt) && w.ctx.Err() == nil
	}
	if healed {
		w.logEvent(w.cfg.Logger.Info(), x).Int("errors_forgotten", d.ErrorCount).
			Str("running_for", w.now().Sub(time.UnixMilli(x.LastStart)).Round(time.Millisecond).String()).
			Msg("replication healed")
	}
	*d = *x
	return true
}
