package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// blockUntil waits until n timers and tickers wait on clock.
func blockUntil(t *testing.T, clock *clockwork.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, n), "waiting for %d timers", n)
}

// jobsOf counts the jobs of database instance dbUUID in the store (a full
// fold: a test's check, not something the product does).
func jobsOf(t *testing.T, s *replicator.Store, dbUUID string) int {
	t.Helper()
	n := 0
	require.NoError(t, s.FoldJobs(context.Background(), func(_ string, _ fdbjobs.State, d *replicator.JobData) error {
		if d.DBUUID == dbUUID {
			n++
		}
		return nil
	}))
	return n
}

// Deleting a _replicator database with a thousand documents: its
// documents leave the views at once, every one of its jobs is removed
// within one interval of a node (not a hundred per cleanup pass, while
// dozens of them heartbeat), and the ones running halt at their next
// heartbeat; another database's job goes on.
func TestDeletingADatabaseStopsAllItsJobs(t *testing.T) {
	const docs = 1000 // ten times what one removal transaction used to take
	// Dozens of jobs running per node, heartbeating ten times a second;
	// churn kept low, as in production (with many more jobs pending than
	// running, every accepted job is one the removal may conflict with).
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 5, 2
	cfg.StatsUpdateInterval = 200 * time.Millisecond
	c, _ := simCluster(t, 0, cfg, 0, 0)
	ctx := context.Background()
	big := map[string]map[string]any{}
	for i := 0; i < docs; i++ {
		big[fmt.Sprintf("d%04d", i)] = repDoc(fmt.Sprintf("http://h/big%d", i), "http://h/t", true)
	}
	c.PutDoc("_replicator", "keep", repDoc("http://h/keep", "http://h/t", true)) // first in the queue
	c.PutDocs("big/_replicator", big)
	c.AddNode("node0")
	c.AddNode("node1")
	c.WaitDocState("_replicator", "keep", replicator.StateRunning)
	runningBig := func() int {
		tasks, err := c.Plane.ActiveTasks(ctx, api.Admin())
		require.NoError(t, err)
		n := 0
		for _, task := range tasks {
			if task.Database != nil && *task.Database == "big/_replicator" {
				n++
			}
		}
		return n
	}
	testutil.WaitUntil(t, &c.Nodes[0].TestSignals.Rescheduled, "jobs of the big database running",
		func(int64) bool { return runningBig() > 0 })
	list, err := c.Plane.SchedulerDocs(ctx, "big/_replicator", nil, api.PageQuery{Limit: 0})
	require.NoError(t, err)
	require.Equal(t, docs, list.TotalRows)
	oldUUID := c.DocJobID("big/_replicator", "")[:32]
	require.Equal(t, docs, jobsOf(t, c.Store, oldUUID))

	c.DeleteDB("big/_replicator")
	list, err = c.Plane.SchedulerDocs(ctx, "big/_replicator", nil, api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Zero(t, list.TotalRows, "the documents left the views with their database")
	require.Empty(t, list.Docs)
	list, err = c.Plane.SchedulerDocs(ctx, "", nil, api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Equal(t, 1, list.TotalRows)
	require.Equal(t, "keep", list.Docs[0].DocID)

	// One whole interval step of each node after the deletion (the node
	// that took the database removes it all in its step; the other passes
	// it by).
	start := time.Now()
	for i := range c.Nodes {
		c.WaitIntervals(i, 2)
	}
	t.Logf("removed %d jobs in %v", docs, time.Since(start))
	require.Zero(t, jobsOf(t, c.Store, oldUUID), "every job removed within one interval")
	require.Zero(t, runningBig())
	jobs, err := c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Equal(t, 1, jobs.TotalRows)
	c.WaitDocState("_replicator", "keep", replicator.StateRunning) // (rotated while the big ones waited)
	testutil.WaitUntil(t, &c.Nodes[0].TestSignals.Rescheduled, "the deleted database's running jobs halted",
		func(int64) bool { return c.Nodes[0].Stats().Running+c.Nodes[1].Stats().Running == 1 })
	require.GreaterOrEqual(t, c.Nodes[0].Metrics().Value(replicator.MetricJobsRemoves)+c.Nodes[1].Metrics().Value(replicator.MetricJobsRemoves), int64(1))
}

// A database deleted and re-created under the same name never receives
// an old job's state: a one-shot job of the deleted database halts as its
// node hears of the deletion (the watch on the database's registration,
// worker.watchRun), before it completes, and writes nothing into the new
// database's document of the same id, and a new job with its replication
// id is not refused as a duplicate of the old one. (A job that completes
// without noticing the deletion is fenced as well: Lifecycle writes a
// document's terminal state only while the document is its job's,
// replicator's TestTerminalStateSkipsRecreatedDatabase.)
func TestRecreatedDatabaseNeverGetsOldState(t *testing.T) {
	clock := clockwork.NewFakeClock()
	eng := simengine.New()
	eng.Clock, eng.OneShot, eng.CheckpointEvery = clock, time.Minute, time.Hour
	eng.Started.Init()
	cfg := testConfig()
	// No cleanup and no heartbeat during the test: the old run stops on
	// the deletion's watch alone.
	cfg.Interval, cfg.StatsUpdateInterval, cfg.JobTimeout = time.Hour, time.Hour, 3*time.Hour
	c := newCluster(t, 1, eng, cfg)
	const db = "g/_replicator"
	c.PutDoc(db, "zz", repDoc("http://h/once", "http://h/t", false))
	oldJob := c.DocJobID(db, "zz")
	waitStarts(t, eng, "the one-shot run", func() bool { return eng.Starts("http://h/once/") == 1 })
	blockUntil(t, clock, 2)         // the run's ticker and end timer
	clock.Advance(30 * time.Second) // the old run is half way

	c.DeleteDB(db)
	testutil.Eventually(t, "the old run halted", func() bool {
		_, _, running, _ := eng.Stats()
		return running == 0
	})
	c.CreateDB(db)
	c.PutDoc(db, "zz", repDoc("http://h/once", "http://h/t", false))
	newJob := c.DocJobID(db, "zz")
	require.NotEqual(t, oldJob, newJob)
	waitStarts(t, eng, "the new job's run", func() bool { return eng.Starts("http://h/once/") == 2 })
	c.WaitJob("the new job running", newJob, func(st fdbjobs.State, d *replicator.JobData) bool {
		return st == fdbjobs.Running && d.State == replicator.StateRunning
	})
	_, updated := c.Docs.Get(db, "zz")
	require.False(t, updated, "the old job wrote into the re-created database's document")

	// The new run ends: its job completes and records it.
	blockUntil(t, clock, 2)
	clock.Advance(time.Minute)
	c.WaitJob("the new job completed", newJob, func(st fdbjobs.State, d *replicator.JobData) bool {
		return st == fdbjobs.Finished && d.State == replicator.StateCompleted
	})
	u, ok := c.Docs.Get(db, "zz")
	require.True(t, ok)
	require.Equal(t, replicator.StateCompleted, u.State)
}
