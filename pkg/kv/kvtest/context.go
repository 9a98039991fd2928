package kvtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var contextTests = []conformanceTest{
	onDB("CancelledBeforeStart", testContextCancelledBefore),
	onDB("CancelledDuringLoop", testContextCancelledDuring),
	onDB("DeadlineExceeded", testContextDeadline),
	onDB("CancelledWhileRetrying", testContextWhileRetrying),
}

func testContextCancelledBefore(t *testing.T, db kv.Database) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := db.Transact(ctx, func(kv.Transaction) (any, error) {
		called = true
		return nil, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	_, err = db.ReadTransact(ctx, func(kv.ReadTransaction) (any, error) {
		called = true
		return nil, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, called)
}

// testContextCancelledDuring: when ctx ends while the function runs, the
// loop returns ctx's error instead of retrying, and nothing is committed.
func testContextCancelledDuring(t *testing.T, db kv.Database) {
	ctx, cancel := context.WithCancel(context.Background())
	_, calls, err := transactRuns(ctx, db, func(tr kv.Transaction, _ int) (any, error) {
		tr.Set(kv.Key("ctx"), []byte("v"))
		cancel()
		return nil, kv.Error{Code: kv.CodeNotCommitted}
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, calls)
	require.Nil(t, read(t, db, kv.Key("ctx")))

}

func testContextDeadline(t *testing.T, db kv.Database) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := db.Transact(ctx, func(kv.Transaction) (any, error) { return nil, nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// testContextWhileRetrying: a loop that keeps failing with retryable errors
// stops when its context is cancelled from elsewhere.
func testContextWhileRetrying(t *testing.T, db kv.Database) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	retrying := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		_, _, err := transactRuns(ctx, db, func(tr kv.Transaction, run int) (any, error) {
			if run == 3 {
				close(retrying)
			}
			return nil, kv.Error{Code: kv.CodeNotCommitted}
		})
		result <- err
	}()
	<-retrying
	cancel()
	select {
	case err := <-result:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(waitTimeout):
		t.Fatal("retry loop did not stop after its context was cancelled")
	}
}
