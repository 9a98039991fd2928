package faultkv_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// openDB opens an in-memory embedded database wrapped with opts.
func openDB(t *testing.T, opts faultkv.Options) *faultkv.DB {
	t.Helper()
	inner, err := embedded.Open(embedded.Options{InMemory: true})
	require.NoError(t, err)
	db := faultkv.Wrap(inner, opts)
	t.Cleanup(func() {
		t.Logf("faults: %v", db.Stats())
		require.NoError(t, db.Close())
	})
	return db
}

// testCtx bounds a test's retry loops, so that a bug that makes them spin
// fails the test instead of hanging it. It is no timing assertion.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var counterKey = kv.Key("counter")

func readCounter(t *testing.T, db kv.Database) uint64 {
	t.Helper()
	v, err := kv.ReadTransact(testCtx(t), db, func(tr kv.ReadTransaction) (uint64, error) {
		b, err := tr.Get(counterKey).Get()
		if err != nil || b == nil {
			return 0, err
		}
		return binary.BigEndian.Uint64(b), nil
	})
	require.NoError(t, err)
	return v
}

// increment is not idempotent: run twice, it counts twice.
func increment(tr kv.Transaction) (any, error) {
	b, err := tr.Get(counterKey).Get()
	if err != nil {
		return nil, err
	}
	var n uint64
	if b != nil {
		n = binary.BigEndian.Uint64(b)
	}
	tr.Set(counterKey, binary.BigEndian.AppendUint64(nil, n+1))
	return nil, nil
}

// incrementOnce is increment guarded by a token: a re-run after a commit
// that did happen finds the token and does nothing.
func incrementOnce(token string) func(kv.Transaction) (any, error) {
	tokenKey := kv.Key("token/" + token)
	return func(tr kv.Transaction) (any, error) {
		done, err := tr.Get(tokenKey).Get()
		if err != nil || done != nil {
			return nil, err
		}
		tr.Set(tokenKey, []byte{1})
		return increment(tr)
	}
}

// The key property: commit_unknown_result after a real commit makes the
// retry loop apply a non-idempotent function twice, and a token-guarded
// function stays exact.
func TestCommitUnknownResultReappliesNonIdempotentFunctions(t *testing.T) {
	const calls = 200
	opts := faultkv.Options{Seed: kvtest.Seed(t), CommitUnknownResult: 0.3}

	t.Run("non-idempotent", func(t *testing.T) {
		db := openDB(t, opts)
		for range calls {
			_, err := db.Transact(testCtx(t), increment)
			require.NoError(t, err)
		}
		unknown := db.Stats().CommitUnknownResult
		require.Positive(t, unknown, "faults were injected")
		got := readCounter(t, db)
		require.Greater(t, got, uint64(calls), "the dangerous case happened")
		require.Equal(t, uint64(calls)+unknown, got, "each commit_unknown_result re-applied the increment once")
	})

	t.Run("idempotent", func(t *testing.T) {
		db := openDB(t, opts)
		for i := range calls {
			_, err := db.Transact(testCtx(t), incrementOnce(strconv.Itoa(i)))
			require.NoError(t, err)
		}
		require.Positive(t, db.Stats().CommitUnknownResult, "faults were injected")
		require.Equal(t, uint64(calls), readCounter(t, db))
	})
}

// Under every fault at once and concurrent callers, token-guarded
// increments stay exact.
func TestConcurrentIdempotentIncrementsUnderAllFaults(t *testing.T) {
	opts := faultkv.DefaultOptions(kvtest.Seed(t))
	opts.CommitUnknownResult, opts.NotCommitted, opts.TransactionTooOld, opts.ReadTooOld = 0.1, 0.1, 0.05, 0.05
	db := openDB(t, opts)
	const workers, each = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := db.Transact(testCtx(t), incrementOnce(fmt.Sprintf("%d/%d", w, i)))
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s := db.Stats()
	require.Positive(t, s.CommitUnknownResult)
	require.Positive(t, s.NotCommitted)
	require.Positive(t, s.ReadTooOld)
	require.Equal(t, uint64(workers*each), readCounter(t, db))
}

// commitOnce runs f in a fresh transaction and commits once, without retry.
func commitOnce(t *testing.T, db kv.Database, f func(kv.Transaction)) (kv.Transaction, error) {
	t.Helper()
	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	f(tr)
	_, err = tr.Commit().Get()
	return tr, err
}

func keyValue(t *testing.T, db kv.Database, key string) []byte {
	t.Helper()
	v, err := kv.ReadTransact(testCtx(t), db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(kv.Key(key)).Get()
	})
	require.NoError(t, err)
	return v
}

func TestCommitFaults(t *testing.T) {
	tests := []struct {
		name      string
		opts      faultkv.Options
		timeout   bool
		code      int // 0: commits
		committed bool
		stat      func(faultkv.Stats) uint64
	}{
		{"not committed", faultkv.Options{NotCommitted: 1}, false, kv.CodeNotCommitted, false,
			func(s faultkv.Stats) uint64 { return s.NotCommitted }},
		{"too old", faultkv.Options{TransactionTooOld: 1}, false, kv.CodeTransactionTooOld, false,
			func(s faultkv.Stats) uint64 { return s.CommitTooOld }},
		{"unknown result after commit", faultkv.Options{CommitUnknownResult: 1}, false, kv.CodeCommitUnknownResult, true,
			func(s faultkv.Stats) uint64 { return s.CommitUnknownResult }},
		{"timed out with timeout", faultkv.Options{TimedOut: 1}, true, kv.CodeTransactionTimedOut, false,
			func(s faultkv.Stats) uint64 { return s.TimedOut }},
		{"no time out without timeout", faultkv.Options{TimedOut: 1}, false, 0, true,
			func(s faultkv.Stats) uint64 { return s.Commits }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t, tc.opts)
			var watch kv.FutureNil
			var vs kv.FutureKey
			_, err := commitOnce(t, db, func(tr kv.Transaction) {
				if tc.timeout {
					require.NoError(t, tr.Options().SetTimeout(60_000))
				}
				tr.Set(kv.Key("k"), []byte("v"))
				watch = tr.Watch(kv.Key("w"))
				vs = tr.GetVersionstamp()
			})
			if tc.code == 0 {
				require.NoError(t, err)
				_, err = vs.Get()
				require.NoError(t, err)
				watch.Cancel()
			} else {
				require.Equal(t, kv.Error{Code: tc.code}, err)
				_, werr := watch.Get()
				require.Equal(t, kv.Error{Code: tc.code}, werr, "the watch fails with the commit's error")
				_, verr := vs.Get()
				require.Equal(t, kv.Error{Code: tc.code}, verr, "the versionstamp fails with the commit's error")
			}
			require.Equal(t, uint64(1), tc.stat(db.Stats()))
			if tc.committed {
				require.Equal(t, []byte("v"), keyValue(t, db, "k"))
			} else {
				require.Nil(t, keyValue(t, db, "k"))
			}
		})
	}
}

func TestTimedOutIsFatalInTheRetryLoop(t *testing.T) {
	db := openDB(t, faultkv.Options{TimedOut: 1})
	runs := 0
	_, err := db.Transact(testCtx(t), func(tr kv.Transaction) (any, error) {
		runs++
		if err := tr.Options().SetTimeout(60_000); err != nil {
			return nil, err
		}
		tr.Set(kv.Key("k"), []byte("v"))
		return nil, nil
	})
	require.True(t, kv.HasCode(err, kv.CodeTransactionTimedOut), "got %v", err)
	require.Equal(t, 1, runs, "transaction_timed_out is not retried")
}

func TestReadFaultsPoisonTheAttempt(t *testing.T) {
	db := openDB(t, faultkv.Options{ReadTooOld: 1})
	tooOld := kv.Error{Code: kv.CodeTransactionTooOld}
	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	_, err = tr.Get(kv.Key("a")).Get()
	require.Equal(t, tooOld, err)
	_, err = tr.GetKey(kv.FirstGreaterOrEqual(kv.Key("a"))).Get()
	require.Equal(t, tooOld, err)
	r := tr.GetRange(kv.KeyRange{Begin: kv.Key("a"), End: kv.Key("b")}, kv.RangeOptions{})
	_, err = r.GetSliceWithError()
	require.Equal(t, tooOld, err)
	require.PanicsWithError(t, tooOld.Error(), func() { r.GetSliceOrPanic() })
	it := r.Iterator()
	require.True(t, it.Advance())
	_, err = it.Get()
	require.Equal(t, tooOld, err)
	require.Panics(t, func() { it.MustGet() })
	require.False(t, it.Advance())
	_, err = tr.Snapshot().Get(kv.Key("a")).Get()
	require.Equal(t, tooOld, err)
	tr.Set(kv.Key("a"), []byte("v"))
	_, err = tr.Commit().Get()
	require.Equal(t, tooOld, err, "the commit fails as the reads did")
	require.Nil(t, keyValue(t, faultkv.Wrap(db.Unwrap(), faultkv.Options{}), "a"))
	require.Positive(t, db.Stats().ReadTooOld)
	require.Zero(t, db.Stats().CommitTooOld)
}

func TestOnErrorStartsAFreshAttempt(t *testing.T) {
	db := openDB(t, faultkv.Options{NotCommitted: 1})
	tr, err := commitOnce(t, db, func(tr kv.Transaction) { tr.Set(kv.Key("k"), []byte("v")) })
	require.Equal(t, kv.Error{Code: kv.CodeNotCommitted}, err)
	_, err = tr.GetCommittedVersion()
	require.Error(t, err)
	_, err = tr.OnError(err.(kv.Error)).Get()
	require.NoError(t, err)
	// The new attempt is clean: a read works (no read faults configured).
	v, err := tr.Get(kv.Key("k")).Get()
	require.NoError(t, err)
	require.Nil(t, v)

	// A retry limit of 0 makes OnError give the injected error back.
	tr.Reset()
	require.NoError(t, tr.Options().SetRetryLimit(0))
	_, err = tr.OnError(kv.Error{Code: kv.CodeNotCommitted}).Get()
	require.Equal(t, kv.Error{Code: kv.CodeNotCommitted}, err)
}

func TestReadOnlyCommitsNeverFail(t *testing.T) {
	db := openDB(t, faultkv.Options{NotCommitted: 0.5, CommitUnknownResult: 0.5})
	for range 20 {
		_, err := commitOnce(t, db, func(tr kv.Transaction) {
			_, err := tr.Get(kv.Key("k")).Get()
			require.NoError(t, err)
			require.NoError(t, tr.AddReadConflictKey(kv.Key("k")))
		})
		require.NoError(t, err)
	}
	require.Zero(t, db.Stats().Injected())
	// A write conflict range alone makes a transaction a writer.
	_, err := commitOnce(t, db, func(tr kv.Transaction) {
		require.NoError(t, tr.AddWriteConflictKey(kv.Key("k")))
	})
	require.Error(t, err)
}

func TestNestedTransactJoinsTheCallersTransaction(t *testing.T) {
	db := openDB(t, faultkv.Options{})
	ctx := testCtx(t)
	setOne := func(tor kv.Transactor, key string) error {
		_, err := tor.Transact(ctx, func(tr kv.Transaction) (any, error) {
			tr.Set(kv.Key(key), []byte("1"))
			return nil, nil
		})
		return err
	}
	_, err := db.Transact(ctx, func(outer kv.Transaction) (any, error) {
		if _, err := outer.Transact(ctx, func(inner kv.Transaction) (any, error) {
			require.Same(t, outer, inner)
			return nil, nil
		}); err != nil {
			return nil, err
		}
		if _, err := outer.ReadTransact(ctx, func(inner kv.ReadTransaction) (any, error) {
			require.Same(t, outer, inner)
			return nil, nil
		}); err != nil {
			return nil, err
		}
		snap := outer.Snapshot()
		if _, err := snap.ReadTransact(ctx, func(inner kv.ReadTransaction) (any, error) {
			require.Same(t, snap, inner)
			require.Same(t, snap, inner.Snapshot())
			return nil, nil
		}); err != nil {
			return nil, err
		}
		if err := setOne(outer, "a"); err != nil {
			return nil, err
		}
		// A MustGet panic inside a nested function comes back as an error.
		_, err := outer.Transact(ctx, func(tr kv.Transaction) (any, error) {
			panic(kv.Error{Code: kv.CodeNotCommitted})
		})
		require.Equal(t, kv.Error{Code: kv.CodeNotCommitted}, err)
		return nil, setOne(outer, "b")
	})
	require.NoError(t, err)
	require.Equal(t, []byte("1"), keyValue(t, db, "a"))
	require.Equal(t, []byte("1"), keyValue(t, db, "b"))
	require.NoError(t, setOne(db, "c"))
	require.Equal(t, []byte("1"), keyValue(t, db, "c"))
}

func TestWritesPassThrough(t *testing.T) {
	db := openDB(t, faultkv.Options{})
	ctx := testCtx(t)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(kv.Key("set"), []byte("v"))
		tr.Set(kv.Key("clear"), []byte("v"))
		tr.Clear(kv.Key("clear"))
		tr.Set(kv.Key("r/1"), []byte("v"))
		tr.ClearRange(kv.KeyRange{Begin: kv.Key("r/"), End: kv.Key("r0")})
		tr.Add(kv.Key("add"), one)
		tr.BitAnd(kv.Key("and"), []byte{0x0f})
		tr.BitOr(kv.Key("or"), []byte{0x0f})
		tr.BitXor(kv.Key("xor"), []byte{0x0f})
		tr.Max(kv.Key("max"), one)
		tr.Min(kv.Key("min"), one)
		tr.ByteMax(kv.Key("bmax"), []byte("b"))
		tr.ByteMin(kv.Key("bmin"), []byte("b"))
		tr.Set(kv.Key("cac"), []byte("x"))
		tr.CompareAndClear(kv.Key("cac"), []byte("x"))
		tr.SetVersionstampedValue(kv.Key("vsv"), append(make([]byte, 10), 0, 0, 0, 0))
		tr.SetVersionstampedKey(append(kv.Key("vsk/"), append(make([]byte, 10), 4, 0, 0, 0)...), []byte("v"))
		if _, err := tr.Get(kv.Key("a")).Get(); err != nil {
			return nil, err
		}
		if err := tr.AddReadConflictRange(kv.KeyRange{Begin: kv.Key("a"), End: kv.Key("b")}); err != nil {
			return nil, err
		}
		return nil, tr.AddWriteConflictRange(kv.KeyRange{Begin: kv.Key("a"), End: kv.Key("b")})
	})
	require.NoError(t, err)
	for key, want := range map[string][]byte{
		"set": []byte("v"), "clear": nil, "r/1": nil, "add": one, "or": {0x0f}, "xor": {0x0f},
		"max": one, "min": one, "bmax": []byte("b"), "bmin": []byte("b"), "cac": nil,
	} {
		require.Equal(t, want, keyValue(t, db, key), key)
	}
	require.Len(t, keyValue(t, db, "vsv"), 10)
	kvs, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.GetRange(kv.KeyRange{Begin: kv.Key("vsk/"), End: kv.Key("vsk0")}, kv.RangeOptions{}).GetSliceWithError()
	})
	require.NoError(t, err)
	require.Len(t, kvs, 1)
}

func TestSameSeedSameFaults(t *testing.T) {
	seed := kvtest.Seed(t)
	run := func() faultkv.Stats {
		opts := faultkv.DefaultOptions(seed)
		opts.ReadTooOld = 0.05
		db := openDB(t, opts)
		for i := range 100 {
			_, err := db.Transact(testCtx(t), incrementOnce(strconv.Itoa(i)))
			require.NoError(t, err)
		}
		return db.Stats()
	}
	first := run()
	require.Positive(t, first.Injected())
	require.Equal(t, first, run())
}

func TestStatsOf(t *testing.T) {
	db := openDB(t, faultkv.Options{})
	s, ok := faultkv.StatsOf(db)
	require.True(t, ok)
	require.Zero(t, s)
	_, ok = faultkv.StatsOf(db.Unwrap())
	require.False(t, ok)
	require.Equal(t, faultkv.Options{}, db.Options())
}
