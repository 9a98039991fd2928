package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
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
	stopUser // its user's other replications wait for a turn (see doc.go, "Per-user limits")
	stopHost // its host's other replications wait for a turn, or it runs beyond its host's budget (see doc.go, "Budgets per host")
	// stopStall: a one-shot run that made no progress while jobs wait
	// (see doc.go, "Stalled one-shot runs")
	stopStall
)

// String names what asked for the stop, as the job's history and log say it.
func (k stopKind) String() string {
	switch k {
	case stopPreempt:
		return "rotation"
	case stopShutdown:
		return "shutdown"
	case stopMove:
		return "balance"
	case stopPark:
		return "park"
	case stopUser:
		return "user limit"
	case stopHost:
		return "host budget"
	case stopStall:
		return "stall"
	}
	return "none"
}

// worker runs one accepted job on a node. Its fields are grouped by
// owner.
type worker struct {
	// Set by newWorker (in Node.started, under n.mu) and never changed:
	// read without a lock. continuous, shareKey and limitedOwner are
	// fixed at acceptance so that the interval step can read them while
	// the worker changes its job's data.
	n          *Node
	job        *fdbjobs.Job
	ctx        context.Context // the node's op context
	cfg        Config
	data       *replicator.JobData // nil when the data did not decode
	decodeErr  error
	continuous bool
	shareKey   string
	// limitedOwner is the owner the per-user limit counts the job against
	// ("" when it is not limited; see doc.go, "Per-user limits").
	limitedOwner string
	// hosts are the budgets' partitions (hosts, hosts and users) that
	// count the job while the node has budgets (see doc.go, "Budgets per
	// host").
	hosts   []string
	started time.Time

	// Guarded by n.mu (the interval step, workerExit and priorityOf):
	// charged is when the job's run time was last charged for fair share;
	// priority is the job's fair-share priority as of prioritized (see
	// replicator/share.go).
	charged     time.Time
	priority    float64
	prioritized time.Time

	// The stop request: stopCh is closed, once (stopOnce), when a stop is
	// asked; stopMu guards kind and requeueAt, set with it.
	stopCh   chan struct{}
	stopOnce sync.Once
	stopMu   sync.Mutex
	kind     stopKind
	// requeueAt is the earliest a stopped job goes back in the queue
	// (Unix ms; 0: its fair-share time): behind its user's waiting jobs
	// (stopUser) or the jobs that waited (stopStall). Set with the stop
	// (requestStopUntil).
	requeueAt int64

	// final is the counters of a run halted because its job was taken
	// from it (runLoop.taken), for logHalted; nil otherwise.
	final *engine.Stats
	// quietHalt is set by runLoop.renew around its heartbeat: an ErrHalt
	// there is not logged by txError but noted in haltSeen, for renew to
	// end the run as runLoop.taken does (writes in flight finished, the
	// final counters logged and stored for whoever removed the job), as
	// when watchRun hears of it first. Both belong to the run loop's
	// goroutine.
	quietHalt, haltSeen bool
	// rep, parkable and group are the replication of the job's run,
	// whether it may park (runLoop.parkable) and its source's watch group,
	// set before the run is registered with the progress loop
	// (Node.runStarted), which reads them.
	rep      engine.Replication
	parkable bool
	group    string
}

func newWorker(n *Node, job *fdbjobs.Job, ctx context.Context, cfg Config) *worker {
	w := &worker{n: n, job: job, ctx: ctx, cfg: cfg, started: cfg.Clock.Now(), stopCh: make(chan struct{})}
	w.data, w.decodeErr = replicator.DecodeJobData(job.Data)
	w.prioritized = w.started
	if w.data != nil {
		w.continuous, w.shareKey, w.limitedOwner = w.data.Continuous(), w.data.ShareKey(), limitedOwner(w.data)
		w.hosts = replicator.BudgetGroups(w.data.Rep)
		// The priority it was enqueued with, decayed while it waited.
		w.priority = cfg.Decay(w.data.Priority, w.started.Sub(time.UnixMilli(w.data.LastUpdated)), cfg.Interval)
	}
	return w
}

func (w *worker) requestStop(k stopKind) { w.requestStopUntil(k, 0) }

// requestStopUntil asks the run to stop for k, its job back in the queue
// no sooner than at (Unix ms; 0: its fair-share time). The first request
// wins.
func (w *worker) requestStopUntil(k stopKind, at int64) {
	w.stopOnce.Do(func() {
		w.stopMu.Lock()
		w.kind, w.requeueAt = k, at
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
	// Its sealed credentials, opened for this run alone (the job data
	// keeps them sealed).
	spec, err := d.Rep.Open(w.cfg.Opener, d.SealScope())
	if err != nil {
		w.cannotOpen(d, err)
		return
	}
	// Job data written by an older or foreign writer is held to today's
	// bounds before anything is allocated for it.
	rep, err := spec.Replication()
	if err == nil {
		// Stored before valid_endpoint_protocols forbade its scheme: it
		// fails, as CouchDB fails such a document when it reads it again.
		err = w.cfg.Protocols.Check(spec, replicator.ErrBadRequest)
	}
	if err != nil {
		w.fail(d, "bad_rep_doc", replicator.Reason(err))
		return
	}
	rep = w.cfg.JobDefaults.Apply(rep, spec)
	if w.stopRequested() {
		w.putBack(d)
		return
	}
	if w.heldAtStart(d) {
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
		OnCheckpoint: keepLatest(ck), Pace: w.n.pacer.Wait,
	})
	r := &runLoop{w: w, d: d, rep: rep, run: run, cancel: cancel, hb: w.cfg.Clock.NewTicker(w.cfg.heartbeat()), hold: w.newHoldTimer()}
	w.rep, w.parkable = rep, r.parkable()
	w.group, _, _ = replicator.WatchGroupOf(d.Rep.Source)
	w.n.runStarted(w, run, d)
	defer w.n.runEnded(w)
	defer r.hb.Stop()
	defer r.hold.stop()
	gone, stopWatch := w.watchRun(runCtx, d)
	defer stopWatch()
	r.gone = gone
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
		case <-gone:
			r.taken()
			return
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
	gone   <-chan struct{} // closed when the store no longer gives the job to the worker (watchRun)
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

// taken ends the run of a job the store no longer gives this worker
// (watchRun): its replication was deleted or cancelled, its document
// changed, its database deleted, or the job taken over. The run starts no
// write from now on and lets those in flight finish, within
// haltGraceDefault (engine Run.Halt), so that its counters are what the
// target took. Then a heartbeat, which the fence refuses, tells why: the
// stop is logged with those counters (txError, logHalted), and the
// counters of a run whose job was removed are stored for whoever removed
// it (storeRunEnd; a POST /_replicate that cancels the replication waits
// for them: replicator.Progress.RunEnd). Should the heartbeat commit
// after all (the store gave the job back meanwhile), the job goes back to
// pending.
func (r *runLoop) taken() {
	w, d := r.w, r.d
	ctx, cancel := context.WithCancel(w.ctx)
	t := w.cfg.Clock.AfterFunc(haltGraceDefault, cancel)
	if w.pausedNow() {
		// Paused: no run of it follows, so its run ends as a stop does,
		// with a final checkpoint (within the same grace), and resumes
		// from there.
		_ = r.run.Stop(ctx)
	}
	_ = r.run.Halt(ctx)
	t.Stop()
	cancel()
	if w.ctx.Err() != nil {
		return
	}
	final := r.run.Progress()
	w.final = &final
	if w.heartbeat(d, final) {
		d.Stats, d.Sync = mergeStats(d.Stats, final), syncOf(r.run)
		w.reschedule(d, "")
	}
}

// renew writes a heartbeat with stats and renews the hold; false when the
// job was halted or its hold lapsed meanwhile (the run is halted then).
func (r *runLoop) renew(stats engine.Stats) bool {
	r.w.quietHalt, r.w.haltSeen = true, false
	ok := r.w.heartbeat(r.d, stats)
	r.w.quietHalt = false
	if !ok {
		if r.w.haltSeen {
			// The job was taken from the run before watchRun said so.
			r.taken()
			return false
		}
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
	// back to pending like any stopped job; so is one of a stalled run
	// (its peer does not answer: the stop cut its requests short).
	if err != nil && !errors.Is(err, engine.ErrStopped) && !cut && w.stopKind() != stopStall {
		w.crash(d, err)
		return
	}
	// A job parks only after its final checkpoint was written: its
	// sequence is where a change is looked for. One that rotation (or a
	// lower max_jobs) stopped while caught up parks too: back in the
	// queue it would only wait for a slot to find it has nothing to copy.
	// One that balance moves runs on at once on a lighter node.
	if !cut && d.Stats.CheckpointedSourceSeq != "" {
		switch kind := w.stopKind(); {
		case kind == stopPark:
			w.park(d, r.rep, "")
			return
		case (kind == stopPreempt || kind == stopUser || kind == stopHost) && w.parkable && w.n.Config().parks() && d.Sync.CaughtUp && d.Sync.Stall == nil &&
			w.n.mayPark(w, r.rep, w.n.waiting.get(w.now(), w.n.Config().waitingMaxAge())):
			w.park(d, r.rep, kind.String())
			return
		}
	}
	w.reschedule(d, "")
}

// parkable reports whether the run's job may ever park (see doc.go,
// "Parking"): it is continuous, checkpoints and its source URL names a
// database. Whether parking is on (Config.parks) is read at each
// decision.
func (r *runLoop) parkable() bool {
	if !r.d.Continuous() || r.rep.DisableCheckpoints {
		return false
	}
	_, _, ok := replicator.WatchGroupOf(r.d.Rep.Source)
	return ok
}

// parkIfIdle asks the run to stop and its job to park once it has been
// caught up, with no change to copy, for the node's ParkAfter, where its
// source's server gives a _db_updates feed that wakes it within a second
// of a change (see doc.go, "When a replication parks"): continuous jobs
// that checkpoint, whose source URL names a database, and that are not
// stalled. (While jobs wait for a slot, the progress loop parks idle jobs
// sooner: Node.giveWayWhileWaiting.)
func (r *runLoop) parkIfIdle() {
	w := r.w
	if !w.parkable || !w.n.Config().parks() {
		return
	}
	s := r.run.Sync()
	if s.CaughtUp && s.Stall == nil && s.CaughtUpSince > 0 && w.now().Sub(time.UnixMilli(s.CaughtUpSince)) >= w.n.Config().ParkAfter &&
		w.n.mayPark(w, r.rep, 0) {
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
