package kv_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestParseLatency(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want kv.Latency
		err  bool
	}{
		{in: "", want: kv.Latency{}},
		{in: "0", want: kv.Latency{}},
		{in: "false", want: kv.Latency{}},
		{in: "1", want: kv.DefaultLatency()},
		{in: "true", want: kv.DefaultLatency()},
		{in: "read=2ms,commit=10ms", want: kv.Latency{Read: 2 * time.Millisecond, GRV: kv.LatencyGRVDefault, Commit: 10 * time.Millisecond}},
		{in: " grv = 0s ", want: kv.Latency{Read: kv.LatencyReadDefault, Commit: kv.LatencyCommitDefault}},
		{in: "read", err: true},
		{in: "read=fast", err: true},
		{in: "read=-1ms", err: true},
		{in: "write=1ms", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := kv.ParseLatency(tc.in)
			if tc.err {
				require.ErrorIs(t, err, kv.ErrInvalidEnv)
				require.Contains(t, err.Error(), kv.EnvLatency)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, kv.Latency{Read: time.Millisecond, GRV: time.Millisecond, Commit: 4 * time.Millisecond}, kv.DefaultLatency())
}

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want kv.Budget
		err  bool
	}{
		{in: "", want: kv.Budget{}},
		{in: "1", want: kv.Budget{Bytes: 1_000_000, Duration: time.Second}},
		{in: "bytes=500", want: kv.Budget{Bytes: 500, Duration: kv.BudgetDurationDefault}},
		{in: "duration=2s,bytes=0", want: kv.Budget{Duration: 2 * time.Second}},
		{in: "bytes=lots", err: true},
		{in: "duration=-1s", err: true},
		{in: "size=1", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := kv.ParseBudget(tc.in)
			if tc.err {
				require.ErrorIs(t, err, kv.ErrInvalidEnv)
				require.Contains(t, err.Error(), kv.EnvBudget)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(kv.EnvLatency, "commit=1s")
	t.Setenv(kv.EnvBudget, "duration=3s")
	l, err := kv.LatencyFromEnv()
	require.NoError(t, err)
	require.Equal(t, time.Second, l.Commit)
	b, err := kv.BudgetFromEnv()
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, b.Duration)
}

// The call site of a budget error is the first caller outside the storage
// layer.
func TestCallSite(t *testing.T) {
	site := func() kv.CallSite { return kv.CaptureCallSite() }()
	e := site.BudgetError("read too much")
	require.Contains(t, e.Site, "kv/env_test.go:")
	require.Contains(t, e.Site, "TestCallSite")
	require.NotEmpty(t, e.Stack)
	require.Contains(t, e.Error(), "read too much")
	require.Contains(t, e.Error(), e.Site)
}
