package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The views show a running job's counters as its run reads and writes
// documents, between its heartbeats and checkpoints (an hour apart here):
// the node writes the counters that changed every ProgressInterval. Once
// the run ends the job's data has its last counters, and the progress is
// removed.
func TestProgressShownBetweenHeartbeats(t *testing.T) {
	cfg := testConfig()
	cfg.Interval, cfg.StatsUpdateInterval, cfg.JobTimeout = time.Hour, time.Hour, 3*time.Hour
	cfg.ProgressInterval = 10 * time.Millisecond
	c, eng := simCluster(t, 1, cfg, time.Hour, time.Hour)
	ctx := context.Background()
	const src = "http://h/s/"
	c.PutDoc("_replicator", "d", repDoc(src, "http://h/t", true))
	waitStarts(t, eng, "the job running", func() bool { return eng.Starts(src) == 1 })
	node := c.Nodes[0]

	var done int64
	for _, docs := range []int64{7, 100, 1000} {
		eng.Work(src, docs-done)
		done = docs
		testutil.WaitUntil(t, &node.TestSignals.Progress, "the counters written", func(int64) bool {
			d, err := c.Plane.SchedulerDoc(ctx, "_replicator", "d")
			require.NoError(t, err)
			return stats(t, d.Info).DocsWritten == docs
		})
		d, err := c.Plane.SchedulerDoc(ctx, "_replicator", "d")
		require.NoError(t, err)
		require.Equal(t, replicator.StateRunning, d.State)
		require.EqualValues(t, docs, stats(t, d.Info).DocsRead)
		jobs, err := c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: -1})
		require.NoError(t, err)
		require.Len(t, jobs.Jobs, 1)
		require.EqualValues(t, docs, stats(t, jobs.Jobs[0].Info).DocsWritten)
		tasks, err := c.Plane.ActiveTasks(ctx, api.Admin())
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		require.EqualValues(t, docs, tasks[0].DocsWritten)
		// The job's own data still has the counters of its start.
		x, _, err := c.Store.Job(ctx, nil, c.DocJobID("_replicator", "d"))
		require.NoError(t, err)
		require.Zero(t, x.Stats.DocsWritten)
	}

	// The node stops: the job's data gets the run's last counters, and the
	// progress the run left is not shown with any other run: here a
	// stale value, written with the stopped run's name and more documents,
	// shows neither while the job waits nor once another node runs it.
	jobID := c.DocJobID("_replicator", "d")
	before, _, err := c.Store.Job(ctx, nil, jobID)
	require.NoError(t, err)
	node.Stop()
	x, _, err := c.Store.Job(ctx, nil, jobID)
	require.NoError(t, err)
	require.EqualValues(t, done, x.Stats.DocsWritten)
	stale := &replicator.RunProgress{Node: before.Node, Start: before.LastStart, At: x.LastUpdated + 1, Stats: engine.Stats{DocsRead: 5000, DocsWritten: 5000}}
	require.NoError(t, c.Store.Progress().Write(ctx, []replicator.ProgressWrite{{JobID: jobID, Progress: stale}}))
	d, err := c.Plane.SchedulerDoc(ctx, "_replicator", "d")
	require.NoError(t, err)
	require.Equal(t, replicator.StatePending, d.State)
	require.EqualValues(t, done, stats(t, d.Info).DocsWritten)
	c.AddNode("node1")
	c.WaitJob("the job running on node1", jobID, runningOn("node1"))
	d, err = c.Plane.SchedulerDoc(ctx, "_replicator", "d")
	require.NoError(t, err)
	require.EqualValues(t, done, stats(t, d.Info).DocsWritten)
}

// stats decodes the info of a view's row (null: zero counters).
func stats(t *testing.T, info json.RawMessage) engine.Stats {
	t.Helper()
	var s engine.Stats
	if len(info) > 0 {
		require.NoError(t, json.Unmarshal(info, &s))
	}
	return s
}
