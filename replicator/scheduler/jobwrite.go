package scheduler

// The worker's writes of its job's state: each a transition of
// replicator.Lifecycle, fenced by the job's hold and retried while the hold
// lasts (transactJob), with its log line and counters after the commit.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

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
		v, err := kv.Transact(ctx, w.n.store, f)
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
		w.withFinal(w.logEvent(w.cfg.Logger.Info(), w.data)).Str("why", "its _replicator database was deleted").Msg("replication stopped")
		w.removeOrphan()
		w.n.Reschedule() // its cleanup removes the database's other jobs now
		return
	}
	if w.ctx.Err() != nil {
		return
	}
	if errors.Is(err, fdbjobs.ErrHalt) {
		if w.quietHalt {
			w.haltSeen = true // runLoop.renew ends the run and logs
			return
		}
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
// (starting). A run halted when its job was taken (runLoop.taken) adds
// its final counters to the line and, when its job was removed, stores
// them for whoever removed it (storeRunEnd).
func (w *worker) logHalted(starting bool) {
	if w.data == nil || (w.data.State != replicator.StateRunning && !starting) {
		return // it never started here: there is no run to end
	}
	why := "its job was removed: its document or database deleted, or the replication cancelled"
	d, st, err := w.n.store.Job(w.ctx, nil, w.job.ID)
	if err == nil && d == nil && w.final != nil {
		w.storeRunEnd(*w.final)
	}
	switch {
	case err == nil && d != nil && d.State == replicator.StatePaused:
		why = "paused, by its document or POST /_scheduler/jobs/{id}/_pause: it resumes from its checkpoint"
	case err != nil || d == nil || st == fdbjobs.Finished:
	case w.data != nil && !replicator.SameReplication(d.Rep, w.data.Rep):
		why = "its document was changed: the job runs again as the new version"
	case w.stopKind() != stopNone && w.stopKind() != stopPark && d.State != replicator.StateParked:
		// The run stopped to be put back in the queue, and its requeue
		// found the job already pending or taken: an attempt whose commit
		// was unknown had committed (and another node may have taken the
		// job since), so the stop's reason is the line's.
		why = w.stopKind().requeueWhy()
	case st == fdbjobs.Running && d.Node != "" && d.Node != w.cfg.NodeName:
		why = fmt.Sprintf("taken over by node %s: this node's hold on the job lapsed", d.Node)
	default:
		why = "re-enqueued: this node's hold on the job lapsed (no heartbeat within the job timeout)"
	}
	w.withFinal(w.logEvent(w.cfg.Logger.Info(), w.data)).Str("why", why).Msg("replication stopped")
}

// pausedNow reports whether the job, taken from this worker's run, is
// now paused (one read; false when it cannot tell).
func (w *worker) pausedNow() bool {
	d, _, err := w.n.store.Job(w.ctx, nil, w.job.ID)
	return err == nil && d != nil && d.State == replicator.StatePaused
}

// withFinal adds to e the final counters of a run halted because its job
// was taken from it (worker.final), if this is one.
func (w *worker) withFinal(e *zerolog.Event) *zerolog.Event {
	if f := w.final; f != nil {
		e = e.Int64("docs_read", f.DocsRead).Int64("docs_written", f.DocsWritten).Int64("doc_write_failures", f.DocWriteFailures)
	}
	return e
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

// logStartLost logs a start that could not be stored before the node's
// hold on the job lapsed (initJob's err, errHoldLapsed). An attempt whose
// commit was unknown may have marked the job running here, and the views
// shown it so, though no run started: the line is "replication stopped"
// at warn, counted in jobs.holds_lost, as for a run that lost its hold.
// The job stays as the store has it until the activity monitor
// re-enqueues it.
func (w *worker) logStartLost(d *replicator.JobData, err error) {
	w.n.m.Inc(replicator.MetricJobsHoldsLost)
	w.logEvent(w.cfg.Logger.Warn(), d).Err(err).
		Str("why", "this node could not renew its hold on the job, nor store the run's start before the hold lapsed: "+
			"the store took none of the job's writes for half the job timeout; no run started here, "+
			"and the job runs once the activity monitor re-enqueues it").
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
// time (preemption, shutdown, filter change), or later when its stop said
// so (requestStopUntil).
func (w *worker) reschedule(d *replicator.JobData, why string) {
	now := w.now()
	p := w.n.priorityOf(w, now)
	w.stopMu.Lock()
	at := w.requeueAt
	w.stopMu.Unlock()
	c := replicator.Change{Kind: replicator.Requeued, At: now, Reason: why, Priority: p, STime: max(w.cfg.EnqueueTime(now, p, w.cfg.Interval), at)}
	if !w.change(d, c, nil) {
		return
	}
	if why == "" {
		why = w.stopKind().requeueWhy()
	}
	w.logEvent(w.cfg.Logger.Info(), d).Str("why", why).Msg("replication stopped")
}

// requeueWhy is the why of the log line of a run stopped for k and put
// back in the queue (worker.reschedule).
func (k stopKind) requeueWhy() string {
	switch k {
	case stopPreempt:
		return "rotation: another job's turn"
	case stopShutdown:
		return "the node is shutting down"
	case stopMove:
		return "balance: moved to a node that runs fewer jobs"
	case stopPark:
		return "caught up and idle, but its final checkpoint was not written: it waits its turn to run again"
	case stopUser:
		return "user limit: another of its user's replications' turn"
	case stopHost:
		return "host budget: another replication of its host's turn, or its host ran as many as its budget allows"
	case stopStall:
		return "no progress while other replications waited for a slot: queued behind them"
	}
	return "the run ended"
}

// putBack returns a job accepted but never started (the node was
// stopping, or its target fell while the fetch waited) to the queue at
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

// TagSealed is the error of a job whose sealed credentials its node
// could not open.
const TagSealed = "sealed_credentials"

// MsgNoSealingKey is the line a node logs, once per key, when it meets
// credentials sealed with a key it does not hold.
const MsgNoSealingKey = "replicator: this node holds no private key for sealed credentials"

// cannotOpen ends a run whose credentials this node cannot open (err from
// replicator.Spec.Open). Without the key the job crashes: it waits out its
// backoff, and a node that holds the key may run it (the node also says
// once, at warn, which key it lacks); credentials that do not open with
// the key (altered, or copied from another document) fail the job, which
// its document's next write replaces.
func (w *worker) cannotOpen(d *replicator.JobData, err error) {
	if !errors.Is(err, seal.ErrNoKey) {
		w.fail(d, TagSealed, replicator.OpenReason(err))
		return
	}
	if id := d.Rep.SealedKeyID(); w.n.lacksKey(id) {
		w.cfg.Logger.Warn().Str("key_id", id).Str("effect", "this node runs none of the replications whose credentials are sealed with it: "+
			"they crash, and wait for a node that holds it; name its file in [replicator] seal_private_key_files").
			Msg(MsgNoSealingKey)
	}
	w.crash(d, err) // classify words it
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

// engineErrors are the engine's error classes, matched in order. A
// refused address comes first: whichever step met it (the changes feed,
// a worker), the job's error says what stops it.
var engineErrors = []error{
	engine.ErrAddressDenied, engine.ErrInvalidSpec, engine.ErrDBNotFound, engine.ErrUnauthorized, engine.ErrForbidden,
	engine.ErrMaxBackoff, engine.ErrLoginBudget, engine.ErrFilterFetch, engine.ErrChangesFeed, engine.ErrRevsDiff,
	engine.ErrOpenRevs, engine.ErrBulkDocs, engine.ErrDocWrite, engine.ErrPurges, engine.ErrCheckpoint, engine.ErrHTTP,
	engine.ErrInternal, engine.ErrStopped,
}

// classify splits an engine error into CouchDB's error tag and reason.
func classify(err error) (tag, reason string) {
	if errors.Is(err, seal.ErrNoKey) || errors.Is(err, seal.ErrCorrupt) {
		return TagSealed, replicator.OpenReason(err)
	}
	msg := err.Error()
	for _, e := range engineErrors {
		if errors.Is(err, e) {
			tag = e.Error()
			if _, after, ok := strings.Cut(msg, tag+": "); ok && e == engine.ErrAddressDenied {
				return tag, after // without the steps that wrap it
			}
			return tag, strings.TrimPrefix(msg, tag+": ")
		}
	}
	return "error", msg
}
