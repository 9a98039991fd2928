package replicator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/tuple"
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

// A store written before fair-share usage moved to the job layer keeps it
// under keys 5 to 8: Setup clears them, and only them.
func TestSetupClearsRetiredUsageKeys(t *testing.T) {
	ctx := context.Background()
	s, _, db := setupStore(t)
	retired := []kv.Key{
		s.k.root.Pack(tuple.Tuple{5, "a/_replicator"}), s.k.root.Pack(tuple.Tuple{6, ""}),
		s.k.root.Pack(tuple.Tuple{7}), s.k.root.Pack(tuple.Tuple{8, "token"}),
	}
	kept := s.k.root.Pack(tuple.Tuple{keyEntries, "job"})
	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		for _, k := range append(retired, kept) {
			tr.Set(k, []byte("v"))
		}
		return nil, nil
	})
	require.NoError(t, err)
	_, err = s.Setup(ctx, time.Hour, 0)
	require.NoError(t, err)
	_, err = db.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) {
		for _, k := range retired {
			v, err := tr.Get(k).Get()
			require.NoError(t, err)
			require.Nil(t, v, "retired key %x", k)
		}
		v, err := tr.Get(kept).Get()
		require.NoError(t, err)
		require.NotNil(t, v, "key 9 is the view index's")
		return nil, nil
	})
	require.NoError(t, err)
}
