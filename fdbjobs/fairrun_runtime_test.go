package fdbjobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
)

type napArgs struct {
	Nap time.Duration
}

func (napArgs) Kind() string { return "nap" }

// A Runtime charges the run time of a FairShareRunTime kind's partitioned
// jobs, once each (its charger writes what is left as it stops), and
// nothing for jobs without a partition or for a kind by starts.
func TestRuntimeChargesRunTime(t *testing.T) {
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[napArgs](func(ctx context.Context, w *fdbjobs.Work[napArgs]) error {
		time.Sleep(w.Args.Nap) // (a job's run time is at least its nap)
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 8}))
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[sumArgs](func(ctx context.Context, w *fdbjobs.Work[sumArgs]) error {
		time.Sleep(10 * time.Millisecond)
		return nil
	}), fdbjobs.WorkerOptions{}))
	b := startClient(t)
	require.NoError(t, b.c.SetFairShareMode(b.ctx, nil, "nap", fdbjobs.FairShareRunTime))
	require.NoError(t, b.c.SetFairShareMode(b.ctx, nil, "sum", fdbjobs.FairShareStarts))
	b.start(t, ws)
	var ids []string
	for i := range 10 {
		ids = append(ids,
			b.insert(t, napArgs{Nap: 30 * time.Millisecond}, fdbjobs.InsertOptions{Partition: "long"}),
			b.insert(t, napArgs{Nap: 5 * time.Millisecond}, fdbjobs.InsertOptions{Partition: "short"}),
			b.insert(t, napArgs{Nap: 5 * time.Millisecond}, fdbjobs.InsertOptions{}),
			b.insert(t, sumArgs{A: i}, fdbjobs.InsertOptions{Partition: "long"}))
	}
	for i, id := range ids {
		kind := "nap"
		if i%4 == 3 {
			kind = "sum"
		}
		o, _, _ := b.outcome(t, kind, id)
		require.Equal(t, fdbjobs.OutcomeCompleted, o)
	}
	require.NoError(t, b.rt.Stop(b.ctx))
	u, err := b.c.RollUpUsage(b.ctx, "nap", time.Now(), time.Minute, fdbjobs.UsageCoeffDefault)
	require.NoError(t, err)
	require.GreaterOrEqual(t, u.Usage["long"], 10*30.0)
	require.GreaterOrEqual(t, u.Usage["short"], 10*5.0)
	require.Len(t, u.Usage, 2, "jobs without a partition are charged nothing: %v", u.Usage)
	u, err = b.c.RollUpUsage(b.ctx, "sum", time.Now(), time.Minute, fdbjobs.UsageCoeffDefault)
	require.NoError(t, err)
	require.Empty(t, u.Usage, "by starts, nothing is charged")
}
