package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
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
	_, _, _, most := eng.Stats()
	require.Equal(t, 1, most, "the job ran on two nodes at once")
	stopped := logs.WaitFor(t, "replication stopped", func(m map[string]any) bool {
		return m["node"] == c.Nodes[from].Config().NodeName && m["level"] == "warn"
	})
	require.Contains(t, stopped["why"], "could not renew its hold")
	require.EqualValues(t, 1, c.Nodes[from].Metrics().Value(replicator.MetricJobsHoldsLost))
}
