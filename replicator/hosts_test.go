package replicator

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// Two nodes' pacers share a host's budget of requests per second, on one
// clock: a second's worth goes at once, whichever node asks; then a
// request waits for the next token (a tenth of a second at 10 a second),
// and a request of another host has a bucket of its own. Without a
// budget nothing waits. The budget per host and user is shared likewise
// by the requests of one user to one host; another user's, or those
// without one, are not held by it.
func TestHostPacerSharesABudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
	db := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{Clock: clock})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	log := zerolog.Nop()
	m := NewMetrics()
	a, b := NewHostPacer(s, clock, &log, m), NewHostPacer(s, clock, &log, m)
	require.NoError(t, a.Wait(ctx, "http://h", "alice"), "no budget: no wait")

	// wait reports whether p lets a request to host go without the clock
	// moving: it returns, or it sleeps on the clock (then the clock is
	// moved on until it returns, and false is reported).
	wait := func(p *HostPacer, host, user string) bool {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- p.Wait(ctx, host, user) }()
		slept := make(chan struct{})
		go func() {
			if clock.BlockUntilContext(ctx, 1) == nil {
				close(slept)
			}
		}()
		select {
		case err := <-done:
			require.NoError(t, err)
			return true
		case <-slept:
		}
		for range 1000 { // 10 s of the clock at most
			clock.Advance(10 * time.Millisecond)
			select {
			case err := <-done:
				require.NoError(t, err)
				return false
			case <-time.After(5 * time.Millisecond):
			}
		}
		require.FailNow(t, "a request waited over 10 s of the clock")
		return false
	}
	const rate = 10
	// free counts the requests of user to host that go at once, from
	// either node, before one waits.
	free := func(host, user string) int {
		t.Helper()
		n := 0
		for i := 0; ; i++ {
			if !wait([]*HostPacer{a, b}[i%2], host, user) {
				return n
			}
			n++
		}
	}
	secondsWorth := func(n int, what string) {
		t.Helper()
		if _, faults, _ := faultkv.FromEnv(); faults || kvtest.OnFoundationDB(t) {
			// A take retried after commit_unknown_result takes its tokens
			// twice: fewer go, never more.
			require.LessOrEqual(t, n, rate, what)
		} else {
			require.Equal(t, rate, n, what)
		}
	}
	a.SetRates(rate, 0)
	b.SetRates(rate, 0)
	at := clock.Now()
	secondsWorth(free("http://h", "alice"), "a second's worth at once, shared by the two nodes")
	require.GreaterOrEqual(t, clock.Since(at), 100*time.Millisecond, "the next one a tenth of a second later")
	require.True(t, wait(a, "http://other:5984", "alice"), "another host's bucket is its own")

	a.SetRates(0, rate)
	b.SetRates(0, rate)
	at = clock.Now()
	secondsWorth(free("http://u", "alice"), "a second's worth of one user's at once, shared by the two nodes")
	require.GreaterOrEqual(t, clock.Since(at), 100*time.Millisecond, "the next one a tenth of a second later")
	require.True(t, wait(a, "http://u", "bob"), "another user's bucket is their own")
	for range 2 * rate {
		require.True(t, wait(b, "http://u", ""), "a request without a user is not held by a budget per user")
	}
	require.EqualValues(t, 2, m.Value(MetricBudgetRequestWaits), "the requests that waited: one per budget")
}
