package scheduler_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// C1 injected below the parser: job data whose tunables would exhaust the
// node (written by an older version, or by hand) fails its own job with
// the bound it breaks, before anything is allocated; the node runs the
// next job as usual.
func TestOversizedJobFailsAlone(t *testing.T) {
	eng := simengine.New()
	c := newCluster(t, 1, eng, testConfig())
	c.PutDoc("_replicator", "ok", repDoc("http://h/ok", "http://h/t", false))
	c.WaitDocState("_replicator", "ok", replicator.StateCompleted)

	spec, err := replicator.ParseSpec([]byte(`{"source":"http://h/dos","target":"http://h/t"}`))
	require.NoError(t, err)
	spec.WorkerProcesses = 100_000_000
	ctx := context.Background()
	u, err := c.Store.ReadRegisteredDB(ctx, "_replicator")
	require.NoError(t, err)
	jobID := replicator.DocJobID(u, "dos")
	_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		d := &replicator.JobData{Rep: spec, DBName: "_replicator", DBUUID: u, DocID: "dos", State: replicator.StatePending}
		return nil, c.Store.AddJob(ctx, tr, jobID, nil, d, 0, c.Config.JobTimeout)
	})
	require.NoError(t, err)

	d := c.WaitDocState("_replicator", "dos", replicator.StateFailed)
	require.Contains(t, string(d.Info), "`worker_processes` must be at most 64")
	require.Zero(t, eng.Starts("http://h/dos/"), "the engine never saw it")
	c.PutDoc("_replicator", "after", repDoc("http://h/after", "http://h/t", false))
	c.WaitDocState("_replicator", "after", replicator.StateCompleted)
}

// A panic in one job's run is contained to that job: it crashes with
// internal_error and the panic as its reason, and the node's other jobs
// run and complete.
func TestPanickingJobCrashesAlone(t *testing.T) {
	eng := simengine.New()
	eng.SetPanic("http://h/boom/", "injected fault")
	c := newCluster(t, 1, eng, testConfig())
	c.PutDoc("_replicator", "boom", repDoc("http://h/boom", "http://h/t", true))
	c.PutDoc("_replicator", "ok", repDoc("http://h/ok", "http://h/t", false))

	d := c.WaitDocState("_replicator", "boom", replicator.StateCrashing)
	require.Contains(t, string(d.Info), "internal_error")
	require.Contains(t, string(d.Info), "injected fault")
	c.WaitDocState("_replicator", "ok", replicator.StateCompleted)
	c.PutDoc("_replicator", "after", repDoc("http://h/after", "http://h/t", false))
	c.WaitDocState("_replicator", "after", replicator.StateCompleted)
}
