package control_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// stallOf is the stall of a view's info (nil for none).
func stallOf(t *testing.T, info json.RawMessage) *api.StallInfo {
	t.Helper()
	var i struct {
		Stall *api.StallInfo `json:"stall"`
	}
	require.NoError(t, json.Unmarshal(info, &i))
	return i.Stall
}

// Issue 41 item 4: with no replication node alive the views say why a job
// waits, and POST /_replicate answers once its timeout passes instead of
// waiting for ever; while a node is alive it waits as long as the
// replication takes; a job whose node died shows it until the activity
// monitor puts it back.
func TestNoReplicationNode(t *testing.T) {
	cfg := replicatortest.Config()
	cfg.Interval = time.Hour   // no balancing: each job stays where it runs
	cfg.JobTimeout = time.Hour // a dead node's job stays running in the store
	cfg.ReplicateNoNodeTimeout = 50 * time.Millisecond
	eng := simengine.New()
	eng.OneShot = 10 * cfg.ReplicateNoNodeTimeout
	c := replicatortest.NewBalancedCluster(t, 0, eng, cfg)
	ctx := context.Background()
	admin := replicator.UserCtx{Name: "adm", Roles: []string{"_admin"}}
	members := cluster.NewStore(c.DB, nil)

	// No replication node has ever been alive: the job is stalled since it
	// was added.
	c.PutDoc("_replicator", "d", map[string]any{"source": "http://h/s", "target": "http://h/t", "continuous": true})
	doc := c.DocState("_replicator", "d")
	require.Equal(t, replicator.StatePending, doc.State)
	stall := stallOf(t, doc.Info)
	require.NotNil(t, stall, "a pending job with no replication node shows a stall")
	require.Equal(t, engine.StallNoReplicationNode, stall.Reason)
	require.Equal(t, doc.StartTime, stall.Since)
	require.Contains(t, stall.Detail, "the job starts when one joins")

	// POST /_replicate answers timeout once it waited, naming the cause;
	// the job stays, pending and stalled.
	rep := map[string]any{"source": "http://h/p", "target": "http://h/q", "continuous": true}
	_, timeout := c.Plane.Replicate(ctx, replicateBody(t, rep), admin)
	require.ErrorIs(t, timeout, replicator.ErrTimeout)
	require.Contains(t, replicator.Reason(timeout), "no replication node is alive in the cluster; the replication stays pending as job ")
	list, err := c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Len(t, list.Jobs, 2, "the POST's job stays")
	for _, j := range list.Jobs {
		require.Equal(t, replicator.StatePending, j.State)
		require.Equal(t, engine.StallNoReplicationNode, stallOf(t, j.Info).Reason)
		if j.DocID == nil {
			require.Contains(t, replicator.Reason(timeout), "job "+j.JobID+" ")
		}
	}

	// A node joins: the jobs run, without a stall, and a one-shot POST
	// that lasts many timeouts gets its outcome.
	c.AddNode("node0")
	doc = c.WaitDocState("_replicator", "d", replicator.StateRunning)
	require.Nil(t, stallOf(t, doc.Info))
	o, err := c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"source": "http://h/o", "target": "http://h/q"}), admin)
	require.NoError(t, err, "a node is alive: the POST waits for the end")
	require.Equal(t, api.Completed, o.Outcome)

	// Another node joins, and node0 dies: its job shows node_down, naming
	// it, since its last heartbeat, until the activity monitor puts it
	// back (an hour here).
	c.AddNode("node1")
	c.Kill(0)
	last0, ok, err := members.Member(ctx, "node0")
	require.NoError(t, err)
	require.True(t, ok, "killed, node0 did not leave")
	testutil.WaitUntil(t, &c.Members[1].TestSignals.Beat, "a heartbeat of node1 after node0's record expired",
		func(expires int64) bool { return expires-replicatortest.NodeTimeout.Milliseconds() > last0.Expires })
	doc = c.DocState("_replicator", "d")
	require.Equal(t, replicator.StatePending, doc.State)
	require.Nil(t, doc.Node)
	stall = stallOf(t, doc.Info)
	require.NotNil(t, stall, "a job on a dead node shows a stall")
	require.Equal(t, engine.StallNodeDown, stall.Reason)
	require.Contains(t, stall.Detail, "node node0, which ran the job")
	require.Equal(t, replicator.FormatMillis(last0.Seen), stall.Since)

	// node1 dies too: no replication node is alive, since node1's last
	// heartbeat.
	c.Kill(1)
	last1, ok, err := members.Member(ctx, "node1")
	require.NoError(t, err)
	require.True(t, ok)
	testutil.Eventually(t, "node1's record expired", func() bool {
		return stallOf(t, c.DocState("_replicator", "d").Info).Reason == engine.StallNoReplicationNode
	})
	stall = stallOf(t, c.DocState("_replicator", "d").Info)
	require.Equal(t, replicator.FormatMillis(last1.Seen), stall.Since)
	require.Contains(t, stall.Detail, "node node0, which ran the job")
	_, err = c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"source": "http://h/x", "target": "http://h/q"}), admin)
	require.ErrorIs(t, err, replicator.ErrTimeout)
	require.Contains(t, replicator.Reason(err), "(the last one was seen at "+replicator.FormatMillis(last1.Seen)+")")
}
