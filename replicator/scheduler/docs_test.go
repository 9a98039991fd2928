package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// A _replicator document's job through its life: started, left alone by
// updates that keep the replication, restarted by a change, failed when
// the document does not parse, shown by the views, removed with the
// document or its database.
func TestDocWrittenLifecycle(t *testing.T) {
	// A checkpoint a second: the restarting write below reads the job's
	// row, which each checkpoint writes. With one every 50 ms it conflicted
	// at every attempt for a minute on a loaded FoundationDB (an attempt
	// took longer than 50 ms: CI's FDB pass).
	c, eng := simCluster(t, 1, testConfig(), time.Second, 0)
	ctx := context.Background()
	doc := repDoc("http://h/a", "http://h/b", true)
	c.PutDoc("_replicator", "d", doc)
	c.WaitDocState("_replicator", "d", replicator.StateRunning)
	// (The job is running from its start transaction; the engine starts
	// right after.)
	waitStarts(t, eng, "engine started", func() bool { return eng.Starts("http://h/a/") == 1 })

	// An update that keeps the replication (owner added, key order) leaves
	// the running job alone.
	doc["owner"] = "bob"
	c.PutDoc("_replicator", "d", doc)
	require.Equal(t, replicator.StateRunning, c.DocState("_replicator", "d").State)
	require.Equal(t, 1, eng.Starts("http://h/a/"))

	// A changed replication restarts the job.
	doc["worker_processes"] = 2
	c.PutDoc("_replicator", "d", doc)
	waitStarts(t, eng, "restart", func() bool { return eng.Starts("http://h/a/") == 2 })
	c.WaitDocState("_replicator", "d", replicator.StateRunning)

	// A document that bypassed validation fails, visibly.
	c.PutDoc("_replicator", "bad", map[string]any{"source": "http://h/x"})
	d := c.WaitDocState("_replicator", "bad", replicator.StateFailed)
	require.Contains(t, string(d.Info), "Missing `target` field")
	failed, err := c.Plane.SchedulerDocs(ctx, "_replicator", []string{replicator.StateFailed}, api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Equal(t, 1, failed.TotalRows, "%+v", failed.Docs)
	require.Equal(t, "bad", failed.Docs[0].DocID)
	_, err = c.Plane.SchedulerDocs(ctx, "_replicator", []string{"triggered"}, api.PageQuery{Limit: -1})
	require.ErrorIs(t, err, replicator.ErrBadQuery)

	// _active_tasks and _scheduler/jobs show the running job.
	tasks, err := c.Plane.ActiveTasks(ctx, api.Admin())
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "replication", tasks[0].Type)
	require.Equal(t, "http://h/a/", tasks[0].Source)
	jobs, err := c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, jobs.TotalRows)
	require.Equal(t, "d", *jobs.Jobs[0].DocID)
	require.NotNil(t, tasks[0].PID, "pid is a string: Fauxton reads it as one")
	require.Equal(t, jobs.Jobs[0].JobID, *tasks[0].PID)
	b, err := json.Marshal(jobs)
	require.NoError(t, err)
	require.Contains(t, string(b), `"history":[{"timestamp":`)

	// Deleting the document removes the job; the running worker halts.
	c.PutDoc("_replicator", "d", nil)
	_, err = c.Plane.SchedulerDoc(ctx, "_replicator", "d")
	require.ErrorIs(t, err, replicator.ErrNotFound)
	testutil.WaitUntil(t, &c.Nodes[0].TestSignals.Rescheduled, "worker halted",
		func(int64) bool { return c.Nodes[0].Stats().Running == 0 })

	// Deleting the database removes its jobs; re-creating it starts afresh.
	c.PutDoc("a/_replicator", "x", repDoc("http://h/c", "http://h/d", true))
	c.WaitDocState("a/_replicator", "x", replicator.StateRunning)
	_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, c.Plane.DBDeleted(ctx, tr, "a/_replicator")
	})
	require.NoError(t, err)
	_, err = c.Plane.SchedulerDoc(ctx, "a/_replicator", "x")
	require.ErrorIs(t, err, replicator.ErrNotFound)
	_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, c.Plane.DBCreated(ctx, tr, "a/_replicator")
	})
	require.NoError(t, err)
	c.PutDoc("a/_replicator", "x", repDoc("http://h/c", "http://h/d", true))
	c.WaitDocState("a/_replicator", "x", replicator.StateRunning)

	fe, node := c.Plane.Metrics(), c.Nodes[0].Metrics()
	// Counters count the commits known to have happened: a single one
	// that an injected commit_unknown_result hid stays uncounted.
	_, faults, _ := faultkv.FromEnv()
	testutil.Eventually(t, "the control plane's counters and a checkpoint", func() bool {
		return fe.Value(replicator.MetricJobsAdds) > 0 && node.Value(replicator.MetricCheckpointsSuccess) > 0 &&
			(faults || fe.Value(replicator.MetricJobsRemoves) > 0 && fe.Value(replicator.MetricDocsDBsDeleted) > 0)
	})
	require.Positive(t, c.Nodes[0].Metrics().Value(replicator.MetricJobsStarts))
}

func TestNodeLeavesNoGoroutines(t *testing.T) {
	testutil.NoLeaks(t)
	eng := simengine.New()
	c := newCluster(t, 2, eng, testConfig())
	c.PutDoc("_replicator", "d", repDoc("http://h/a", "http://h/b", true))
	c.WaitDocState("_replicator", "d", replicator.StateRunning)
}
