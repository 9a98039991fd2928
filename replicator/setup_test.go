package replicator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// Setup gives the rep_jobs queue the configured shards, and leaves them
// alone when asked for none (the command line's local store).
func TestSetupJobShards(t *testing.T) {
	ctx := context.Background()
	db := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	for _, tc := range []struct{ set, want int }{{0, fdbjobs.ShardsDefault}, {64, 64}, {0, 64}, {8, 8}} {
		_, err := s.Setup(ctx, time.Hour, tc.set)
		require.NoError(t, err)
		n, err := jobs.TypeShards(ctx, nil, JobType)
		require.NoError(t, err)
		require.Equal(t, tc.want, n, "after Setup with %d", tc.set)
	}
}
