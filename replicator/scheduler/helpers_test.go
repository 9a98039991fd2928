package scheduler_test

import (
	"cmp"
	"fmt"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// The package's tests run the scheduler as production does: replication
// nodes taking jobs that the control plane created, on one store, through
// the replicatortest harness; most use the simulated engine.

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

var (
	testConfig = replicatortest.Config
	newCluster = replicatortest.NewCluster
	repDoc     = replicatortest.RepDoc
)

// waitStarts waits for runs to start on eng (whose Started signal is
// initialised) until cond holds.
func waitStarts(t *testing.T, eng *simengine.Engine, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		testutil.WaitUntil(t, &eng.Started, what, func(string) bool { return true })
	}
}

// runningOn is a replicatortest.Cluster.WaitJob condition: the job runs on
// node.
func runningOn(node string) func(fdbjobs.State, *replicator.JobData) bool {
	return func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && d.State == replicator.StateRunning && d.Node == node
	}
}

// simCluster starts n nodes with cfg running the simulated engine, whose
// runs checkpoint every ck and end one-shot runs after oneShot (zero: the
// engine's defaults), with its Started signal on.
func simCluster(t *testing.T, n int, cfg scheduler.Config, ck, oneShot time.Duration) (*replicatortest.Cluster, *simengine.Engine) {
	t.Helper()
	eng := simengine.New()
	eng.CheckpointEvery = cmp.Or(ck, eng.CheckpointEvery)
	eng.OneShot = cmp.Or(oneShot, eng.OneShot)
	eng.Started.Init()
	return newCluster(t, n, eng, cfg), eng
}

// rescheduleNow runs node i's interval step now and waits until it ended.
func rescheduleNow(t *testing.T, c *replicatortest.Cluster, i int) {
	t.Helper()
	n := c.Nodes[i]
	target := n.Stats().Intervals + 1
	n.Reschedule()
	testutil.WaitUntil(t, &n.TestSignals.Rescheduled, fmt.Sprintf("node %d's interval %d", i, target),
		func(step int64) bool { return step >= target })
}
