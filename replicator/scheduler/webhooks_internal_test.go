package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// A user's deliveries hold at most webhookOwnerConcurrency slots; another
// waits for one to be given back, or gives up after its wait; other users
// are not held up; a user with nothing working leaves nothing behind.
func TestHookOwners(t *testing.T) {
	ctx := context.Background()
	var h hookOwners
	for range webhookOwnerConcurrency {
		require.True(t, h.take(ctx, "alice", 0))
	}
	require.False(t, h.take(ctx, "alice", time.Millisecond), "alice's slots are taken")
	require.True(t, h.take(ctx, "bob", 0), "bob is not held up")
	got := make(chan bool)
	go func() { got <- h.take(ctx, "alice", time.Minute) }()
	h.give("alice")
	require.True(t, testutil.Recv(t, got), "a slot given back is taken by the one waiting")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.False(t, h.take(cancelled, "alice", time.Minute), "a stopped delivery waits no more")
	for range webhookOwnerConcurrency {
		h.give("alice")
	}
	h.give("bob")
	require.Empty(t, h.sems, "nothing kept for users with nothing working")
}
