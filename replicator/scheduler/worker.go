package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

type stopKind int

const (
	stopNone stopKind = iota
	stopPreempt
	stopShutdown
	stopMove // balance: a lighter node takes the job
	stopPark // caught up and idle: the job parks (see doc.go, "Parking")
)

// worker runs one accepted job on a node.
type worker struct {
	n   *Node
	job *fdbjobs.Job
	ctx context.Context // the node's op context
	cfg Config

	data       *replicator.JobData // nil when the data did not decode
	decodeErr  error
	continuous bool
	shareKey   string
	started    time.Time
	charged    time.Time // guarded by n.mu
	// priority is the job's fair-share priority as of prioritized (both
	// guarded by n.mu; see replicator/share.go).
	priority    float64
	prioritized time.Time

	stopCh   chan struct{}
	stopOnce sync.Once
	stopMu   sync.Mutex
	kind     stopKind
}

func newWorker(n *Node, job *fdbjobs.Job, ctx context.Context, cfg Config) *worker {
	w := &worker{n: n, job: job, ctx: ctx, cfg: cfg, started: cfg.Clock.Now(), stopCh: make(chan struct{})}
	w.data, w.decodeErr = replicator.DecodeJobData(job.Data)
	w.prioritized = w.started
	if w.data != nil {
		w.continuous, w.shareKey = w.data.Continuous(), w.data.ShareKey()
		// The priority it was enqueued with, decayed while it waited.
		w.priority = cfg.Decay(w.data.Priority, w.started.Sub(time.UnixMilli(w.data.LastUpdated)), cfg.Interval)
	}
	return w
}

func (w *worker) requestStop(k stopKind) {
	w.stopOnce.Do(func() {
		w.stopMu.Lock()
		w.kind = k
		w.stopMu.Unlock()
		close(w.stopCh)
	})
}

func (w *worker) stopRequested() bool {
	select {
	case <-w.stopCh:
		return true
	default:
		return false
	}
}

func (w *worker) stopKind() stopKind {
	w.stopMu.Lock()
	defer w.stopMu.Unlock()
	return w.kind
}

func (w *worker) now() time.Time { return w.cfg.Clock.Now() }

// logEvent starts the lifecycle log line of the job (see doc.go, "Logs"):
// job_id, and db and doc_id for a document's job or user for a transient
// one, and rep_id once the run computed it (the node's logger adds node).
// A document's versions share its job id: rep_id tells their runs apart.
// Nothing of the endpoints but their redacted URLs is ever added.
func (w *worker) logEvent(e *zerolog.Event, d *replicator.JobData) *zerolog.Event {
	e = e.Fields(w.logFields(d))
	if d != nil && d.RepID != "" {
		e = e.Str("rep_id", d.RepID)
	}
	return e
}

// logFields are the fields that name the job and its document (or its
// user) in the lifecycle lines (logEvent) and in every line of its runs
// (engine.Options.LogFields; a run adds replication_id itself).
func (w *worker) logFields(d *replicator.JobData) []any {
	f := []any{"job_id", w.job.ID}
	switch {
	case d == nil:
	case d.Transient():
		f = append(f, "user", d.RepUser)
	default:
		f = append(f, "db", d.DBName, "doc_id", d.DocID)
	}
	return f
}

// run is the job's whole life on this node.
func (w *worker) run() {
	if w.decodeErr != nil {
		w.cfg.Logger.Error().Err(w.decodeErr).Str("job_id", w.job.ID).Msg("replicator: undecodable job data")
		w.fail(&replicator.JobData{State: replicator.StatePending}, "bad_job_data", w.decodeErr.Error())
		return
	}
	d := w.data
	if d.Rep == nil || d.State == replicator.StateFailed {
		reason := d.LastError
		if reason == "" {
			reason = "the replication document could not be parsed"
		}
		w.fail(d, "bad_rep_doc", reason)
		return
	}
	// Job data written by an older or foreign writer is held to today's
	// bounds before anything is allocated for it.
	rep, err := d.Rep.Replication()
	if err != nil {
		w.fail(d, "bad_rep_doc", replicator.Reason(err))
		return
	}
	rep = w.cfg.JobDefaults.Apply(rep, d.Rep)
	if w.stopRequested() {
		w.putBack(d)
		return
	}
	uuid := w.n.serverUUID
	repID, code, err := w.n.eng.ReplicationID(w.ctx, rep, uuid)
	if err != nil {
		if w.ctx.Err() != nil {
			return
		}
		w.crash(d, err)
		return
	}
	if !w.initJob(d, rep, repID, code) {
		return
	}
	w.execute(d, rep, code)
}

// execute runs the engine until the job ends, is stopped or halted: one
// loop over the run's events, each handled by a step of runLoop's (the
// hold lapsing, the run ending, a checkpoint, a heartbeat, a stop, the
// node's hard stop).
func (w *worker) execute(d *replicator.JobData, rep engine.Replication, code string) {
	runCtx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	ck := make(chan engine.Checkpoint, 1)
	run := w.n.eng.Start(runCtx, rep, engine.Options{
		ServerUUID: w.n.serverUUID, FilterCode: code, Stats: d.Stats, Clock: w.cfg.Clock, LogFields: w.logFields(d),
		OnCheckpoint: keepLatest(ck),
	})
	w.n.runStarted(w, run, d)
	defer w.n.runEnded(w)
	r := &runLoop{w: w, d: d, rep: rep, run: run, cancel: cancel, hb: w.cfg.Clock.NewTicker(w.cfg.heartbeat()), hold: w.newHoldTimer()}
	defer r.hb.Stop()
	defer r.hold.stop()
	for {
		select {
		case <-r.hold.expired():
			// The store has not taken a heartbeat for half the job
			// timeout: another node may soon have the job. Stop acting on
			// it now, and write nothing.
			r.holdLost()
			return
		case <-run.Done():
			r.ended()
			return
		case c := <-ck:
			if !r.checkpointed(c) {
				return
			}
		case <-r.hb.Chan():
			if !r.renew(run.Progress()) {
				return
			}
			r.parkIfIdle()
			// The period follows the node's configuration: a shorter
			// interval set at run time applies to running jobs too.
			r.hb.Reset(w.n.Config().heartbeat())
		case <-w.stopCh:
			r.stopped()
			return
		case <-w.ctx.Done():
			r.halt()
			return
		}
	}
}

// keepLatest is an engine.Options.OnCheckpoint that keeps the latest
// checkpoint in ck (a buffer of one), replacing one the loop has not
// taken yet: the engine never waits on the loop.
func keepLatest(ck chan engine.Checkpoint) func(engine.Checkpoint) {
	return func(c engine.Checkpoint) {
		select {
		case ck <- c:
		default:
			select {
			case <-ck:
			default:
			}
			select {
			case ck <- c:
			default:
			}
		}
	}
}

// runLoop is the state of execute's loop over one run.
type runLoop struct {
	w      *worker
	d      *replicator.JobData
	rep    engine.Replication
	run    replicator.Run
	cancel context.CancelFunc // the run's context
	hb     clockwork.Ticker
	hold   *holdTimer
}

// halt ends the run without a word to the store.
func (r *runLoop) halt() {
	r.cancel()
	<-r.run.Done()
}

// holdLost halts the run of a job whose hold lapsed.
func (r *runLoop) holdLost() {
	r.halt()
	r.w.logHoldLost()
}

// renew writes a heartbeat with stats and renews the hold; false when the
// job was halted or its hold lapsed meanwhile (the run is halted then).
func (r *runLoop) renew(stats engine.Stats) bool {
	if !r.w.heartbeat(r.d, stats) {
		r.halt()
		return false
	}
	if r.hold.lapsed() {
		r.holdLost()
		return false
	}
	r.hold.reset()
	return true
}

// ended records how the run ended: a crash, a stopped or continuous run
// back to pending, or a one-shot run completed (also when a stop was asked
// as it completed: completedRun).
func (r *runLoop) ended() {
	w, d, run := r.w, r.d, r.run
	res, err := run.Wait()
	switch {
	case w.ctx.Err() != nil:
		return // hard stop: the activity monitor re-enqueues the job
	case err != nil:
		if errors.Is(err, engine.ErrCheckpoint) {
			w.n.m.Inc(replicator.MetricCheckpointsFailure)
		}
		d.Stats, d.Sync = mergeStats(d.Stats, run.Progress()), syncOf(run)
		w.crash(d, err)
	case res.Completed:
		d.Sync = syncOf(run)
		w.complete(d, res)
	case w.stopRequested(), d.Continuous():
		d.Stats, d.Sync = mergeStats(d.Stats, res.Stats), syncOf(run)
		w.reschedule(d, "")
	default:
		d.Sync = syncOf(run)
		w.complete(d, res)
	}
}

// checkpointed writes the stats of checkpoint c as a heartbeat; for a
// replication with a user filter it first computes the replication id
// again, and a changed filter stops the run, back to pending under the new
// id (unless the run completed meanwhile: completedRun). false when the
// loop is over.
func (r *runLoop) checkpointed(c engine.Checkpoint) bool {
	w, d := r.w, r.d
	w.n.m.Inc(replicator.MetricCheckpointsSuccess)
	if d.Rep.UserFilter() {
		// Fetching the filter waits on the source: no longer than the
		// hold, as a renewal (Job.HoldContext).
		idCtx, done := w.job.HoldContext(w.ctx)
		id, _, err := w.n.eng.ReplicationID(idCtx, r.rep, w.n.serverUUID)
		done()
		if r.hold.lapsed() {
			r.holdLost()
			return false
		}
		if err == nil && id != d.RepID {
			if _, _, halted := w.stopRun(r.run, r.cancel, d, r.hb, r.hold); halted || w.ctx.Err() != nil {
				return false
			}
			d.Stats, d.Sync = mergeStats(d.Stats, r.run.Progress()), syncOf(r.run)
			if res, ok := completedRun(r.run); ok {
				w.complete(d, res)
				return false
			}
			w.reschedule(d, "filter changed")
			return false
		}
	}
	return r.renew(c.Stats)
}

// stopped ends the run the node asked to stop (rotation, balance, a lower
// max_jobs, a removed job): a final checkpoint within the grace, then back
// to pending, or a crash for an error the stop did not cause; a one-shot
// run that completed before the stop reached it completes its job
// (completedRun).
func (r *runLoop) stopped() {
	w, d := r.w, r.d
	err, cut, halted := w.stopRun(r.run, r.cancel, d, r.hb, r.hold)
	if halted || w.ctx.Err() != nil {
		return
	}
	d.Stats, d.Sync = mergeStats(d.Stats, r.run.Progress()), syncOf(r.run)
	if res, ok := completedRun(r.run); ok {
		w.complete(d, res)
		return
	}
	// An error after the grace ran out is the cut's doing: the job goes
	// back to pending like any stopped job.
	if err != nil && !errors.Is(err, engine.ErrStopped) && !cut {
		w.crash(d, err)
		return
	}
	// A job parks only after its final checkpoint was written: its
	// sequence is where a change is looked for.
	if w.stopKind() == stopPark && !cut && d.Stats.CheckpointedSourceSeq != "" {
		w.park(d, r.rep)
		return
	}
	w.reschedule(d, "")
}

// parkIfIdle asks the run to stop and its job to park once it has been
// caught up, with no change to copy, for the node's ParkAfter (see doc.go,
// "Parking"): continuous jobs that checkpoint, whose source URL names a
// database, and that are not stalled.
func (r *runLoop) parkIfIdle() {
	w := r.w
	cfg := w.n.Config()
	if !cfg.parks() || !r.d.Continuous() || r.rep.DisableCheckpoints {
		return
	}
	if _, _, ok := replicator.WatchGroupOf(r.d.Rep.Source); !ok {
		return
	}
	s := r.run.Sync()
	if s.CaughtUp && s.Stall == nil && s.CaughtUpSince > 0 && w.now().Sub(time.UnixMilli(s.CaughtUpSince)) >= cfg.ParkAfter {
		w.requestStop(stopPark)
	}
}

// stopRun asks run for a final checkpoint and waits for it to end, still
// heartbeating (a slow stop must not let the activity monitor take the job
// back). After Config.stopGrace, or if a heartbeat finds the job halted,
// it cancels the stop and the run's context (cancelRun), so that requests
// being retried against an unreachable peer end, and waits for the run to
// return. cut reports that the grace ran out; halted that the job was
// removed or taken over, or that the node's hold on it expired (the caller
// must write nothing more).
func (w *worker) stopRun(run replicator.Run, cancelRun context.CancelFunc, d *replicator.JobData, hb clockwork.Ticker, hold *holdTimer) (err error, cut, halted bool) {
	stopCtx, cancelStop := context.WithCancel(w.ctx)
	defer cancelStop()
	errc := make(chan error, 1)
	go func() { errc <- run.Stop(stopCtx) }()
	grace := w.cfg.Clock.NewTimer(w.cfg.stopGrace())
	defer grace.Stop()
	abort := func() {
		cancelStop()
		cancelRun()
	}
	for {
		select {
		case err := <-errc:
			return err, cut, halted
		case <-grace.Chan():
			cut = true
			abort()
		case <-hb.Chan():
			if !halted && !cut && !w.heartbeat(d, run.Progress()) {
				halted = true
				abort()
			}
			if !halted && hold.lapsed() {
				halted = true
				abort()
				w.logHoldLost()
			}
			hold.reset()
		case <-hold.expired():
			if !halted {
				halted = true
				abort()
				w.logHoldLost()
			}
		}
	}
}

// completedRun returns the result of run, which has ended, and whether it
// is a one-shot run that replicated its whole feed (engine.Result.Completed)
// rather than one a stop ended first. Such a run completes its job whatever
// the node asked of it as it ended (a changed filter found at its final
// checkpoint, a rotation, a shutdown): that stop came too late, and the
// job sent back to pending would run again after it completed.
func completedRun(run replicator.Run) (engine.Result, bool) {
	res, err := run.Wait()
	return res, err == nil && res.Completed
}

// syncOf is run's Sync as the job's data keeps it: caught up when the run
// last knew it, its last progress and stall; its throughput is the
// run's, shown only while it runs.
func syncOf(run replicator.Run) *engine.Sync {
	s := run.Sync()
	return &s
}

func mergeStats(old, cur engine.Stats) engine.Stats {
	if cur.DocsRead < old.DocsRead || cur.RevisionsChecked < old.RevisionsChecked {
		return old
	}
	return cur
}

// errHoldLapsed is wrapped, with the last attempt's error, by the error
// of a job transaction that transactJob gave up on because the worker's
// hold on the job lapsed before an attempt committed.
var errHoldLapsed = errors.New("scheduler: the node's hold on the job lapsed before the job's write committed")

// jobTxAttempts bounds the attempts of a job transaction for a job without
// a hold (fdbjobs.Job.HoldDeadline: its type has no timeout), for which
// transactJob has no deadline to go by.
const jobTxAttempts = 5

// jobTxRetryInitial is transactJob's first wait between attempts.
const jobTxRetryInitial = 10 * time.Millisecond

// transactJob is kv.Transact, run again after the errors its retry loop
// returns (those FoundationDB does not retry, such as
// transaction_timed_out), other than ErrHalt, for as long as the worker
// holds the job: a job transaction abandoned while the hold lasts leaves
// the job running in the store with no worker until the activity monitor
// re-enqueues it, a job timeout or more after the last heartbeat, and a
// one-shot job whose run completed then runs again. Each attempt, and each
// wait between two, ends at the hold deadline (Job.HoldContext, on the
// node's clock): past it another node may have the job, the worker writes
// nothing more for it, and the monitor's re-enqueue is the recovery; the
// error then wraps errHoldLapsed. The waits are kv.Backoff.WaitAny at a
// fixed pace, on the real clock as FoundationDB's own retries are: 10 ms
// after the first failure, doubling up to kv.BackoffMaxDefault (1 s), so
// that while the store fails the worker tries about once a second until
// the deadline, half the job timeout after the start of the hold's last
// renewal. A job without a hold gets jobTxAttempts attempts. No wait
// follows the last attempt.
func transactJob[T any](w *worker, f func(kv.Transaction) (T, error)) (T, error) {
	_, held := w.job.HoldDeadline()
	ctx, done := w.job.HoldContext(w.ctx)
	defer done()
	b := kv.Backoff{Initial: jobTxRetryInitial, Rand: kv.Full}
	for attempt := 1; ; attempt++ {
		v, err := kv.Transact(ctx, w.n.store.DB, f)
		switch {
		case err == nil || errors.Is(err, fdbjobs.ErrHalt) || w.ctx.Err() != nil:
			return v, err
		case ctx.Err() != nil:
			return v, fmt.Errorf("%w: %w", errHoldLapsed, err)
		case !held && attempt >= jobTxAttempts:
			return v, err
		}
		if b.WaitAny(ctx, err) != nil {
			if w.ctx.Err() != nil {
				return v, err
			}
			return v, fmt.Errorf("%w: %w", errHoldLapsed, err)
		}
	}
}

// txError logs a failed job transaction; ErrHalt means the job was
// removed or taken over, or its database deleted, and the worker just
// stops.
func (w *worker) txError(err error) {
	if errors.Is(err, replicator.ErrDBDeleted) {
		w.logEvent(w.cfg.Logger.Info(), w.data).Str("why", "its _replicator database was deleted").Msg("replication stopped")
		w.removeOrphan()
		w.n.Reschedule() // its cleanup removes the database's other jobs now
		return
	}
	if w.ctx.Err() != nil {
		return
	}
	if errors.Is(err, fdbjobs.ErrHalt) {
		w.logHalted(false)
		return
	}
	w.cfg.Logger.Warn().Err(err).Str("job_id", w.job.ID).Msg("replicator: job transaction")
}

// logHalted logs the end of a run whose job was taken from it (ErrHalt):
// removed or changed by its document or replication, or re-enqueued or
// taken over after this node's hold on it lapsed. One read tells which
// (best effort: without it the line says removed). A job that never
// started here has no run to end, unless starting says it may have
// (starting).
func (w *worker) logHalted(starting bool) {
	if w.data == nil || (w.data.State != replicator.StateRunning && !starting) {
		return // it never started here: there is no run to end
	}
	why := "its job was removed: its document or database deleted, or the replication cancelled"
	d, st, err := w.n.store.Job(w.ctx, nil, w.job.ID)
	switch {
	case err != nil || d == nil || st == fdbjobs.Finished:
	case w.data != nil && !replicator.SameReplication(d.Rep, w.data.Rep):
		why = "its document was changed: the job runs again as the new version"
	case st == fdbjobs.Running && d.Node != "" && d.Node != w.cfg.NodeName:
		why = fmt.Sprintf("taken over by node %s: this node's hold on the job lapsed", d.Node)
	default:
		why = "re-enqueued: this node's hold on the job lapsed (no heartbeat within the job timeout)"
	}
	w.logEvent(w.cfg.Logger.Info(), w.data).Str("why", why).Msg("replication stopped")
}

// change applies c to the job in a transaction (prep, when set, first
// writes the worker's own data into the job's, such as its counters),
// updates d and counts the change; it reports whether it committed.
func (w *worker) change(d *replicator.JobData, c replicator.Change, prep func(x *replicator.JobData)) bool {
	l := w.lifecycle()
	x, err := transactJob(w, func(tr kv.Transaction) (*replicator.JobData, error) {
		x := d.Clone()
		if prep != nil {
			prep(x)
		}
		return x, l.Apply(w.ctx, tr, w.job, x, c)
	})
	if err != nil {
		if errors.Is(err, errHoldLapsed) {
			w.logEndLost(d, c, err)
			return false
		}
		w.txError(err)
		return false
	}
	*d = *x
	w.count(d, c)
	return true
}

// logEndLost logs the change c to the job whose data is d, which could not
// be stored before the node's hold on the job lapsed (transactJob's err).
// For a run that started here that change was the run's end: the line is
// "replication stopped" at warn, counted in jobs.holds_lost as a run
// stopped for want of its hold. The job stays running in the store until
// the activity monitor re-enqueues it, then runs again, one-shot or not
// (unless the last attempt, cut off at the deadline, committed unseen).
// A job that never started here logs the failed transaction only.
func (w *worker) logEndLost(d *replicator.JobData, c replicator.Change, err error) {
	if d.State != replicator.StateRunning {
		w.cfg.Logger.Warn().Err(err).Str("job_id", w.job.ID).Str("change", c.Kind.String()).Msg("replicator: job transaction")
		return
	}
	w.n.m.Inc(replicator.MetricJobsHoldsLost)
	w.logEvent(w.cfg.Logger.Warn(), d).Err(err).
		Str("why", "this node could not renew its hold on the job, nor store the run's end ("+c.Kind.String()+") before the hold lapsed: "+
			"the store took none of the job's writes for half the job timeout; the job runs again once the activity monitor re-enqueues it").
		Msg("replication stopped")
}

// count adds to the counters of the change c, which committed, to the
// job whose data is d.
func (w *worker) count(d *replicator.JobData, c replicator.Change) {
	for _, name := range w.lifecycle().Counters(d, c) {
		w.n.m.Inc(name)
	}
}

// lifecycle is how this worker's changes are applied, under the node's
// current configuration.
func (w *worker) lifecycle() replicator.Lifecycle {
	return replicator.Lifecycle{Store: w.n.store, Docs: w.cfg.DocUpdater, Logger: w.cfg.Logger,
		MaxHistory: w.cfg.MaxHistory, HealthThreshold: w.cfg.HealthThreshold, Backoff: w.cfg.backoff}
}

// fail ends the job in state failed.
func (w *worker) fail(d *replicator.JobData, tag, reason string) {
	if w.change(d, replicator.Change{Kind: replicator.Failed, At: w.now(), Tag: tag, Reason: reason}, nil) {
		w.logFailed(d, tag, reason)
	}
}

func (w *worker) logFailed(d *replicator.JobData, tag, reason string) {
	w.logEvent(w.cfg.Logger.Error(), d).Str("error", tag).Str("reason", reason).Msg("replication failed")
}

// complete ends a one-shot job in state completed with its final
// checkpoint as result.
func (w *worker) complete(d *replicator.JobData, res engine.Result) {
	now := w.now() // outside the transaction: a retry writes the same data
	ok := w.change(d, replicator.Change{Kind: replicator.Completed, At: now}, func(x *replicator.JobData) {
		x.Stats = mergeStats(x.Stats, res.Stats)
		x.CheckpointHistory, _ = json.Marshal(res)
	})
	if ok {
		w.logEvent(w.cfg.Logger.Info(), d).Int64("docs_read", d.Stats.DocsRead).Int64("docs_written", d.Stats.DocsWritten).
			Int64("doc_write_failures", d.Stats.DocWriteFailures).Int64("missing_revisions_found", d.Stats.MissingRevisionsFound).
			Str("duration", now.Sub(time.UnixMilli(d.LastStart)).Round(time.Millisecond).String()).Msg("replication completed")
	}
}

// reschedule stops the job and makes it pending again at its fair-share
// time (preemption, shutdown, filter change).
func (w *worker) reschedule(d *replicator.JobData, why string) {
	now := w.now()
	p := w.n.priorityOf(w, now)
	c := replicator.Change{Kind: replicator.Requeued, At: now, Reason: why, Priority: p, STime: w.cfg.EnqueueTime(now, p, w.cfg.Interval)}
	if !w.change(d, c, nil) {
		return
	}
	if why == "" {
		switch w.stopKind() {
		case stopPreempt:
			why = "rotation: another job's turn"
		case stopShutdown:
			why = "the node is shutting down"
		case stopMove:
			why = "balance: moved to a node that runs fewer jobs"
		case stopPark:
			why = "caught up and idle, but its final checkpoint was not written: it waits its turn to run again"
		default:
			why = "the run ended"
		}
	}
	w.logEvent(w.cfg.Logger.Info(), d).Str("why", why).Msg("replication stopped")
}

// putBack returns a job accepted but never started (the node was
// stopping, or its target fell while the acceptor waited) to the queue at
// its scheduled time with its data unchanged, as if it had not been
// taken: it keeps its place.
func (w *worker) putBack(d *replicator.JobData) {
	w.change(d, replicator.Change{Kind: replicator.PutBack}, nil)
}

// crash handles an error: a persistent job (or a rate-limited transient
// one) becomes crashing and backs off; a transient job fails.
func (w *worker) crash(d *replicator.JobData, err error) {
	tag, reason := classify(err)
	if d.Transient() && !errors.Is(err, engine.ErrMaxBackoff) {
		w.fail(d, tag, reason)
		return
	}
	c := w.crashed(w.now(), tag, reason)
	if w.change(d, c, nil) {
		w.logCrashed(d, tag, reason, c.At, c.Jitter)
		// Through a proxy, the host's answer to a probe says nothing of
		// the path the replication takes: it waits out its backoff.
		if host := engine.UnreachableHost(err); host != "" && d.Rep != nil && d.Rep.Source.Proxy == "" && d.Rep.Target.Proxy == "" {
			w.n.watchHost(host, w.job.ID)
		}
	}
}

// crashed is the change that makes the job crashing at now, with its
// backoff's jitter and the priority it keeps for when its backoff ends,
// chosen outside the transaction: a retry after commit_unknown_result
// schedules the job at the same time.
func (w *worker) crashed(now time.Time, tag, reason string) replicator.Change {
	return replicator.Change{Kind: replicator.Crashed, At: now, Tag: tag, Reason: reason,
		Jitter: rand.Float64(), Priority: w.n.priorityOf(w, now)}
}

// logCrashed logs a crash with when the job is retried (the Crashed
// change's arithmetic on the committed error count).
func (w *worker) logCrashed(d *replicator.JobData, tag, reason string, now time.Time, jitter float64) {
	wait := w.cfg.backoff(d.ErrorCount, jitter)
	w.logEvent(w.cfg.Logger.Warn(), d).Str("error", tag).Str("reason", reason).Int("error_count", d.ErrorCount).
		Time("retry_at", now.Add(wait).UTC()).Str("retry_in", wait.Round(time.Millisecond).String()).Msg("replication crashed")
}

// engineErrors are the engine's error classes, matched in order.
var engineErrors = []error{
	engine.ErrInvalidSpec, engine.ErrDBNotFound, engine.ErrUnauthorized, engine.ErrForbidden,
	engine.ErrMaxBackoff, engine.ErrFilterFetch, engine.ErrChangesFeed, engine.ErrRevsDiff,
	engine.ErrOpenRevs, engine.ErrBulkDocs, engine.ErrDocWrite, engine.ErrCheckpoint, engine.ErrHTTP,
	engine.ErrInternal, engine.ErrStopped,
}

// classify splits an engine error into CouchDB's error tag and reason.
func classify(err error) (tag, reason string) {
	msg := err.Error()
	for _, e := range engineErrors {
		if errors.Is(err, e) {
			tag = e.Error()
			return tag, strings.TrimPrefix(msg, tag+": ")
		}
	}
	return "error", msg
}
