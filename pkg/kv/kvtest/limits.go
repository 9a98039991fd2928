package kvtest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var limitTests = []conformanceTest{
	onDB("Sizes", testSizeLimits),
	onDB("SystemKeys", testSystemKeys),
	withoutBudget(onDB("TransactionTooLarge", testTransactionTooLarge)),
	withoutBudget(conformanceTest{"TransactionTooOld", testTransactionTooOld}),
	onDB("Timeout", testTimeout),
	onDB("RetryLimit", testRetryLimit),
	onDB("MaxRetryDelay", testMaxRetryDelay),
}

// testSizeLimits: keys and values at FoundationDB's limits commit; one byte
// more fails the commit with key_too_large or value_too_large.
func testSizeLimits(t *testing.T, db kv.Database) {
	for _, tc := range []struct {
		name       string
		keyLen     int
		valueLen   int
		code       int
		atomicOnly bool
	}{
		{"largest key", kv.MaxKeySize, 1, 0, false},
		{"key too large", kv.MaxKeySize + 1, 1, kv.CodeKeyTooLarge, false},
		{"largest value", 10, kv.MaxValueSize, 0, false},
		{"value too large", 10, kv.MaxValueSize + 1, kv.CodeValueTooLarge, false},
		{"atomic key too large", kv.MaxKeySize + 1, 8, kv.CodeKeyTooLarge, true},
		{"atomic param too large", 10, kv.MaxValueSize + 1, kv.CodeValueTooLarge, true},
	} {
		subScenario(t, tc.name, func(t *testing.T, ks keyspace) {
			key := append(ks.key(""), bytes.Repeat([]byte("k"), tc.keyLen-len(ks))...)
			value := bytes.Repeat([]byte("v"), tc.valueLen)
			tr := newTr(t, db)
			if tc.atomicOnly {
				tr.BitOr(key, value)
			} else {
				tr.Set(key, value)
			}
			err := commit(tr)
			if tc.code != 0 {
				mustCode(t, err, tc.code)
				return
			}
			must(t, err)
			require.Len(t, read(t, db, key), tc.valueLen)
		})
	}
}

// testSystemKeys: writes at or after "\xff" fail the commit with
// key_outside_legal_range, but sets and clears in the special key space
// ("\xff\xff" on) with special_keys_write_disabled.
func testSystemKeys(t *testing.T, db kv.Database) {
	for _, tc := range []struct {
		name  string
		write func(tr kv.Transaction)
		code  int
	}{
		{"set", func(tr kv.Transaction) { tr.Set(kv.Key("\xffsystem"), []byte("v")) }, kv.CodeKeyOutsideLegalRange},
		{"clear", func(tr kv.Transaction) { tr.Clear(kv.Key("\xff/x")) }, kv.CodeKeyOutsideLegalRange},
		{"atomic", func(tr kv.Transaction) { tr.Add(kv.Key("\xff"), kv.Int64(1)) }, kv.CodeKeyOutsideLegalRange},
		{"clear range past user keys", func(tr kv.Transaction) {
			tr.ClearRange(kv.KeyRange{Begin: kv.Key("a"), End: kv.Key("\xff\x01")})
		}, kv.CodeKeyOutsideLegalRange},
		{"special set", func(tr kv.Transaction) { tr.Set(kv.Key("\xff\xff/x"), []byte("v")) }, kv.CodeSpecialKeysWriteDisabled},
		{"special clear", func(tr kv.Transaction) { tr.Clear(kv.Key("\xff\xff")) }, kv.CodeSpecialKeysWriteDisabled},
		{"special atomic", func(tr kv.Transaction) { tr.Max(kv.Key("\xff\xff/x"), []byte{1}) }, kv.CodeKeyOutsideLegalRange},
		{"special clear range", func(tr kv.Transaction) {
			tr.ClearRange(kv.KeyRange{Begin: kv.Key("\xff\xff/a"), End: kv.Key("\xff\xff/b")})
		}, kv.CodeSpecialKeysWriteDisabled},
	} {
		subScenario(t, tc.name, func(t *testing.T, ks keyspace) {
			tr := newTr(t, db)
			tc.write(tr)
			mustCode(t, commit(tr), tc.code)
		})
	}
}

// testTransactionTooLarge: more than MaxTransactionSize bytes of mutations
// fail the commit with transaction_too_large, which is not retryable.
func testTransactionTooLarge(t *testing.T, db kv.Database) {
	value := bytes.Repeat([]byte("v"), kv.MaxValueSize)
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, _ int) (any, error) {
		for i := range kv.MaxTransactionSize/kv.MaxValueSize + 1 {
			tr.Set(kv.Key(fmt.Sprintf("big/%04d", i)), value)
		}
		return nil, nil
	})
	require.True(t, kv.HasCode(err, kv.CodeTransactionTooLarge), "got %v", err)
	require.Empty(t, readAll(t, db, kv.KeyRange{Begin: kv.Key("big/"), End: kv.Key("big0")}))
	// A fault injected before the size check may have retried the function.
	require.GreaterOrEqual(t, calls, 1)
}

// testTransactionTooOld: a transaction older than the five second lifetime
// cannot commit (transaction_too_old), which the retry loop retries. The
// embedded store refuses its reads too; FoundationDB may still answer them
// while its storage servers keep the version (they must keep it five
// seconds, and may keep it longer).
func testTransactionTooOld(t *testing.T, open OpenFunc) {
	if testing.Short() {
		t.Skip("waits out the five second transaction lifetime")
	}
	db := open(t)
	scenario(t, func(ks keyspace) {
		set(t, db, ks.key("k"), "1")
		tr := newTr(t, db)
		require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("k"))))
		tr.Set(ks.key("k"), []byte("2"))
		// Waiting out a deadline is the behaviour under test.
		time.Sleep(kv.MaxTransactionLifetimeMillis*time.Millisecond + 500*time.Millisecond)
		_, err := tr.Get(ks.key("other")).Get()
		if !onFoundationDB(db) || err != nil {
			mustCode(t, err, kv.CodeTransactionTooOld)
		}
		mustCode(t, commit(tr), kv.CodeTransactionTooOld)
		require.Equal(t, []byte("1"), read(t, db, ks.key("k")))
		// OnError retries it: the reset transaction has a new read version.
		_, err = tr.OnError(kv.Error{Code: kv.CodeTransactionTooOld}).Get()
		require.NoError(t, err)
		require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("k"))))
		tr.Set(ks.key("k"), []byte("3"))
		must(t, commit(tr))
		require.Equal(t, []byte("3"), read(t, db, ks.key("k")))
	})
}

// testTimeout: with SetTimeout, operations fail with transaction_timed_out
// once the time has passed, and the retry loop does not retry it.
func testTimeout(t *testing.T, db kv.Database) {
	_, _, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
		if run > 10 {
			return nil, fmt.Errorf("transaction_timed_out was retried %d times", run-1)
		}
		if err := tr.Options().SetTimeout(1); err != nil {
			return nil, err
		}
		time.Sleep(20 * time.Millisecond) // let the 1 ms timeout pass
		tr.Get(kv.Key("k")).MustGet()
		tr.Set(kv.Key("k"), []byte("v"))
		return nil, nil
	})
	require.True(t, kv.HasCode(err, kv.CodeTransactionTimedOut), "got %v", err)
	require.Nil(t, read(t, db, kv.Key("k")))

	tr := newTr(t, db)
	require.NoError(t, tr.Options().SetTimeout(0), "0 disables the timeout")
}

// testRetryLimit: with SetRetryLimit(n), OnError gives up after n retries.
func testRetryLimit(t *testing.T, db kv.Database) {
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, _ int) (any, error) {
		if err := tr.Options().SetRetryLimit(2); err != nil {
			return nil, err
		}
		return nil, kv.Error{Code: kv.CodeNotCommitted}
	})
	require.True(t, kv.HasCode(err, kv.CodeNotCommitted), "got %v", err)
	require.Equal(t, 3, calls, "one try and two retries")
}

func testMaxRetryDelay(t *testing.T, db kv.Database) {
	_, calls, err := transactRuns(ctxBg, db, func(tr kv.Transaction, run int) (any, error) {
		if err := tr.Options().SetMaxRetryDelay(1); err != nil {
			return nil, err
		}
		if run < 5 {
			return nil, kv.Error{Code: kv.CodeNotCommitted}
		}
		return nil, nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 5)
}
