package fdbjobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Runtime errors: the context.Cause of a Work's ctx.
var (
	// ErrHoldLapsed: the node could not renew its hold on the job for half
	// the kind's timeout, so it stopped before another node may take the
	// job (see doc.go, "Holding a job").
	ErrHoldLapsed = errors.New("fdbjobs: hold on the job lapsed")
	// ErrStopped: the Runtime is stopping and its grace ended
	// (StopAndCancel, or Stop's deadline); the job is handed back.
	ErrStopped = errors.New("fdbjobs: runtime stopped")
)

// Runtime works the jobs of the kinds its Workers registry names, on one
// node: per kind, fetchers (WorkerOptions.Fetchers: by default one per
// FetchBatch of its Concurrency, 8 at most) accept up to the kind's
// Concurrency jobs in batches of up to FetchBatch (AcceptBatch, woken by
// a watch when jobs are inserted; the oldest due first with
// OldestFirst), and each job
// runs on a runner (a goroutine that works the kind's jobs one after the
// other, and leaves after runnerIdle without one). A job that runs longer
// than WatchHoldAfter or than Timeout / HeartbeatFraction gets a keeper,
// which renews its hold (Update, every Timeout / HeartbeatFraction),
// watches its row, and ends the Work's ctx when the job is taken from it
// or its hold lapses; a shorter job costs no goroutine or transaction of
// its own. When Work returns, the runner hands the attempt's end to the
// kind's completers and goes on: one of them finishes the job
// (completed), retries it later by its RetryPolicy, or discards it, fenced
// by the job's lock, in a transaction it shares among the attempts that
// ended meanwhile.
//
// Many Runtimes (nodes) work the same kinds on one store; each job runs on
// one of them at a time (see doc.go, "Holding a job"). The Client must be
// started (Client.Start: its activity monitors hand back the jobs of
// nodes that died).
type Runtime struct {
	c     *Client
	kinds []*kindWorker
	opts  RuntimeOptions
	svc   service.Base

	// mu guards stopping, drained, hardCtx and hard, made anew by each
	// Start.
	mu sync.Mutex
	// stopping is closed when Stop begins: fetchers take no more jobs.
	stopping chan struct{}
	// drained is closed by the run loop once its fetchers and running
	// jobs have ended.
	drained chan struct{}
	// hardCtx is the parent of every running job's ctx; hard cancels it
	// (ErrStopped).
	hardCtx context.Context
	hard    context.CancelCauseFunc
	// running counts the jobs being worked; the run loop waits on it
	// once its fetchers, which add to it, have ended.
	running sync.WaitGroup
	// leaveLease, for tests, makes a stopping Runtime leave its leases of
	// limited kinds' capacity in the store, as one that died does.
	leaveLease bool
}

// NewRuntime returns a Runtime of c for the kinds registered in ws (read
// now: later registrations are not seen). An empty registry is
// ErrInvalidArgument.
func NewRuntime(c *Client, ws *Workers, opts RuntimeOptions) (*Runtime, error) {
	if c == nil || ws == nil {
		return nil, fmt.Errorf("%w: NewRuntime: nil Client or Workers", ErrInvalidArgument)
	}
	kinds := ws.snapshot()
	if len(kinds) == 0 {
		return nil, fmt.Errorf("%w: NewRuntime: no worker registered (AddWorker)", ErrInvalidArgument)
	}
	if opts.FetchPoll < 0 || opts.WatchHoldAfter < 0 || opts.SweepPeriod < 0 || opts.SchedulePoll < 0 {
		return nil, fmt.Errorf("%w: NewRuntime: negative FetchPoll, WatchHoldAfter, SweepPeriod or SchedulePoll", ErrInvalidArgument)
	}
	if opts.ChargeInterval != 0 && opts.ChargeInterval < time.Millisecond {
		return nil, fmt.Errorf("%w: NewRuntime: ChargeInterval %v: at least 1ms (0: %v)", ErrInvalidArgument, opts.ChargeInterval, ChargeIntervalDefault)
	}
	if slices.ContainsFunc(opts.Middleware, isNilMiddleware) {
		return nil, fmt.Errorf("%w: NewRuntime: a nil Middleware", ErrInvalidArgument)
	}
	opts.SweepPeriod = cmp.Or(opts.SweepPeriod, SweepPeriodDefault)
	opts.SchedulePoll = cmp.Or(opts.SchedulePoll, SchedulePollDefault)
	opts.ChargeInterval = cmp.Or(opts.ChargeInterval, ChargeIntervalDefault)
	if opts.FetchPoll == 0 {
		opts.FetchPoll = FetchPollDefault
	}
	if opts.WatchHoldAfter == 0 {
		opts.WatchHoldAfter = WatchHoldAfterDefault
	}
	return &Runtime{c: c, kinds: kinds, opts: opts}, nil
}

// Start writes each kind's timeout where the store has another, raises
// each kind's shards (SetTypeShards) to the number of nodes
// Config.Members names when it has fewer (a type needs about as many
// shards as the nodes that take from it; Start never lowers them), then
// works jobs until Stop, StopAndCancel, or until ctx ends (which cancels
// running jobs as StopAndCancel does). Start on a started Runtime does
// nothing.
func (r *Runtime) Start(ctx context.Context) error {
	var run runState
	_, err := r.svc.Start(ctx, func(ctx context.Context) error {
		if !r.c.started() {
			// Without its activity monitors the jobs of a node that
			// died would never come back.
			return fmt.Errorf("%w: a Runtime's Client must be started (Client.Start) first", ErrNotStarted)
		}
		for _, k := range r.kinds {
			have, err := r.c.TypeTimeout(ctx, nil, k.kind)
			if err == nil && have == k.opts.Timeout {
				continue
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if err := r.c.SetTypeTimeout(ctx, nil, k.kind, k.opts.Timeout); err != nil {
				return err
			}
		}
		if n := r.c.memberCount(); n > 0 {
			for _, k := range r.kinds {
				if err := r.c.raiseTypeShards(ctx, k.kind, n); err != nil {
					return err
				}
			}
		}
		for _, k := range r.kinds {
			cp, err := newCapacity(r, k)
			if err != nil {
				return err
			}
			k.capacity = cp
			k.slots.setGrant(0) // until its lease loop knows whether the kind is limited
		}
		hardCtx, hard := context.WithCancelCause(context.WithoutCancel(ctx))
		run = runState{make(chan struct{}), make(chan struct{}), hardCtx, hard}
		r.mu.Lock()
		r.stopping, r.drained, r.hardCtx, r.hard = run.stopping, run.drained, hardCtx, hard
		r.mu.Unlock()
		return nil
	}, func(ctx context.Context) { r.run(ctx, run) })
	return err
}

// runState is what one Start made for its run loop (and Stop then takes
// from the Runtime): the run loop gets it from Start, as a Stop right
// after Start may have taken it from the Runtime already.
type runState struct {
	stopping, drained chan struct{}
	hardCtx           context.Context
	hard              context.CancelCauseFunc
}

// run is the Runtime's loop: the fetchers, until Stop closes stopping or
// ctx ends (which also cancels the running jobs), then the running jobs'
// end.
func (r *Runtime) run(ctx context.Context, st runState) {
	stopping, drained, hardCtx, hard := st.stopping, st.drained, st.hardCtx, st.hard
	defer close(drained)
	fetchCtx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	go func() {
		select {
		case <-stopping:
		case <-ctx.Done():
			hard(ErrStopped)
		}
		stopFetch()
	}()
	// The completers outlive the jobs, and write the ends still queued.
	completeCtx, stopComplete := context.WithCancel(context.WithoutCancel(ctx))
	var completers sync.WaitGroup
	defer func() {
		stopComplete()
		completers.Wait()
	}()
	for _, k := range r.kinds {
		for range completersPerKind {
			completers.Add(1)
			go func() {
				defer completers.Done()
				r.completer(completeCtx, k)
			}()
		}
	}
	// Leases of limited kinds' capacity and chargers outlive the jobs.
	leaseCtx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	var leases sync.WaitGroup
	defer func() {
		stopLeases()
		leases.Wait()
	}()
	for _, k := range r.kinds {
		leases.Add(2)
		go func() {
			defer leases.Done()
			k.capacity.run(leaseCtx)
		}()
		go func() { defer leases.Done(); r.charger(leaseCtx, k) }()
	}
	var fetchers sync.WaitGroup
	fetched := make(chan struct{}) // closed once the fetchers ended: idle runners leave
	for _, k := range r.kinds {
		p := &pool{k: k, hardCtx: hardCtx, fetched: fetched, jobs: make(chan task)}
		for range k.fetchers() {
			fetchers.Add(1)
			go func() {
				defer fetchers.Done()
				r.fetch(fetchCtx, p)
			}()
		}
		fetchers.Add(1)
		go func() {
			defer fetchers.Done()
			r.sweeper(fetchCtx, k)
		}()
	}
	fetchers.Add(1)
	go func() {
		defer fetchers.Done()
		r.scheduleLoop(fetchCtx)
	}()
	fetchers.Wait()
	close(fetched)
	r.running.Wait()
	hard(ErrStopped)
}

// SetConcurrency makes n the most jobs of kind this Runtime works at once,
// now, whether or not it runs (WorkerOptions.Concurrency until then):
// raising it takes more jobs at once, lowering it lets the jobs running
// end and takes new ones only once fewer than n run. The number of
// fetchers (WorkerOptions.Fetchers) stays as Start made it. A kind the
// Runtime does not work, or n out of 1..ConcurrencyMax, is
// ErrInvalidArgument.
func (r *Runtime) SetConcurrency(kind string, n int) error {
	if n < 1 || n > ConcurrencyMax {
		return fmt.Errorf("%w: SetConcurrency(%q, %d): 1 to %d", ErrInvalidArgument, kind, n, ConcurrencyMax)
	}
	for _, k := range r.kinds {
		if k.kind == kind {
			k.slots.setLimit(n)
			return nil
		}
	}
	return fmt.Errorf("%w: SetConcurrency(%q): no worker of this kind on the Runtime", ErrInvalidArgument, kind)
}

// Stop stops taking jobs, waits until the running ones end or ctx ends,
// then cancels those still running (their ctx's cause ErrStopped), hands
// them back at once (pending, no attempt counted) and returns ctx's error.
// Stop on a stopped Runtime does nothing.
func (r *Runtime) Stop(ctx context.Context) error {
	r.mu.Lock()
	stopping, drained, hard := r.stopping, r.drained, r.hard
	r.stopping, r.drained, r.hardCtx, r.hard = nil, nil, nil, nil
	r.mu.Unlock()
	if stopping == nil {
		r.svc.Stop()
		return nil
	}
	close(stopping)
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
		hard(ErrStopped)
		<-drained
	}
	r.svc.Stop()
	return err
}

// StopAndCancel is Stop without a grace: running jobs' ctx ends at once.
func (r *Runtime) StopAndCancel() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r.Stop(ctx)
}

// fetchersAuto bounds the fetchers a kind gets by default: one per
// FetchBatch of its Concurrency, so that accepts overlap.
const fetchersAuto = 8

// fetchers is how many fetchers k gets (WorkerOptions.Fetchers).
func (k *kindWorker) fetchers() int {
	if k.opts.Fetchers > 0 {
		return k.opts.Fetchers
	}
	return min(fetchersAuto, (k.slots.size()+k.opts.FetchBatch-1)/k.opts.FetchBatch)
}

// kindStats are a kind's figures on one Runtime (Runtime.Stats).
type kindStats struct {
	running  atomic.Int64 // jobs accepted and not ended
	fetching atomic.Int64 // fetchers in an accept
	fetches  atomic.Int64 // accept transactions begun
	idle     atomic.Int64 // Config.TimeUnit time of the last look that found no job due
}

// KindStats are a kind's figures on one Runtime.
type KindStats struct {
	// Running counts the jobs the Runtime accepted that have not ended.
	Running int
	// Fetching counts the fetchers in an accept (waiting for due jobs):
	// 0 when every slot is taken.
	Fetching int
	// Fetches counts the accepts the Runtime's fetchers began, since it
	// was made.
	Fetches int64
	// Idle is when a fetcher last found no job due (in the store's
	// Config.TimeUnit since the Unix epoch, by the Client's clock; 0:
	// never): with OldestFirst, the time of its look, before it waits;
	// otherwise the end of a wait of FetchPoll that brought none.
	Idle int64
}

// Stats returns kind's figures on the Runtime; a kind it does not work is
// ErrInvalidArgument.
func (r *Runtime) Stats(kind string) (KindStats, error) {
	for _, k := range r.kinds {
		if k.kind == kind {
			return KindStats{Running: int(k.stats.running.Load()), Fetching: int(k.stats.fetching.Load()), Fetches: k.stats.fetches.Load(),
				Idle: k.stats.idle.Load()}, nil
		}
	}
	return KindStats{}, fmt.Errorf("%w: Stats(%q): no worker of this kind on the Runtime", ErrInvalidArgument, kind)
}

// pool is what a kind's fetchers and runners share on one run of the
// Runtime.
type pool struct {
	k       *kindWorker
	hardCtx context.Context // the parent of the jobs' ctx
	// jobs hands an accepted job to an idle runner.
	jobs chan task
	// fetched is closed once every fetcher of the Runtime ended.
	fetched <-chan struct{}
}

// runnerIdle is how long a runner waits for its next job before it
// leaves. Runners outlive their job so that a busy kind does not start a
// goroutine, and grow its stack, for every job.
const runnerIdle = 10 * time.Second

// fetch is one of a kind's fetchers: it accepts jobs while the kind has
// free slots, and hands each to a runner.
func (r *Runtime) fetch(ctx context.Context, p *pool) {
	k := p.k
	log := r.c.cfg.Logger
	var b kv.Backoff
	for {
		// A kind that got a limit takes no job until its lease is written.
		if limited, _ := k.capacity.limited(); limited && !k.capacity.leased.Load() {
			k.slots.setGrant(0)
		}
		// Wait for free slots, and take those there are.
		n := k.slots.take(ctx, k.opts.FetchBatch)
		if n == 0 {
			return
		}
		// And, for a kind with a limit of starts, for the starts.
		var started func(got int)
		if k.capacity.rated.Load() {
			var m int
			m, started = k.capacity.takeStarts(ctx, n)
			k.slots.give(n - m)
			if n = m; n == 0 {
				return
			}
		}
		k.stats.fetching.Add(1)
		k.stats.fetches.Add(1)
		jobs, err := r.accept(ctx, k, n)
		if started != nil {
			started(len(jobs))
		}
		k.stats.fetching.Add(-1)
		k.slots.give(n - len(jobs))
		if errors.Is(err, ErrPaused) || errors.Is(err, ErrCapacityLapsed) {
			select { // Resume: looked at again within FetchPoll
			case <-r.c.cfg.Clock.After(r.opts.FetchPoll):
			case <-ctx.Done():
				return
			}
			continue
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: accepting jobs")
			select {
			case <-r.c.cfg.Clock.After(b.NextAny(err)):
			case <-ctx.Done():
				return
			}
			continue
		}
		b = kv.Backoff{}
		k.stats.running.Add(int64(len(jobs)))
		tasks := make([]task, len(jobs))
		for i, j := range jobs {
			tasks[i] = r.prepare(k, j)
		}
		start := func(t task) {
			select {
			case p.jobs <- t: // an idle runner takes it
			default:
				r.running.Add(1)
				go r.runner(p, t)
			}
		}
		for _, t := range r.claimPartitions(ctx, p.hardCtx, k, tasks, start) {
			start(t)
		}
	}
}

// accept takes up to n due jobs of k, waiting up to FetchPoll for one:
// with OldestFirst, those with the oldest scheduled times across the
// kind's shards (DueTime finds the latest time among the n oldest, and
// the accept takes the jobs due by then; jobs that racing fetchers took
// meanwhile leave fewer, and the next fetch takes the rest).
func (r *Runtime) accept(ctx context.Context, k *kindWorker, n int) ([]*Job, error) {
	opts := AcceptOptions{Timeout: r.opts.FetchPoll}
	var fence func(kv.Transaction) func() error
	if k.capacity.leased.Load() {
		fence = k.capacity.fence
	}
	if k.opts.OldestFirst {
		now := r.c.cfg.now()
		h, due, err := r.c.dueHandicapped(ctx, k.kind, now, n)
		if err != nil {
			return nil, err
		}
		if due > 0 {
			n = due // the jobs at h-1 and before, when others tie at h
			// At least 1, which covers the jobs scheduled at 0: a
			// MaxScheduledTime of 0 is now.
			opts = AcceptOptions{MaxScheduledTime: max(now, 1), handicapped: true, handicap: max(h, 1)}
		} else {
			k.stats.idle.Store(now)
		}
	}
	opts.fence = fence
	jobs, err := r.c.AcceptBatch(ctx, k.kind, n, opts)
	if errors.Is(err, ErrNotFound) && !k.opts.OldestFirst {
		k.stats.idle.Store(r.c.cfg.now())
	}
	if errors.Is(err, ErrNotFound) && opts.Timeout == 0 {
		return nil, nil // taken by racing fetchers: look again
	}
	return jobs, err
}

// task is an accepted job as a fetcher hands it to a runner: its
// envelope and its arguments decoded already (prepare).
type task struct {
	job  *Job
	e    *envelope
	args any
	// err is the decoding's: of the envelope (errDecode: the Worker is not
	// called) or, with e set, of the arguments (the attempt's error, as
	// the Worker's would be).
	err error
	// leased: the job holds one of the Runtime's places in its partition
	// (placelease.go), which it gives back locally as it leaves.
	leased bool
}

// prepare decodes job's envelope and arguments for k's Worker. It runs in
// the fetcher: a JSON decoder's calls are deep, and on a runner they
// would double its stack (8 KiB instead of 4) for as long as the runner
// lives. A panic of the arguments' decoding (a custom UnmarshalJSON) is
// the attempt's error, as a panic of the Worker is.
func (r *Runtime) prepare(k *kindWorker, job *Job) (t task) {
	t.job = job
	if k.opts.Manual {
		t.e = &envelope{Args: job.Data}
	} else if t.e, t.err = decodeEnvelope(job.Data); t.err != nil {
		t.e = nil
		return t
	}
	defer func() {
		if p := recover(); p != nil {
			t.args, t.err = nil, fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	t.args, t.err = k.decode(t.e.Args)
	return t
}

// runner works t, then the jobs the fetchers hand it, until it has waited
// runnerIdle for one or the fetchers ended.
func (r *Runtime) runner(p *pool, t task) {
	defer r.running.Done()
	// The runner's jobs' ctx derive from its own, so that they do not all
	// take hardCtx's lock to start and end.
	ctx, cancel := context.WithCancel(p.hardCtx)
	defer cancel()
	var idle clockwork.Timer
	for {
		r.work(ctx, p.hardCtx, p.k, t)
		p.k.stats.running.Add(-1)
		p.k.slots.give(1)
		if idle == nil {
			idle = r.c.cfg.Clock.NewTimer(runnerIdle)
			defer idle.Stop()
		} else {
			idle.Reset(runnerIdle)
		}
		select {
		case t = <-p.jobs:
		case <-idle.Chan():
			return
		case <-p.fetched:
			return
		}
	}
}

// work runs one attempt at job, in a ctx derived from parent (which
// hardCtx's cancel ends), and ends it: finished, retried, discarded or,
// when the Runtime stopped it, handed back.
func (r *Runtime) work(parent, hardCtx context.Context, k *kindWorker, t task) {
	job := t.job
	if t.leased {
		defer k.capacity.places.release(t.e.Partition)
	}
	if k.opts.Manual {
		r.workManual(parent, k, t)
		return
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	// A lapsed lease of a limited kind's capacity hands the job back.
	defer context.AfterFunc(k.capacity.jobCtx(), func() { cancel(ErrCapacityLapsed) })()
	held := make(chan struct{})
	keeperDone := make(chan struct{})
	a := &attempt{r: r, job: job, e: t.e, write: make(chan struct{}, 1)}
	// The keeper starts once the job has run for keepAfter: a job that
	// ends sooner pays for no goroutine, ticker or watch of its own.
	after := r.keepAfter(k)
	keeper := r.c.cfg.Clock.AfterFunc(after, func() {
		defer close(keeperDone)
		r.keep(ctx, cancel, held, k, job, after, a.write)
	})
	e, err := t.e, t.err
	if e != nil {
		began := r.c.cfg.Clock.Now()
		err = r.call(ctx, k, a, t)
		k.runTime.add(e.Partition, r.c.cfg.Clock.Since(began))
	} else {
		e = &envelope{Args: job.Data}
	}
	close(held)
	if !keeper.Stop() {
		<-keeperDone
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrHalt) || errors.Is(cause, ErrHoldLapsed) || errors.Is(cause, ErrCancelled) {
		if e != nil && !t.leased && r.c.partLimited(k.kind, e.Partition) {
			rctx, cancel := context.WithTimeout(hardCtx, partitionReleaseTimeout)
			if err := r.c.releasePartition(rctx, k.kind, e.Partition, job.ID); err != nil && hardCtx.Err() == nil {
				r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Str("job", job.ID).
					Msg("fdbjobs: runtime: giving back a partition's place (the jobs waiting for it look again within the kind's Timeout)")
			}
			cancel()
		}
		return // not this node's job any more
	}
	if err == nil && a.completed.Load() {
		r.c.metrics.Load().ended(k.kind, OutcomeCompleted)
		return // CompleteTx ended it
	}
	r.end(hardCtx, k, t, e, err, errors.Is(cause, ErrStopped) || errors.Is(cause, ErrCapacityLapsed))
}

// workManual runs one attempt at job of a Manual kind, whose worker holds
// and ends the job itself: the Runtime only logs its error.
func (r *Runtime) workManual(ctx context.Context, k *kindWorker, t task) {
	job := t.job
	a := &attempt{r: r, job: job, e: t.e, manual: true}
	if err := r.call(ctx, k, a, t); err != nil && ctx.Err() == nil {
		r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Str("job", job.ID).
			Msg("fdbjobs: runtime: a Manual worker's attempt ended with an error; the job is as the worker left it")
	}
}

// keepAfter is how long a job of k runs before its keeper starts: its
// first heartbeat or its watch, whichever is due first.
func (r *Runtime) keepAfter(k *kindWorker) time.Duration {
	return min(r.opts.WatchHoldAfter, k.opts.Timeout/HeartbeatFraction)
}

// call calls the worker with t's arguments through the middleware
// (chain), turning a panic into the attempt's error; when t's arguments
// did not decode, their error is the attempt's, which the middleware sees
// as the Worker's.
func (r *Runtime) call(ctx context.Context, k *kindWorker, a *attempt, t task) (err error) {
	// A Manual kind's scheduled times are its worker's (the replicator
	// orders its queue by them): no wait is observed.
	var due time.Time
	if !a.manual {
		due = r.c.cfg.timeOf(a.job.ScheduledTime)
	}
	defer r.c.metrics.Load().attempt(k.kind, due, r.c.cfg.Clock)()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return r.chain(k, a.job, a.e, func(ctx context.Context) error {
		if t.err != nil {
			return t.err
		}
		return k.work(ctx, a.job, a.e, a, t.args)
	})(ctx)
}

// end hands the outcome of an attempt whose worker returned err to the
// kind's completer, which writes it in a transaction fenced by the job's
// lock, bounded by the hold.
func (r *Runtime) end(hardCtx context.Context, k *kindWorker, t task, e *envelope, err error, stopped bool) {
	job := t.job
	log := r.c.cfg.Logger
	now := r.c.cfg.Clock.Now()
	maxAttempts := cmp.Or(e.MaxAttempts, k.opts.MaxAttempts)
	var snooze *snoozeError
	var perm *permanentError
	var data []byte
	var stime int64 = -1 // Finish; otherwise FinishAt stime
	switch {
	case err == nil:
		e.Attempt++
		e.Outcome = OutcomeCompleted
		e.FinishedAt = now.UnixMilli()
	case stopped:
		stime = r.c.cfg.now() // handed back: not an attempt
	case errors.As(err, &snooze):
		stime = r.c.cfg.stime(now.Add(snooze.d))
	default:
		e.failed(err, now)
		if errors.As(err, &perm) || errors.Is(err, errDecode) || e.Attempt >= maxAttempts {
			e.Outcome, e.FinishedAt = OutcomeDiscarded, now.UnixMilli()
		} else {
			stime = r.c.cfg.stime(now.Add(k.opts.RetryPolicy.NextRetry(e.Attempt, err)))
		}
	}
	if err == nil || !stopped && snooze == nil {
		b, encErr := e.encode()
		if encErr != nil {
			log.Error().Err(encErr).Str("kind", k.kind).Str("job", job.ID).Msg("fdbjobs: runtime: encoding the job's data")
			return // the activity monitor hands the job back
		}
		data = b
	}
	en := &ending{job: job, data: data, stime: stime, e: e, attempt: !stopped && snooze == nil, leased: t.leased}
	if err != nil && !stopped && snooze == nil {
		en.failed, en.maxAttempts = err, maxAttempts
	}
	r.complete(hardCtx, k, en)
}
