package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestBackoffFollowsOnError(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		b     kv.Backoff
		codes []int
		want  []time.Duration // with the jitter at its maximum
	}{
		{"doubles up to the max", kv.Backoff{}, []int{1020, 1020, 1020, 1020, 1020, 1020, 1020, 1020, 1020},
			[]time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, 1000 * ms, 1000 * ms}},
		{"max retry delay", kv.Backoff{Max: 25 * ms}, []int{1020, 1020, 1020, 1020}, []time.Duration{10 * ms, 20 * ms, 25 * ms, 25 * ms}},
		{"zero max", kv.Backoff{Max: -1}, []int{1020, 1020, 1007}, []time.Duration{10 * ms, 0, 0}},
		{"too old and future version: fixed, no growth", kv.Backoff{}, []int{1007, 1009, 1007, 1020},
			[]time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms}},
		{"proxy memory limits grow past the max", kv.Backoff{Max: 40 * ms, MaxResourceConstrained: 100 * ms},
			[]int{1042, 1078, 1042, 1042, 1020, 1020}, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 40 * ms}},
		{"blob granule failures are retried", kv.Backoff{}, []int{1079}, []time.Duration{10 * ms}},
		{"commit unknown result and throttling are retried", kv.Backoff{}, []int{1021, 1213, 1223, 1037, 1051, 1038},
			[]time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			b.Rand = func() float64 { return 1 }
			var got []time.Duration
			for _, code := range tc.codes {
				d, ok := b.Next(kv.Error{Code: code})
				require.True(t, ok, "code %d", code)
				got = append(got, d)
			}
			require.Equal(t, tc.want, got)
			b.Reset()
			d, _ := b.Next(kv.Error{Code: kv.CodeNotCommitted})
			require.Equal(t, 10*ms, d, "Reset starts over")
		})
	}
}

func TestBackoffGivesUpOnFatalErrors(t *testing.T) {
	for _, err := range []error{
		kv.Error{Code: kv.CodeTransactionTimedOut},
		kv.Error{Code: kv.CodeTransactionTooLarge},
		kv.Error{Code: kv.CodeIOError},
		errors.New("not a kv error"),
	} {
		var b kv.Backoff
		_, ok := b.Next(err)
		require.False(t, ok, "%v", err)
		require.Equal(t, err, b.Wait(context.Background(), err))
	}
}

func TestBackoffNextAny(t *testing.T) {
	ms := time.Millisecond
	b := kv.Backoff{Rand: func() float64 { return 1 }}
	var got []time.Duration
	for _, err := range []error{
		errors.New("not a kv error"), // waits as a conflict would
		kv.Error{Code: kv.CodeTransactionTooLarge},
		kv.Error{Code: kv.CodeNotCommitted},
		kv.Error{Code: kv.CodeTransactionTooOld}, // OnError's own rule
	} {
		got = append(got, b.NextAny(err))
	}
	require.Equal(t, []time.Duration{10 * ms, 20 * ms, 40 * ms, 10 * ms}, got)
}

func TestBackoffWaitOnClock(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b := kv.Backoff{Clock: clock, Rand: func() float64 { return 1 }}
	done := make(chan error, 1)
	go func() { done <- b.Wait(context.Background(), kv.Error{Code: kv.CodeNotCommitted}) }()
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(10 * time.Millisecond)
	require.NoError(t, <-done)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- b.Wait(ctx, kv.Error{Code: kv.CodeNotCommitted}) }()
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.ErrorIs(t, b.Wait(ctx, kv.Error{Code: kv.CodeNotCommitted}), context.Canceled)
}
