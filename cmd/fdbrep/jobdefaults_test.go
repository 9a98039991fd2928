package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The [replicator] defaults of the replications' own settings are the
// engine's, and each key reaches the node.
func TestJobDefaultsFromConfig(t *testing.T) {
	got := jobDefaults(config.Default())
	require.Equal(t, replicator.JobDefaults{
		WorkerProcesses: engine.WorkerProcessesDefault, WorkerBatchSize: engine.WorkerBatchSizeDefault,
		HTTPConnections: engine.HTTPConnectionsDefault, ConnectionTimeout: engine.ConnectionTimeoutDefault,
		RetriesPerRequest: engine.RetriesPerRequestDefault, CheckpointInterval: engine.CheckpointIntervalDefault,
	}, got)

	cfg, err := config.FromMap(map[string]map[string]string{"replicator": {
		"checkpoint_interval": "1000", "retries_per_request": "0", "use_bulk_get": "false", "worker_processes": "8",
	}})
	require.NoError(t, err)
	got = jobDefaults(cfg)
	require.Equal(t, time.Second, got.CheckpointInterval)
	require.Equal(t, -1, got.RetriesPerRequest, "0 in the file: no retries")
	require.True(t, got.NoBulkGet)
	require.Equal(t, 8, got.WorkerProcesses)
	require.Empty(t, cfg.Warnings(), "checkpoint_interval is a known key now")
}
