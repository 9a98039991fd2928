package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

// Options are the per-run inputs that are not part of the replication
// specification.
type Options struct {
	// ServerUUID is the replicator installation's persistent UUID, the first
	// factor of the replication id. Required.
	ServerUUID string

	// FilterCode is the source text of the "ddoc/name" filter function. When
	// empty for a user filter, Start fetches it from the source (see
	// FetchFilterCode); the job layer normally passes the code it hashed.
	FilterCode string

	// Stats seeds the counters (cumulative over restarts of one
	// replication); the run starts from the element-wise maximum of these
	// and the counters of the checkpoint it resumes from.
	Stats Stats

	// OnCheckpoint, when set, is called after every checkpoint tick (every
	// Replication.CheckpointInterval, and at the end of a one-shot run or a
	// Stop), including ticks that had nothing new to record. The job layer
	// uses it as its heartbeat. Calls are sequential, on the run's
	// goroutines, without locks held: the callback may call Progress but
	// must not block for long, nor call Stop or Wait.
	OnCheckpoint func(Checkpoint)

	// Limiter is the process's shared 429 back-off state (nil: a private
	// one per run).
	Limiter *couch.RateLimiter
	// Pace, if set, is waited on before each request of the run to an
	// endpoint (couch.Options.Pace), with the endpoint's host and the user
	// it logs in as (its user name, or its token's client id; "" for
	// none): the node's budgets of requests per second per host and per
	// host and user.
	Pace func(ctx context.Context, host, user string) error

	// Logins is the process's memory of the logins peers refused (nil: a
	// run remembers its own only): credentials a peer refused lately are
	// not tried again by any run, so that documents sharing a wrong
	// password do not lock the account out (couch.Logins).
	Logins *couch.Logins
	// Pools is the process's shared connection pools (nil: each run's
	// peers have pools of their own; see couch.Pools): the runs reaching
	// one server share its connections.
	Pools *couch.Pools

	// Client holds the node's settings of the endpoints' HTTP clients
	// (TLS, authentication); the zero value is Go's TLS defaults and
	// session authentication.
	Client ClientSettings

	// Logger receives the run's log lines; the zero value discards them.
	Logger zerolog.Logger

	// LogFields are added to each of the run's log lines, its HTTP
	// clients' included, as key-value pairs ("job_id", id, …): the job
	// layer names the job and its document.
	LogFields []any

	// Count, if set, is told of each event of the run that CouchDB's
	// couch_replicator stats count (see Count); Client.Count is told of
	// its requests. It is called on the run's goroutines and must be
	// quick and safe for concurrent use.
	Count func(Count)

	// Clock is the run's time source: checkpoint ticks, the engine's own
	// retry waits, the moving averages' recheck periods, history
	// timestamps and Checkpoint.Time, and pkg/couch's retry waits and
	// private rate limiters (a shared Limiter keeps its own clock). nil is
	// the real clock; tests pass a fake one. Connection and request
	// timeouts bound real network I/O and run on real time.
	Clock clockwork.Clock
}

// Result is the outcome of a finished one-shot run (or of a stopped run),
// shaped like CouchDB's POST /_replicate reply.
type Result struct {
	OK                   bool            `json:"ok"`
	NoChanges            bool            `json:"no_changes,omitempty"`
	UseCheckpoints       *bool           `json:"use_checkpoints,omitempty"`
	SessionID            string          `json:"session_id,omitempty"`
	SourceLastSeq        json.RawMessage `json:"source_last_seq,omitempty"`
	ReplicationIDVersion int             `json:"replication_id_version,omitempty"`
	History              []HistoryEntry  `json:"history,omitempty"`
	// For doc_ids replications only, as CouchDB answers them (from its
	// 1.0-era replicator): the run's start and end (RFC 1123) and its
	// counters, as the checkpoint document carries them.
	StartTime        string `json:"start_time,omitempty"`
	EndTime          string `json:"end_time,omitempty"`
	DocsRead         *int64 `json:"docs_read,omitempty"`
	DocsWritten      *int64 `json:"docs_written,omitempty"`
	DocWriteFailures *int64 `json:"doc_write_failures,omitempty"`
	// Stats are the final counters (not part of the JSON reply).
	Stats Stats `json:"-"`
	// StartSeq is the sequence this run started from.
	StartSeq json.RawMessage `json:"-"`
	// Completed reports a one-shot replication that replicated its whole
	// feed; false for a continuous one and for a run ended by Stop first.
	Completed bool `json:"-"`
}

// Run is one execution of a replication, from Start until it completes
// (one-shot), fails, is stopped, or its context ends. It owns the
// lifecycle; the work is shared among three roles that setup builds, as in
// CouchDB's replicator: a changesReader streams the source's feed, workers
// replicate its batches and a checkpointer records the progress.
type Run struct {
	rep  Replication
	opts Options // Clock set
	log  zerolog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	stopOnce sync.Once
	stopCh   chan struct{}
	stopMu   sync.Mutex
	stopCtx  context.Context

	haltOnce sync.Once
	haltCh   chan struct{} // closed by Halt
	halting  context.Context
	halt     context.CancelFunc // ends halting

	// Set during setup, read-only afterwards.
	src, tgt *peer
	baseID   string
	fullID   string
	ready    chan struct{} // closed when setup has finished
	start    CheckpointStart
	changes  *changesReader
	workers  *workers
	ck       *checkpointer

	stats  counters // updated by the workers, read by the checkpointer
	health *health  // what Sync is computed from

	failMu  sync.Mutex
	failErr error

	result Result
	err    error
}

// Start begins replicating in the background and returns at once; setup
// errors (missing database, bad credentials, ...) are reported by Wait. The
// run lasts until the one-shot replication completes, an error stops it,
// Stop is called or ctx ends (which aborts without a final checkpoint).
func Start(ctx context.Context, rep Replication, opts Options) *Run {
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	halting, halt := context.WithCancel(context.Background())
	r := &Run{
		rep:     rep.WithDefaults(),
		opts:    opts,
		log:     opts.Logger.With().Fields(opts.LogFields).Logger(),
		ctx:     runCtx,
		cancel:  cancel,
		done:    make(chan struct{}),
		stopCh:  make(chan struct{}),
		haltCh:  make(chan struct{}),
		halting: halting,
		halt:    halt,
		ready:   make(chan struct{}),
	}
	r.health = newHealth(opts.Clock, r.rep.DocIDs != nil || len(r.rep.Selector) > 0 || r.rep.Filter != "")
	go r.run()
	return r
}

// Wait blocks until the run ends and returns its result. A one-shot run that
// completes, and a run ended by Stop once set up, return a nil error; a run
// stopped during its setup returns an error wrapping ErrStopped.
func (r *Run) Wait() (Result, error) {
	<-r.done
	return r.result, r.err
}

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Stop ends the run gracefully: it stops reading changes, lets the workers
// finish the batches they hold, writes a final checkpoint and returns Wait's
// error. If ctx ends first, the run's work (final checkpoint included) is
// cancelled at once and the error wraps ErrStopped; the next run resumes
// from the last checkpoint written. With a ctx that never ends, the wait is
// bounded by the requests in flight: against a dead or frozen peer each
// gives up after retries_per_request retries (connection_timeout each at
// most). Stop may be called more than once, concurrently, with an ended ctx,
// and after the run has ended.
func (r *Run) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.stopMu.Lock()
		r.stopCtx = ctx
		r.stopMu.Unlock()
		close(r.stopCh)
	})
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel(ErrStopped)
		<-r.done
	}
	return r.err
}

// Halt ends the run at once, without a final checkpoint, for a job that is
// no longer the caller's (its replication deleted or cancelled, or the job
// taken over): the changes feed and every read in flight are cancelled
// now, and no write to the target starts after Halt is called. Writes
// already sent (a _bulk_docs, a document's PUT) are left to finish until
// ctx ends, when they are cut too: so, unless ctx ended first, the
// counters Progress returns after Halt count exactly the documents the
// target took. It returns once the run has ended, with Wait's error
// (wrapping ErrHalted, unless the run had ended by itself first). Halt may
// be called more than once, concurrently, and with Stop.
func (r *Run) Halt(ctx context.Context) error {
	r.haltOnce.Do(func() {
		close(r.haltCh)
		r.halt()
	})
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel(ErrHalted)
		<-r.done
	}
	return r.err
}

// halted reports whether Halt was called.
func (r *Run) halted() bool { return closed(r.haltCh) }

// ID returns the replication's base and full id once setup has computed
// them; ok is false before that (or if setup failed).
func (r *Run) ID() (base, full string, ok bool) {
	select {
	case <-r.ready:
		return r.baseID, r.fullID, r.baseID != ""
	default:
		return "", "", false
	}
}

// Progress returns the current counters and sequences. It never waits on
// a checkpoint's requests.
func (r *Run) Progress() Stats {
	select {
	case <-r.ready:
	default:
		return r.stats.load()
	}
	if r.ck == nil { // setup failed
		return r.stats.load()
	}
	return r.ck.progress()
}

// Sync returns whether the run is in sync with its source, and if not,
// why (see Sync). Like Progress, it never waits on a request.
func (r *Run) Sync() Sync {
	s := r.Progress()
	var passed int64
	select {
	case <-r.ready:
		if r.ck != nil {
			_, passed = r.ck.tracker.passedThrough()
		}
	default:
	}
	y := r.health.sync(s, passed)
	select {
	case <-r.ready:
		if r.ck != nil { // setup succeeded
			start := r.start
			y.Checkpoint = &start
		}
	default:
	}
	return y
}

// Refused returns the documents the target refused whose RefusedDoc.Seq
// is above after: the last RefusedDocsMax at most.
func (r *Run) Refused(after int64) []RefusedDoc { return r.health.refusedAfter(after) }

// closed reports whether ch is closed (ch only ever closes).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fail records the first error and cancels the run's work.
func (r *Run) fail(err error, cancel context.CancelCauseFunc) {
	r.failMu.Lock()
	if r.failErr == nil {
		r.failErr = err
	}
	r.failMu.Unlock()
	cancel(err)
}

func (r *Run) failure() error {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	return r.failErr
}

func (r *Run) run() {
	defer close(r.done)
	defer r.cancel(nil)
	defer r.halt() // releases halting's resources; Halt reads haltCh
	defer func() {
		for _, p := range []*peer{r.src, r.tgt} {
			if p != nil {
				p.t.close()
			}
		}
	}()
	// Setup has nothing to checkpoint: Stop cancels it at once (against a
	// frozen peer it would otherwise last its requests' retry budgets).
	setupCtx, setupCancel := context.WithCancelCause(r.ctx)
	setupDone := make(chan struct{})
	go func() {
		select {
		case <-r.stopCh:
			setupCancel(ErrStopped)
		case <-r.haltCh:
			setupCancel(ErrHalted)
		case <-setupDone:
		}
	}()
	err := safely(&r.log, func() error { return r.setup(setupCtx) })
	close(setupDone)
	stopped := setupCtx.Err() != nil
	setupCancel(nil)
	close(r.ready)
	if err != nil {
		switch {
		case r.ctx.Err() != nil:
			err = r.abortError()
		case stopped && r.halted():
			err = fmt.Errorf("%w: during setup", ErrHalted)
		case stopped:
			err = fmt.Errorf("%w: during setup", ErrStopped)
		default:
			r.count(CountFailedStart)
		}
		r.err = err
		if errors.Is(err, ErrHalted) || errors.Is(err, ErrStopped) || r.ctx.Err() != nil {
			// Told to stop (a pause, a rotation, a shutdown): not a
			// failure; the node logs why it stopped.
			r.log.Debug().Err(err).Msg("replication stopped during setup")
		} else {
			r.log.Error().Err(err).Msg("replication setup failed")
		}
		return
	}
	r.err = safely(&r.log, r.replicate)
}

// safely runs f and turns a panic in it into an error wrapping
// ErrInternal, logged to *log. Every goroutine of a run goes through it, so
// a bug reached by one replication's input fails that replication, not the
// process. (Out-of-memory is not a panic and cannot be caught: Validate's
// maxima and the limits on what peers send, MemoryBound, keep a run's
// allocations bounded instead.)
func safely(log *zerolog.Logger, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrInternal, p)
			log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
				Msg("replication run panicked; the run fails, the node goes on")
		}
	}()
	return f()
}

// setup verifies the peers, computes the id, finds the start sequence and
// builds the run's changes reader, workers and checkpointer.
func (r *Run) setup(ctx context.Context) error {
	if err := r.rep.Validate(); err != nil {
		return err
	}
	if r.opts.ServerUUID == "" {
		return fmt.Errorf("%w: Options.ServerUUID is required", ErrInvalidSpec)
	}
	src, tgt, err := newPeers(r.rep, r.opts, &r.log, r.health)
	if err != nil {
		return err
	}
	r.src, r.tgt = src, tgt
	startTime := r.opts.Clock.Now()

	// The source first, as CouchDB: a missing source or a wrong password
	// must not leave a created target behind, at every retry.
	srcInfo, err := r.src.info(ctx)
	if err != nil {
		return err
	}
	if r.rep.CreateTarget {
		if err := r.tgt.create(ctx, r.rep.CreateTargetParams); err != nil {
			return err
		}
	}
	tgtInfo, err := r.tgt.info(ctx)
	if err != nil {
		return err
	}
	r.src.pouch, r.tgt.pouch = srcInfo.Adapter != "", tgtInfo.Adapter != ""
	targetEmpty := tgtInfo.DocCount == 0 && tgtInfo.DocDelCount == 0

	code := r.opts.FilterCode
	if r.rep.userFilter() && code == "" {
		if code, err = fetchFilterCode(ctx, r.src, r.rep.Filter); err != nil {
			return err
		}
	}
	if r.baseID, r.fullID, err = ReplicationID(r.rep, r.opts.ServerUUID, code); err != nil {
		return err
	}
	r.log = r.log.With().Str("replication_id", r.fullID).Logger()

	logID := CheckpointIDPrefix + r.baseID
	others, err := CheckpointIDs(r.rep, r.opts.ServerUUID, code)
	if err != nil {
		return err
	}
	logs, err := findLogs(ctx, r.src, r.tgt, r.baseID, others)
	if err != nil {
		return err
	}
	var seq json.RawMessage
	seq, r.start = logs.start(r.rep)
	history, srcLog, tgtLog := logs.history, logs.src, logs.tgt
	seed := r.opts.Stats
	if logs.found && logs.from != nil && len(logs.from.History) > 0 {
		seed = maxStats(seed, statsOfHistory(logs.from.History[0]))
	}
	switch {
	case !logs.found:
		r.log.Info().Str("since", r.start.Since).Msg("no common ancestry, performing a full replication")
	case logs.migratedFrom != "":
		r.log.Info().Str("since", r.start.Since).Str("migrated_from", logs.migratedFrom).
			Msg("resuming from a checkpoint taken over from another replication id (CouchDB's, or an earlier fdbrep's)")
	default:
		r.log.Info().Str("since", r.start.Since).Msg("resuming from the checkpoint")
	}
	r.stats.seed(seed)

	// On an empty target everything will be missing: skip _revs_diff from
	// the start (the moving average re-checks within tuningRecheck) and,
	// for a replication from the beginning, take first revisions straight
	// from the feed.
	missingRatio := 0.0
	if targetEmpty {
		missingRatio = 1
	}
	inlineDocs := targetEmpty && isZeroSeq(seq)
	r.changes = newChangesReader(r.rep, r.src, seq, inlineDocs, r.opts.Clock, r.log)
	r.changes.health, r.changes.stats, r.changes.count = r.health, &r.stats, r.count
	r.workers = &workers{rep: r.rep, src: r.src, tgt: r.tgt, changes: r.changes, stats: &r.stats, stop: r.stopCh,
		halt: r.haltCh, halting: r.halting,
		clock: r.opts.Clock, log: r.log, inlineDocs: inlineDocs, maxBulkBytes: bulkDocsMaxBytesDefault,
		perWorkerConn: max(1, r.rep.HTTPConnections/r.rep.WorkerProcesses),
		tuning:        newTuning(r.opts.Clock, startTime, missingRatio), large: make(chan struct{}, 1)}
	r.ck = &checkpointer{src: r.src, tgt: r.tgt, srcStartTime: srcInfo.InstanceStartTime,
		tgtStartTime: tgtInfo.InstanceStartTime, id: logID, sessionID: newSessionID(), startTime: startTime,
		startSeq: seq, history: history, disabled: r.rep.DisableCheckpoints, docIDs: r.rep.DocIDs != nil,
		tracker: r.changes.tracker, stats: &r.stats, onCheckpoint: r.opts.OnCheckpoint, clock: r.opts.Clock,
		log: r.log, srcLogRev: logRev(srcLog), tgtLogRev: logRev(tgtLog), committedSeq: seq}
	r.ck.primePending(ctx, seq, srcInfo.UpdateSeq)
	if r.rep.FollowPurges {
		var from *CheckpointDoc
		if logs.found {
			from = logs.from
		}
		r.ck.purges = newPurger(r.rep, r.src, r.tgt, from, r.log)
		// The purges made while no run looked, before the first change.
		if _, err := r.ck.purges.follow(ctx, srcInfo.PurgeSeq); err != nil {
			return err
		}
	}
	return nil
}

func newSessionID() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:])
}

// logRev is the revision of a checkpoint document, "" when there is none.
func logRev(d *CheckpointDoc) string {
	if d == nil {
		return ""
	}
	return d.Rev
}

// replicate runs the changes reader, the workers and the checkpoint timer
// until the feed is replicated (one-shot), Stop is called, an error occurs
// or the run's context ends.
func (r *Run) replicate() error {
	runCtx, runCancel := context.WithCancelCause(r.ctx)
	defer runCancel(nil)
	feedCtx, feedCancel := context.WithCancel(runCtx)
	defer feedCancel()

	var bg, workers sync.WaitGroup
	r.spawn(&bg, feedCtx, runCancel, CountChangesReaderDeath, func() error { return r.changes.run(feedCtx) },
		func() { close(r.changes.rows) })
	for i := 0; i < r.rep.WorkerProcesses; i++ {
		r.count(CountWorkerStarted)
		r.spawn(&workers, runCtx, runCancel, CountWorkerDeath, func() error { return r.workers.work(runCtx) }, nil)
	}
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	tickerStop := make(chan struct{})
	r.spawn(&bg, runCtx, runCancel, -1, func() error { return r.ck.every(runCtx, r.rep.CheckpointInterval, tickerStop) }, nil)
	join := func() {
		close(tickerStop)
		feedCancel()
		<-workersDone
		bg.Wait()
	}

	select {
	case <-workersDone:
		join()
		if err := r.failure(); err != nil {
			return err
		}
		if err := r.ctx.Err(); err != nil {
			return r.abortError()
		}
		if r.halted() {
			return ErrHalted
		}
		if closed(r.stopCh) {
			return r.stoppedCheckpoint(r.stopContext())
		}
		if err := r.finalCheckpoint(r.ctx); err != nil {
			if r.ctx.Err() != nil {
				return r.abortError() // cancelled, or a Stop whose context ended
			}
			return err
		}
		return nil
	case <-r.haltCh:
		// Workers take no batch, and start no write, from now on, nor
		// does the checkpoint timer; the writes in flight end by
		// themselves, or when Halt's context ends (r.ctx).
		join()
		if err := r.failure(); err != nil && !errors.Is(err, ErrHalted) {
			return err
		}
		return ErrHalted
	case <-r.stopCh:
		feedCancel()
		stopCtx := r.stopContext()
		select {
		case <-workersDone:
		case <-stopCtx.Done():
			runCancel(ErrStopped)
		case <-runCtx.Done():
		case <-r.haltCh:
		}
		join()
		if err := r.failure(); err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrHalted) {
			return err
		}
		if r.halted() {
			return ErrHalted
		}
		if stopCtx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrStopped, stopCtx.Err())
		}
		return r.stoppedCheckpoint(stopCtx)
	case <-runCtx.Done():
		join()
		if err := r.failure(); err != nil {
			return err
		}
		return r.abortError()
	}
}

// spawn runs f on a goroutine counted by wg. An error fails the run, unless
// ctx had ended (a role cut short by the end of the run reports that end,
// not the request it was in); a panic (ErrInternal) always fails it. An
// error that fails the run is counted as death (none: -1). then (nil:
// none) runs after that, when f's end is recorded: what the other roles
// wait for (the changes feed's rows closing) is done there, so that no
// role sees f end before its error fails the run.
func (r *Run) spawn(wg *sync.WaitGroup, ctx context.Context, cancel context.CancelCauseFunc, death Count, f func() error, then func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		if then != nil {
			defer then()
		}
		err := safely(&r.log, f)
		// A role cut short by a halt (a read cancelled, a write not
		// started) ended as asked.
		if err != nil && (errors.Is(err, ErrInternal) || (ctx.Err() == nil && !r.halted())) {
			if death >= 0 {
				r.count(death)
			}
			r.fail(err, cancel)
		}
	}()
}

func (r *Run) abortError() error {
	if cause := context.Cause(r.ctx); cause != nil {
		return cause
	}
	return r.ctx.Err()
}

func (r *Run) stopContext() context.Context {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if r.stopCtx == nil {
		return r.ctx
	}
	return r.stopCtx
}

// stoppedCheckpoint is the final checkpoint of a run ended by Stop: when the
// stop context ends during it, the run reports ErrStopped (the checkpoint
// was cut short by the caller's deadline, the peers did not fail).
func (r *Run) stoppedCheckpoint(stopCtx context.Context) error {
	err := r.finalCheckpoint(stopCtx)
	if err != nil && stopCtx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return err
}

// finalCheckpoint writes the last checkpoint and records the run's result.
// It runs once the reader and the workers have returned.
func (r *Run) finalCheckpoint(ctx context.Context) error {
	res, err := r.ck.finalCheckpoint(ctx, r.changes.completed())
	if err != nil {
		return err
	}
	r.result = res
	return nil
}
