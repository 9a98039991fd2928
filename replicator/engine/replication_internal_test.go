package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWithDefaults checks that zero tunables take their defaults and that a
// negative retries_per_request means no retries.
func TestWithDefaults(t *testing.T) {
	rep := Replication{}.WithDefaults()
	require.Equal(t, WorkerProcessesDefault, rep.WorkerProcesses)
	require.Equal(t, WorkerBatchSizeDefault, rep.WorkerBatchSize)
	require.Equal(t, HTTPConnectionsDefault, rep.HTTPConnections)
	require.Equal(t, ConnectionTimeoutDefault, rep.ConnectionTimeout)
	require.Equal(t, CheckpointIntervalDefault, rep.CheckpointInterval)
	require.Equal(t, RetriesPerRequestDefault, rep.RetriesPerRequest)
	require.False(t, rep.DisableCheckpoints)

	require.Zero(t, Replication{RetriesPerRequest: -1}.WithDefaults().RetriesPerRequest)
	set := Replication{WorkerProcesses: 2, WorkerBatchSize: 10, RetriesPerRequest: 3}.WithDefaults()
	require.Equal(t, 2, set.WorkerProcesses)
	require.Equal(t, 10, set.WorkerBatchSize)
	require.Equal(t, 3, set.RetriesPerRequest)
}
