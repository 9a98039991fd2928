package fdbjobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

type ctxKey struct{}

// The Runtime's middleware wrap the kind's, which wrap the Worker, each
// list outermost first; they see the job, may change the attempt's error
// and the Work's ctx, and a panic in one is the attempt's error.
func TestWorkMiddleware(t *testing.T) {
	var mu sync.Mutex
	var trail []string
	note := func(s string) {
		mu.Lock()
		trail = append(trail, s)
		mu.Unlock()
	}
	tracing := func(name string) fdbjobs.WorkMiddleware {
		return func(ctx context.Context, job *fdbjobs.JobRow, next func(context.Context) error) error {
			note(fmt.Sprintf("%s> %s %s attempt %d %s", name, job.Kind, job.State, job.Attempt, job.Args))
			err := next(ctx)
			note("<" + name)
			return err
		}
	}
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(ctx context.Context, w *fdbjobs.Work[sumArgs]) error {
		note(fmt.Sprintf("work %v", ctx.Value(ctxKey{})))
		if w.Args.A == 1 {
			return errors.New("fails")
		}
		return nil
	}), fdbjobs.WorkerOptions{MaxAttempts: 5, RetryPolicy: noDelay, Middleware: []fdbjobs.WorkMiddleware{
		tracing("kind"),
		func(ctx context.Context, job *fdbjobs.JobRow, next func(context.Context) error) error {
			if string(job.Args) == `{"A":2,"B":0}` {
				panic("in middleware")
			}
			if err := next(context.WithValue(ctx, ctxKey{}, "valued")); err != nil {
				return fdbjobs.Permanent(err) // no retry
			}
			return nil
		},
	}}))
	b := startRuntime(t, ws, tracing("rt1"), tracing("rt2"))

	id := b.insert(t, sumArgs{A: 0}, fdbjobs.InsertOptions{})
	o, n, _ := b.outcome(t, "sum", id)
	require.Equal(t, fdbjobs.OutcomeCompleted, o)
	require.Equal(t, 1, n)
	mu.Lock()
	require.Equal(t, []string{
		`rt1> sum running attempt 1 {"A":0,"B":0}`, `rt2> sum running attempt 1 {"A":0,"B":0}`, `kind> sum running attempt 1 {"A":0,"B":0}`,
		"work valued", "<kind", "<rt2", "<rt1",
	}, trail)
	mu.Unlock()

	id = b.insert(t, sumArgs{A: 1}, fdbjobs.InsertOptions{})
	o, n, errs := b.outcome(t, "sum", id)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o, "the middleware made the error permanent")
	require.Equal(t, 1, n)
	require.Contains(t, errs[0].Error, "fails")

	id = b.insert(t, sumArgs{A: 2}, fdbjobs.InsertOptions{MaxAttempts: 1})
	o, _, errs = b.outcome(t, "sum", id)
	require.Equal(t, fdbjobs.OutcomeDiscarded, o)
	require.Contains(t, errs[0].Error, "panic: in middleware")
}

func TestNilMiddleware(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	err := fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(context.Context, *fdbjobs.Work[sumArgs]) error { return nil }),
		fdbjobs.WorkerOptions{Middleware: []fdbjobs.WorkMiddleware{nil}})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(context.Context, *fdbjobs.Work[sumArgs]) error { return nil }),
		fdbjobs.WorkerOptions{}))
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	_, err = fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{Middleware: []fdbjobs.WorkMiddleware{nil}})
	require.ErrorIs(t, err, fdbjobs.ErrInvalidArgument)
}

// Insert hooks run in the inserting transaction, after the jobs were
// written, with the page's jobs: what they write commits with the jobs,
// and an error rejects them.
func TestInsertHook(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(context.Context, *fdbjobs.Work[sumArgs]) error { return nil }),
		fdbjobs.WorkerOptions{}))
	b := startRuntime(t, ws)
	require.NoError(t, b.c.Pause(b.ctx, nil, "sum")) // the jobs stay where they are inserted
	audit := subspace.Sub("insert-hook-audit")
	errRejected := errors.New("A must not be negative")
	var calls [][]string
	var mu sync.Mutex
	b.c.AddInsertHook(func(ctx context.Context, tr kv.Transaction, jobs []fdbjobs.JobRow) error {
		var ids []string
		for _, j := range jobs {
			var a sumArgs
			require.NoError(t, fdbjobs.UnmarshalArgs([]byte(`{"args":`+string(j.Args)+`}`), &a))
			if a.A < 0 {
				return errRejected
			}
			require.Equal(t, "sum", j.Kind)
			require.Equal(t, fdbjobs.StateAvailable, j.State)
			require.Zero(t, j.Attempt)
			tr.Set(audit.Pack(tuple.Tuple{j.ID}), nil)
			ids = append(ids, j.ID)
		}
		mu.Lock()
		calls = append(calls, ids)
		mu.Unlock()
		return nil
	})
	audited := func() []string {
		kvs, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
			return tr.GetRange(audit, kv.RangeOptions{}).GetSliceWithError()
		})
		require.NoError(t, err)
		var ids []string
		for _, e := range kvs {
			t2, err := audit.Unpack(e.Key)
			require.NoError(t, err)
			ids = append(ids, t2[0].(string))
		}
		return ids
	}
	counts := func() fdbjobs.JobCounts {
		n, err := b.c.Counts(b.ctx, nil, "sum")
		require.NoError(t, err)
		return n
	}

	one := b.insert(t, sumArgs{A: 1}, fdbjobs.InsertOptions{})
	many, err := b.c.InsertMany(b.ctx, nil, []fdbjobs.InsertJob{{Args: sumArgs{A: 2}}, {Args: sumArgs{A: 3}}})
	require.NoError(t, err)
	require.ElementsMatch(t, append([]string{one}, many...), audited())
	// Once per transaction, with its jobs; a transaction that ran again
	// (an injected fault) ran it again with the same jobs.
	mu.Lock()
	calls = slices.CompactFunc(calls, slices.Equal[[]string])
	mu.Unlock()
	require.Equal(t, [][]string{{one}, many}, calls, "once per transaction, with its jobs")

	_, err = b.c.Insert(b.ctx, nil, sumArgs{A: -1}, fdbjobs.InsertOptions{})
	require.ErrorIs(t, err, errRejected)
	_, err = b.c.InsertMany(b.ctx, nil, []fdbjobs.InsertJob{{Args: sumArgs{A: 4}}, {Args: sumArgs{A: -1}}})
	require.ErrorIs(t, err, errRejected)
	_, err = b.c.Insert(b.ctx, nil, sumArgs{A: -1}, fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true}})
	require.ErrorIs(t, err, errRejected)
	require.Equal(t, fdbjobs.JobCounts{Pending: 3}, counts(), "a rejected insert adds nothing")

	r, err := b.c.Insert(b.ctx, nil, sumArgs{A: 1}, fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true}})
	require.NoError(t, err)
	require.False(t, r.Duplicate)
	calls = nil
	r, err = b.c.Insert(b.ctx, nil, sumArgs{A: 1}, fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true}})
	require.NoError(t, err)
	require.True(t, r.Duplicate)
	require.Empty(t, calls, "nothing inserted: no hook")
	require.Equal(t, fdbjobs.JobCounts{Pending: 4}, counts())
}
