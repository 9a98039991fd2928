package fdbjobs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// Jobs whose rows are large keep the activity monitor's and the
// notifier's transactions under FoundationDB's advised 1 MB: a batch ends
// at its bytes, not at its job count (which starts at BatchSize, 1000).
func TestBigRowsKeepBackgroundBatchesInBudget(t *testing.T) {
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true, Budget: &kv.Budget{Bytes: 1 << 20}})
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
	c, err := New(db, Config{Clock: clock, NotifierHoldoff: time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	t.Cleanup(c.Stop)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, t1, 2*time.Second))

	const jobs = 40 // 40 × 60 kB = 2.4 MB of rows
	big := `{"pad":"` + strings.Repeat("x", 60_000) + `"}`
	for i := range jobs {
		require.NoError(t, c.Add(ctx, nil, t1, fmt.Sprintf("j%02d", i), raw(big), 0))
	}
	for range jobs {
		_, err := c.Accept(ctx, t1, AcceptOptions{})
		require.NoError(t, err)
	}
	cycles := make(chan int, 100)
	c.hooks.monitorChecked = func(_ string, n int) { cycles <- n }
	require.NoError(t, c.Start(ctx))

	// The notifier reads every subscribed row each round.
	subs := make([]*Subscription, jobs)
	for i := range subs {
		subs[i], _, _, err = c.Subscribe(ctx, nil, t1, fmt.Sprintf("j%02d", i))
		require.NoError(t, err)
	}

	// The workers go silent; the monitor puts every job back.
	require.Zero(t, <-cycles, "the first cycle only reads the activity clock")
	clock.Advance(3 * time.Second)
	require.Equal(t, jobs, <-cycles)
	for _, s := range subs {
		e, err := s.WaitState(ctx, Pending)
		require.NoError(t, err)
		require.JSONEq(t, big, string(e.Data))
	}
}
