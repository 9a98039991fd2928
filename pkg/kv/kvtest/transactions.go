package kvtest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var transactionTests = []conformanceTest{
	inScenario("Reset", testReset),
	inScenario("Cancel", testCancel),
	inScenario("CancelAfterCommitKeepsWatches", testCancelAfterCommit),
	inScenario("OnError", testOnError),
	onDB("ClosedDatabase", testClosedDatabase),
}

// testReset: Reset discards the writes and the read version.
func testReset(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	rv := wait(t, tr.GetReadVersion())
	tr.Set(ks.key("a"), []byte("discarded"))
	set(t, db, ks.key("b"), "committed")
	tr.Reset()
	require.Nil(t, wait(t, tr.Get(ks.key("a"))))
	require.Equal(t, []byte("committed"), wait(t, tr.Get(ks.key("b"))))
	require.Greater(t, wait(t, tr.GetReadVersion()), rv)
	tr.Set(ks.key("c"), []byte("kept"))
	must(t, commit(tr))
	require.Nil(t, read(t, db, ks.key("a")))
	require.Equal(t, []byte("kept"), read(t, db, ks.key("c")))
}

// testCancel: after Cancel, reads and the commit fail with
// transaction_cancelled, which is not retryable, and nothing is written.
func testCancel(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.Set(ks.key("a"), []byte("v"))
	tr.Cancel()
	_, err := tr.Get(ks.key("a")).Get()
	mustCode(t, err, kv.CodeTransactionCancelled)
	mustCode(t, commit(tr), kv.CodeTransactionCancelled)
	require.False(t, kv.IsRetryable(err))
	require.Nil(t, read(t, db, ks.key("a")))
	_, err = tr.OnError(kv.Error{Code: kv.CodeTransactionCancelled}).Get()
	require.True(t, kv.HasCode(err, kv.CodeTransactionCancelled), "got %v", err)
}

// testCancelAfterCommit: cancelling a committed transaction does not cancel
// the watches it set (the retry loop relies on it).
func testCancelAfterCommit(t *testing.T, db kv.Database, ks keyspace) {
	var w kv.FutureNil
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		if w != nil {
			w.Cancel()
		}
		w = watchOf(t, tr, ks.key("w"))
		return nil, nil
	})
	require.NoError(t, err)
	defer w.Cancel()
	set(t, db, ks.key("w"), "changed")
	awaitWatch(t, w)

	tr := newTr(t, db)
	w2 := watchOf(t, tr, ks.key("w2"))
	defer w2.Cancel()
	must(t, commit(tr))
	tr.Cancel()
	set(t, db, ks.key("w2"), "changed")
	awaitWatch(t, w2)
}

// testOnError: OnError resolves to nil for retryable errors and resets the
// transaction; other errors come back as they are.
func testOnError(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.Set(ks.key("a"), []byte("v"))
	_, err := tr.OnError(kv.Error{Code: kv.CodeNotCommitted}).Get()
	require.NoError(t, err)
	require.Nil(t, wait(t, tr.Get(ks.key("a"))), "OnError resets the transaction")
	must(t, commit(tr))
	require.Nil(t, read(t, db, ks.key("a")))

	for _, code := range []int{kv.CodeTransactionTooOld, kv.CodeCommitUnknownResult, kv.CodeFutureVersion} {
		tr := newTr(t, db)
		_, err := tr.OnError(kv.Error{Code: code}).Get()
		require.NoError(t, err, "code %d", code)
	}
	for _, code := range []int{kv.CodeClientInvalidOperation, kv.CodeTransactionTimedOut, kv.CodeValueTooLarge} {
		tr := newTr(t, db)
		_, err := tr.OnError(kv.Error{Code: code}).Get()
		require.True(t, kv.HasCode(err, code), "code %d: got %v", code, err)
	}
}

// testClosedDatabase: a closed database refuses new work with
// kv.ErrDatabaseClosed.
func testClosedDatabase(t *testing.T, db kv.Database) {
	set(t, db, kv.Key("k"), "v")
	pending := newTr(t, db)
	pending.Set(kv.Key("k"), []byte("w"))
	require.NoError(t, db.Close())
	// A transaction still open cannot commit. (An injected fault may
	// answer first.)
	if err := commit(pending); !kv.IsRetryable(err) {
		require.ErrorIs(t, err, kv.ErrDatabaseClosed)
	}
	_, err := db.CreateTransaction()
	require.ErrorIs(t, err, kv.ErrDatabaseClosed)
	called := false
	_, err = db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		called = true
		return nil, nil
	})
	require.True(t, errors.Is(err, kv.ErrDatabaseClosed), "got %v", err)
	require.False(t, called)
}
