package fdbjobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

type sumArgs struct {
	A, B int
}

func (sumArgs) Kind() string { return "sum" }

type sleepArgs struct {
	Name string
}

func (*sleepArgs) Kind() string { return "sleep" }

// runtimeBundle is a started Client on a fresh store, scheduled times in
// milliseconds, and a Runtime of ws (with middleware mws) started on it.
type runtimeBundle struct {
	db  kv.Database
	c   *fdbjobs.Client
	rt  *fdbjobs.Runtime
	ctx context.Context
}

func startRuntime(t *testing.T, ws *fdbjobs.Workers, mws ...fdbjobs.WorkMiddleware) *runtimeBundle {
	t.Helper()
	b := startClient(t)
	b.start(t, ws, mws...)
	return b
}

// startClient is startRuntime without the Runtime (start starts it).
func startClient(t *testing.T) *runtimeBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db := kvtest.NewDB(t)
	c, err := fdbjobs.New(db, fdbjobs.Config{TimeUnit: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Stop)
	return &runtimeBundle{db: db, c: c, ctx: ctx}
}

func (b *runtimeBundle) start(t *testing.T, ws *fdbjobs.Workers, mws ...fdbjobs.WorkMiddleware) {
	t.Helper()
	rt, err := fdbjobs.NewRuntime(b.c, ws, fdbjobs.RuntimeOptions{FetchPoll: 20 * time.Millisecond, WatchHoldAfter: 10 * time.Millisecond,
		Middleware: mws})
	require.NoError(t, err)
	require.NoError(t, rt.Start(b.ctx))
	t.Cleanup(rt.StopAndCancel)
	b.rt = rt
}

// outcome waits until job id of kind is finished and returns its outcome.
func (b *runtimeBundle) outcome(t *testing.T, kind, id string) (string, int, []fdbjobs.AttemptError) {
	t.Helper()
	testutil.Eventually(t, "job "+id+" finished", func() bool {
		s, err := b.c.JobState(b.ctx, nil, kind, id)
		require.NoError(t, err)
		return s == fdbjobs.Finished
	})
	data, err := b.c.JobData(b.ctx, nil, kind, id)
	require.NoError(t, err)
	o, n, errs, err := fdbjobs.JobOutcome(data)
	require.NoError(t, err)
	return o, n, errs
}

// insert inserts args and returns the new job's id.
func (b *runtimeBundle) insert(t *testing.T, args fdbjobs.JobArgs, opts fdbjobs.InsertOptions) string {
	t.Helper()
	r, err := b.c.Insert(b.ctx, nil, args, opts)
	require.NoError(t, err)
	require.False(t, r.Duplicate)
	return r.ID
}

var noDelay = fdbjobs.RetryFunc(func(int, error) time.Duration { return 0 })

func TestRuntimeWorksTypedJobs(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	var mu sync.Mutex
	sums := map[string]int{}
	var running, most atomic.Int32
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(ctx context.Context, w *fdbjobs.Work[sumArgs]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if w.Attempt != 1 {
			return fdbjobs.Permanent(fmt.Errorf("attempt %d", w.Attempt))
		}
		mu.Lock()
		sums[w.ID] = w.Args.A + w.Args.B
		mu.Unlock()
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 3}))
	b := startRuntime(t, ws)
	var jobs []fdbjobs.InsertJob
	for i := range 50 {
		jobs = append(jobs, fdbjobs.InsertJob{Args: sumArgs{A: i, B: 1}})
	}
	ids, err := b.c.InsertMany(b.ctx, nil, jobs)
	require.NoError(t, err)
	one := b.insert(t, sumArgs{A: 40, B: 2}, fdbjobs.InsertOptions{ID: "answer"})
	require.Equal(t, "answer", one)
	for i, id := range append(ids, one) {
		o, n, errs := b.outcome(t, "sum", id)
		require.Equal(t, fdbjobs.OutcomeCompleted, o)
		require.Equal(t, 1, n)
		require.Empty(t, errs)
		mu.Lock()
		if id == one {
			require.Equal(t, 42, sums[id])
		} else {
			require.Equal(t, i+1, sums[id])
		}
		mu.Unlock()
	}
	require.LessOrEqual(t, most.Load(), int32(3), "Concurrency bounds the jobs worked at once")
}

func TestRuntimeRetriesThenDiscards(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	var calls sync.Map // id -> attempts seen
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(ctx context.Context, w *fdbjobs.Work[sumArgs]) error {
		calls.Store(fmt.Sprint(w.ID, "/", w.Attempt), len(w.Errors))
		switch {
		case w.Args.A == 1: // fails each time
			return fmt.Errorf("boom %d", w.Attempt)
		case w.Args.A == 2: // permanent
			return fdbjobs.Permanent(errors.New("bad input"))
		case w.Args.A == 3: // panics once, then works
			if w.Attempt == 1 {
				panic("first time")
			}
			return nil
		case w.Args.A == 4: // snoozes once: not an attempt
			if _, again := calls.LoadOrStore("snoozed", true); !again {
				return fdbjobs.Snooze(10 * time.Millisecond)
			}
			return nil
		}
		return nil
	}), fdbjobs.WorkerOptions{MaxAttempts: 3, RetryPolicy: noDelay}))
	b := startRuntime(t, ws)
	fails := b.insert(t, sumArgs{A: 1}, fdbjobs.InsertOptions{})
	failsMore := b.insert(t, sumArgs{A: 1}, fdbjobs.InsertOptions{MaxAttempts: 5})
	perm := b.insert(t, sumArgs{A: 2}, fdbjobs.InsertOptions{})
	panics := b.insert(t, sumArgs{A: 3}, fdbjobs.InsertOptions{})
	snoozes := b.insert(t, sumArgs{A: 4}, fdbjobs.InsertOptions{})
	// Arguments that do not decode as sumArgs: discarded at once.
	require.NoError(t, b.c.Add(b.ctx, nil, "sum", "garbled", []byte(`{"args":{"A":"x"}}`), 0))
	// A job added with Add, whose data is no Runtime's envelope: its data
	// are its arguments, and when they do not decode it is discarded too.
	require.NoError(t, b.c.Add(b.ctx, nil, "sum", "added", []byte(`{"A":0,"B":5}`), 0))
	require.NoError(t, b.c.Add(b.ctx, nil, "sum", "foreign", []byte(`[1]`), 0))

	o, n, errs := b.outcome(t, "sum", fails)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	require.Equal(t, 3, n)
	require.Len(t, errs, 3)
	require.Equal(t, "boom 3", errs[2].Error)
	require.Equal(t, 3, errs[2].Attempt)
	seen, _ := calls.Load(fails + "/3")
	require.Equal(t, 2, seen, "the third attempt sees the two errors before it")

	o, n, _ = b.outcome(t, "sum", failsMore)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	require.Equal(t, 5, n, "the job's own MaxAttempts")

	o, n, errs = b.outcome(t, "sum", perm)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	require.Equal(t, 1, n)
	require.Contains(t, errs[0].Error, "bad input")

	o, n, errs = b.outcome(t, "sum", panics)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 2, n)
	require.Contains(t, errs[0].Error, "panic: first time")

	o, n, errs = b.outcome(t, "sum", snoozes)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 1, n, "a snooze is not an attempt")
	require.Empty(t, errs)

	for _, id := range []string{"garbled", "foreign"} {
		o, n, errs = b.outcome(t, "sum", id)
		require.Equal(t, fdbjobs.OutcomeDiscarded, o, id)
		require.Equal(t, 1, n, id)
		require.Contains(t, errs[0].Error, "do not decode", id)
	}
	o, n, errs = b.outcome(t, "sum", "added")
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 1, n)
	require.Empty(t, errs)
	data, err := b.c.JobData(b.ctx, nil, "sum", "added")
	require.NoError(t, err)
	var args sumArgs
	require.NoError(t, fdbjobs.UnmarshalArgs(data, &args))
	require.Equal(t, sumArgs{B: 5}, args)
}

// A job removed while it runs: its worker's ctx ends (ErrHalt) within the
// watch's latency, long before a heartbeat, and nothing is written for it.
// fragileArgs' decoding panics when Panic is set the first time a job's
// arguments are decoded.
type fragileArgs struct {
	Panic bool
}

func (fragileArgs) Kind() string { return "fragile" }

var fragilePanicked sync.Map // job ids whose decoding panicked

func (a *fragileArgs) UnmarshalJSON(b []byte) error {
	type plain fragileArgs
	if err := json.Unmarshal(b, (*plain)(a)); err != nil {
		return err
	}
	if a.Panic {
		if _, again := fragilePanicked.LoadOrStore(string(b), true); !again {
			panic("decoding")
		}
	}
	return nil
}

// The Runtime decodes a job's arguments before a runner takes the job: a
// decoding that panics is an attempt's error (retried, as a Worker's
// panic), a decoding that fails discards the job, and the middleware sees
// both as the attempt's outcome.
func TestRuntimeArgumentDecoding(t *testing.T) {
	fragilePanicked.Clear()
	var seen sync.Map // job id -> the error the middleware saw, as a string
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[fragileArgs](func(ctx context.Context, w *fdbjobs.Work[fragileArgs]) error {
		return nil
	}), fdbjobs.WorkerOptions{RetryPolicy: noDelay}))
	b := startRuntime(t, ws, func(ctx context.Context, row *fdbjobs.JobRow, next func(context.Context) error) error {
		err := next(ctx)
		if err != nil {
			seen.Store(row.ID, err.Error())
		}
		return err
	})
	panics := b.insert(t, fragileArgs{Panic: true}, fdbjobs.InsertOptions{})
	require.NoError(t, b.c.Add(b.ctx, nil, "fragile", "garbled", []byte(`{"args":{"Panic":"x"}}`), 0))

	o, n, errs := b.outcome(t, "fragile", panics)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 2, n)
	require.Contains(t, errs[0].Error, "panic: decoding")
	got, _ := seen.Load(panics)
	require.Contains(t, got, "panic: decoding")

	o, n, errs = b.outcome(t, "fragile", "garbled")
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	require.Equal(t, 1, n)
	require.Contains(t, errs[0].Error, "do not decode")
	got, _ = seen.Load("garbled")
	require.Contains(t, got, "do not decode")
}

func TestRuntimeHearsRemoval(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	started := make(chan string, 1)
	cause := make(chan error, 1)
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[*sleepArgs](func(ctx context.Context, w *fdbjobs.Work[*sleepArgs]) error {
		started <- w.Args.Name + "/" + w.ID
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}), fdbjobs.WorkerOptions{Timeout: time.Hour}))
	b := startRuntime(t, ws)
	id := b.insert(t, &sleepArgs{Name: "long"}, fdbjobs.InsertOptions{})
	require.Equal(t, "long/"+id, <-started)
	require.NoError(t, b.c.Remove(b.ctx, nil, "sleep", id))
	require.ErrorIs(t, <-cause, fdbjobs.ErrHalt)
	_, err := b.c.JobState(b.ctx, nil, "sleep", id)
	require.ErrorIs(t, err, fdbjobs.ErrNotFound, "nothing written for the job after its removal")
}

// Stop lets running jobs finish within its deadline; past it, their ctx
// ends (ErrStopped) and they are handed back pending, no attempt counted.
// A Stop right after Start stops the run loop that Start began, even when
// that loop had not yet begun (it read what Start made from the Runtime,
// which the Stop had taken: the loop got nil channels and never drained).
// A Runtime does not start on a Client not started.
func TestRuntimeStopRightAfterStart(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(context.Context, *fdbjobs.Work[sumArgs]) error { return nil }),
		fdbjobs.WorkerOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	// Not before its Client: without the Client's activity monitors the
	// jobs of a node that died would never come back.
	rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
	require.NoError(t, err)
	require.ErrorIs(t, rt.Start(ctx), fdbjobs.ErrNotStarted)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Stop)
	for range 100 {
		rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			rt.StopAndCancel()
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			t.Fatal("Stop right after Start never returned")
		}
	}
}

func TestRuntimeStop(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	started := make(chan string, 2)
	release := make(chan struct{})
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[*sleepArgs](func(ctx context.Context, w *fdbjobs.Work[*sleepArgs]) error {
		started <- w.Args.Name
		if w.Args.Name == "quick" {
			<-release
			return nil
		}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), fdbjobs.ErrStopped) {
			return fmt.Errorf("cause %v", context.Cause(ctx))
		}
		return ctx.Err()
	}), fdbjobs.WorkerOptions{}))
	b := startRuntime(t, ws)
	quick := b.insert(t, &sleepArgs{Name: "quick"}, fdbjobs.InsertOptions{})
	slow := b.insert(t, &sleepArgs{Name: "slow"}, fdbjobs.InsertOptions{})
	testutil.Recv(t, started)
	testutil.Recv(t, started)

	stopCtx, cancel := context.WithCancel(b.ctx)
	stopped := make(chan error)
	go func() { stopped <- b.rt.Stop(stopCtx) }()
	close(release) // the quick one ends within the grace
	o, n, _ := b.outcome(t, "sleep", quick)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 1, n)
	cancel() // the grace ends
	require.ErrorIs(t, <-stopped, context.Canceled)
	s, err := b.c.JobState(b.ctx, nil, "sleep", slow)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Pending, s, "handed back")
	data, err := b.c.JobData(b.ctx, nil, "sleep", slow)
	require.NoError(t, err)
	_, attempts, _, err := fdbjobs.JobOutcome(data)
	require.NoError(t, err)
	require.Zero(t, attempts, "an attempt the Runtime stopped is not counted")

	// Started again, it takes the job back.
	require.NoError(t, b.rt.Start(b.ctx))
	require.Equal(t, "slow", <-started)
	b.rt.StopAndCancel()
	s, err = b.c.JobState(b.ctx, nil, "sleep", slow)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Pending, s)
}

func TestRuntimeBadInput(t *testing.T) {
	nop := fdbjobs.WorkFunc[sumArgs](func(context.Context, *fdbjobs.Work[sumArgs]) error { return nil })
	ws := fdbjobs.NewWorkers()
	for _, o := range []fdbjobs.WorkerOptions{{Concurrency: -1}, {Concurrency: fdbjobs.ConcurrencyMax + 1},
		{Timeout: -time.Second}, {Timeout: time.Millisecond}, {MaxAttempts: -1}, {Fetchers: -1}, {Fetchers: fdbjobs.FetchersMax + 1},
		{FetchBatch: -1}, {FetchBatch: fdbjobs.MaxBatch + 1}, {RetryPolicy: fdbjobs.ExponentialRetry{}},
		{RetryPolicy: fdbjobs.ExponentialRetry{Min: time.Minute, Max: time.Second}},
		{RetryPolicy: fdbjobs.ExponentialRetry{Min: time.Second, Max: time.Minute, Jitter: 1}},
		{RetryPolicy: fdbjobs.ExponentialRetry{Min: time.Second, Max: time.Minute, Jitter: math.NaN()}},
		{RetryPolicy: &fdbjobs.ExponentialRetry{Min: time.Minute, Max: time.Second}}, {RetryPolicy: (*fdbjobs.ExponentialRetry)(nil)},
		{Manual: true, MaxAttempts: 3}, {Manual: true, RetryPolicy: fdbjobs.RetryPolicyDefault}, {Manual: true, RetainCompleted: time.Hour},
		{RetainFinished: time.Hour}, {Manual: true, RetainFinished: -time.Hour}} {
		require.ErrorIs(t, fdbjobs.AddWorker(ws, nop, o), fdbjobs.ErrInvalidArgument, "%+v", o)
	}
	require.ErrorIs(t, fdbjobs.AddWorker[sumArgs](ws, nil, fdbjobs.WorkerOptions{}), fdbjobs.ErrInvalidArgument)
	require.ErrorIs(t, fdbjobs.AddWorker(nil, nop, fdbjobs.WorkerOptions{}), fdbjobs.ErrInvalidArgument, "nil Workers")
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	_, err = fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument, "no worker registered")
	_, err = (&fdbjobs.Runtime{}).Stats("sum")
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument, "stats of a kind the Runtime does not work")
	require.NoError(t, fdbjobs.AddWorker(ws, nop, fdbjobs.WorkerOptions{}))
	require.ErrorIs(t, fdbjobs.AddWorker(ws, nop, fdbjobs.WorkerOptions{}), fdbjobs.ErrInvalidArgument, "registered twice")
	_, err = fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{FetchPoll: -1})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
	_, err = fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{ChargeInterval: time.Microsecond})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)

	ctx := context.Background()
	_, err = c.Insert(ctx, nil, nil, fdbjobs.InsertOptions{})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
	_, err = c.Insert(ctx, nil, sumArgs{}, fdbjobs.InsertOptions{MaxAttempts: -1})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
	_, err = c.Insert(ctx, nil, sumArgs{}, fdbjobs.InsertOptions{})
	require.ErrorIs(t, err, fdbjobs.ErrNoTypeTimeout, "a kind no Runtime has started, nor SetTypeTimeout")
	_, err = c.InsertMany(ctx, nil, []fdbjobs.InsertJob{{Args: sumArgs{}}, {Args: &sleepArgs{}}})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument, "kinds mixed in one batch")
	_, _, _, err = fdbjobs.JobOutcome([]byte(`[1`))
	require.ErrorIs(t, err, fdbjobs.ErrInvalidData)
}

// Cancel from any node: a pending job is finished cancelled at once, a
// running one too, and its worker's ctx ends (ErrCancelled) within the
// watch's latency; it never ends completed, though its worker returns nil
// after. RetryNow brings a cancelled or discarded job back.
func TestRuntimeCancelAndRetryNow(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	started := make(chan string, 4)
	cause := make(chan error, 4)
	var failOnce sync.Map
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[*sleepArgs](func(ctx context.Context, w *fdbjobs.Work[*sleepArgs]) error {
		started <- w.Args.Name
		switch w.Args.Name {
		case "block":
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil // too late: the job is not this worker's any more
		case "fail":
			if _, again := failOnce.LoadOrStore(w.ID, true); !again {
				return errors.New("no")
			}
		}
		return nil
	}), fdbjobs.WorkerOptions{Timeout: time.Hour, MaxAttempts: 1}))
	b := startRuntime(t, ws)

	later := b.insert(t, &sleepArgs{Name: "later"}, fdbjobs.InsertOptions{ScheduledAt: time.Now().Add(time.Hour)})
	o, err := b.c.Cancel(b.ctx, nil, "sleep", later)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.OutcomeCancelled, o)
	o, n, _ := b.outcome(t, "sleep", later)
	require.Equal(t, fdbjobs.OutcomeCancelled, o)
	require.Zero(t, n)

	block := b.insert(t, &sleepArgs{Name: "block"}, fdbjobs.InsertOptions{})
	require.Equal(t, "block", <-started)
	require.ErrorIs(t, b.c.RetryNow(b.ctx, nil, "sleep", block), fdbjobs.ErrRunning)
	o, err = b.c.Cancel(b.ctx, nil, "sleep", block)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.OutcomeCancelled, o)
	require.ErrorIs(t, <-cause, fdbjobs.ErrCancelled)
	o, _, _ = b.outcome(t, "sleep", block)
	require.Equal(t, fdbjobs.OutcomeCancelled, o, "the worker's nil after the cancel changes nothing")
	o, err = b.c.Cancel(b.ctx, nil, "sleep", block)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.OutcomeCancelled, o, "a finished job stays as it is")

	// RetryNow: the cancelled job runs now and completes; so does a
	// discarded one, which gets one more attempt.
	require.NoError(t, b.c.RetryNow(b.ctx, nil, "sleep", later))
	require.Equal(t, "later", <-started)
	o, n, _ = b.outcome(t, "sleep", later)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 1, n)
	fail := b.insert(t, &sleepArgs{Name: "fail"}, fdbjobs.InsertOptions{})
	require.Equal(t, "fail", <-started)
	o, n, _ = b.outcome(t, "sleep", fail)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	require.Equal(t, 1, n)
	require.NoError(t, b.c.RetryNow(b.ctx, nil, "sleep", fail))
	require.Equal(t, "fail", <-started)
	o, n, errs := b.outcome(t, "sleep", fail)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 2, n)
	require.Len(t, errs, 1, "the discarded attempt's error is kept")

	_, err = b.c.Cancel(b.ctx, nil, "sleep", "unknown")
	require.ErrorIs(t, err, fdbjobs.ErrNotFound)
	require.ErrorIs(t, b.c.RetryNow(b.ctx, nil, "sleep", "unknown"), fdbjobs.ErrNotFound)
	// A job added with Add (no envelope) is cancelled as any other.
	require.NoError(t, b.c.Add(b.ctx, nil, "sleep", "added", []byte(`{"Name":"x"}`), time.Now().Add(time.Hour).UnixMilli()))
	_, err = b.c.Cancel(b.ctx, nil, "sleep", "added")
	require.NoError(t, err)
	data, err := b.c.JobData(b.ctx, nil, "sleep", "added")
	require.NoError(t, err)
	o, _, _, err = fdbjobs.JobOutcome(data)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.OutcomeCancelled, o)
	_, err = b.c.Cancel(b.ctx, nil, "", "x")
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
}

// Pause stops every accept of a kind at once, leaving running jobs be;
// Resume starts the jobs inserted meanwhile.
func TestRuntimePauseResume(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	started := make(chan string, 8)
	release := make(chan struct{})
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[*sleepArgs](func(ctx context.Context, w *fdbjobs.Work[*sleepArgs]) error {
		started <- w.Args.Name
		if w.Args.Name == "running" {
			<-release
		}
		return nil
	}), fdbjobs.WorkerOptions{}))
	b := startRuntime(t, ws)
	running := b.insert(t, &sleepArgs{Name: "running"}, fdbjobs.InsertOptions{})
	require.Equal(t, "running", <-started)

	require.NoError(t, b.c.Pause(b.ctx, nil, "sleep"))
	paused, err := b.c.Paused(b.ctx, nil, "sleep")
	require.NoError(t, err)
	require.True(t, paused)
	waiting := b.insert(t, &sleepArgs{Name: "waiting"}, fdbjobs.InsertOptions{})
	_, err = b.c.Accept(b.ctx, "sleep", fdbjobs.AcceptOptions{})
	require.ErrorIs(t, err, fdbjobs.ErrPaused, "no node accepts a paused kind's job")
	close(release)
	o, _, _ := b.outcome(t, "sleep", running)
	require.Equal(t, fdbjobs.OutcomeCompleted, o, "a running job goes on")
	s, err := b.c.JobState(b.ctx, nil, "sleep", waiting)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Pending, s)

	require.NoError(t, b.c.Resume(b.ctx, nil, "sleep"))
	require.Equal(t, "waiting", <-started)
	o, _, _ = b.outcome(t, "sleep", waiting)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.ErrorIs(t, b.c.Pause(b.ctx, nil, ""), fdbjobs.ErrInvalidArgument)
}

// A unique insert finds its duplicate by kind and arguments (and period),
// among the states it names, in its own transaction; a cancelled or
// discarded job is no duplicate by default.
func TestInsertUnique(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	release := make(chan struct{})
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[*sleepArgs](func(ctx context.Context, w *fdbjobs.Work[*sleepArgs]) error {
		if w.Args.Name == "block" {
			<-release
		}
		return nil
	}), fdbjobs.WorkerOptions{}))
	b := startRuntime(t, ws)
	require.NoError(t, b.c.Pause(b.ctx, nil, "sleep")) // the jobs stay pending
	byArgs := fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true}}
	first := b.insert(t, &sleepArgs{Name: "a"}, byArgs)
	r, err := b.c.Insert(b.ctx, nil, &sleepArgs{Name: "a"}, byArgs)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.InsertResult{ID: first, Duplicate: true}, r)
	other := b.insert(t, &sleepArgs{Name: "b"}, byArgs)
	require.NotEqual(t, first, other, "other arguments: another job")

	// Unique by period alone: one job per kind per period.
	hourly := fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByPeriod: time.Hour}}
	h := b.insert(t, &sleepArgs{Name: "x"}, hourly)
	r, err = b.c.Insert(b.ctx, nil, &sleepArgs{Name: "y"}, hourly)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.InsertResult{ID: h, Duplicate: true}, r)

	// Cancelled: no duplicate by default; with ByState naming it, one.
	_, err = b.c.Cancel(b.ctx, nil, "sleep", first)
	require.NoError(t, err)
	withCancelled := fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true,
		ByState: []string{fdbjobs.StatePending, fdbjobs.OutcomeCancelled}}}
	r, err = b.c.Insert(b.ctx, nil, &sleepArgs{Name: "a"}, withCancelled)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.InsertResult{ID: first, Duplicate: true}, r)
	again := b.insert(t, &sleepArgs{Name: "a"}, byArgs)
	require.NotEqual(t, first, again)

	// Completed counts by default.
	require.NoError(t, b.c.Resume(b.ctx, nil, "sleep"))
	o, _, _ := b.outcome(t, "sleep", again)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	r, err = b.c.Insert(b.ctx, nil, &sleepArgs{Name: "a"}, byArgs)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.InsertResult{ID: again, Duplicate: true}, r)

	for _, u := range []fdbjobs.UniqueOpts{{ByPeriod: time.Millisecond}, {ByPeriod: -time.Hour},
		{ByArgs: true, ByState: []string{"retryable"}}} {
		_, err = b.c.Insert(b.ctx, nil, &sleepArgs{Name: "a"}, fdbjobs.InsertOptions{Unique: u})
		require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument, "%+v", u)
	}
	_, err = b.c.InsertMany(b.ctx, nil, []fdbjobs.InsertJob{{Args: &sleepArgs{}, Opts: byArgs}})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument, "unique jobs are Insert's")
	close(release)
}

// Unique inserts of one key at once, from many goroutines (nodes): exactly
// one inserts, the others get its id; under injected faults too
// (a retried attempt recognises its own job).
func TestInsertUniqueConcurrent(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[*sleepArgs](func(context.Context, *fdbjobs.Work[*sleepArgs]) error {
		return nil
	}), fdbjobs.WorkerOptions{}))
	b := startRuntime(t, ws)
	require.NoError(t, b.c.Pause(b.ctx, nil, "sleep"))
	const n = 16
	results := make([]fdbjobs.InsertResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.c.Insert(b.ctx, nil, &sleepArgs{Name: "once"}, fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true}})
			if err == nil {
				results[i] = r
			}
		}()
	}
	wg.Wait()
	inserted := 0
	for _, r := range results {
		require.NotEmpty(t, r.ID)
		require.Equal(t, results[0].ID, r.ID)
		if !r.Duplicate {
			inserted++
		}
	}
	require.Equal(t, 1, inserted)
	n2, err := b.c.PendingCount(b.ctx, nil, "sleep", 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n2)
}

// Finished jobs are kept for their outcome's retention, then removed by
// the sweeper; RetainForever keeps them.
func TestRuntimeRetention(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(ctx context.Context, w *fdbjobs.Work[sumArgs]) error {
		if w.Args.A < 0 {
			return fdbjobs.Permanent(errors.New("negative"))
		}
		return nil
	}), fdbjobs.WorkerOptions{RetainCompleted: time.Millisecond, RetainDiscarded: fdbjobs.RetainForever}))
	b := startRuntime(t, ws)
	done := b.insert(t, sumArgs{A: 1}, fdbjobs.InsertOptions{})
	bad := b.insert(t, sumArgs{A: -1}, fdbjobs.InsertOptions{})
	later := b.insert(t, sumArgs{A: 2}, fdbjobs.InsertOptions{ScheduledAt: time.Now().Add(time.Hour)})
	o, _, _ := b.outcome(t, "sum", done)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	o, _, _ = b.outcome(t, "sum", bad)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	_, err := b.c.Cancel(b.ctx, nil, "sum", later)
	require.NoError(t, err)

	testutil.Eventually(t, "the completed job past its retention removed", func() bool {
		_, err := b.rt.Sweep(b.ctx)
		require.NoError(t, err)
		_, err = b.c.JobState(b.ctx, nil, "sum", done)
		return errors.Is(err, fdbjobs.ErrNotFound)
	})
	for _, id := range []string{bad, later} {
		s, err := b.c.JobState(b.ctx, nil, "sum", id)
		require.NoError(t, err, "kept: forever (discarded), a day (cancelled)")
		require.Equal(t, fdbjobs.Finished, s)
	}
	n, err := b.rt.Sweep(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing more to remove")

	// A job retried after its end keeps no entry that would remove it.
	require.NoError(t, b.c.RetryNow(b.ctx, nil, "sum", later))
	o, _, _ = b.outcome(t, "sum", later)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	testutil.Eventually(t, "the retried job removed once completed and past its retention", func() bool {
		_, err := b.rt.Sweep(b.ctx)
		require.NoError(t, err)
		_, err = b.c.JobState(b.ctx, nil, "sum", later)
		return errors.Is(err, fdbjobs.ErrNotFound)
	})

	_, err = fdbjobs.NewRuntime(b.c, ws, fdbjobs.RuntimeOptions{SweepPeriod: -1})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
	require.ErrorIs(t, fdbjobs.AddWorker(fdbjobs.NewWorkers(), fdbjobs.WorkFunc[sumArgs](nil), fdbjobs.WorkerOptions{RetainCompleted: -time.Hour}),
		fdbjobs.ErrInvalidArgument)
}

// A burst of short jobs: their ends are written in batches (a completer
// per kind), each job's outcome its own.
func TestRuntimeBurst(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(ctx context.Context, w *fdbjobs.Work[sumArgs]) error {
		if w.Args.A%7 == 0 {
			return fdbjobs.Permanent(errors.New("multiple of 7"))
		}
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 64}))
	b := startRuntime(t, ws)
	var jobs []fdbjobs.InsertJob
	for i := range 500 {
		jobs = append(jobs, fdbjobs.InsertJob{Args: sumArgs{A: i}})
	}
	ids, err := b.c.InsertMany(b.ctx, nil, jobs)
	require.NoError(t, err)
	for i, id := range ids {
		o, _, _ := b.outcome(t, "sum", id)
		if i%7 == 0 {
			require.Equal(t, fdbjobs.OutcomeDiscarded, o, i)
		} else {
			require.Equal(t, fdbjobs.OutcomeCompleted, o, i)
		}
	}
}

type stepArgs struct {
	Done int
}

func (stepArgs) Kind() string { return "step" }

// Work.Update checkpoints a job's arguments under its lock: the attempt
// that failed after it leaves them to the next attempt, and the completed
// job keeps them. An Update once the job was cancelled is ErrHalt and
// writes nothing.
func TestRuntimeWorkUpdate(t *testing.T) {
	var attempts []stepArgs
	var maxAttempts atomic.Int64
	var mu sync.Mutex
	started, cancelled := make(chan struct{}, 1), make(chan error, 1)
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[stepArgs](func(ctx context.Context, w *fdbjobs.Work[stepArgs]) error {
		mu.Lock()
		attempts = append(attempts, w.Args)
		mu.Unlock()
		maxAttempts.Store(int64(w.MaxAttempts))
		if w.ID == "cancelled" {
			started <- struct{}{}
			<-ctx.Done()
			cancelled <- w.Update(context.WithoutCancel(ctx), stepArgs{Done: 99})
			return nil
		}
		next := stepArgs{Done: w.Args.Done + 1}
		if err := w.Update(ctx, next); err != nil {
			return err
		}
		if next.Done < 2 {
			return errors.New("not yet")
		}
		return nil
	}), fdbjobs.WorkerOptions{RetryPolicy: fdbjobs.RetryFunc(func(int, error) time.Duration { return 0 })}))
	b := startRuntime(t, ws)
	id := b.insert(t, stepArgs{}, fdbjobs.InsertOptions{})
	o, n, errs := b.outcome(t, "step", id)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 2, n)
	require.Len(t, errs, 1)
	mu.Lock()
	require.Equal(t, []stepArgs{{Done: 0}, {Done: 1}}, attempts, "the second attempt starts from the first's checkpoint")
	mu.Unlock()
	require.EqualValues(t, fdbjobs.MaxAttemptsDefault, maxAttempts.Load(), "the kind's MaxAttempts, the job having none of its own")
	data, err := b.c.JobData(b.ctx, nil, "step", id)
	require.NoError(t, err)
	var args stepArgs
	require.NoError(t, fdbjobs.UnmarshalArgs(data, &args))
	require.Equal(t, stepArgs{Done: 2}, args)

	c := b.insert(t, stepArgs{Done: 7}, fdbjobs.InsertOptions{ID: "cancelled"})
	// Cancel once the worker runs: a job cancelled while its accept is on
	// its way (a retry after commit_unknown_result) is not worked at all.
	testutil.Recv(t, started)
	_, err = b.c.Cancel(b.ctx, nil, "step", c)
	require.NoError(t, err)
	require.ErrorIs(t, testutil.Recv(t, cancelled), fdbjobs.ErrHalt)
	data, err = b.c.JobData(b.ctx, nil, "step", c)
	require.NoError(t, err)
	require.NoError(t, fdbjobs.UnmarshalArgs(data, &args))
	require.Equal(t, stepArgs{Done: 7}, args, "nothing written after the cancel")
}

type ledgerArgs struct {
	Amount int
}

func (ledgerArgs) Kind() string { return "ledger" }

// Work.CompleteTx ends the job in the worker's own transaction: its
// effects and the job's completion commit together, and the Runtime writes
// nothing more. A cancelled job's CompleteTx is ErrHalt, and the worker's
// transaction, which returns it, commits nothing.
func TestRuntimeCompleteTx(t *testing.T) {
	key := func(id string) kv.Key { return kv.Key("ledger/" + id) }
	var b *runtimeBundle
	started, cancelled := make(chan struct{}, 1), make(chan error, 1)
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[ledgerArgs](func(ctx context.Context, w *fdbjobs.Work[ledgerArgs]) error {
		if w.ID == "cancelled" {
			started <- struct{}{}
			<-ctx.Done()
			ctx = context.WithoutCancel(ctx)
		}
		_, err := kv.Transact(ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
			tr.Set(key(w.ID), []byte(fmt.Sprint(w.Args.Amount)))
			return struct{}{}, w.CompleteTx(ctx, tr)
		})
		if w.ID == "cancelled" {
			cancelled <- err
		}
		return err
	}), fdbjobs.WorkerOptions{}))
	b = startRuntime(t, ws)
	id := b.insert(t, ledgerArgs{Amount: 7}, fdbjobs.InsertOptions{})
	o, n, errs := b.outcome(t, "ledger", id)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 1, n)
	require.Empty(t, errs)
	v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(key(id)).Get() })
	require.NoError(t, err)
	require.Equal(t, "7", string(v))

	c := b.insert(t, ledgerArgs{Amount: 9}, fdbjobs.InsertOptions{ID: "cancelled"})
	testutil.Recv(t, started) // see TestRuntimeWorkUpdate
	_, err = b.c.Cancel(b.ctx, nil, "ledger", c)
	require.NoError(t, err)
	require.ErrorIs(t, testutil.Recv(t, cancelled), fdbjobs.ErrHalt)
	o, _, _ = b.outcome(t, "ledger", c)
	require.Equal(t, fdbjobs.OutcomeCancelled, o)
	v, err = kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(key(c)).Get() })
	require.NoError(t, err)
	require.Nil(t, v, "the worker's effects did not commit")
}

type gateArgs struct {
	N int
}

func (gateArgs) Kind() string { return "gate" }

// SetConcurrency changes how many jobs of a kind the Runtime works at
// once while it runs: raised, it takes more at once; lowered, it takes new
// ones only once fewer run than the new limit.
func TestRuntimeSetConcurrency(t *testing.T) {
	var running atomic.Int32
	var lowered, exceeded atomic.Bool
	gate := make(chan struct{})
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[gateArgs](func(ctx context.Context, w *fdbjobs.Work[gateArgs]) error {
		if n := running.Add(1); lowered.Load() && n > 1 {
			exceeded.Store(true)
		}
		defer running.Add(-1)
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 2}))
	b := startRuntime(t, ws)
	require.ErrorIs(t, b.rt.SetConcurrency("gate", 0), fdbjobs.ErrInvalidArgument)
	require.ErrorIs(t, b.rt.SetConcurrency("nope", 1), fdbjobs.ErrInvalidArgument)
	var jobs []fdbjobs.InsertJob
	for i := range 10 {
		jobs = append(jobs, fdbjobs.InsertJob{Args: gateArgs{N: i}})
	}
	ids, err := b.c.InsertMany(b.ctx, nil, jobs)
	require.NoError(t, err)
	running2 := func(n int32) func() bool { return func() bool { return running.Load() == n } }
	testutil.Eventually(t, "2 jobs running", running2(2))
	require.NoError(t, b.rt.SetConcurrency("gate", 5))
	testutil.Eventually(t, "5 jobs running", running2(5))
	require.NoError(t, b.rt.SetConcurrency("gate", 1))
	lowered.Store(true)
	close(gate)
	for _, id := range ids {
		o, _, _ := b.outcome(t, "gate", id)
		require.Equal(t, fdbjobs.OutcomeCompleted, o)
	}
	require.False(t, exceeded.Load(), "after the limit was lowered to 1, no job started beside another")
}

type manualArgs struct {
	Step int `json:"step"`
}

func (manualArgs) Kind() string { return "manual" }

// A Manual kind's worker holds and ends its jobs itself: the Runtime runs
// them with the job's data as arguments (no envelope), writes no end (an
// error leaves the job running, for the activity monitor), and refuses
// the Runtime's own writes (Update, CompleteTx).
func TestRuntimeManual(t *testing.T) {
	type seen struct {
		args   manualArgs
		update error
		tx     error
	}
	got := make(chan seen, 10)
	var b *runtimeBundle
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[manualArgs](func(ctx context.Context, w *fdbjobs.Work[manualArgs]) error {
		s := seen{args: w.Args, update: w.Update(ctx, manualArgs{Step: 9})}
		_, s.tx = kv.Transact(ctx, b.db, func(tr kv.Transaction) (struct{}, error) { return struct{}{}, w.CompleteTx(ctx, tr) })
		got <- s
		if w.Args.Step == 2 {
			return errors.New("left running")
		}
		return b.c.Finish(ctx, nil, w.Job, json.RawMessage(`{"step":3,"done":true}`))
	}), fdbjobs.WorkerOptions{Manual: true, Timeout: time.Second}))
	b = startRuntime(t, ws)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(fdbjobs.NewMetrics(b.c)))

	require.NoError(t, b.c.Add(b.ctx, nil, "manual", "one", json.RawMessage(`{"step":1}`), 0))
	s := testutil.Recv(t, got)
	require.Equal(t, 1, s.args.Step, "the job's data are its arguments")
	require.ErrorIs(t, s.update, fdbjobs.ErrInvalidArgument)
	require.ErrorIs(t, s.tx, fdbjobs.ErrInvalidArgument)
	testutil.Eventually(t, "finished by the worker", func() bool {
		st, err := b.c.JobState(b.ctx, nil, "manual", "one")
		require.NoError(t, err)
		return st == fdbjobs.Finished
	})
	data, err := b.c.JobData(b.ctx, nil, "manual", "one")
	require.NoError(t, err)
	require.JSONEq(t, `{"step":3,"done":true}`, string(data), "the worker's end, nothing of the Runtime's")
	// Its run is timed, but no wait from its scheduled time, which is the
	// worker's to give a meaning.
	testutil.Eventually(t, "the run timed", func() bool {
		families, err := reg.Gather()
		require.NoError(t, err)
		runs := uint64(0)
		for _, f := range families {
			require.NotEqual(t, "fdbjobs_job_wait_seconds", f.GetName())
			if f.GetName() == "fdbjobs_job_run_seconds" {
				runs = f.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return runs == 1
	})

	// An error is the worker's to handle: the job stays running, then the
	// activity monitor hands it back and the Runtime runs it again.
	require.NoError(t, b.c.Add(b.ctx, nil, "manual", "two", json.RawMessage(`{"step":2}`), 0))
	require.Equal(t, 2, testutil.Recv(t, got).args.Step)
	st, err := b.c.JobState(b.ctx, nil, "manual", "two")
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Running, st, "no end written")
	require.Equal(t, 2, testutil.Recv(t, got).args.Step, "run again after the job timeout")
}

// A Manual kind's jobs are removed RetainFinished after the time their
// worker marked them finished at (RetainTx), with OnRemove in the
// removing transaction; a mark the worker cleared (UnretainTx), or whose
// job runs again, removes nothing.
func TestRuntimeManualRetention(t *testing.T) {
	var b *runtimeBundle
	var mu sync.Mutex
	var removed []fdbjobs.RemovedJob
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[manualArgs](func(ctx context.Context, w *fdbjobs.Work[manualArgs]) error {
		_, err := kv.Transact(ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
			if err := b.c.Finish(ctx, tr, w.Job, nil); err != nil {
				return struct{}{}, err
			}
			if w.Args.Step > 0 {
				b.c.RetainTx(tr, "manual", w.ID, time.UnixMilli(int64(w.Args.Step)))
			}
			return struct{}{}, nil
		})
		return err
	}), fdbjobs.WorkerOptions{Manual: true, RetainFinished: time.Hour, FinishedAt: func(data json.RawMessage) (time.Time, bool) {
		var a manualArgs
		err := json.Unmarshal(data, &a)
		return time.UnixMilli(int64(a.Step)), err == nil && a.Step > 0
	}, OnRemove: func(ctx context.Context, tr kv.Transaction, jobs []fdbjobs.RemovedJob) error {
		tr.Set(kv.Key("removed/"+jobs[0].ID), nil) // its own keys, in the same transaction
		mu.Lock()
		removed = append(removed, jobs...)
		mu.Unlock()
		return nil
	}}))
	b = startRuntime(t, ws)
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	for id, step := range map[string]int64{"old": old, "new": time.Now().UnixMilli(), "unmarked": 0, "cleared": old} {
		require.NoError(t, b.c.Add(b.ctx, nil, "manual", id, json.RawMessage(fmt.Sprintf(`{"step":%d}`, step)), 0))
		testutil.Eventually(t, "finished", func() bool {
			st, err := b.c.JobState(b.ctx, nil, "manual", id)
			require.NoError(t, err)
			return st == fdbjobs.Finished
		})
	}
	_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		b.c.UnretainTx(tr, "manual", "cleared", time.UnixMilli(old))
		// A mark an earlier finish left: not the time FinishedAt reads.
		b.c.RetainTx(tr, "manual", "new", time.UnixMilli(old))
		return struct{}{}, nil
	})
	require.NoError(t, err)
	n, err := b.rt.Sweep(b.ctx)
	require.NoError(t, err)
	if _, faulty := faultkv.StatsOf(b.db); !faulty { // else a commit_unknown_result may leave it uncounted
		require.Equal(t, 2, n, "old's mark and new's stale one cleared")
	}
	mu.Lock()
	// OnRemove runs in each attempt of the sweep's transaction.
	removed = slices.CompactFunc(removed, func(a, b fdbjobs.RemovedJob) bool { return a.ID == b.ID })
	require.Len(t, removed, 1)
	require.Equal(t, "old", removed[0].ID)
	require.JSONEq(t, fmt.Sprintf(`{"step":%d}`, old), string(removed[0].Data))
	removed = nil
	mu.Unlock()
	_, err = b.c.JobState(b.ctx, nil, "manual", "old")
	require.ErrorIs(t, err, fdbjobs.ErrNotFound)
	v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(kv.Key("removed/old")).Get() })
	require.NoError(t, err)
	require.NotNil(t, v, "OnRemove wrote in the removing transaction")
	for _, id := range []string{"new", "unmarked", "cleared"} {
		st, err := b.c.JobState(b.ctx, nil, "manual", id)
		require.NoError(t, err, id)
		require.Equal(t, fdbjobs.Finished, st, id)
	}

	// A shorter retention takes the next one; a job pending again keeps
	// its row, and its mark goes.
	require.NoError(t, b.rt.SetRetainFinished("manual", time.Nanosecond))
	require.ErrorIs(t, b.rt.SetRetainFinished("manual", 0), fdbjobs.ErrInvalidArgument)
	require.ErrorIs(t, b.rt.SetRetainFinished("sum", time.Hour), fdbjobs.ErrInvalidArgument)
	_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		b.c.RetainTx(tr, "manual", "unmarked", time.Now().Add(-time.Minute))
		return struct{}{}, b.c.Add(b.ctx, tr, "manual", "unmarked", json.RawMessage(`{"step":0}`), time.Now().Add(time.Hour).UnixMilli())
	})
	require.NoError(t, err)
	testutil.Eventually(t, "the new job removed", func() bool {
		_, err := b.rt.Sweep(b.ctx)
		require.NoError(t, err)
		_, err = b.c.JobState(b.ctx, nil, "manual", "new")
		return errors.Is(err, fdbjobs.ErrNotFound)
	})
	st, err := b.c.JobState(b.ctx, nil, "manual", "unmarked")
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Pending, st, "pending again: kept")
}

// A sweep whose jobs' data are large reads them in pages bounded by
// kv.PageBytes, across as many transactions as that takes.
func TestSweepRetainedLargeRows(t *testing.T) {
	b := startClient(t)
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "big", time.Minute))
	big := json.RawMessage(`{"pad":"` + strings.Repeat("x", 50_000) + `"}`)
	const jobs = 60 // 3 MB
	var batch []fdbjobs.NewJob
	for i := range jobs {
		batch = append(batch, fdbjobs.NewJob{ID: fmt.Sprintf("j%02d", i), Data: big})
	}
	for i := 0; i < jobs; i += 10 {
		require.NoError(t, b.c.AddBatch(b.ctx, nil, "big", batch[i:i+10]))
	}
	finished := time.Now().Add(-time.Hour)
	for left := jobs; left > 0; {
		got, err := b.c.AcceptBatch(b.ctx, "big", 10, fdbjobs.AcceptOptions{MaxScheduledTime: time.Now().UnixMilli()})
		require.NoError(t, err)
		_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
			for _, j := range got {
				if err := b.c.Finish(b.ctx, tr, j, nil); err != nil {
					return struct{}{}, err
				}
				b.c.RetainTx(tr, "big", j.ID, finished)
			}
			return struct{}{}, nil
		})
		require.NoError(t, err)
		left -= len(got)
	}
	var removed atomic.Int64
	n, err := b.c.SweepRetained(b.ctx, "big", time.Now(), fdbjobs.Sweep{OnRemove: func(_ context.Context, tr kv.Transaction, js []fdbjobs.RemovedJob) error {
		tr.Locals().OnCommit(func() { removed.Add(int64(len(js))) })
		return nil
	}})
	require.NoError(t, err)
	// Both count commits that said so (a page that committed with
	// commit_unknown_result, found done by its retry, is not counted).
	require.LessOrEqual(t, n, jobs)
	require.LessOrEqual(t, removed.Load(), int64(jobs))
	if _, faulty := faultkv.StatsOf(b.db); !faulty {
		require.Equal(t, jobs, n)
		require.EqualValues(t, jobs, removed.Load())
	}
	for i := range jobs {
		_, err := b.c.JobState(b.ctx, nil, "big", fmt.Sprintf("j%02d", i))
		require.ErrorIs(t, err, fdbjobs.ErrNotFound)
	}
	counts, err := b.c.Counts(b.ctx, nil, "big")
	require.NoError(t, err)
	require.Zero(t, counts.Completed)
	_, err = b.c.SweepRetained(b.ctx, "", time.Now(), fdbjobs.Sweep{})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
}

// With OldestFirst a kind's jobs start in the order of their scheduled
// times across its shards.
func TestRuntimeOldestFirst(t *testing.T) {
	order := make(chan string, 100)
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[gateArgs](func(ctx context.Context, w *fdbjobs.Work[gateArgs]) error {
		order <- w.ID
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 1, FetchBatch: 1, OldestFirst: true}))
	b := startClient(t)
	ctx, c := b.ctx, b.c
	require.NoError(t, c.SetTypeShards(ctx, nil, "gate", 16))
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "gate", fdbjobs.TimeoutDefault))
	// Due in the past, a second apart, in the order of their ids, which
	// spread them over the shards.
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	const n = 40
	var want []string
	for i := range n {
		id := fmt.Sprintf("j%02d", i)
		want = append(want, id)
		require.NoError(t, c.Add(ctx, nil, "gate", id, json.RawMessage(fmt.Sprintf(`{"N":%d}`, i)), hourAgo+int64(i)*1000))
	}
	b.start(t, ws)
	rt := b.rt
	var got []string
	for range n {
		got = append(got, <-order)
	}
	require.Equal(t, want, got)
	s, err := rt.Stats("gate")
	require.NoError(t, err)
	require.GreaterOrEqual(t, s.Fetches, int64(n))
	testutil.Eventually(t, "idle once the queue is empty", func() bool {
		s, err := rt.Stats("gate")
		require.NoError(t, err)
		return s.Idle > 0 && s.Running == 0
	})
}

func TestExponentialRetry(t *testing.T) {
	p := fdbjobs.ExponentialRetry{Min: 32 * time.Second, Max: 48 * time.Hour, Jitter: 0.25}
	for _, c := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, 32 * time.Second}, {2, 0, 64 * time.Second}, {3, 0.5, 128*time.Second - 16*time.Second},
		{0, 0, 32 * time.Second}, {20, 0, 48 * time.Hour}, {70, 0, 48 * time.Hour}, {1000, 0.999, 48*time.Hour - time.Duration(0.999*0.25*float64(48*time.Hour))},
	} {
		require.Equal(t, c.want, p.Delay(c.attempt, c.r), "attempt %d, r %v", c.attempt, c.r)
	}
	huge := fdbjobs.ExponentialRetry{Min: time.Second, Max: math.MaxInt64}
	require.Equal(t, time.Duration(math.MaxInt64), huge.Delay(70, 0), "no overflow on the way to Max")
	for range 100 {
		d := p.NextRetry(3, nil)
		require.LessOrEqual(t, d, 128*time.Second)
		require.Greater(t, d, 96*time.Second)
	}
}
