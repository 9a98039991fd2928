package fdbjobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// JobArgs are the arguments of a job that a Runtime works, stored as the
// job's JSON (encoding/json). Kind names the job type: the fdbjobs type of
// every job inserted with such arguments, and the worker that works them.
// It must return a constant.
type JobArgs interface {
	Kind() string
}

// Worker works the jobs of one kind, whose arguments are T. Work returns
// nil when the job is done (it becomes finished, completed), or an error:
// the attempt failed and the job is retried by its RetryPolicy until its
// MaxAttempts, then discarded. Errors made with Permanent discard at once,
// and those made with Snooze put the job back for later without counting
// an attempt. A panic in Work is the attempt's error.
//
// ctx ends when the worker must stop: the job was cancelled (Cancel), or
// taken from this node (removed, re-enqueued by the activity monitor,
// accepted elsewhere), the node could not renew its hold on the job in
// time (see doc.go, "Holding a job"), or the Runtime is stopping and its
// grace ended. Its context.Cause says which (ErrCancelled, ErrHalt,
// ErrHoldLapsed, ErrStopped). Work must
// return soon after: the job is no longer this worker's, and what it
// writes for the job outside the store may be written twice (at-least-once).
type Worker[T JobArgs] interface {
	Work(ctx context.Context, w *Work[T]) error
}

// WorkFunc is a Worker written as a function.
type WorkFunc[T JobArgs] func(ctx context.Context, w *Work[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, w *Work[T]) error { return f(ctx, w) }

// Work is one attempt at a job, as its Worker sees it.
type Work[T JobArgs] struct {
	// Args are the job's arguments, decoded.
	Args T
	// ID is the job's id.
	ID string
	// Attempt counts this attempt: 1 for the first. An attempt whose node
	// died is not counted (the activity monitor hands the job back).
	Attempt int
	// MaxAttempts is the attempts the job has in all.
	MaxAttempts int
	// Errors are the last errors of the job's earlier attempts, oldest
	// first (ErrorHistoryMax at most).
	Errors []AttemptError
	// Schedule is the name of the schedule that inserted the job, and
	// Period the time of the period it was inserted for, in UTC ("" and
	// zero for a job inserted otherwise; see Client.PutSchedule).
	Schedule string
	Period   time.Time
	// Job is the job as the store gave it. The Runtime renews its hold
	// meanwhile (Update): the worker reads its ID and Type and its hold
	// (HoldDeadline, HoldContext), and does not call the Client's Update or
	// Finish for it (Work.Update is the worker's), unless its kind is
	// Manual (WorkerOptions.Manual): then those are the worker's alone.
	Job *Job

	// update writes new arguments under the job's lock, and completeTx
	// finishes the job in the caller's transaction (the Runtime's).
	update     func(ctx context.Context, args json.RawMessage) error
	completeTx func(ctx context.Context, tr kv.Transaction) error
}

// Update stores args as the job's arguments, in a transaction fenced by
// the job's lock that renews its hold too: a checkpoint of a long job,
// which its next attempt starts from (a retry, or another node after this
// one stopped or died), and which the attempt's end keeps. w.Args stays as
// it was. It returns ErrHalt when the job is no longer this worker's (then
// nothing is written, and Work must return), and the transaction's error
// otherwise; ctx bounds it, and so does the job's hold. Arguments that do
// not encode are ErrInvalidArgument. Any goroutine of the attempt may call
// it; calls are written one at a time.
func (w *Work[T]) Update(ctx context.Context, args T) error {
	if w.update == nil {
		return fmt.Errorf("%w: Work.Update: not a Runtime's attempt", ErrInvalidArgument)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("%w: Work.Update: encoding the arguments: %v", ErrInvalidArgument, err)
	}
	return w.update(ctx, raw)
}

// CompleteTx finishes the job, completed, in tr, fenced by the job's lock
// (River's JobCompleteTx): the worker's effects in the store commit with
// the job's end, or neither does. It returns ErrHalt when the job is no
// longer this worker's (tr must then not commit the effects). Work returns
// nil once tr committed, and the Runtime writes nothing more for the
// attempt; if Work returns an error instead, the attempt ends by that
// error, as if CompleteTx had not been called, which the lock fences in
// turn when tr did commit (the job is then completed).
func (w *Work[T]) CompleteTx(ctx context.Context, tr kv.Transaction) error {
	if w.completeTx == nil {
		return fmt.Errorf("%w: Work.CompleteTx: not a Runtime's attempt", ErrInvalidArgument)
	}
	return w.completeTx(ctx, tr)
}

// WorkerOptions tune the working of one kind on one Runtime. The zero
// value gives the defaults.
type WorkerOptions struct {
	// Concurrency is how many jobs of the kind this Runtime works at once
	// (ConcurrencyDefault when zero; at most ConcurrencyMax).
	Concurrency int
	// Timeout is the kind's activity timeout (SetTypeTimeout), which the
	// Runtime writes when it starts if the store has another: a job whose
	// node renewed its hold on it for no Timeout is handed to another node.
	// The Runtime renews every Timeout / HeartbeatFraction. TimeoutDefault
	// when zero; at least TimeoutMin. Every node should give a kind the
	// same Timeout.
	Timeout time.Duration
	// MaxAttempts is how many attempts a job of the kind has, unless it
	// was inserted with its own (InsertOptions.MaxAttempts):
	// MaxAttemptsDefault when zero.
	MaxAttempts int
	// RetryPolicy says when a failed attempt is tried again:
	// RetryPolicyDefault when nil.
	RetryPolicy RetryPolicy
	// RetainCompleted, RetainCancelled and RetainDiscarded are how long a
	// job finished with each outcome is kept before the Runtime's sweeper
	// removes it: RetainCompletedDefault, RetainCancelledDefault and
	// RetainDiscardedDefault when zero, RetainForever to keep such jobs.
	// The sweeper of any node working the kind applies its own.
	RetainCompleted, RetainCancelled, RetainDiscarded time.Duration
	// RetainFinished, for a Manual kind only, is how long a job its worker
	// marked finished with Client.RetainTx is kept past the time it gave
	// there before the Runtime's sweeper removes it:
	// RetainCompletedDefault when zero, RetainForever to keep such jobs;
	// Runtime.SetRetainFinished changes it while the Runtime runs.
	RetainFinished time.Duration
	// FinishedAt, for a Manual kind only, when not nil, reads from a
	// finished job's data the time its worker gave RetainTx for its last
	// finish: the sweeper then removes a job only by the mark of that
	// time, and clears a mark of another time alone (one an earlier
	// finish left, where a writer did not call UnretainTx). Without it,
	// any mark of a finished job removes it.
	FinishedAt func(data json.RawMessage) (time.Time, bool)
	// OnRemove, when not nil, is called by the Runtime's sweeper in each
	// transaction that removes jobs of the kind past their retention,
	// with those jobs, before their rows are cleared: for a caller that
	// keeps keys of its own beside its jobs (an index) to clear them in
	// the same transaction. Its error fails the transaction, which the
	// sweeper retries at its next period; it may run again for the same
	// jobs when the transaction retries, so it must only write in tr.
	OnRemove func(ctx context.Context, tr kv.Transaction, jobs []RemovedJob) error
	// Middleware wrap every attempt of the kind's jobs, inside the
	// Runtime's (RuntimeOptions.Middleware), outermost first.
	Middleware []WorkMiddleware
	// Fetchers is how many fetchers accept the kind's jobs on the Runtime
	// at once, each an AcceptBatch at a time: one per FetchBatch of the
	// Concurrency the Runtime starts with (8 at most) when zero; at most
	// FetchersMax. More fetchers overlap more accepts; each
	// idle one holds a watch.
	Fetchers int
	// FetchBatch is the most jobs one fetch accepts in one transaction:
	// FetchBatchDefault when zero, at most MaxBatch.
	FetchBatch int
	// OldestFirst makes each fetch take the due jobs with the oldest
	// scheduled times across the kind's shards, priorities' handicaps
	// included (see Config.PriorityAging), for one more snapshot read of
	// every shard's head per fetch: a queue in the order of its
	// scheduled times and priorities, as the replicator's fair share
	// needs. By default a fetch takes the due jobs of shards in a random
	// order, which scales out better (the fetchers of many nodes seldom
	// aim at the same jobs), and a job may start before one due earlier,
	// or of a higher priority, in another shard.
	OldestFirst bool
	// Manual makes the Worker hold and end its jobs itself, with the
	// Client's Update, Finish and Resubmit fenced by Work.Job's lock (or
	// a layer of its own over them): the Runtime accepts the kind's jobs,
	// bounds them by Concurrency and runs them on its runners, but starts
	// no keeper for them (the Worker renews the hold at least every
	// Timeout / HeartbeatFraction, and watches the job if it must hear of
	// its removal) and writes no end: an error Work returns, or a panic,
	// is logged, and a job it left running goes back to pending by the
	// activity monitor, after Timeout. A Manual job's data are its
	// arguments as the Client stores them (no envelope: no attempt count,
	// retry or retention by outcome of the Runtime's), so Work.Update and
	// Work.CompleteTx are ErrInvalidArgument, the Runtime's sweeper
	// removes only the jobs the worker marked with Client.RetainTx
	// (RetainFinished after), and its metrics (NewMetrics) count its
	// attempts' starts and run times but no wait from a due time (its
	// scheduled times are the worker's) and no outcome. Work's ctx ends only when the Runtime stops
	// (ErrStopped). The replicator runs its replication jobs so: their
	// heartbeats carry the run's counters, and their ends go through its
	// Lifecycle.
	Manual bool
}

// Defaults and bounds of WorkerOptions and the Runtime.
const (
	// ConcurrencyDefault is WorkerOptions.Concurrency's default.
	ConcurrencyDefault = 10
	// ConcurrencyMax bounds WorkerOptions.Concurrency: the jobs of one
	// fetch are accepted in one transaction (AcceptBatch).
	ConcurrencyMax = 10_000
	// TimeoutDefault is WorkerOptions.Timeout's default.
	TimeoutDefault = 30 * time.Second
	// TimeoutMin bounds WorkerOptions.Timeout from below: heartbeats at a
	// quarter of it must fit a transaction's time.
	TimeoutMin = 100 * time.Millisecond
	// MaxAttemptsDefault is WorkerOptions.MaxAttempts' default, River's.
	MaxAttemptsDefault = 25
	// FetchBatchDefault is WorkerOptions.FetchBatch's default.
	FetchBatchDefault = 200
	// FetchersMax bounds WorkerOptions.Fetchers.
	FetchersMax = 1000
	// HeartbeatFraction divides a kind's Timeout into the time between
	// two renewals of a running job's hold: four renewals per timeout,
	// two per hold (HoldFraction), so one lost heartbeat costs no job.
	HeartbeatFraction = 4
)

// Workers is the registry of the Workers a Runtime runs, one per kind. It
// is safe for concurrent use; a Runtime reads it when it starts.
type Workers struct {
	mu    sync.Mutex
	kinds map[string]*kindWorker // by kind; guarded by mu
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers { return &Workers{kinds: map[string]*kindWorker{}} }

// kindWorker is a registered Worker with its options, behind a function
// that decodes the job's arguments for it.
type kindWorker struct {
	kind   string
	opts   WorkerOptions
	retain retention
	// retainFinished is a Manual kind's RetainFinished on the Runtime
	// (one per Runtime, as ends), which SetRetainFinished changes.
	retainFinished *atomic.Int64
	// ends are the attempts' ends for the kind's completers (complete.go),
	// one channel per Runtime (snapshot makes it).
	ends chan *ending
	// slots bound the kind's jobs at work on the Runtime (one per Runtime,
	// as ends).
	slots *slots
	// stats are the kind's figures on the Runtime (one per Runtime, as
	// ends).
	stats *kindStats
	// capacity is the Runtime's lease of the kind's cluster-wide limit
	// (one per Start of a Runtime; limits.go).
	capacity *capacity
	// claims serializes the Runtime's claims of places in the kind's
	// partitions (partition.go; one per Runtime, as ends): its fetchers'
	// claims read and write the same partitions' keys, so that two at
	// once would make one of them fail and run again.
	claims *sync.Mutex
	// claimGroup gathers the claims of the kind's fetchers on the
	// Runtime into shared transactions (claimgroup.go; one per Runtime,
	// as ends).
	claimGroup *claimGroup
	// runTime is the run time of the kind's jobs not yet charged, for
	// fair shares by run time (charge.go; one per Runtime, as ends).
	runTime *runTimeCharges
	// decode decodes a job's arguments into the Worker's T (as any); its
	// error is errDecode. work calls the Worker with them.
	decode func(raw json.RawMessage) (any, error)
	work   func(ctx context.Context, j *Job, e *envelope, a *attempt, args any) error
}

// AddWorker registers worker for the jobs whose arguments are T (their
// kind, T's Kind). A kind registered already, or options out of bounds,
// are ErrInvalidArgument.
func AddWorker[T JobArgs](ws *Workers, worker Worker[T], opts WorkerOptions) error {
	var zero T
	if ws == nil {
		return fmt.Errorf("%w: AddWorker[%T]: nil Workers (NewWorkers makes one)", ErrInvalidArgument, zero)
	}
	kind := kindOf(zero)
	if err := checkName("kind", kind); err != nil {
		return fmt.Errorf("AddWorker[%T]: %w", zero, err)
	}
	if worker == nil {
		return fmt.Errorf("%w: AddWorker(%q): nil worker", ErrInvalidArgument, kind)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return fmt.Errorf("AddWorker(%q): %w", kind, err)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.kinds == nil {
		ws.kinds = map[string]*kindWorker{}
	}
	if _, dup := ws.kinds[kind]; dup {
		return fmt.Errorf("%w: AddWorker(%q): kind registered already", ErrInvalidArgument, kind)
	}
	ws.kinds[kind] = &kindWorker{kind: kind, opts: opts, stats: &kindStats{}, retain: retention{OutcomeCompleted: opts.RetainCompleted,
		OutcomeCancelled: opts.RetainCancelled, OutcomeDiscarded: opts.RetainDiscarded}, decode: func(raw json.RawMessage) (any, error) {
		var args T
		if err := decodeArgs(raw, &args); err != nil {
			return nil, fmt.Errorf("%w: %v", errDecode, err)
		}
		return args, nil
	}, work: func(ctx context.Context, j *Job, e *envelope, a *attempt, decoded any) error {
		args, _ := decoded.(T) // T's zero value when decoded is a nil interface or pointer
		w := &Work[T]{Args: args, ID: j.ID, Attempt: e.Attempt + 1, MaxAttempts: cmp.Or(e.MaxAttempts, opts.MaxAttempts),
			Errors: e.Errors, Schedule: e.Schedule, Job: j, update: a.update, completeTx: a.completeTx}
		if e.Period != 0 {
			w.Period = time.UnixMilli(e.Period).UTC()
		}
		return worker.Work(ctx, w)
	}}
	return nil
}

// KindOf is args' kind (its Kind), also for a nil pointer: the kind of
// its type.
func KindOf[T JobArgs](args T) string { return kindOf(args) }

// kindOf is T's Kind, also for a pointer type whose zero value is nil.
func kindOf[T JobArgs](zero T) string {
	if t := reflect.TypeOf(zero); t != nil && t.Kind() == reflect.Pointer && reflect.ValueOf(zero).IsNil() {
		return reflect.New(t.Elem()).Interface().(JobArgs).Kind()
	}
	return zero.Kind()
}

// decodeArgs decodes a job's arguments into args (a pointer to T, or to
// a pointer that it allocates).
func decodeArgs(raw json.RawMessage, args any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	return json.Unmarshal(raw, args)
}

func (o WorkerOptions) withDefaults() (WorkerOptions, error) {
	switch {
	case o.Concurrency < 0 || o.Concurrency > ConcurrencyMax:
		return o, fmt.Errorf("%w: Concurrency %d: 1 to %d (0: %d)", ErrInvalidArgument, o.Concurrency, ConcurrencyMax, ConcurrencyDefault)
	case o.Timeout < 0 || (o.Timeout > 0 && o.Timeout < TimeoutMin):
		return o, fmt.Errorf("%w: Timeout %v: at least %v (0: %v)", ErrInvalidArgument, o.Timeout, TimeoutMin, TimeoutDefault)
	case o.MaxAttempts < 0:
		return o, fmt.Errorf("%w: MaxAttempts %d: at least 1 (0: %d)", ErrInvalidArgument, o.MaxAttempts, MaxAttemptsDefault)
	case o.Fetchers < 0 || o.Fetchers > FetchersMax:
		return o, fmt.Errorf("%w: Fetchers %d: 1 to %d (0: one per FetchBatch of Concurrency)", ErrInvalidArgument, o.Fetchers, FetchersMax)
	case o.FetchBatch < 0 || o.FetchBatch > MaxBatch:
		return o, fmt.Errorf("%w: FetchBatch %d: 1 to %d (0: %d)", ErrInvalidArgument, o.FetchBatch, MaxBatch, FetchBatchDefault)
	}
	if slices.ContainsFunc(o.Middleware, isNilMiddleware) {
		return o, fmt.Errorf("%w: a nil Middleware", ErrInvalidArgument)
	}
	var exp *ExponentialRetry
	switch p := o.RetryPolicy.(type) {
	case ExponentialRetry:
		exp = &p
	case *ExponentialRetry:
		if p == nil {
			return o, fmt.Errorf("%w: a nil *ExponentialRetry", ErrInvalidArgument)
		}
		exp = p
	}
	if exp != nil {
		if err := exp.check(); err != nil {
			return o, err
		}
	}
	if o.Manual && (o.MaxAttempts != 0 || o.RetryPolicy != nil || o.RetainCompleted != 0 || o.RetainCancelled != 0 || o.RetainDiscarded != 0) {
		return o, fmt.Errorf("%w: a Manual kind's worker ends its jobs itself: MaxAttempts, RetryPolicy and the Retain options of the outcomes are the Runtime's, and would do nothing (RetainFinished is a Manual kind's)", ErrInvalidArgument)
	}
	if !o.Manual && (o.RetainFinished != 0 || o.FinishedAt != nil) {
		return o, fmt.Errorf("%w: RetainFinished and FinishedAt are a Manual kind's (the Runtime's kinds keep their jobs by outcome: RetainCompleted, RetainCancelled, RetainDiscarded)", ErrInvalidArgument)
	}
	for _, r := range []*time.Duration{&o.RetainCompleted, &o.RetainCancelled, &o.RetainDiscarded, &o.RetainFinished} {
		if *r < 0 && *r != RetainForever {
			return o, fmt.Errorf("%w: retention %v: positive, 0 (the default) or RetainForever", ErrInvalidArgument, *r)
		}
	}
	o.RetainCompleted = cmp.Or(o.RetainCompleted, RetainCompletedDefault)
	o.RetainCancelled = cmp.Or(o.RetainCancelled, RetainCancelledDefault)
	o.RetainDiscarded = cmp.Or(o.RetainDiscarded, RetainDiscardedDefault)
	if o.Manual {
		o.RetainFinished = cmp.Or(o.RetainFinished, RetainCompletedDefault)
	}
	if o.Concurrency == 0 {
		o.Concurrency = ConcurrencyDefault
	}
	o.FetchBatch = cmp.Or(o.FetchBatch, FetchBatchDefault)
	if o.Timeout == 0 {
		o.Timeout = TimeoutDefault
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = MaxAttemptsDefault
	}
	if o.RetryPolicy == nil {
		o.RetryPolicy = RetryPolicyDefault
	}
	return o, nil
}

// snapshot returns the registered kinds, for one Runtime.
func (ws *Workers) snapshot() []*kindWorker {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*kindWorker, 0, len(ws.kinds))
	for _, k := range ws.kinds {
		c := *k // a Runtime's own: two Runtimes of one registry share no completer
		c.ends = make(chan *ending, completeQueue)
		c.slots = newSlots(c.opts.Concurrency)
		c.stats = &kindStats{}
		c.claims = &sync.Mutex{}
		c.claimGroup = &claimGroup{}
		c.runTime = newRunTimeCharges()
		c.retainFinished = &atomic.Int64{}
		c.retainFinished.Store(int64(c.opts.RetainFinished))
		out = append(out, &c)
	}
	return out
}
