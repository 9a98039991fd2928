package faultkv_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
)

// The errors of a loaded cluster: each is injected where FoundationDB
// returns it, fails the attempt, and is retried by the retry loop.
func TestLoadFaults(t *testing.T) {
	tests := []struct {
		name  string
		opts  faultkv.Options
		code  int
		where string // "read", "grv" (first read only) or "commit"
		stat  func(faultkv.Stats) uint64
	}{
		{"process behind", faultkv.Options{ProcessBehind: 1}, kv.CodeProcessBehind, "read",
			func(s faultkv.Stats) uint64 { return s.ProcessBehind }},
		{"future version", faultkv.Options{FutureVersion: 1}, kv.CodeFutureVersion, "read",
			func(s faultkv.Stats) uint64 { return s.FutureVersion }},
		{"grv proxy memory", faultkv.Options{GRVProxyMemoryLimit: 1}, kv.CodeGRVProxyMemoryLimit, "grv",
			func(s faultkv.Stats) uint64 { return s.GRVProxyMemoryLimit }},
		{"tag throttled", faultkv.Options{TagThrottled: 1}, kv.CodeTagThrottled, "grv",
			func(s faultkv.Stats) uint64 { return s.TagThrottled }},
		{"commit proxy memory", faultkv.Options{ProxyMemoryLimit: 1}, kv.CodeProxyMemoryLimit, "commit",
			func(s faultkv.Stats) uint64 { return s.ProxyMemoryLimit }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, kv.Error{Code: tc.code}.Retryable())
			db := openDB(t, tc.opts)
			tr, err := db.CreateTransaction()
			require.NoError(t, err)
			defer tr.Cancel()
			switch tc.where {
			case "read", "grv":
				_, err = tr.GetReadVersion().Get()
				if tc.where == "grv" {
					require.Equal(t, kv.Error{Code: tc.code}, err, "getting the read version fails")
				} else {
					require.NoError(t, err)
				}
				_, err = tr.Get(kv.Key("k")).Get()
				require.Equal(t, kv.Error{Code: tc.code}, err, "the attempt stays failed")
				tr.Set(kv.Key("k"), []byte("v"))
				_, err = tr.Commit().Get()
				require.Equal(t, kv.Error{Code: tc.code}, err)
			case "commit":
				tr.Set(kv.Key("k"), []byte("v"))
				_, err = tr.Commit().Get()
				require.Equal(t, kv.Error{Code: tc.code}, err)
				require.Nil(t, keyValue(t, faultkv.Wrap(db.Unwrap(), faultkv.Options{}), "k"), "dropped")
			}
			require.Equal(t, uint64(1), tc.stat(db.Stats()))
		})
	}
}

// A grv fault hits only the first read of an attempt; OnError starts a new
// attempt that may hit it again.
func TestGRVFaultOnlyOnFirstRead(t *testing.T) {
	db := openDB(t, faultkv.Options{TagThrottled: 1})
	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	defer tr.Cancel()
	_, err = tr.Get(kv.Key("a")).Get()
	require.Equal(t, kv.Error{Code: kv.CodeTagThrottled}, err)
	_, err = tr.OnError(kv.Error{Code: kv.CodeTagThrottled}).Get()
	require.NoError(t, err)
	_, err = tr.Get(kv.Key("a")).Get()
	require.Equal(t, kv.Error{Code: kv.CodeTagThrottled}, err, "a new attempt gets a new read version")
	require.Equal(t, uint64(2), db.Stats().TagThrottled)
}

func TestWatchFailures(t *testing.T) {
	db := openDB(t, faultkv.Options{Seed: kvtest0, WatchFailure: 1})
	codes := map[int]int{}
	for range 40 {
		tr, err := db.CreateTransaction()
		require.NoError(t, err)
		w := tr.Watch(kv.Key("w"))
		_, err = tr.Commit().Get()
		require.NoError(t, err, "a failed watch does not fail its transaction")
		_, werr := w.Get()
		var e kv.Error
		require.ErrorAs(t, werr, &e)
		codes[e.Code]++
	}
	require.Positive(t, codes[kv.CodeTooManyWatches])
	require.Positive(t, codes[kv.CodeFutureVersion])
	require.Len(t, codes, 2)
	require.Equal(t, uint64(40), db.Stats().WatchFailed)
}

// kvtest0 is a fixed seed: 40 draws then give both watch errors.
const kvtest0 = 1

func TestHealthPassesThrough(t *testing.T) {
	db := openDB(t, faultkv.Options{})
	require.NoError(t, kv.Health(db))
	require.NoError(t, db.Close())
	require.ErrorIs(t, kv.Health(db), kv.ErrDatabaseClosed)
}

func TestDefaultRatesAreValid(t *testing.T) {
	o := faultkv.DefaultOptions(1)
	require.NoError(t, o.Validate())
	require.Positive(t, o.ProxyMemoryLimit)
	require.Positive(t, o.ProcessBehind)
	require.Positive(t, o.FutureVersion)
	require.Positive(t, o.GRVProxyMemoryLimit)
	require.Positive(t, o.TagThrottled)
	require.Positive(t, o.WatchFailure)
}
