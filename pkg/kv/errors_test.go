package kv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// Names and messages are FoundationDB 7.3's, in the binding's format.
func TestErrorNamesAndMessages(t *testing.T) {
	for _, tc := range []struct {
		code       int
		name, text string
	}{
		{1020, "not_committed", "FoundationDB error code 1020 (Transaction not committed due to conflict with another transaction)"},
		{1042, "commit_proxy_memory_limit_exceeded", "FoundationDB error code 1042 (CommitProxy commit memory limit exceeded)"},
		{1078, "grv_proxy_memory_limit_exceeded", "FoundationDB error code 1078 (GetReadVersion proxy memory limit exceeded)"},
		{1223, "proxy_tag_throttled", "FoundationDB error code 1223 (Exceeded maximum proxy tag throttling duration)"},
		{1510, "io_error", "FoundationDB error code 1510 (Disk i/o operation failed)"},
		{2012, "range_limits_invalid", "FoundationDB error code 2012 (Range limits not valid)"},
		{2021, "no_commit_version", "FoundationDB error code 2021 (Transaction is read-only and therefore does not have a commit version)"},
		{2210, "exact_mode_without_limits", "FoundationDB error code 2210 (EXACT streaming mode requires limits, but none were given)"},
		{9999, "unknown_error_9999", "FoundationDB error code 9999 (Unknown error)"},
	} {
		e := kv.Error{Code: tc.code}
		require.Equal(t, tc.name, e.Name())
		require.Equal(t, tc.text, e.Error())
	}
}

// Run gives back the caller's own error, wrapped as it was, when OnError
// refuses to retry it (as the binding's retry loop does).
func TestRunReturnsTheOriginalError(t *testing.T) {
	db, err := embedded.Open(embedded.Options{InMemory: true, Latency: &kv.Latency{}, Budget: &kv.Budget{}})
	require.NoError(t, err)
	defer db.Close()
	wrapped := fmt.Errorf("reading the thing: %w", kv.Error{Code: kv.CodeTransactionTooLarge})
	_, err = db.Transact(context.Background(), func(kv.Transaction) (any, error) { return nil, wrapped })
	require.Same(t, wrapped, errors.Unwrap(fmt.Errorf("x: %w", err)))
}

func TestProbe(t *testing.T) {
	db, err := embedded.Open(embedded.Options{InMemory: true, Latency: &kv.Latency{}, Budget: &kv.Budget{}})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, kv.Probe(context.Background(), db, 0))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = kv.Probe(ctx, db, time.Second)
	require.ErrorIs(t, err, kv.ErrUnreachable)
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), "cluster file")

	require.NoError(t, db.Close())
	err = kv.Probe(context.Background(), db, time.Second)
	require.ErrorIs(t, err, kv.ErrUnreachable)
	require.ErrorIs(t, err, kv.ErrDatabaseClosed)
}

func TestHealth(t *testing.T) {
	require.NoError(t, kv.Health(struct{}{}), "stores that cannot tell are healthy")
	db, err := embedded.Open(embedded.Options{InMemory: true, Latency: &kv.Latency{}, Budget: &kv.Budget{}})
	require.NoError(t, err)
	require.NoError(t, kv.Health(db))
	require.NoError(t, db.Close())
	require.ErrorIs(t, kv.Health(db), kv.ErrDatabaseClosed)
}
