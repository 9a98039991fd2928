package kvtest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Details where a backend must behave as FoundationDB 7.3 does, because
// code that passes on a laxer backend fails on FoundationDB.
var fidelityTests = []conformanceTest{
	inScenario("VersionstampAfterCommit", testVersionstampAfterCommit),
	inScenario("WatchAddsReadConflict", testWatchAddsReadConflict),
	inScenario("RangeLimits", testRangeLimits),
	withoutBudget(onDB("SizeCountsMutationOverhead", testSizeCountsMutationOverhead)),
	withoutBudget(onDB("SizeCountsReadConflictRanges", testSizeCountsReadConflicts)),
}

// withoutBudget runs ct on databases without the budget check of
// FDBREP_KV_BUDGET: ct goes over it on purpose.
func withoutBudget(ct conformanceTest) conformanceTest {
	return conformanceTest{ct.name, func(t *testing.T, open OpenFunc) {
		ExemptFromBudget(t)
		ct.run(t, open)
	}}
}

// testVersionstampAfterCommit: GetVersionstamp must be called before
// Commit; afterwards it fails with used_during_commit, even after a
// successful commit.
func testVersionstampAfterCommit(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.Set(ks.key("k"), []byte("v"))
	must(t, commit(tr))
	_, err := tr.GetVersionstamp().Get()
	mustCode(t, err, kv.CodeUsedDuringCommit)
}

// testWatchAddsReadConflict: setting a watch reads the key with a read
// conflict range, so a read-write transaction that set a watch conflicts
// with a concurrent write of the key.
func testWatchAddsReadConflict(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("w"), "1")
	tr := newTr(t, db)
	wait(t, tr.GetReadVersion())
	w := watchOf(t, tr, ks.key("w"))
	defer w.Cancel()
	err := commitAfterWrite(t, db, ks, tr, "w", true)
	mustCode(t, err, kv.CodeNotCommitted)
	_, werr := w.Get()
	require.Error(t, werr, "the watch fails with the commit")
}

// testRangeLimits: a limit of -1 (FoundationDB's ROW_LIMIT_UNLIMITED) reads
// every row, as 0 does, but is exact_mode_without_limits in EXACT mode; a
// limit below -1 is range_limits_invalid (2012).
func testRangeLimits(t *testing.T, db kv.Database, ks keyspace) {
	for i := range 3 {
		set(t, db, ks.key(fmt.Sprint(i)), "v")
	}
	tr := newTr(t, db)
	defer tr.Cancel()
	rows, err := tr.GetRange(ks.all(), kv.RangeOptions{Limit: kv.RowLimitUnlimited}).GetSliceWithError()
	must(t, err)
	require.Len(t, rows, 3)
	_, err = tr.GetRange(ks.all(), kv.RangeOptions{Limit: -2}).GetSliceWithError()
	mustCode(t, err, kv.CodeRangeLimitsInvalid)
	_, err = tr.GetRange(ks.all(), kv.RangeOptions{Limit: kv.RowLimitUnlimited, Mode: kv.StreamingModeExact}).GetSliceWithError()
	mustCode(t, err, kv.CodeExactModeWithoutLimits)
}

// testSizeCountsMutationOverhead: FoundationDB counts every mutation and
// every write conflict range with its overhead, so 50,000 sets of 20-byte
// keys and 100-byte values (6 MB of keys and values) are about 12.4 MB:
// transaction_too_large.
func testSizeCountsMutationOverhead(t *testing.T, db kv.Database) {
	value := make([]byte, 100)
	_, _, err := transactRuns(ctxBg, db, func(tr kv.Transaction, _ int) (any, error) {
		for i := range 50_000 {
			tr.Set(kv.Key(fmt.Sprintf("overhead/%011d", i)), value)
		}
		return nil, nil
	})
	require.True(t, kv.HasCode(err, kv.CodeTransactionTooLarge), "got %v", err)
	require.Empty(t, readAll(t, db, kv.KeyRange{Begin: kv.Key("overhead/"), End: kv.Key("overhead0")}))
}

// testSizeCountsReadConflicts: read conflict ranges count too: 9 MB of
// values commit alone, not with 100 point reads of 5,000-byte keys besides
// (each adds a conflict range of about 10 kB).
func testSizeCountsReadConflicts(t *testing.T, db kv.Database) {
	value := make([]byte, kv.MaxValueSize)
	write := func(tr kv.Transaction) {
		for i := range 90 {
			tr.Set(kv.Key(fmt.Sprintf("reads/%02d", i)), value)
		}
	}
	_, _, err := transactRuns(ctxBg, db, func(tr kv.Transaction, _ int) (any, error) {
		write(tr)
		return nil, nil
	})
	require.NoError(t, err, "9 MB of values alone commit")
	_, _, err = transactRuns(ctxBg, db, func(tr kv.Transaction, _ int) (any, error) {
		write(tr)
		reads := make([]kv.FutureByteSlice, 100)
		for i := range reads {
			key := fmt.Appendf(nil, "reads/absent/%03d/", i)
			reads[i] = tr.Get(kv.Key(append(key, bytes.Repeat([]byte("k"), 5_000-len(key))...)))
		}
		for _, f := range reads {
			if _, err := f.Get(); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	require.True(t, kv.HasCode(err, kv.CodeTransactionTooLarge), "got %v", err)
}
