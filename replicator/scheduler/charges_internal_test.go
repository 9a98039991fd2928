package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator"
)

// Run time a flush could not write is kept for the next one, and none is
// written twice; a roll-up keeps the table it read, and a failed one the
// last.
func TestChargesFlushAndRollUp(t *testing.T) {
	db := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	store := replicator.NewStore(db, jobs, nil)
	c := newCharges()
	c.add("a/_replicator", 300)
	c.add("a/_replicator", 200)
	c.add("b/_replicator", 100)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, c.flush(cancelled, store))
	require.Equal(t, map[string]int64{"a/_replicator": 500, "b/_replicator": 100}, c.accrued, "kept after a failed write")
	c.add("b/_replicator", 50)

	ctx := context.Background()
	require.NoError(t, c.flush(ctx, store))
	require.Empty(t, c.accrued)
	require.NoError(t, c.flush(ctx, store), "nothing to write")

	now := time.UnixMilli(1_700_000_000_000)
	require.NoError(t, c.rollUp(ctx, store, now, time.Minute, 0.5))
	usage := c.shares().Usage
	require.Equal(t, 500.0, usage["a/_replicator"], "each charge counted once")
	require.Equal(t, 150.0, usage["b/_replicator"])

	require.Error(t, c.rollUp(cancelled, store, now.Add(time.Minute), time.Minute, 0.5))
	require.Equal(t, usage, c.shares().Usage, "a failed roll-up keeps the last table")
}
