package kvtest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var retryLoopTests = []conformanceTest{
	onDB("RetriesRetryableErrors", testRetryRetryable),
	onDB("ReturnsOtherErrors", testRetryReturnsOthers),
	onDB("MustGetPanicsBecomeErrors", testRetryPanics),
	onDB("CommitUnknownResultRunsAgain", testRetryCommitUnknown),
	onDB("NestedTransactJoins", testNestedTransact),
	onDB("ReadTransact", testReadTransact),
	onDB("TypedResults", testTypedResults),
	onDB("LocalsLiveWithTheTransaction", testLocals),
	onDB("LocalsAdoptACommittedAttempt", testLocalsAdopt),
}

// testLocalsAdopt: an attempt whose commit is reported unknown keeps its
// hooks; the retry that finds its write adopts them, so they run once, when
// the retry commits (a retry that adopts them and fails leaves them to the
// next). An attempt that surely failed leaves nothing to adopt.
func testLocalsAdopt(t *testing.T, db kv.Database) {
	key := kv.Key("adopt")
	var hooks []int
	found := 0
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
		l := tr.Locals()
		if v := tr.Get(key).MustGet(); v != nil {
			l.Adopt(int(v[0]))
			l.Adopt(int(v[0])) // adopting twice runs the hooks once
			if found++; found == 1 {
				return nil, kv.Error{Code: kv.CodeNotCommitted}
			}
			return nil, nil
		}
		n := l.Attempt()
		tr.Set(key, []byte{byte(n)})
		l.OnCommit(func() { hooks = append(hooks, n) })
		switch run {
		case 1: // fails for sure: nothing kept
			return nil, kv.Error{Code: kv.CodeNotCommitted}
		case 2: // committed, then reported unknown
			if _, err := tr.Commit().Get(); err != nil {
				return nil, err
			}
			return nil, kv.Error{Code: kv.CodeCommitUnknownResult}
		}
		return nil, nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 3) // 4 without injected faults: one may cut the story short
	require.Len(t, hooks, 1, "the committed attempt's hooks run once")
	v := read(t, db, key)
	require.Equal(t, []int{int(v[0])}, hooks, "and they are the hooks of the attempt that wrote")
	require.NotZero(t, hooks[0], "the attempt that surely failed adopts nothing")
}

type localsKey struct{}

// testLocals: a Transaction's Locals keep their values across the retries of
// its loop (a retry after commit_unknown_result finds what the committed
// attempt chose), run the hooks of the attempt that commits once, before
// Transact returns, and of no other attempt (nested functions' hooks with
// the outer commit); Reset drops them.
func testLocals(t *testing.T, db kv.Database) {
	var chosen []any
	var hooks []int
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
		l := tr.Locals()
		if _, ok := l.Value(localsKey{}); !ok {
			l.SetValue(localsKey{}, run)
		}
		v, _ := l.Value(localsKey{})
		chosen = append(chosen, v)
		l.OnCommit(func() { hooks = append(hooks, run) })
		tr.Set(kv.Key("locals"), []byte("v"))
		if run == 1 {
			// Committed, then reported unknown: its hooks must not run.
			if _, err := tr.Commit().Get(); err != nil {
				return nil, err
			}
			return nil, kv.Error{Code: kv.CodeCommitUnknownResult}
		}
		_, err := tr.Transact(ctxBg, func(inner kv.Transaction) (any, error) {
			inner.Locals().OnCommit(func() { hooks = append(hooks, -run) })
			return nil, nil
		})
		return nil, err
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 2)
	for _, v := range chosen {
		require.Equal(t, 1, v, "every attempt sees the first one's choice")
	}
	require.Equal(t, []int{calls, -calls}, hooks, "the committing attempt's hooks, once, with the nested function's")

	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	defer tr.Cancel()
	tr.Locals().SetValue(localsKey{}, "x")
	tr.Locals().OnCommit(func() { t.Error("a hook survived Reset") })
	tr.Reset()
	_, ok := tr.Locals().Value(localsKey{})
	require.False(t, ok, "Reset drops the values")
	tr.Locals().Committed()
}

// testRetryRetryable: the loop retries retryable errors from the function
// and discards the failed attempt's writes.
func testRetryRetryable(t *testing.T, db kv.Database) {
	for _, code := range []int{kv.CodeNotCommitted, kv.CodeTransactionTooOld, kv.CodeFutureVersion, kv.CodeProcessBehind} {
		t.Run(kv.Error{Code: code}.Name(), func(t *testing.T) {
			key := kv.Key("retry/" + kv.Error{Code: code}.Name())
			ret, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
				tr.Set(append(key, byte('0'+run)), []byte("v"))
				if run < 3 {
					return nil, kv.Error{Code: code}
				}
				return "done", nil
			})
			require.NoError(t, err)
			require.Equal(t, "done", ret)
			require.GreaterOrEqual(t, calls, 3)
			r, err := kv.PrefixRange(key)
			require.NoError(t, err)
			got := readAll(t, db, r)
			require.NotEmpty(t, got)
			for _, e := range got {
				require.GreaterOrEqual(t, e.Key[len(key)], byte('3'), "a failed attempt's write survived")
			}
		})
	}
}

var errApp = errors.New("application error")

// testRetryReturnsOthers: non-retryable errors end the loop at once and come
// back unchanged; nothing is committed.
func testRetryReturnsOthers(t *testing.T, db kv.Database) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"application error", errApp},
		{"wrapped application error", errors.Join(errApp, errors.New("context"))},
		{"non-retryable kv.Error", kv.Error{Code: kv.CodeClientInvalidOperation}},
		{"transaction_timed_out", kv.Error{Code: kv.CodeTransactionTimedOut}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, _ int) (any, error) {
				tr.Set(kv.Key("others"), []byte("v"))
				return nil, tc.err
			})
			require.Equal(t, tc.err, err)
			require.Equal(t, 1, calls)
			require.Nil(t, read(t, db, kv.Key("others")))
		})
	}
}

// testRetryPanics: a panic with an error (as MustGet raises) is handled like
// a returned error; other panics propagate.
func testRetryPanics(t *testing.T, db kv.Database) {
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
		if run == 1 {
			kv.ReadyFuture[[]byte](nil, kv.Error{Code: kv.CodeNotCommitted}).MustGet()
		}
		return nil, nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 2)

	_, err = db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		panic(kv.Error{Code: kv.CodeInvertedRange})
	})
	require.Equal(t, kv.Error{Code: kv.CodeInvertedRange}, err)

	_, err = db.ReadTransact(ctxBg, func(tr kv.ReadTransaction) (any, error) {
		panic(errApp)
	})
	require.Equal(t, errApp, err)

	require.PanicsWithValue(t, "not an error", func() {
		_, _ = db.Transact(ctxBg, func(tr kv.Transaction) (any, error) { panic("not an error") })
	})
}

// testRetryCommitUnknown: after commit_unknown_result the loop runs the
// function again (it must be idempotent).
func testRetryCommitUnknown(t *testing.T, db kv.Database) {
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
		tr.Set(kv.Key("unknown"), []byte("v"))
		if run == 1 {
			return nil, kv.Error{Code: kv.CodeCommitUnknownResult}
		}
		return nil, nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 2)
	require.Equal(t, []byte("v"), read(t, db, kv.Key("unknown")))
}

// testNestedTransact: Transact and ReadTransact on a Transaction (or a
// snapshot) run the function once in that transaction; the outer loop
// commits everything atomically.
func testNestedTransact(t *testing.T, db kv.Database) {
	setOne := func(tor kv.Transactor, key, value string) error {
		_, err := tor.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
			tr.Set(kv.Key(key), []byte(value))
			return nil, nil
		})
		return err
	}
	getOne := func(tor kv.ReadTransactor, key string) ([]byte, error) {
		return kv.ReadTransact(ctxBg, tor, func(tr kv.ReadTransaction) ([]byte, error) {
			return tr.Get(kv.Key(key)).Get()
		})
	}
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		if err := setOne(tr, "n/a", "1"); err != nil {
			return nil, err
		}
		if err := setOne(tr, "n/b", "2"); err != nil {
			return nil, err
		}
		v, err := getOne(tr, "n/a")
		if err != nil {
			return nil, err
		}
		if string(v) != "1" {
			return nil, errors.New("nested write not visible to the caller")
		}
		v, err = getOne(tr.Snapshot(), "n/b")
		if err != nil {
			return nil, err // a retryable error goes back to the retry loop
		}
		if string(v) != "2" {
			return nil, errors.New("nested write not visible to a snapshot")
		}
		return nil, nil
	})
	require.NoError(t, err)
	require.Len(t, readAll(t, db, kv.KeyRange{Begin: kv.Key("n/"), End: kv.Key("n0")}), 2)

	// A nested function runs once: its error, even a retryable one, comes
	// back to the caller instead of being retried inside.
	calls := 0
	tr := newTr(t, db)
	_, err = tr.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		calls++
		return nil, kv.Error{Code: kv.CodeNotCommitted}
	})
	require.Equal(t, kv.Error{Code: kv.CodeNotCommitted}, err)
	require.Equal(t, 1, calls)
	_, err = tr.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		panic(kv.Error{Code: kv.CodeNotCommitted})
	})
	require.Equal(t, kv.Error{Code: kv.CodeNotCommitted}, err, "a nested panic becomes an error")

	// A nested Transact does not commit.
	tr = newTr(t, db)
	require.NoError(t, setOne(tr, "n/uncommitted", "x"))
	require.Nil(t, read(t, db, kv.Key("n/uncommitted")))

	// A cancelled context does not stop a nested function: the caller's loop
	// owns the context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ret, err := tr.ReadTransact(ctx, func(kv.ReadTransaction) (any, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, 7, ret)
}

// testReadTransact: the read-only loop retries, returns results and never
// commits.
func testReadTransact(t *testing.T, db kv.Database) {
	set(t, db, kv.Key("r"), "v")
	calls := 0
	ret, err := db.ReadTransact(ctxBg, func(tr kv.ReadTransaction) (any, error) {
		calls++
		if calls == 1 {
			return nil, kv.Error{Code: kv.CodeTransactionTooOld}
		}
		return tr.Get(kv.Key("r")).Get()
	})
	require.NoError(t, err)
	require.Equal(t, []byte("v"), ret)
	require.GreaterOrEqual(t, calls, 2)
}

func testTypedResults(t *testing.T, db kv.Database) {
	n, err := kv.Transact(ctxBg, db, func(tr kv.Transaction) (int, error) {
		tr.Set(kv.Key("typed"), []byte("v"))
		return 42, nil
	})
	require.NoError(t, err)
	require.Equal(t, 42, n)
	v, err := kv.ReadTransact(ctxBg, db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(kv.Key("typed")).Get()
	})
	require.NoError(t, err)
	require.Equal(t, []byte("v"), v)
	_, err = kv.Transact(ctxBg, db, func(tr kv.Transaction) (string, error) { return "", errApp })
	require.Equal(t, errApp, err)
}
