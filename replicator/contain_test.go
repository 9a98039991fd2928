package replicator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// C1 injected below the parser: job data whose tunables would exhaust the
// node (written by an older version, or by hand) fails its own job with
// the bound it breaks, before anything is allocated; the node runs the
// next job as usual.
func TestOversizedJobFailsAlone(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	c.putDoc("_replicator", "ok", repDoc("http://h/ok", "http://h/t", false))
	c.waitDocState("_replicator", "ok", StateCompleted)

	spec, err := ParseSpec([]byte(`{"source":"http://h/dos","target":"http://h/t"}`))
	require.NoError(t, err)
	spec.WorkerProcesses = 100_000_000
	u, err := c.fe.registeredDB(context.Background(), "_replicator")
	require.NoError(t, err)
	jobID := persistentJobID(u, "dos")
	_, err = c.db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		d := &jobData{Rep: spec, DBName: "_replicator", DBUUID: u, DocID: "dos", State: StatePending}
		return nil, c.fe.addJob(context.Background(), tr, jobID, nil, d)
	})
	require.NoError(t, err)

	d := c.waitDocState("_replicator", "dos", StateFailed)
	require.Contains(t, string(d.Info), "`worker_processes` must be at most 64")
	require.Zero(t, eng.startsOf("http://h/dos/"), "the engine never saw it")
	c.putDoc("_replicator", "after", repDoc("http://h/after", "http://h/t", false))
	c.waitDocState("_replicator", "after", StateCompleted)
}

// A panic in one job's run is contained to that job: it crashes with
// internal_error and the panic as its reason, and the node's other jobs
// run and complete.
func TestPanickingJobCrashesAlone(t *testing.T) {
	eng := newFakeEngine()
	eng.mu.Lock()
	eng.panics["http://h/boom/"] = "injected fault"
	eng.mu.Unlock()
	c := newCluster(t, 1, eng, testConfig())
	c.putDoc("_replicator", "boom", repDoc("http://h/boom", "http://h/t", true))
	c.putDoc("_replicator", "ok", repDoc("http://h/ok", "http://h/t", false))

	d := c.waitDocState("_replicator", "boom", StateCrashing)
	require.Contains(t, string(d.Info), "internal_error")
	require.Contains(t, string(d.Info), "injected fault")
	c.waitDocState("_replicator", "ok", StateCompleted)
	c.putDoc("_replicator", "after", repDoc("http://h/after", "http://h/t", false))
	c.waitDocState("_replicator", "after", StateCompleted)
}
