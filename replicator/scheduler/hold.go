package scheduler

import (
	"context"
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
	// A run that started while its node had no budget per host takes its
	// places now that there is one (or, its host full, gives way).
	budget := w.n.Config().budgets()
	var over string
	x, err := kv.Transact(ctx, w.n.store, func(tr kv.Transaction) (*replicator.JobData, error) {
		x := d.Clone()
		now := w.now()
		x.Stats = mergeStats(x.Stats, s)
		if sy != nil {
			x.Sync = sy
		}
		over = ""
		if budget.On() && len(x.BudgetHosts) == 0 {
			if places := budget.Places(x.Rep); len(places) > 0 {
				full, err := w.n.store.ClaimHosts(tr, w.job.ID, places)
				if err != nil {
					return nil, err
				}
				if over = full; full == "" {
					x.BudgetHosts = replicator.Partitions(places)
				}
			}
		}
		healed = x.ErrorCount > 0 && replicator.Healed(x.LastStart, now, w.cfg.HealthThreshold)
		return x, l.Apply(ctx, tr, w.job, x, replicator.Change{Kind: replicator.Heartbeat, At: now})
	})
	renewed(err == nil)
	if err != nil {
		w.txError(err)
		return !errors.Is(err, fdbjobs.ErrHalt) && w.ctx.Err() == nil
	}
	if over != "" {
		// Its host runs as many as its budget allows without it: it goes
		// back to the queue, where its start waits for a place.
		w.logEvent(w.cfg.Logger.Info(), x).Str("host", over).Int("budget", budget.LimitOf(over)).
			Msg("replication stopping: it started before its host's budget, which its host's other replications fill")
		w.requestStopUntil(stopHost, replicator.Millis(w.now().Add(HeldByHostRecheck*w.cfg.Interval)))
	}
	if healed {
		w.logEvent(w.cfg.Logger.Info(), x).Int("errors_forgotten", d.ErrorCount).
			Str("running_for", w.now().Sub(time.UnixMilli(x.LastStart)).Round(time.Millisecond).String()).
			Msg("replication healed")
	}
	*d = *x
	return true
}

// haltGraceDefault bounds how long a run whose job was taken from it
// (watchRun) lets its writes in flight finish before they are cut: a
// write sent is counted only when the target answered it.
const haltGraceDefault = 5 * time.Second

// watchRun follows, on a goroutine of its own until ctx ends, whether the
// store still gives the running job to this worker (replicator.Store
// WatchRun: the job's row still carries the worker's lock and, for a
// document's job, its database is still the one it belongs to), and closes
// gone when it does not: the replication deleted or cancelled, its
// document changed, its database deleted, or the job taken over. Each
// round is one read transaction that sets watches on the job's row and
// its database's registration, then a wait on them: the worker hears of a
// removal within the watches' latency, not at its next heartbeat
// (StatsUpdateInterval). Its own heartbeats fire the watch too, so a
// round (a read, no write) follows each. A failed round (the store
// unreachable, a watch it refused: too_many_watches) is tried again after
// a backoff that grows to the heartbeat's period; meanwhile the
// heartbeat's fence stops the run, as it would without the watch. stop
// ends the goroutine and waits for it.
func (w *worker) watchRun(ctx context.Context, d *replicator.JobData) (gone <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch, done := make(chan struct{}), make(chan struct{})
	d = d.Clone() // the worker writes its own as the run goes
	go func() {
		defer close(done)
		b := kv.Backoff{Initial: jobTxRetryInitial, Max: w.cfg.heartbeat(), Rand: kv.Full}
		for {
			type round struct {
				watches []kv.FutureNil
				ok      bool
			}
			r, err := kv.Transact(ctx, w.n.store, func(tr kv.Transaction) (round, error) {
				ws, ok, err := w.n.store.WatchRun(tr, w.job, d)
				return round{ws, ok}, err
			})
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if b.WaitAny(ctx, err) != nil {
					return
				}
				continue
			case !r.ok:
				close(ch)
				return
			}
			if err := awaitAny(ctx, r.watches); err == nil {
				b.Reset()
			} else if ctx.Err() == nil && b.WaitAny(ctx, err) != nil {
				return
			}
		}
	}()
	return ch, func() {
		cancel()
		<-done
	}
}

// awaitAny waits until one of ws is ready (its error, nil when it fired)
// or ctx ends, then cancels them all.
func awaitAny(ctx context.Context, ws []kv.FutureNil) error {
	defer func() {
		for _, w := range ws {
			w.Cancel()
		}
	}()
	var second <-chan struct{}
	if len(ws) > 1 {
		second = ws[1].Done()
	}
	select {
	case <-ctx.Done():
		return nil
	case <-ws[0].Done():
		_, err := ws[0].Get()
		return err
	case <-second:
		_, err := ws[1].Get()
		return err
	}
}
