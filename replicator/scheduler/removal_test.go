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
)

// A replication deleted or cancelled while it runs stops within the
// store's watch latency, not at its next heartbeat: its document deleted,
// its database deleted, a POST /_replicate cancel, each with heartbeats and
// checkpoints an hour apart. The cancel's answer carries the run's final
// counters. The nodes' running jobs write nothing for an hour: no
// heartbeat (StatsUpdateInterval, Interval and a third of the job timeout
// all an hour or more), and no checkpoint (the engine's period is an
// hour); a run that stops sooner heard of its job's removal through the
// store's watches (worker.watchRun).
func TestRemovalStopsTheRunBeforeItsHeartbeat(t *testing.T) {
	cfg := testConfig()
	cfg.JobTimeout = 3 * time.Hour
	cfg.Interval = time.Hour
	cfg.StatsUpdateInterval = time.Hour
	c, eng := simCluster(t, 1, cfg, time.Hour, time.Hour)
	ctx := context.Background()
	running := func() int {
		_, _, n, _ := eng.Stats()
		return n
	}
	stopped := func(what string) {
		t.Helper()
		testutil.Eventually(t, what, func() bool { return running() == 0 })
	}

	t.Run("document deleted", func(t *testing.T) {
		c.PutDoc("_replicator", "del", repDoc("http://h/del", "http://h/t", true))
		c.WaitDocState("_replicator", "del", replicator.StateRunning)
		waitStarts(t, eng, "the run", func() bool { return running() == 1 })
		c.PutDoc("_replicator", "del", nil)
		stopped("the deleted document's run to stop")
	})

	t.Run("database deleted", func(t *testing.T) {
		c.CreateDB("other/_replicator")
		c.PutDoc("other/_replicator", "d", repDoc("http://h/db", "http://h/t", true))
		c.WaitDocState("other/_replicator", "d", replicator.StateRunning)
		waitStarts(t, eng, "the run", func() bool { return running() == 1 })
		c.DeleteDB("other/_replicator")
		stopped("the deleted database's run to stop")
	})

	t.Run("cancelled", func(t *testing.T) {
		body, err := json.Marshal(map[string]any{"source": "http://h/post", "target": "http://h/t", "continuous": true})
		require.NoError(t, err)
		res, err := c.Plane.Replicate(ctx, body, api.Admin())
		require.NoError(t, err)
		require.Equal(t, api.Running, res.Outcome)
		waitStarts(t, eng, "the run", func() bool { return running() == 1 })
		eng.Work("http://h/post/", 7)
		cancel, err := json.Marshal(map[string]any{"replication_id": res.LocalID, "cancel": true})
		require.NoError(t, err)
		res, err = c.Plane.Replicate(ctx, cancel, api.Admin())
		require.NoError(t, err)
		require.Equal(t, api.Cancelled, res.Outcome)
		require.Empty(t, res.Unconfirmed)
		require.NotNil(t, res.Stopped, "the answer carries the run's final counters")
		require.Equal(t, int64(7), res.Stopped.DocsWritten)
		require.Zero(t, running(), "the run has stopped when the cancel answers")
	})
}
