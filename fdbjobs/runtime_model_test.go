package fdbjobs_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

// modelArgs are the model test's jobs: the worker's answer to each of
// their attempts is drawn from (Seed, N, attempt).
type modelArgs struct {
	Seed uint64
	N    int
}

func (modelArgs) Kind() string { return "model" }

const modelMaxAttempts = 3

// answer is what the worker does at attempt a of job n: "ok", "fail" or
// "permanent".
func (m modelArgs) answer(a int) string {
	h := fnv.New64a()
	fmt.Fprint(h, m.Seed, "/", m.N, "/", a)
	switch h.Sum64() % 5 {
	case 0, 1:
		return "ok"
	case 2, 3:
		return "fail"
	}
	return "permanent"
}

// reference is the outcome and attempts a job has without a cancel: the
// model the Runtime must match.
func (m modelArgs) reference() (string, int) {
	for a := 1; ; a++ {
		switch m.answer(a) {
		case "ok":
			return fdbjobs.OutcomeCompleted, a
		case "permanent":
			return fdbjobs.OutcomeDiscarded, a
		}
		if a == modelMaxAttempts {
			return fdbjobs.OutcomeDiscarded, a
		}
	}
}

// TestRuntimeModel runs a seeded stream of operations on the Runtime
// (inserts, cancels from outside, pauses and resumes of the kind) against
// workers whose answers are drawn from the seed, then checks each job's
// end against the reference: a job a Cancel reported cancelled ends
// cancelled and never completed; every other job ends as the reference
// says, with its attempts; no attempt beyond MaxAttempts; no job lost
// (every one ends once the kind is resumed); the counts per state the store
// keeps are the jobs' outcomes. Replay: FDBREP_RUNTIME_SEED.
func TestRuntimeModel(t *testing.T) {
	seed := testutil.SeedFrom(t, "FDBREP_RUNTIME_SEED")
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	ws := fdbjobs.NewWorkers()
	var mu sync.Mutex
	maxSeen := map[int]int{} // job N -> the highest attempt its worker saw
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[modelArgs](func(ctx context.Context, w *fdbjobs.Work[modelArgs]) error {
		mu.Lock()
		maxSeen[w.Args.N] = max(maxSeen[w.Args.N], w.Attempt)
		mu.Unlock()
		switch w.Args.answer(w.Attempt) {
		case "ok":
			return nil
		case "fail":
			return errors.New("fail")
		}
		return fdbjobs.Permanent(errors.New("permanent"))
	}), fdbjobs.WorkerOptions{Concurrency: 4, MaxAttempts: modelMaxAttempts, RetryPolicy: noDelay}))
	b := startRuntime(t, ws)

	type job struct {
		args      modelArgs
		id        string
		cancelled bool   // the last Cancel reported it cancelled
		reported  string // the last Cancel's answer
	}
	var jobs []*job
	ops := 150
	if testing.Short() {
		ops = 50
	}
	for range ops {
		switch p := rng.IntN(10); {
		case p < 6 || len(jobs) == 0:
			a := modelArgs{Seed: seed, N: len(jobs)}
			jobs = append(jobs, &job{args: a, id: b.insert(t, a, fdbjobs.InsertOptions{})})
		case p < 8:
			j := jobs[rng.IntN(len(jobs))]
			o, err := b.c.Cancel(b.ctx, nil, "model", j.id)
			require.NoError(t, err)
			j.reported = o
			j.cancelled = j.cancelled || o == fdbjobs.OutcomeCancelled
		case p < 9:
			require.NoError(t, b.c.Pause(b.ctx, nil, "model"))
		default:
			require.NoError(t, b.c.Resume(b.ctx, nil, "model"))
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // let the workers interleave
		}
	}
	require.NoError(t, b.c.Resume(b.ctx, nil, "model"))
	var counts fdbjobs.JobCounts // every job has ended: the counts are their outcomes'
	for _, j := range jobs {
		o, n, _ := b.outcome(t, "model", j.id)
		*map[string]*int64{fdbjobs.OutcomeCompleted: &counts.Completed, fdbjobs.OutcomeCancelled: &counts.Cancelled,
			fdbjobs.OutcomeDiscarded: &counts.Discarded}[o]++
		ro, rn := j.args.reference()
		mu.Lock()
		seen := maxSeen[j.args.N]
		mu.Unlock()
		require.LessOrEqual(t, seen, modelMaxAttempts, "job %d", j.args.N)
		if j.cancelled {
			require.Equal(t, fdbjobs.OutcomeCancelled, o, "job %d: a job Cancel reported cancelled stays so", j.args.N)
			require.LessOrEqual(t, n, rn, "job %d", j.args.N)
			continue
		}
		if j.reported != "" {
			require.Equal(t, ro, j.reported, "job %d: what Cancel found finished is the reference's outcome", j.args.N)
		}
		require.Equal(t, ro, o, "job %d: outcome", j.args.N)
		require.Equal(t, rn, n, "job %d: attempts", j.args.N)
	}
	got, err := b.c.Counts(b.ctx, nil, "model")
	require.NoError(t, err)
	require.Equal(t, counts, got, "the counts the store keeps")
}
