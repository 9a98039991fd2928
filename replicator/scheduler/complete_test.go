package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// endingEngine is the simulated engine with two ways for a one-shot run's
// end to meet what the node asks of it at that moment. Its runs complete
// even when asked to stop: Stop waits for the run's own end, as a stop
// that reaches a run in its final checkpoint does. With filter set, the
// code of a source's filter becomes filter once that source's run has
// ended: the replication id that a checkpoint computes again (a filter
// fetch waits on the source) is the new one, as for a filter changed on
// the source just as the run completed.
type endingEngine struct {
	*simengine.Engine
	filter string

	mu   sync.Mutex
	runs map[string]replicator.Run // the last run of each source
}

func newEndingEngine(oneShot time.Duration, filter string) *endingEngine {
	e := &endingEngine{Engine: simengine.New(), filter: filter, runs: map[string]replicator.Run{}}
	e.CheckpointEvery, e.OneShot = 5*time.Millisecond, oneShot
	e.Started.Init()
	return e
}

func (e *endingEngine) Start(ctx context.Context, rep engine.Replication, opts engine.Options) replicator.Run {
	r := &endingRun{Run: e.Engine.Start(ctx, rep, opts)}
	e.mu.Lock()
	e.runs[rep.Source.URL.String()] = r
	e.mu.Unlock()
	return r
}

func (e *endingEngine) ReplicationID(ctx context.Context, rep engine.Replication, uuid string) (string, string, error) {
	src := rep.Source.URL.String()
	e.mu.Lock()
	run := e.runs[src]
	e.mu.Unlock()
	if run != nil && e.filter != "" {
		select {
		case <-run.Done():
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
		e.SetFilterCode(src, e.filter)
	}
	return e.Engine.ReplicationID(ctx, rep, uuid)
}

// endingRun is a run that a stop does not end before it completes.
type endingRun struct{ replicator.Run }

func (r *endingRun) Stop(ctx context.Context) error {
	select {
	case <-r.Done():
	case <-ctx.Done():
		return r.Run.Stop(ctx)
	}
	_, err := r.Wait()
	return err
}

// A filtered one-shot run whose final checkpoint finds the filter changed
// has completed all the same: its job completes and does not run again
// under the new replication id (the model test, seed 1795619978339586242,
// saw the job requeued "filter changed" and run again).
func TestFilterChangeAtCompletion(t *testing.T) {
	eng := newEndingEngine(100*time.Millisecond, "function(doc){return false}")
	eng.SetFilterCode("http://h/f/", "function(doc){return true}")
	c := newCluster(t, 1, eng, testConfig())
	doc := repDoc("http://h/f", "http://h/t", false)
	doc["filter"] = "ddoc/f"
	c.PutDoc("_replicator", "d", doc)
	c.WaitDocState("_replicator", "d", replicator.StateCompleted)
	c.WaitJob("finished", c.DocJobID("_replicator", "d"), func(st fdbjobs.State, _ *replicator.JobData) bool {
		return st == fdbjobs.Finished
	})
	require.Equal(t, 1, eng.Starts("http://h/f/"), "the completed job ran again")
	u, ok := c.Docs.Get("_replicator", "d")
	require.True(t, ok)
	require.Equal(t, replicator.StateCompleted, u.State)
}

// A one-shot run that completes while its node stops (the stop reached it
// too late to end it first) completes its job, rather than sending it back
// to pending, where it would run again.
func TestStopAtCompletion(t *testing.T) {
	eng := newEndingEngine(300*time.Millisecond, "")
	c := newCluster(t, 1, eng, testConfig())
	c.PutDoc("_replicator", "d", repDoc("http://h/s", "http://h/t", false))
	testutil.WaitUntil(t, &eng.Started, "the run started", func(src string) bool { return src == "http://h/s/" })
	c.Nodes[0].Stop()
	d, st, err := c.Store.Job(context.Background(), nil, c.DocJobID("_replicator", "d"))
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Finished, st)
	require.Equal(t, replicator.StateCompleted, d.State)
	require.Equal(t, 1, eng.Starts("http://h/s/"))
}
