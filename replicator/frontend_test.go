package replicator

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestDocWrittenLifecycle(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	ctx := context.Background()
	doc := repDoc("http://h/a", "http://h/b", true)
	c.putDoc("_replicator", "d", doc)
	c.waitDocState("_replicator", "d", StateRunning)
	// (The job is running from its start transaction; the engine starts
	// right after.)
	waitFor(t, "engine started", func() bool { return eng.startsOf("http://h/a/") == 1 })

	// An update that keeps the replication (owner added, key order) leaves
	// the running job alone.
	doc["owner"] = "bob"
	c.putDoc("_replicator", "d", doc)
	require.Equal(t, StateRunning, c.docState("_replicator", "d").State)
	require.Equal(t, 1, eng.startsOf("http://h/a/"))

	// A changed replication restarts the job.
	doc["worker_processes"] = 2
	c.putDoc("_replicator", "d", doc)
	waitFor(t, "restart", func() bool { return eng.startsOf("http://h/a/") == 2 })
	c.waitDocState("_replicator", "d", StateRunning)

	// A document that bypassed validation fails, visibly.
	c.putDoc("_replicator", "bad", map[string]any{"source": "http://h/x"})
	d := c.waitDocState("_replicator", "bad", StateFailed)
	require.Contains(t, string(d.Info), "Missing `target` field")
	failed, err := c.fe.SchedulerDocs(ctx, "_replicator", "", []string{StateFailed}, -1, 0)
	require.NoError(t, err)
	require.Equal(t, 1, failed.TotalRows, "%+v", failed.Docs)
	require.Equal(t, "bad", failed.Docs[0].DocID)
	_, err = c.fe.SchedulerDocs(ctx, "_replicator", "", []string{"triggered"}, -1, 0)
	require.ErrorIs(t, err, ErrBadQuery)

	// _active_tasks and _scheduler/jobs show the running job.
	tasks, err := c.fe.ActiveTasks(ctx)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "replication", tasks[0].Type)
	require.Equal(t, "http://h/a/", tasks[0].Source)
	jobs, err := c.fe.SchedulerJobs(ctx, 10, 0)
	require.NoError(t, err)
	require.Equal(t, 1, jobs.TotalRows)
	require.Equal(t, "d", *jobs.Jobs[0].DocID)
	b, err := json.Marshal(jobs)
	require.NoError(t, err)
	require.Contains(t, string(b), `"history":[{"timestamp":`)

	// Deleting the document removes the job; the running worker halts.
	c.putDoc("_replicator", "d", nil)
	_, err = c.fe.SchedulerDoc(ctx, "_replicator", "d")
	require.ErrorIs(t, err, ErrNotFound)
	waitFor(t, "worker halted", func() bool { return c.nodes[0].Stats().Running == 0 })

	// Deleting the database removes its jobs; re-creating it starts afresh.
	c.putDoc("a/_replicator", "x", repDoc("http://h/c", "http://h/d", true))
	c.waitDocState("a/_replicator", "x", StateRunning)
	_, err = c.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, c.fe.DBDeleted(ctx, tr, "a/_replicator")
	})
	require.NoError(t, err)
	_, err = c.fe.SchedulerDoc(ctx, "a/_replicator", "x")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, c.fe.DBCreated(ctx, tr, "a/_replicator")
	})
	require.NoError(t, err)
	c.putDoc("a/_replicator", "x", repDoc("http://h/c", "http://h/d", true))
	c.waitDocState("a/_replicator", "x", StateRunning)

	m := map[string]int64{}
	for _, x := range c.fe.Metrics() {
		m[x.Name] = x.Value
	}
	require.Positive(t, m[MetricJobsAdds])
	require.Positive(t, m[MetricJobsRemoves])
	require.Positive(t, m[MetricDocsDBsDeleted])
	require.Positive(t, c.nodes[0].m.Value(MetricCheckpointsSuccess))
	require.Positive(t, c.nodes[0].m.Value(MetricJobsStarts))
}

func TestNodeLeavesNoGoroutines(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Run("cluster", func(t *testing.T) {
		eng := newFakeEngine()
		c := newCluster(t, 2, eng, testConfig())
		c.putDoc("_replicator", "d", repDoc("http://h/a", "http://h/b", true))
		c.waitDocState("_replicator", "d", StateRunning)
	})
	goleak.VerifyNone(t, ignore)
}

// The first document write works even when the caller's transaction
// began before the job type was registered (a retry of the caller's loop
// at worst).
func TestDocWrittenRegistersTypeInCallersTransaction(t *testing.T) {
	c := newCluster(t, 0, newFakeEngine(), testConfig())
	ctx := context.Background()
	doc, _ := json.Marshal(repDoc("http://h/a", "http://h/b", true))
	_, err := c.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if _, err := tr.GetReadVersion().Get(); err != nil {
			return nil, err
		}
		return nil, c.fe.DocWritten(ctx, tr, "_replicator", "d", doc)
	})
	require.NoError(t, err)
	require.Equal(t, StatePending, c.docState("_replicator", "d").State)
}
