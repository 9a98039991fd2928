package embedded

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestWriteLimits(t *testing.T) {
	big := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	for _, tc := range []struct {
		name  string
		write func(tr kv.Transaction)
		code  int
	}{
		{"key too large", func(tr kv.Transaction) { tr.Set(kv.Key(big(kv.MaxKeySize+1)), nil) }, kv.CodeKeyTooLarge},
		{"largest key", func(tr kv.Transaction) { tr.Set(kv.Key(big(kv.MaxKeySize)), nil) }, 0},
		{"value too large", func(tr kv.Transaction) { tr.Set(kv.Key("k"), big(kv.MaxValueSize+1)) }, kv.CodeValueTooLarge},
		{"largest value", func(tr kv.Transaction) { tr.Set(kv.Key("k"), big(kv.MaxValueSize)) }, 0},
		{"atomic param too large", func(tr kv.Transaction) { tr.Add(kv.Key("k"), big(kv.MaxValueSize+1)) }, kv.CodeValueTooLarge},
		{"system key", func(tr kv.Transaction) { tr.Set(kv.Key("\xff"), nil) }, kv.CodeKeyOutsideLegalRange},
		{"system key clear", func(tr kv.Transaction) { tr.Clear(kv.Key("\xff/x")) }, kv.CodeKeyOutsideLegalRange},
		{"system key atomic", func(tr kv.Transaction) { tr.Max(kv.Key("\xff\xff"), []byte{1}) }, kv.CodeKeyOutsideLegalRange},
		{"clear range into system keys", func(tr kv.Transaction) { tr.ClearRange(kr("a", "\xff\x00")) }, kv.CodeKeyOutsideLegalRange},
		{"clear range up to system keys", func(tr kv.Transaction) { tr.ClearRange(kr("a", "\xff")) }, 0},
		{"inverted clear range", func(tr kv.Transaction) { tr.ClearRange(kr("b", "a")) }, kv.CodeInvertedRange},
		{"versionstamp offset out of range", func(tr kv.Transaction) {
			tr.SetVersionstampedKey(kv.Key("abc\x05\x00\x00\x00"), nil)
		}, kv.CodeClientInvalidOperation},
		{"versionstamp without offset", func(tr kv.Transaction) { tr.SetVersionstampedValue(kv.Key("k"), []byte{1}) }, kv.CodeClientInvalidOperation},
		{"transaction too large", func(tr kv.Transaction) {
			for i := range kv.MaxTransactionSize/kv.MaxValueSize + 1 {
				tr.Set(kv.Key{byte(i >> 8), byte(i)}, big(kv.MaxValueSize))
			}
		}, kv.CodeTransactionTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openMem(t)
			tr := newTr(t, db)
			tc.write(tr)
			_, err := tr.Commit().Get()
			if tc.code == 0 {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, tc.code)
		})
	}
}

func TestReadLimits(t *testing.T) {
	db := openMem(t)
	tr := newTr(t, db)
	_, err := tr.Get(kv.Key("\xff")).Get()
	requireCode(t, err, kv.CodeKeyOutsideLegalRange)
	_, err = tr.GetRange(kr("a", "\xff\x01"), kv.RangeOptions{}).GetSliceWithError()
	requireCode(t, err, kv.CodeKeyOutsideLegalRange)
	_, err = tr.GetRange(kr("a", "\xff"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	_, err = tr.GetRange(kr("a", "b"), kv.RangeOptions{Limit: kv.RowLimitUnlimited}).GetSliceWithError()
	require.NoError(t, err, "-1 is FoundationDB's unlimited")
	_, err = tr.GetRange(kr("a", "b"), kv.RangeOptions{Limit: -2}).GetSliceWithError()
	requireCode(t, err, kv.CodeRangeLimitsInvalid)
	_, err = tr.GetKey(kv.FirstGreaterOrEqual(kv.Key("\xff\x01"))).Get()
	requireCode(t, err, kv.CodeKeyOutsideLegalRange)
	requireCode(t, tr.AddReadConflictRange(kr("b", "a")), kv.CodeInvertedRange)
	requireCode(t, tr.AddWriteConflictRange(kr("a", "\xff\x00")), kv.CodeKeyOutsideLegalRange)
	requireCode(t, tr.AddReadConflictKey(kv.Key("\xff")), kv.CodeKeyOutsideLegalRange)
	v, err := tr.Get(kv.Key(bytes.Repeat([]byte{'k'}, kv.MaxKeySize+1))).Get()
	require.NoError(t, err, "a key too large to exist reads as absent")
	require.Nil(t, v)
	v, err = tr.Get(kv.Key("")).Get()
	require.NoError(t, err)
	require.Nil(t, v)
}

func TestCancelResetAndUseDuringCommit(t *testing.T) {
	db := openMem(t)

	tr := newTr(t, db)
	tr.Set(kv.Key("k"), []byte("v"))
	tr.Cancel()
	_, err := tr.Get(kv.Key("k")).Get()
	requireCode(t, err, kv.CodeTransactionCancelled)
	_, err = tr.Commit().Get()
	requireCode(t, err, kv.CodeTransactionCancelled)
	_, err = tr.OnError(kv.Error{Code: kv.CodeNotCommitted}).Get()
	requireCode(t, err, kv.CodeTransactionCancelled)
	tr.Reset()
	v, ok := mustGet(t, tr, "k")
	require.False(t, ok, "reset dropped the write: %q", v)

	tr = newTr(t, db)
	tr.Set(kv.Key("k"), []byte("v"))
	_, err = tr.Commit().Get()
	require.NoError(t, err)
	_, err = tr.Get(kv.Key("k")).Get()
	requireCode(t, err, kv.CodeUsedDuringCommit)
	_, err = tr.Commit().Get()
	requireCode(t, err, kv.CodeUsedDuringCommit)
	_, err = tr.GetVersionstamp().Get()
	requireCode(t, err, kv.CodeUsedDuringCommit)
	cv, err := tr.GetCommittedVersion()
	require.NoError(t, err)
	require.Positive(t, cv)
	tr.Cancel() // no-op after a commit
	cv2, err := tr.GetCommittedVersion()
	require.NoError(t, err)
	require.Equal(t, cv, cv2)

	ro := newTr(t, db)
	_, _ = mustGet(t, ro, "k")
	_, err = ro.Commit().Get()
	require.NoError(t, err)
	cv, err = ro.GetCommittedVersion()
	require.NoError(t, err)
	require.Equal(t, int64(-1), cv)
	_, err = ro.GetVersionstamp().Get()
	require.Error(t, err)
}

// An operation issued while a commit is in flight fails with
// used_during_commit and fails the commit with it; a cancel fails it with
// transaction_cancelled. The commit goes on and may still happen, as on
// FoundationDB.
func TestOperationDuringCommitFailsTheCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(tr kv.Transaction) error
		code int
	}{
		{"read", func(tr kv.Transaction) error { _, err := tr.Get(kv.Key("x")).Get(); return err }, kv.CodeUsedDuringCommit},
		{"versionstamp", func(tr kv.Transaction) error { _, err := tr.GetVersionstamp().Get(); return err }, kv.CodeUsedDuringCommit},
		{"commit", func(tr kv.Transaction) error { _, err := tr.Commit().Get(); return err }, kv.CodeUsedDuringCommit},
		{"write", func(tr kv.Transaction) error { tr.Set(kv.Key("x"), nil); return nil }, kv.CodeUsedDuringCommit},
		{"cancel", func(tr kv.Transaction) error { tr.Cancel(); return nil }, kv.CodeTransactionCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			db := openMem(t, func(o *Options) {})
			db.testHookBatch = func(int) { <-release }
			tr := newTr(t, db)
			tr.Set(kv.Key("k"), []byte("v"))
			vs := tr.GetVersionstamp()
			f := tr.Commit()
			if err := tc.op(tr); err != nil {
				requireCode(t, err, tc.code)
			}
			_, err := f.Get()
			requireCode(t, err, tc.code)
			_, err = vs.Get()
			requireCode(t, err, tc.code)
			cv, err := tr.GetCommittedVersion()
			require.NoError(t, err)
			require.Equal(t, int64(-1), cv)
			close(release)
			put(t, db, "after", "1") // committed after the first batch
			v, ok := read(t, db, "k")
			require.True(t, ok, "the commit went on")
			require.Equal(t, "v", v)
		})
	}
}

func TestTimeoutAndRetryLimit(t *testing.T) {
	db, clock := openFakeClock(t)
	tr := newTr(t, db)
	require.NoError(t, tr.Options().SetTimeout(1))
	_, err := waitReady(t, tr.OnError(kv.Error{Code: kv.CodeNotCommitted}))
	require.NoError(t, err, "the timeout has not passed yet")
	clock.Advance(time.Millisecond)
	_, err = waitReady(t, tr.OnError(kv.Error{Code: kv.CodeNotCommitted}))
	requireCode(t, err, kv.CodeTransactionTimedOut)
	_, err = tr.Get(kv.Key("k")).Get()
	requireCode(t, err, kv.CodeTransactionTimedOut)
	_, err = tr.Commit().Get()
	requireCode(t, err, kv.CodeTransactionTimedOut)
	tr.Reset()
	_, err = tr.Get(kv.Key("k")).Get()
	require.NoError(t, err, "reset clears the timeout")

	require.Error(t, tr.Options().SetTimeout(-1))
	require.Error(t, tr.Options().SetRetryLimit(-2))
	require.Error(t, tr.Options().SetMaxRetryDelay(-1))

	// Retry limit: the loop gives up with the last error.
	calls := 0
	_, err = db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		calls++
		if err := tr.Options().SetRetryLimit(2); err != nil {
			return nil, err
		}
		return nil, kv.Error{Code: kv.CodeNotCommitted}
	})
	requireCode(t, err, kv.CodeNotCommitted)
	require.Equal(t, 3, calls)

	// A non-retryable error comes straight back.
	tr2 := newTr(t, db)
	_, err = tr2.OnError(kv.Error{Code: kv.CodeKeyTooLarge}).Get()
	requireCode(t, err, kv.CodeKeyTooLarge)
}

func TestOnErrorBackoff(t *testing.T) {
	db := openMem(t)
	tr := newTr(t, db).(*transaction)
	require.NoError(t, tr.Options().SetMaxRetryDelay(40))
	tr.backoff.Rand = func() float64 { return 0 } // no waiting; the limits are checked below
	for range 5 {
		_, err := waitReady(t, tr.OnError(kv.Error{Code: kv.CodeCommitUnknownResult}))
		require.NoError(t, err)
	}
	// The limit doubled from 10 ms and stopped at the max retry delay.
	next := tr.backoff
	next.Rand = func() float64 { return 1 }
	d, ok := next.Next(kv.Error{Code: kv.CodeNotCommitted})
	require.True(t, ok)
	require.Equal(t, 40*time.Millisecond, d)
	// transaction_too_old waits a fixed 10 ms, as FoundationDB.
	d, ok = next.Next(kv.Error{Code: kv.CodeTransactionTooOld})
	require.True(t, ok)
	require.Equal(t, kv.FutureVersionRetryDelayDefault, d)
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{},
		{InMemory: true, CacheSize: -1},
		{InMemory: true, MaxBatchTxns: 1 << 17},
		{InMemory: true, MaxBatchTxns: -1},
		{InMemory: true, MaxBatchBytes: -1},
		{InMemory: true, MaxWatches: -1},
		{InMemory: true, TransactionLifetime: -1},
		{InMemory: true, MemTableSize: -1},
		{InMemory: true, MemTableSize: memTableMin - 1},
		{InMemory: true, MemTableSize: memTableMax + 1},
	} {
		_, err := Open(o)
		require.ErrorIs(t, err, ErrInvalidOptions)
	}
}

func TestClosedDatabase(t *testing.T) {
	db, err := Open(Options{InMemory: true})
	require.NoError(t, err)
	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	_, err = tr.Get(kv.Key("k")).Get()
	require.NoError(t, err)
	w := tr.Watch(kv.Key("k"))
	_, err = tr.Commit().Get()
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "Close is idempotent")
	_, err = w.Get()
	require.ErrorIs(t, err, kv.ErrDatabaseClosed)
	_, err = db.CreateTransaction()
	require.ErrorIs(t, err, kv.ErrDatabaseClosed)
	tr.Reset()
	_, err = tr.Get(kv.Key("k")).Get()
	require.ErrorIs(t, err, kv.ErrDatabaseClosed)
	_, err = db.Transact(context.Background(), func(kv.Transaction) (any, error) { return nil, nil })
	require.ErrorIs(t, err, kv.ErrDatabaseClosed)
}
