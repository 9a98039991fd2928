package fdbjobstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// wait bounds every wait of the helpers, so that a job that never ends
// fails the test instead of hanging it.
const wait = time.Minute

// NewClient returns a started Client on a new embedded store in memory,
// with scheduled times in milliseconds; both end with the test.
func NewClient(t testing.TB) *fdbjobs.Client {
	t.Helper()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		t.Fatalf("fdbjobstest: opening a store in memory: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c, err := fdbjobs.New(db, fdbjobs.Config{TimeUnit: time.Millisecond})
	if err != nil {
		t.Fatalf("fdbjobstest: %v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("fdbjobstest: starting the client: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// FireSchedules inserts the jobs of T's kind's schedules due at now (a
// time of the test's choosing, such as a period's) and returns how many,
// as the Runtimes' schedule loops would at that time.
func FireSchedules[T fdbjobs.JobArgs](t testing.TB, c *fdbjobs.Client, now time.Time) int {
	t.Helper()
	var zero T
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n, err := c.FireSchedules(ctx, kindOf(zero), now)
	if err != nil {
		t.Fatalf("fdbjobstest: firing the schedules: %v", err)
	}
	return n
}

// Job is a runtime job of kind T as the store has it.
type Job[T fdbjobs.JobArgs] struct {
	ID    string
	Args  T
	State fdbjobs.State
	// ScheduledTime is in the Client's TimeUnit.
	ScheduledTime int64
	// Outcome, Attempts and Errors are JobOutcome's.
	Outcome  string
	Attempts int
	Errors   []fdbjobs.AttemptError
}

// Jobs returns every job of T's kind on c, in id order.
func Jobs[T fdbjobs.JobArgs](t testing.TB, c *fdbjobs.Client) []Job[T] {
	t.Helper()
	var zero T
	kind := kindOf(zero)
	var out []Job[T]
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := c.FoldJobs(ctx, kind, func(j fdbjobs.JobInfo) error {
		var args T
		if err := fdbjobs.UnmarshalArgs(j.Data, &args); err != nil {
			return err
		}
		o, n, errs, err := fdbjobs.JobOutcome(j.Data)
		if err != nil {
			return err
		}
		out = append(out, Job[T]{ID: j.ID, Args: args, State: j.State, ScheduledTime: j.ScheduledTime,
			Outcome: o, Attempts: n, Errors: errs})
		return nil
	})
	if err != nil {
		t.Fatalf("fdbjobstest: reading the jobs of kind %q: %v", kind, err)
	}
	return out
}

// RequireInserted fails the test unless exactly one job of want's kind
// has arguments equal to want (as JSON), and returns it.
func RequireInserted[T fdbjobs.JobArgs](t testing.TB, c *fdbjobs.Client, want T) Job[T] {
	t.Helper()
	found := matching(t, c, want)
	if len(found) != 1 {
		t.Fatalf("fdbjobstest: %d jobs of kind %q with arguments %s, want 1", len(found), kindOf(want), jsonOf(t, want))
	}
	return found[0]
}

// RequireNotInserted fails the test if a job of want's kind has arguments
// equal to want (as JSON).
func RequireNotInserted[T fdbjobs.JobArgs](t testing.TB, c *fdbjobs.Client, want T) {
	t.Helper()
	if found := matching(t, c, want); len(found) > 0 {
		t.Fatalf("fdbjobstest: job %s of kind %q has arguments %s, want none", found[0].ID, kindOf(want), jsonOf(t, want))
	}
}

func matching[T fdbjobs.JobArgs](t testing.TB, c *fdbjobs.Client, want T) []Job[T] {
	t.Helper()
	w := jsonOf(t, want)
	var found []Job[T]
	for _, j := range Jobs[T](t, c) {
		if bytes.Equal(jsonOf(t, j.Args), w) {
			found = append(found, j)
		}
	}
	return found
}

func jsonOf(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("fdbjobstest: %v", err)
	}
	return b
}

// WorkResult is what one attempt at a job did.
type WorkResult[T fdbjobs.JobArgs] struct {
	// Err is what the worker returned.
	Err error
	// Job is the job after the attempt: finished (Outcome completed or
	// discarded) or pending for its retry.
	Job Job[T]
}

// Work has worker work one job of args once, as a Runtime would: on a
// store of its own in memory (NewClient), it inserts the job (with
// opts.Insert), works it on a Runtime with the kind's options opts.Worker,
// and returns when that attempt has ended and its outcome is stored: the
// worker's error and the job as it is then, finished (completed or
// discarded) or pending for its retry. No second attempt starts (the kind
// is paused before the attempt's end is stored).
func Work[T fdbjobs.JobArgs](t testing.TB, worker fdbjobs.Worker[T], args T, opts WorkOptions) WorkResult[T] {
	t.Helper()
	c := NewClient(t)
	kind := kindOf(args)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	returned := make(chan error, 1)
	var once sync.Once
	ws := fdbjobs.NewWorkers()
	err := fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[T](func(wctx context.Context, w *fdbjobs.Work[T]) error {
		err := worker.Work(wctx, w)
		once.Do(func() {
			// No second attempt: the fetcher's next accept finds the kind
			// paused, while the Runtime stores this one's end.
			if perr := c.Pause(ctx, nil, kind); perr != nil {
				err = errors.Join(err, perr)
			}
			returned <- err
		})
		return err
	}), opts.Worker)
	if err != nil {
		t.Fatalf("fdbjobstest: %v", err)
	}
	rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{FetchPoll: 10 * time.Millisecond, WatchHoldAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("fdbjobstest: %v", err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatalf("fdbjobstest: starting a runtime: %v", err)
	}
	defer rt.StopAndCancel()
	r, err := c.Insert(ctx, nil, args, opts.Insert)
	if err != nil {
		t.Fatalf("fdbjobstest: inserting the job: %v", err)
	}
	var werr error
	select {
	case werr = <-returned:
	case <-ctx.Done():
		t.Fatalf("fdbjobstest: job %s of kind %q did not run within %v", r.ID, kind, wait)
	}
	for {
		st, err := c.JobState(ctx, nil, kind, r.ID)
		if err != nil {
			t.Fatalf("fdbjobstest: reading job %s: %v", r.ID, err)
		}
		if st != fdbjobs.Running {
			break
		}
		select { // the Runtime stores the attempt's end
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("fdbjobstest: job %s of kind %q still running after its worker returned", r.ID, kind)
		}
	}
	for _, j := range Jobs[T](t, c) {
		if j.ID == r.ID {
			return WorkResult[T]{Err: werr, Job: j}
		}
	}
	t.Fatalf("fdbjobstest: job %s of kind %q is gone", r.ID, kind)
	return WorkResult[T]{}
}

// WorkOptions tune Work: the job's insert options and the kind's worker
// options.
type WorkOptions struct {
	Insert fdbjobs.InsertOptions
	Worker fdbjobs.WorkerOptions
}

// kindOf is the kind of T, also for a nil pointer T.
func kindOf[T fdbjobs.JobArgs](v T) string { return fdbjobs.KindOf(v) }
