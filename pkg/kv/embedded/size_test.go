package embedded

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Mutation sizes as FoundationDB 7.3's read-your-writes layer sends them:
// kv.MutationOverhead (56) plus the key and parameter of each mutation it
// produces from its write map.
func TestMutationsSize(t *testing.T) {
	const o = kv.MutationOverhead
	add8, add4 := kv.Int64(1), []byte{1, 0, 0, 0}
	tests := []struct {
		name string
		muts []mutation
		want int
	}{
		{"one set", []mutation{{op: opSet, key: []byte("key"), param: []byte("value")}}, o + 3 + 5},
		{"a second set replaces the first", []mutation{
			{op: opSet, key: []byte("key"), param: []byte("value")},
			{op: opSet, key: []byte("key"), param: []byte("v")},
		}, o + 3 + 1},
		{"point clear is a clear range", []mutation{{op: opClear, key: []byte("key")}}, o + 3 + 4},
		{"clear then set: both", []mutation{
			{op: opClear, key: []byte("key")},
			{op: opSet, key: []byte("key"), param: []byte("v")},
		}, o + 3 + 4 + o + 3 + 1},
		{"set then clear: the clear", []mutation{
			{op: opSet, key: []byte("key"), param: []byte("v")},
			{op: opClear, key: []byte("key")},
		}, o + 3 + 4},
		{"adjacent clears merge", []mutation{
			{op: opClear, key: []byte("a")},
			{op: opClear, key: []byte("a\x00")},
			{op: opClearRange, key: []byte("a\x00\x00"), param: []byte("b")},
		}, o + 1 + 1},
		{"separate clears stay apart", []mutation{
			{op: opClear, key: []byte("a")},
			{op: opClear, key: []byte("c")},
		}, 2 * (o + 1 + 2)},
		{"clear range drops the writes inside", []mutation{
			{op: opSet, key: []byte("b1"), param: []byte("v")},
			{op: opClearRange, key: []byte("b"), param: []byte("c")},
		}, o + 1 + 1},
		{"adds of one length merge", []mutation{
			{op: opAdd, key: []byte("n"), param: add8},
			{op: opAdd, key: []byte("n"), param: add8},
		}, o + 1 + 8},
		{"adds of different lengths do not", []mutation{
			{op: opAdd, key: []byte("n"), param: add8},
			{op: opAdd, key: []byte("n"), param: add4},
		}, o + 1 + 8 + o + 1 + 4},
		{"and of different lengths merges", []mutation{
			{op: opBitAnd, key: []byte("n"), param: add8},
			{op: opBitAnd, key: []byte("n"), param: add4},
		}, o + 1 + 4},
		{"different atomic ops stack", []mutation{
			{op: opAdd, key: []byte("n"), param: add8},
			{op: opMax, key: []byte("n"), param: add8},
		}, 2 * (o + 1 + 8)},
		{"atomic op on a set value is a set", []mutation{
			{op: opSet, key: []byte("n"), param: add4},
			{op: opAdd, key: []byte("n"), param: add8},
		}, o + 1 + 8},
		{"atomic op on a cleared key is a set after the clear", []mutation{
			{op: opClearRange, key: []byte("a"), param: []byte("z")},
			{op: opAdd, key: []byte("n"), param: add8},
		}, o + 1 + 1 + o + 1 + 8},
		{"compare and clear of a set value clears the key", []mutation{
			{op: opSet, key: []byte("n"), param: []byte("x")},
			{op: opCompareAndClear, key: []byte("n"), param: []byte("x")},
		}, o + 1 + 2},
		{"versionstamped value counts its offset", []mutation{
			{op: opVersionstampedValue, key: []byte("k"), param: make([]byte, 10)},
		}, o + 1 + 10 + 4},
		{"writes after a versionstamped value stack", []mutation{
			{op: opVersionstampedValue, key: []byte("k"), param: make([]byte, 10)},
			{op: opSet, key: []byte("k"), param: []byte("v")},
		}, o + 1 + 14 + o + 1 + 1},
		{"versionstamped keys count each, with the offset", []mutation{
			{op: opVersionstampedKey, key: make([]byte, 12), param: []byte("v")},
			{op: opVersionstampedKey, key: make([]byte, 12), param: []byte("v")},
		}, 2 * (o + 12 + 4 + 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, mutationsSize(tc.muts))
			require.GreaterOrEqual(t, transactionSizeAtMost(tc.muts, nil, nil), tc.want)
		})
	}
}

// transactionSizeAtMost bounds the exact size of any mutations: random ones
// on a few keys, which coalesce, clear and stack in every way.
func TestTransactionSizeAtMostBounds(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ops := []opType{opSet, opClear, opClearRange, opAdd, opBitAnd, opBitOr, opBitXor, opMax, opMin,
		opByteMax, opByteMin, opCompareAndClear, opVersionstampedKey, opVersionstampedValue}
	bytesOf := func(n int) []byte {
		b := make([]byte, rng.IntN(n))
		for i := range b {
			b[i] = byte(rng.IntN(3))
		}
		return b
	}
	for range 2000 {
		var muts []mutation
		for range rng.IntN(12) {
			mu := mutation{op: ops[rng.IntN(len(ops))], key: bytesOf(3), param: bytesOf(10)}
			if mu.op == opClearRange {
				mu.param = append(append([]byte{}, mu.key...), bytesOf(3)...)
			}
			muts = append(muts, mu)
		}
		require.GreaterOrEqual(t, transactionSizeAtMost(muts, nil, nil), mutationsSize(muts), "%+v", muts)
	}
}

// The limit falls exactly where FoundationDB's does: a commit of exactly
// kv.MaxTransactionSize bytes, as FoundationDB counts them, succeeds; one
// byte more fails with transaction_too_large.
func TestTransactionSizeLimitIsExact(t *testing.T) {
	const perKey = kv.MutationOverhead + 4 + kv.MaxValueSize + kv.ConflictRangeOverhead + 4 + 5 // "b/NN"
	for _, extra := range []int{0, 1} {
		t.Run(fmt.Sprintf("%+d", extra), func(t *testing.T) {
			db := openMem(t)
			last := kv.MaxTransactionSize - 99*perKey - (kv.MutationOverhead + 4 + kv.ConflictRangeOverhead + 4 + 5) + extra
			_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
				for i := range 99 {
					tr.Set(kv.Key(fmt.Sprintf("b/%02d", i)), bytes.Repeat([]byte("v"), kv.MaxValueSize))
				}
				tr.Set(kv.Key("b/99"), bytes.Repeat([]byte("v"), last))
				return nil, nil
			})
			if extra == 0 {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, kv.CodeTransactionTooLarge)
		})
	}
}

// Read conflict ranges count; a versionstamped key's landing range does
// not, as FoundationDB's client does not send it.
func TestTransactionSizeCountsConflictRanges(t *testing.T) {
	db := openMem(t)
	tr := newTr(t, db).(*transaction)
	_, err := tr.Get(kv.Key("r1")).Get()
	require.NoError(t, err)
	_, err = tr.GetRange(kv.KeyRange{Begin: kv.Key("s"), End: kv.Key("t")}, kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	tr.Set(kv.Key("w"), []byte("v"))
	tr.SetVersionstampedKey(kv.Key(append(make([]byte, 10), 0, 0, 0, 0)), []byte("v"))
	reads, writes := coalesce(tr.reads), coalesce(tr.wconf)
	got := transactionSize(tr.buf.muts, reads, writes)
	o, c := kv.MutationOverhead, kv.ConflictRangeOverhead
	want := (c + 2 + 3) + (c + 1 + 1) + // reads: [r1, r1\x00) and [s, t)
		(c + 1 + 2) + // writes: [w, w\x00)
		(o + 1 + 1) + (o + 14 + 1) // set, versionstamped key
	require.Equal(t, want, got)
}
