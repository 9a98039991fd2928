package embedded

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The environment configures every store opened without explicit options.
func TestLatencyAndBudgetFromEnv(t *testing.T) {
	t.Setenv(kv.EnvLatency, "read=1h")
	t.Setenv(kv.EnvBudget, "bytes=10")
	db, err := Open(Options{InMemory: true})
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, time.Hour, db.opts.Latency.Read)
	require.Equal(t, kv.LatencyCommitDefault, db.opts.Latency.Commit)
	require.Equal(t, kv.Budget{Bytes: 10, Duration: kv.BudgetDurationDefault}, *db.opts.Budget)

	off, err := Open(Options{InMemory: true, Latency: &kv.Latency{}, Budget: &kv.Budget{}})
	require.NoError(t, err)
	defer off.Close()
	require.True(t, off.opts.Latency.IsZero(), "explicit options win")
	require.True(t, off.opts.Budget.IsZero())

	t.Setenv(kv.EnvLatency, "read=soon")
	_, err = Open(Options{InMemory: true})
	require.ErrorIs(t, err, ErrInvalidOptions)
	require.ErrorIs(t, err, kv.ErrInvalidEnv)
}

// In the latency mode a read's future becomes ready only after the
// latency; cancelling it first fails it with operation_cancelled.
func TestLatencyDelaysFutures(t *testing.T) {
	db := openMem(t, func(o *Options) { o.Latency = &kv.Latency{Read: time.Hour, GRV: time.Hour, Commit: time.Hour} })
	tr := newTr(t, db)
	futures := []interface {
		IsReady() bool
		Cancel()
	}{tr.GetReadVersion(), tr.Get(kv.Key("k")), tr.GetKey(kv.FirstGreaterOrEqual(kv.Key("k")))}
	for i, f := range futures {
		require.False(t, f.IsReady(), "future %d", i)
		f.Cancel()
	}
	_, err := futures[1].(kv.FutureByteSlice).Get()
	requireCode(t, err, kv.CodeOperationCancelled)

	tr.Set(kv.Key("k"), []byte("v"))
	c := tr.Commit()
	require.False(t, c.IsReady())
	c.Cancel()
	_, err = waitReady(t, c)
	requireCode(t, err, kv.CodeOperationCancelled)
}

// Sequential reads add up: with a lifetime of 50 ms and 10 ms per read, a
// transaction that reads one key after the other fails with
// transaction_too_old before its tenth read, as it would on FoundationDB
// with thousands of reads and five seconds.
func TestLatencySequentialReadsRunOutOfTime(t *testing.T) {
	db := openMem(t, func(o *Options) {
		o.Latency = &kv.Latency{Read: 10 * time.Millisecond}
		o.TransactionLifetime = 50 * time.Millisecond
	})
	tr := newTr(t, db)
	var err error
	reads := 0
	for ; reads < 10 && err == nil; reads++ {
		_, err = tr.Get(kv.Key(fmt.Sprintf("k%d", reads))).Get()
	}
	requireCode(t, err, kv.CodeTransactionTooOld)
	require.Less(t, reads, 10)
}

// A range read waits one read latency per batch.
func TestLatencyRangeReads(t *testing.T) {
	db := openMem(t, func(o *Options) { o.Latency = &kv.Latency{Read: time.Millisecond} })
	put(t, db, "a", "1", "b", "2")
	kvs, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.GetRange(kv.KeyRange{Begin: kv.Key("a"), End: kv.Key("c")}, kv.RangeOptions{}).GetSliceWithError()
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, keysOf(kvs))
	require.Equal(t, time.Millisecond, (&transaction{db: db}).readLatency(1))
	require.Equal(t, 2*time.Millisecond, (&transaction{db: db}).readLatency(kv.LatencyReplyBytesDefault+1))
}

func TestBudget(t *testing.T) {
	big := make([]byte, 600)
	tests := []struct {
		name   string
		budget kv.Budget
		run    func(tr kv.Transaction) error
		reason string
	}{
		{"read bytes", kv.Budget{Bytes: 1000}, func(tr kv.Transaction) error {
			for _, k := range []string{"big1", "big2"} {
				if _, err := tr.Get(kv.Key(k)).Get(); err != nil {
					return err
				}
			}
			return nil
		}, "read 1208 bytes (budget 1000)"},
		{"range read bytes", kv.Budget{Bytes: 1000}, func(tr kv.Transaction) error {
			_, err := tr.GetRange(kv.KeyRange{Begin: kv.Key("big"), End: kv.Key("bih")}, kv.RangeOptions{}).GetSliceWithError()
			return err
		}, "read 1208 bytes"},
		{"written bytes", kv.Budget{Bytes: 1000}, func(tr kv.Transaction) error {
			tr.Set(kv.Key("w1"), big)
			tr.Set(kv.Key("w2"), big)
			_, err := tr.Commit().Get()
			return err
		}, "commits 1390 bytes as FoundationDB counts them (budget 1000)"},
		{"open too long", kv.Budget{Duration: time.Nanosecond}, func(tr kv.Transaction) error {
			tr.Set(kv.Key("w1"), nil)
			time.Sleep(time.Millisecond) // being slow is the behaviour under test
			_, err := tr.Commit().Get()
			return err
		}, "open for"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var reported []*kv.BudgetError
			db := openMem(t, func(o *Options) {
				o.OnBudgetExceeded = func(e *kv.BudgetError) { reported = append(reported, e) }
			})
			put(t, db, "big1", string(big), "big2", string(big))
			*db.opts.Budget = tc.budget // after the setup, which goes over it
			runs := 0
			_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
				runs++
				return nil, tc.run(tr)
			})
			var be *kv.BudgetError
			require.True(t, errors.As(err, &be), "got %v", err)
			require.Contains(t, be.Reason, tc.reason)
			require.Contains(t, be.Site, "embedded/latency_test.go:", "the call site is the caller of Transact")
			require.Equal(t, 1, runs, "not retried")
			require.Len(t, reported, 1)
			require.Same(t, be, reported[0])
		})
	}
}
