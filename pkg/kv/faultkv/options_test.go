package faultkv

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{"defaults", DefaultOptions(1), true},
		{"zero", Options{}, true},
		{"all commit faults", Options{CommitUnknownResult: 0.5, NotCommitted: 0.25, TransactionTooOld: 0.25}, true},
		{"negative", Options{NotCommitted: -0.1}, false},
		{"above one", Options{ReadTooOld: 1.5}, false},
		{"NaN", Options{TimedOut: math.NaN()}, false},
		{"commit sum above one", Options{CommitUnknownResult: 0.6, NotCommitted: 0.6}, false},
		{"read sum above one", Options{ReadTooOld: 0.6, TimedOut: 0.6}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidOptions)
			require.Panics(t, func() { Wrap(nil, tc.opts) })
		})
	}
}

func TestParseEnv(t *testing.T) {
	withSeed := func(seed uint64, f func(*Options)) Options {
		o := DefaultOptions(seed)
		if f != nil {
			f(&o)
		}
		return o
	}
	tests := []struct {
		in      string
		enabled bool
		want    *Options // nil: do not compare (random seed)
		err     bool
	}{
		{in: "", enabled: false},
		{in: "0", enabled: false},
		{in: "false", enabled: false},
		{in: "1", enabled: true},
		{in: "TRUE", enabled: true},
		{in: "seed=42", enabled: true, want: ptr(withSeed(42, nil))},
		{in: "seed=7, commit_unknown=0.5 ,not_committed=0,too_old=0.1,read_too_old=0,timed_out=0.3," +
			"proxy_memory=0,process_behind=0,future_version=0,grv_memory=0,tag_throttled=0,watch=0", enabled: true,
			want: ptr(Options{Seed: 7, CommitUnknownResult: 0.5, TransactionTooOld: 0.1, TimedOut: 0.3})},
		{in: "seed=5,proxy_memory=0.1,process_behind=0.2,future_version=0.3,grv_memory=0.4,tag_throttled=0.5,watch=0.6",
			enabled: true, want: ptr(withSeed(5, func(o *Options) {
				o.ProxyMemoryLimit, o.ProcessBehind, o.FutureVersion = 0.1, 0.2, 0.3
				o.GRVProxyMemoryLimit, o.TagThrottled, o.WatchFailure = 0.4, 0.5, 0.6
			}))},
		{in: "seed=1,grv_memory=0.6,tag_throttled=0.6", err: true},
		{in: "seed=1,process_behind=0.6,future_version=0.6", err: true},
		{in: "seed=3,not_committed=0.2", enabled: true, want: ptr(withSeed(3, func(o *Options) { o.NotCommitted = 0.2 }))},
		{in: "yes", err: true},
		{in: "seed=-1", err: true},
		{in: "seed=1,bogus=0.1", err: true},
		{in: "seed=1,too_old=lots", err: true},
		{in: "seed=1,commit_unknown=0.9,not_committed=0.9", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, enabled, err := parseEnv(tc.in)
			if tc.err {
				require.ErrorIs(t, err, ErrInvalidOptions)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.enabled, enabled)
			if !enabled {
				return
			}
			require.NoError(t, got.Validate())
			if tc.want != nil {
				require.Equal(t, *tc.want, got)
			} else {
				require.Equal(t, DefaultOptions(got.Seed), got)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "seed=9")
	got, enabled, err := FromEnv()
	require.NoError(t, err)
	require.True(t, enabled)
	require.Equal(t, DefaultOptions(9), got)
}

func ptr[T any](v T) *T { return &v }
