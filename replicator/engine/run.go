package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/google/uuid"
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

	// Logger receives the run's log lines; the zero value discards them.
	Logger zerolog.Logger
}

// Checkpoint describes one checkpoint tick.
type Checkpoint struct {
	// Seq is the sequence recorded: every change up to it is on the target.
	Seq json.RawMessage
	// Written reports whether checkpoint documents were written on this
	// tick (false when nothing changed or with use_checkpoints false).
	Written bool
	// Stats are the run's counters at the tick.
	Stats Stats
	Time  time.Time
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
	// Stats are the final counters (not part of the JSON reply).
	Stats Stats `json:"-"`
	// StartSeq is the sequence this run started from.
	StartSeq json.RawMessage `json:"-"`
	// Completed reports a one-shot replication that replicated its whole
	// feed; false for a continuous one and for a run ended by Stop first.
	Completed bool `json:"-"`
}

// Run is one execution of a replication, from Start until it completes
// (one-shot), fails, is stopped, or its context ends.
type Run struct {
	rep  Replication
	opts Options
	log  zerolog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	stopOnce sync.Once
	stopCh   chan struct{}
	stopMu   sync.Mutex
	stopCtx  context.Context

	// Set during setup, read-only afterwards.
	src, tgt      *peer
	baseID        string
	fullID        string
	sessionID     string
	startTime     time.Time
	startSeq      json.RawMessage
	history       []HistoryEntry
	srcStartTime  json.RawMessage
	tgtStartTime  json.RawMessage
	ready         chan struct{} // closed when setup has finished
	maxBulkBytes  int
	perWorkerConn int
	// inlineDocs reads the changes feed with include_docs=true: set for a
	// full replication into an empty target, where every document is
	// missing. First revisions (single leaf, "1-", no attachments) are then
	// written from the feed without a fetch, as PouchDB does with _all_docs.
	inlineDocs bool

	tracker *seqTracker
	stats   counters
	rows    chan change
	batchMu sync.Mutex
	tuning  tuning

	// ckMu serialises checkpoints and is held across their requests;
	// nothing that must answer promptly (Progress) may take it.
	ckMu      sync.Mutex
	srcLogRev string
	tgtLogRev string
	// committedMu guards committedSeq and lastResultDoc, written by
	// checkpoints (under ckMu too) and read by Progress and the result.
	committedMu   sync.Mutex
	committedSeq  json.RawMessage
	lastResultDoc *CheckpointDoc
	pendingMu     sync.Mutex
	pending       *int64

	feedComplete atomic.Bool // a one-shot feed was read to its end

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
	runCtx, cancel := context.WithCancelCause(ctx)
	r := &Run{
		rep:    rep.withDefaults(),
		opts:   opts,
		log:    opts.Logger,
		ctx:    runCtx,
		cancel: cancel,
		done:   make(chan struct{}),
		stopCh: make(chan struct{}),
		ready:  make(chan struct{}),
	}
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

// Progress returns the current counters and sequences.
func (r *Run) Progress() Stats {
	s := r.stats.load()
	select {
	case <-r.ready:
	default:
		return s
	}
	if r.tracker != nil {
		through, highest, _ := r.tracker.snapshot()
		s.ThroughSeq, s.SourceSeq = seqString(through), seqString(highest)
	}
	r.committedMu.Lock()
	s.CheckpointedSourceSeq = seqString(r.committedSeq)
	r.committedMu.Unlock()
	r.pendingMu.Lock()
	s.ChangesPending = r.pending
	r.pendingMu.Unlock()
	return s
}

func (r *Run) stopping() bool {
	select {
	case <-r.stopCh:
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
		case <-setupDone:
		}
	}()
	err := r.safely(func() error { return r.setup(setupCtx) })
	close(setupDone)
	stopped := setupCtx.Err() != nil
	setupCancel(nil)
	close(r.ready)
	if err != nil {
		switch {
		case r.ctx.Err() != nil:
			err = r.abortError()
		case stopped:
			err = fmt.Errorf("%w: during setup", ErrStopped)
		}
		r.err = err
		r.log.Error().Err(err).Msg("replication setup failed")
		return
	}
	r.err = r.safely(r.replicate)
}

// safely runs f and turns a panic in it into an error wrapping
// ErrInternal. Every goroutine of a run goes through it, so a bug reached
// by one replication's input fails that replication, not the process.
// (Out-of-memory is not a panic and cannot be caught: Validate's maxima
// keep a run's allocations bounded instead.)
func (r *Run) safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrInternal, p)
			r.log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
				Msg("replication run panicked; the run fails, the node goes on")
		}
	}()
	return f()
}

// setup verifies the peers, computes the id and finds the start sequence.
func (r *Run) setup(ctx context.Context) error {
	if err := r.rep.Validate(); err != nil {
		return err
	}
	if r.opts.ServerUUID == "" {
		return fmt.Errorf("%w: Options.ServerUUID is required", ErrInvalidSpec)
	}
	src, tgt, err := r.newPeers()
	if err != nil {
		return err
	}
	r.src, r.tgt = src, tgt
	r.sessionID = newSessionID()
	r.startTime = time.Now()
	r.maxBulkBytes = bulkDocsMaxBytesDefault
	r.perWorkerConn = max(1, r.rep.HTTPConnections/r.rep.WorkerProcesses)
	r.tuning = newTuning()

	if r.rep.CreateTarget {
		if err := r.tgt.create(ctx, r.rep.CreateTargetParams); err != nil {
			return err
		}
	}
	srcInfo, err := r.src.info(ctx)
	if err != nil {
		return err
	}
	tgtInfo, err := r.tgt.info(ctx)
	if err != nil {
		return err
	}
	r.srcStartTime, r.tgtStartTime = srcInfo.InstanceStartTime, tgtInfo.InstanceStartTime
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
	srcLog, err := r.src.getLocal(ctx, logID)
	if err != nil {
		return fmt.Errorf("reading the source checkpoint: %w", err)
	}
	tgtLog, err := r.tgt.getLocal(ctx, logID)
	if err != nil {
		return fmt.Errorf("reading the target checkpoint: %w", err)
	}
	if srcLog != nil {
		r.srcLogRev = srcLog.Rev
	}
	if tgtLog != nil {
		r.tgtLogRev = tgtLog.Rev
	}
	seq, history, found := compareLogs(srcLog, tgtLog)
	seed := r.opts.Stats
	if found && srcLog != nil && len(srcLog.History) > 0 {
		seed = maxStats(seed, statsOfHistory(srcLog.History[0]))
	}
	if !found && len(r.rep.SinceSeq) > 0 {
		seq = r.rep.SinceSeq
	}
	if !found {
		r.log.Info().Msg("no common ancestry, performing a full replication")
	}
	r.startSeq, r.history, r.committedSeq = seq, history, seq
	if targetEmpty {
		// Everything will be missing: skip _revs_diff from the start (the
		// moving average re-checks within tuningRecheck) and, for a
		// replication from the beginning, take first revisions straight
		// from the feed.
		r.tuning.missingRatio = 1
		r.inlineDocs = isZeroSeq(seq)
	}
	r.stats.seed(seed)
	r.tracker = newSeqTracker(seq)
	return nil
}

func newSessionID() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:])
}

// replicate runs the changes reader, the workers and the checkpoint timer.
func (r *Run) replicate() error {
	runCtx, runCancel := context.WithCancelCause(r.ctx)
	defer runCancel(nil)
	feedCtx, feedCancel := context.WithCancel(runCtx)
	defer feedCancel()

	r.rows = make(chan change, min(r.rep.WorkerBatchSize*r.rep.WorkerProcesses, WorkerBatchSizeMax)*2)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		defer close(r.rows)
		err := r.safely(func() error { return r.readChanges(feedCtx, r.rows) })
		switch {
		case err != nil && (feedCtx.Err() == nil || errors.Is(err, ErrInternal)):
			r.fail(err, runCancel)
		case err == nil && feedCtx.Err() == nil && !r.rep.Continuous:
			r.feedComplete.Store(true)
		}
	}()

	var workers sync.WaitGroup
	for i := 0; i < r.rep.WorkerProcesses; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			// A worker cut short by the end of the run reports that end,
			// not the request it was in.
			err := r.safely(func() error { return r.work(runCtx) })
			if err != nil && (runCtx.Err() == nil || errors.Is(err, ErrInternal)) {
				r.fail(err, runCancel)
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()

	tickerStop := make(chan struct{})
	bg.Add(1)
	go func() {
		defer bg.Done()
		t := time.NewTicker(r.rep.CheckpointInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := r.safely(func() error { return r.checkpoint(runCtx) }); err != nil {
					if runCtx.Err() == nil || errors.Is(err, ErrInternal) {
						r.fail(err, runCancel)
					}
					return
				}
			case <-tickerStop:
				return
			case <-runCtx.Done():
				return
			}
		}
	}()
	finish := func() {
		close(tickerStop)
		feedCancel()
		<-workersDone
		bg.Wait()
	}

	select {
	case <-workersDone:
		finish()
		if err := r.failure(); err != nil {
			return err
		}
		if err := r.ctx.Err(); err != nil {
			return r.abortError()
		}
		if r.stopping() {
			return r.stoppedCheckpoint(r.stopContext())
		}
		if err := r.finalCheckpoint(r.ctx); err != nil {
			if r.ctx.Err() != nil {
				return r.abortError() // cancelled, or a Stop whose context ended
			}
			return err
		}
		return nil
	case <-r.stopCh:
		feedCancel()
		stopCtx := r.stopContext()
		select {
		case <-workersDone:
		case <-stopCtx.Done():
			runCancel(ErrStopped)
		case <-runCtx.Done():
		}
		finish()
		if err := r.failure(); err != nil && !errors.Is(err, ErrStopped) {
			return err
		}
		if stopCtx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrStopped, stopCtx.Err())
		}
		return r.stoppedCheckpoint(stopCtx)
	case <-runCtx.Done():
		finish()
		if err := r.failure(); err != nil {
			return err
		}
		return r.abortError()
	}
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

// finalCheckpoint writes the last checkpoint and builds the result.
func (r *Run) finalCheckpoint(ctx context.Context) error {
	written, err := r.doCheckpoint(ctx)
	if err != nil {
		return err
	}
	_, _, inFlight := r.tracker.snapshot()
	res := Result{OK: true, Stats: r.Progress(), StartSeq: r.startSeq,
		Completed: r.feedComplete.Load() && len(r.rows) == 0 && inFlight == 0}
	switch {
	case r.rep.DisableCheckpoints:
		f := false
		res.UseCheckpoints = &f
	default:
		r.committedMu.Lock()
		d := r.lastResultDoc
		r.committedMu.Unlock()
		if d == nil {
			d = r.logDoc(r.startSeq, r.stats.load())
			d.History = r.history
			res.NoChanges = !written
		}
		res.SessionID = d.SessionID
		res.SourceLastSeq = d.SourceLastSeq
		res.ReplicationIDVersion = ReplicationIDVersion
		res.History = d.History
	}
	r.result = res
	return nil
}

// checkpoint is the timer's tick.
func (r *Run) checkpoint(ctx context.Context) error {
	_, err := r.doCheckpoint(ctx)
	return err
}

// doCheckpoint records through_seq on both peers when it moved, refreshes
// changes_pending and notifies OnCheckpoint.
func (r *Run) doCheckpoint(ctx context.Context) (bool, error) {
	written, through, err := r.commitThrough(ctx)
	if err != nil {
		return false, err
	}
	r.refreshPending(ctx, through)
	if r.opts.OnCheckpoint != nil {
		// Called without locks held, so the callback may use Progress.
		r.opts.OnCheckpoint(Checkpoint{Seq: through, Written: written, Stats: r.Progress(), Time: time.Now()})
	}
	return written, nil
}

// commitThrough writes the checkpoint documents for the current through_seq
// if it moved since the last checkpoint.
func (r *Run) commitThrough(ctx context.Context) (bool, json.RawMessage, error) {
	r.ckMu.Lock()
	defer r.ckMu.Unlock()
	through, _, _ := r.tracker.snapshot()
	r.committedMu.Lock()
	committed := r.committedSeq
	r.committedMu.Unlock()
	if seqEqual(through, committed) {
		return false, through, nil
	}
	written := false
	if !r.rep.DisableCheckpoints {
		if err := r.writeLogs(ctx, through); err != nil {
			return false, through, err
		}
		written = true
	}
	r.committedMu.Lock()
	r.committedSeq = through
	r.committedMu.Unlock()
	return written, through, nil
}

// logDoc builds the checkpoint body for seq.
func (r *Run) logDoc(seq json.RawMessage, s Stats) *CheckpointDoc {
	now := time.Now()
	entry := HistoryEntry{
		SessionID:        r.sessionID,
		StartTime:        rfc1123(r.startTime),
		EndTime:          rfc1123(now),
		StartLastSeq:     r.startSeq,
		EndLastSeq:       seq,
		RecordedSeq:      seq,
		MissingChecked:   s.RevisionsChecked,
		MissingFound:     s.MissingRevisionsFound,
		DocsRead:         s.DocsRead,
		DocsWritten:      s.DocsWritten,
		DocWriteFailures: s.DocWriteFailures,
		BulkGetDocs:      s.BulkGetDocs,
		BulkGetAttempts:  s.BulkGetAttempts,
	}
	d := &CheckpointDoc{
		ID:                   CheckpointIDPrefix + r.baseID,
		SessionID:            r.sessionID,
		SourceLastSeq:        seq,
		ReplicationIDVersion: ReplicationIDVersion,
		History:              historyWith(entry, r.history),
	}
	if r.rep.DocIDs != nil {
		d.StartTime, d.EndTime = entry.StartTime, entry.EndTime
		d.DocsRead, d.DocsWritten, d.DocWriteFailures = &entry.DocsRead, &entry.DocsWritten, &entry.DocWriteFailures
	}
	return d
}

// writeLogs commits both peers and writes the checkpoint documents.
func (r *Run) writeLogs(ctx context.Context, seq json.RawMessage) error {
	for _, side := range []struct {
		name string
		p    *peer
		want json.RawMessage
	}{{"source", r.src, r.srcStartTime}, {"target", r.tgt, r.tgtStartTime}} {
		got, err := side.p.ensureFullCommit(ctx)
		if err != nil {
			return fmt.Errorf("%w: _ensure_full_commit on the %s: %w", ErrCheckpoint, side.name, err)
		}
		if !sameInstance(got, side.want) {
			return fmt.Errorf("%w: instance_start_time on %s database has changed since last checkpoint", ErrCheckpoint, side.name)
		}
	}
	d := r.logDoc(seq, r.stats.load())
	rev, err := r.putLog(ctx, r.src, d, r.srcLogRev)
	if err != nil {
		return fmt.Errorf("%w: Error updating the source checkpoint document: %w", ErrCheckpoint, err)
	}
	r.srcLogRev = rev
	rev, err = r.putLog(ctx, r.tgt, d, r.tgtLogRev)
	if err != nil {
		return fmt.Errorf("%w: Error updating the target checkpoint document: %w", ErrCheckpoint, err)
	}
	r.tgtLogRev = rev
	r.committedMu.Lock()
	r.lastResultDoc = d
	r.committedMu.Unlock()
	r.log.Debug().RawJSON("seq", seq).Msg("checkpoint written")
	return nil
}

// putLog writes d with the given revision; on a conflict it re-reads the
// document and adopts its revision if it already holds what we sent (an
// earlier attempt succeeded but its reply was lost).
func (r *Run) putLog(ctx context.Context, p *peer, d *CheckpointDoc, rev string) (string, error) {
	body := *d
	body.Rev = rev
	newRev, err := p.putLocal(ctx, &body)
	if statusOf(err) == 409 {
		cur, gerr := p.getLocal(ctx, d.ID)
		if gerr == nil && cur != nil && cur.SessionID == d.SessionID && seqEqual(cur.SourceLastSeq, d.SourceLastSeq) {
			return cur.Rev, nil
		}
		return "", err
	}
	if err != nil {
		return "", err
	}
	if newRev == "" { // pouchdb-server style replies without rev
		cur, gerr := p.getLocal(ctx, d.ID)
		if gerr != nil || cur == nil {
			return "", fmt.Errorf("re-reading %s: %v", d.ID, gerr)
		}
		newRev = cur.Rev
	}
	return newRev, nil
}

func sameInstance(got, want json.RawMessage) bool {
	if seqString(got) == "0" || seqString(want) == "0" {
		return true
	}
	return seqString(got) == seqString(want)
}

// refreshPending recomputes changes_pending at a checkpoint tick: update_seq minus through_seq for integer sequences, the
// _changes "pending" count otherwise; nil when unknown.
func (r *Run) refreshPending(ctx context.Context, through json.RawMessage) {
	var pending *int64
	if n, err := strconv.ParseInt(seqString(through), 10, 64); err == nil {
		if info, err := r.src.info(ctx); err == nil {
			if u, err := strconv.ParseInt(seqString(info.UpdateSeq), 10, 64); err == nil {
				p := max(0, u-n)
				pending = &p
			}
		}
	} else {
		pending = r.src.pendingSince(ctx, through)
	}
	r.pendingMu.Lock()
	r.pending = pending
	r.pendingMu.Unlock()
}
