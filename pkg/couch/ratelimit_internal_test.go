package couch

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func newTestLimiter(t *testing.T, cfg RateLimiterConfig) (*RateLimiter, *clockwork.FakeClock) {
	t.Helper()
	clk := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
	cfg.Clock = clk
	l, err := NewRateLimiter(cfg)
	require.NoError(t, err)
	return l, clk
}

func TestRateLimiterAIMD(t *testing.T) {
	l, clk := newTestLimiter(t, RateLimiterConfig{})
	const k = "http://h GET"
	require.Zero(t, l.Interval(k))
	l.Success(k) // no entry: nothing to do
	require.Zero(t, l.Interval(k))

	// Multiplicative increase from the 20 ms base: 24, 29, 35, 42 ms ...
	want := []time.Duration{24, 29, 35, 42, 50, 60}
	for _, w := range want {
		clk.Advance(100 * time.Millisecond)
		l.Failure(k)
		require.Equal(t, w*time.Millisecond, l.Interval(k))
	}
	// Updates closer than 80 ms are ignored (a burst counts once).
	clk.Advance(10 * time.Millisecond)
	l.Failure(k)
	require.Equal(t, 60*time.Millisecond, l.Interval(k))

	// Additive decrease: -20 ms at <= 100 ms, clamped to the base, then gone.
	clk.Advance(100 * time.Millisecond)
	l.Success(k)
	require.Equal(t, 40*time.Millisecond, l.Interval(k))
	clk.Advance(100 * time.Millisecond)
	l.Success(k)
	require.Equal(t, 20*time.Millisecond, l.Interval(k))
	clk.Advance(100 * time.Millisecond)
	l.Success(k)
	require.Zero(t, l.Interval(k))

	// Larger steps above 100 ms, 1 s and 10 s.
	for _, tc := range []struct{ start, after time.Duration }{
		{150 * time.Millisecond, 110 * time.Millisecond},
		{2 * time.Second, 1900 * time.Millisecond},
		{20 * time.Second, 19 * time.Second},
	} {
		l.mu.Lock()
		l.entries[k] = &rateEntry{interval: tc.start, updated: clk.Now()}
		l.mu.Unlock()
		clk.Advance(100 * time.Millisecond)
		l.Success(k)
		require.Equal(t, tc.after, l.Interval(k), "from %v", tc.start)
	}

	// A success long after the last update first decays by 2 ms per ms.
	l.mu.Lock()
	l.entries[k] = &rateEntry{interval: 5 * time.Second, updated: clk.Now()}
	l.mu.Unlock()
	clk.Advance(2 * time.Second) // -4 s to 1 s, then -40 ms
	l.Success(k)
	require.Equal(t, 960*time.Millisecond, l.Interval(k))

	// Keys are independent and forgotten after ForgetAfter.
	l.Failure("other")
	require.Equal(t, 960*time.Millisecond, l.Interval(k))
	clk.Advance(RateForgetAfterDefault)
	require.Equal(t, 960*time.Millisecond, l.Interval(k), "not before ForgetAfter beyond the interval")
	clk.Advance(time.Second)
	require.Zero(t, l.Interval(k))
}

func TestRateLimiterMaxBackoff(t *testing.T) {
	l, clk := newTestLimiter(t, RateLimiterConfig{MaxInterval: 100 * time.Millisecond})
	const k = "http://h POST"
	n := 0
	for l.Interval(k) < 100*time.Millisecond {
		require.Less(t, n, 100, "the interval must reach the max")
		clk.Advance(time.Second)
		l.Failure(k)
		n++
	}
	require.Equal(t, 100*time.Millisecond, l.Interval(k), "capped")
	require.ErrorIs(t, l.Wait(context.Background(), k), ErrMaxBackoff)
	require.NoError(t, l.Wait(context.Background(), "http://h GET"), "other keys unaffected")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l2, _ := newTestLimiter(t, RateLimiterConfig{})
	l2.Failure(k)
	require.ErrorIs(t, l2.Wait(ctx, k), context.Canceled)
}

// TestRateLimiterWaitsOnClock checks that Wait sleeps the key's interval on
// the limiter's clock, and not a moment less.
func TestRateLimiterWaitsOnClock(t *testing.T) {
	l, clk := newTestLimiter(t, RateLimiterConfig{})
	const k = "http://h GET"
	l.Failure(k)
	require.Equal(t, 24*time.Millisecond, l.Interval(k))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- l.Wait(ctx, k) }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1))
	clk.Advance(23 * time.Millisecond)
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v before the interval passed", err)
	default: // the timer has not fired: Wait cannot have returned
	}
	clk.Advance(time.Millisecond)
	require.NoError(t, <-waited)
}

// TestRateLimiterReachesMaxWithSlowRequests: a peer that answers 429 only
// after a long time must still drive the interval to the maximum.
func TestRateLimiterReachesMaxWithSlowRequests(t *testing.T) {
	l, clk := newTestLimiter(t, RateLimiterConfig{})
	const k = "http://h GET"
	for n := 0; l.Interval(k) < RateMaxIntervalDefault; n++ {
		require.Less(t, n, 1000)
		clk.Advance(l.Interval(k) + 10*time.Second) // the wait, then a slow 429
		l.Failure(k)
	}
	require.ErrorIs(t, l.Wait(context.Background(), k), ErrMaxBackoff)
}

func TestRateLimiterConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  RateLimiterConfig
		ok   bool
	}{
		{"defaults", RateLimiterConfig{}, true},
		{"small max", RateLimiterConfig{BaseInterval: time.Millisecond, MaxInterval: 10 * time.Millisecond}, true},
		{"negative base", RateLimiterConfig{BaseInterval: -1}, false},
		{"max below base", RateLimiterConfig{BaseInterval: time.Second, MaxInterval: time.Millisecond}, false},
		{"multiplier 1", RateLimiterConfig{Multiplier: 1}, false},
		{"multiplier below 1", RateLimiterConfig{Multiplier: 0.5}, false},
		{"negative min update", RateLimiterConfig{MinUpdateInterval: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRateLimiter(tc.cfg)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidOptions)
			}
		})
	}
}
