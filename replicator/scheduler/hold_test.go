package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
)

// A node cut off from the store (a partition, a firewall rule) stops its
// runs once it could not renew its hold on their jobs for half the job
// timeout, before the activity monitor of another node can hand them on:
// the job moves, and never runs on two nodes at once.
func TestCutOffNodeStopsBeforeTakeover(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "store fails", true: "store hangs"}[hang], func(t *testing.T) { cutOffStopsBeforeTakeover(t, hang) })
	}
}

// With hang, the cut-off node's transactions wait instead of failing, as
// a FoundationDB client's do behind a firewall rule: a renewal waiting
// out its transaction timeout kept the run going past the hold, and the
// job ran on both nodes (the deployment test, issue 22).
func cutOffStopsBeforeTakeover(t *testing.T, hang bool) {
	logs := &testutil.Logs{}
	cfg := testConfig()
	cfg.JobTimeout = 2 * time.Second // a hold of 1 s
	cfg.Logger = logs.Logger()
	c, eng := simCluster(t, 2, cfg, 0, 0)
	c.PutDoc("_replicator", "cont", repDoc("http://127.0.0.1:9/cont/", "http://127.0.0.1:9/t", true))
	d := c.WaitDocState("_replicator", "cont", replicator.StateRunning)
	from, to := 0, 1
	if d.Node != nil && *d.Node == c.Nodes[1].Config().NodeName {
		from, to = 1, 0
	}

	if hang {
		c.HangOff(from, 5*cfg.JobTimeout) // far past the hold, as FoundationDB's 60 s are
	} else {
		c.CutOff(from)
	}
	c.WaitJob("running on the other node", c.DocJobID("_replicator", "cont"), runningOn(c.Nodes[to].Config().NodeName))
	stopped := logs.WaitFor(t, "replication stopped", func(m map[string]any) bool {
		return m["node"] == c.Nodes[from].Config().NodeName && m["level"] == "warn"
	})
	require.Contains(t, stopped["why"], "could not renew its hold")
	// The job's data says running before its run starts: wait for the
	// other node's run (the cut-off node's ended before it logged). A
	// commit_unknown_result on the cut-off node's start may have left its
	// run never started at all.
	waitStarts(t, eng, "the other node's run", func() bool { _, _, running, _ := eng.Stats(); return running >= 1 })
	_, _, _, most := eng.Stats()
	require.Equal(t, 1, most, "the job ran on two nodes at once")
	require.EqualValues(t, 1, c.Nodes[from].Metrics().Value(replicator.MetricJobsHoldsLost))
}

// flakyDocs is a DocUpdater whose DocCompleted fails its first fails calls
// with transaction_timed_out, an error FoundationDB does not retry: the
// transaction that completes a document's one-shot job fails as a store
// that times out makes it fail, and nothing else does.
type flakyDocs struct {
	*replicatortest.MemDocs
	fails atomic.Int64
	calls atomic.Int64
}

func (f *flakyDocs) DocCompleted(ctx context.Context, tr kv.Transaction, db, doc string, stats json.RawMessage) error {
	if f.calls.Add(1) <= f.fails.Load() {
		return kv.Error{Code: kv.CodeTransactionTimedOut}
	}
	return f.MemDocs.DocCompleted(ctx, tr, db, doc, stats)
}

// A one-shot run's completion whose transaction fails more often than the
// five attempts a worker once made, while its node still holds the job, is
// stored all the same: the job ends completed and never runs again. (The
// model test saw a completed job run again: its worker gave the write up,
// the job stayed running in the store, and the activity monitor
// re-enqueued it.)
func TestCompletionOutlastsFailedWrites(t *testing.T) {
	logs := &testutil.Logs{}
	cfg := testConfig()
	cfg.JobTimeout = 10 * time.Second // a hold of 5 s; the retries take about 0.6 s
	cfg.Logger = logs.Logger()
	docs := &flakyDocs{MemDocs: replicatortest.NewMemDocs()}
	docs.fails.Store(6)
	cfg.DocUpdater = docs
	c, eng := simCluster(t, 1, cfg, 0, 20*time.Millisecond)
	c.PutDoc("_replicator", "once", repDoc("http://h/once", "http://h/t", false))
	c.WaitDocState("_replicator", "once", replicator.StateCompleted)
	c.WaitJob("finished", c.DocJobID("_replicator", "once"), func(st fdbjobs.State, _ *replicator.JobData) bool {
		return st == fdbjobs.Finished // no activity monitor takes it back
	})
	// The worker counts the completion once its write returned, then
	// logs it: the store may say finished before.
	logs.WaitFor(t, "replication completed", nil)
	require.GreaterOrEqual(t, docs.calls.Load(), int64(7), "six failed attempts, then one that committed")
	require.Equal(t, 1, eng.Starts("http://h/once/"), "the job ran again")
	u, ok := docs.Get("_replicator", "once")
	require.True(t, ok)
	require.Equal(t, replicator.StateCompleted, u.State)
	m := c.Nodes[0].Metrics()
	require.EqualValues(t, 1, m.Value(replicator.MetricJobsCompleted))
	require.Zero(t, m.Value(replicator.MetricJobsHoldsLost))
}

// A completion that cannot be stored while the node holds the job is given
// up once the hold lapses: the worker says so and counts it, writes
// nothing more for the job, and the activity monitor's re-enqueue is the
// recovery (the job runs again).
func TestCompletionGivenUpWhenHoldLapses(t *testing.T) {
	logs := &testutil.Logs{}
	cfg := testConfig()
	cfg.JobTimeout = 3 * time.Second // a hold of 1.5 s
	cfg.Logger = logs.Logger()
	docs := &flakyDocs{MemDocs: replicatortest.NewMemDocs()}
	docs.fails.Store(math.MaxInt64)
	cfg.DocUpdater = docs
	c, eng := simCluster(t, 1, cfg, 0, 20*time.Millisecond)
	src := "http://h/once/"
	c.PutDoc("_replicator", "once", repDoc("http://h/once", "http://h/t", false))

	stopped := logs.WaitFor(t, "replication stopped", func(m map[string]any) bool { return m["level"] == "warn" })
	require.Contains(t, stopped["why"], "could not renew its hold")
	require.Contains(t, stopped["why"], "(completed)")
	require.EqualValues(t, 1, c.Nodes[0].Metrics().Value(replicator.MetricJobsHoldsLost))
	tried := docs.calls.Load()
	require.Greater(t, tried, int64(5), "tried while it held the job, not five times")
	require.Equal(t, 1, eng.Starts(src))

	// The run after the re-enqueue crashes (no completion to write): the
	// job runs again, and the first worker tried nothing more meanwhile.
	eng.SetFail(src, fmt.Errorf("%w: could not open %s", engine.ErrDBNotFound, src))
	c.WaitJob("run again after the re-enqueue, and crashed", c.DocJobID("_replicator", "once"),
		func(_ fdbjobs.State, d *replicator.JobData) bool { return d != nil && d.ErrorCount >= 1 })
	require.GreaterOrEqual(t, eng.Starts(src), 2)
	require.Equal(t, tried, docs.calls.Load(), "a completion attempted after the hold lapsed")
	_, ok := docs.Get("_replicator", "once")
	require.False(t, ok, "a document state stored")
}
