package kvtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var atomicTests = []conformanceTest{
	onDB("Table", testAtomicTable),
}

type atomicOp func(tr kv.Transaction, key kv.KeyConvertible, param []byte)

var atomicOps = map[string]atomicOp{
	"Add":             kv.Transaction.Add,
	"BitAnd":          kv.Transaction.BitAnd,
	"BitOr":           kv.Transaction.BitOr,
	"BitXor":          kv.Transaction.BitXor,
	"Max":             kv.Transaction.Max,
	"Min":             kv.Transaction.Min,
	"ByteMax":         kv.Transaction.ByteMax,
	"ByteMin":         kv.Transaction.ByteMin,
	"CompareAndClear": kv.Transaction.CompareAndClear,
}

// testAtomicTable checks every atomic operation against FoundationDB's
// definition (API version 730: BitAnd and Min on an absent value store the
// parameter), both as read back in the same transaction and after commit.
// A nil existing value means the key is absent; a nil want means the key
// ends up absent.
func testAtomicTable(t *testing.T, db kv.Database) {
	b := func(bs ...byte) []byte { return bs }
	for _, tc := range []struct {
		name     string
		op       string
		existing []byte
		param    []byte
		want     []byte
	}{
		{"add", "Add", kv.Int64(40), kv.Int64(2), kv.Int64(42)},
		{"add to absent", "Add", nil, kv.Int64(7), kv.Int64(7)},
		{"add wraps", "Add", b(0xff, 0xff), b(0x01, 0x00), b(0x00, 0x00)},
		{"add carries", "Add", b(0xff, 0x00), b(0x01, 0x00), b(0x00, 0x01)},
		{"add shorter existing is zero extended", "Add", b(0x05), b(0x01, 0x01), b(0x06, 0x01)},
		{"add longer existing is truncated", "Add", b(0x05, 0x01, 0x09), b(0x01), b(0x06)},
		{"add negative", "Add", kv.Int64(10), kv.Int64(-1), kv.Int64(9)},
		{"and", "BitAnd", b(0x0f, 0xf0), b(0x3c, 0x3c), b(0x0c, 0x30)},
		{"and absent stores param", "BitAnd", nil, b(0x3c), b(0x3c)},
		{"and shorter existing", "BitAnd", b(0xff), b(0x0f, 0x0f), b(0x0f, 0x00)},
		{"or", "BitOr", b(0x0f, 0x00), b(0x30, 0x01), b(0x3f, 0x01)},
		{"or absent", "BitOr", nil, b(0x30), b(0x30)},
		{"xor", "BitXor", b(0xff, 0x0f), b(0x0f, 0x0f), b(0xf0, 0x00)},
		{"xor absent", "BitXor", nil, b(0x5a), b(0x5a)},
		{"max keeps larger param", "Max", kv.Int64(5), kv.Int64(9), kv.Int64(9)},
		{"max keeps larger existing", "Max", kv.Int64(9), kv.Int64(5), kv.Int64(9)},
		{"max compares little-endian", "Max", b(0x00, 0x02), b(0xff, 0x01), b(0x00, 0x02)},
		{"max absent", "Max", nil, kv.Int64(3), kv.Int64(3)},
		{"min keeps smaller param", "Min", kv.Int64(9), kv.Int64(5), kv.Int64(5)},
		{"min keeps smaller existing", "Min", kv.Int64(5), kv.Int64(9), kv.Int64(5)},
		{"min compares little-endian", "Min", b(0x00, 0x02), b(0xff, 0x01), b(0xff, 0x01)},
		{"min absent stores param", "Min", nil, kv.Int64(3), kv.Int64(3)},
		{"byte max", "ByteMax", []byte("apple"), []byte("banana"), []byte("banana")},
		{"byte max existing", "ByteMax", []byte("cherry"), []byte("banana"), []byte("cherry")},
		{"byte max prefix", "ByteMax", []byte("ab"), []byte("a"), []byte("ab")},
		{"byte max absent", "ByteMax", nil, []byte("x"), []byte("x")},
		{"byte min", "ByteMin", []byte("apple"), []byte("banana"), []byte("apple")},
		{"byte min prefix", "ByteMin", []byte("ab"), []byte("a"), []byte("a")},
		{"byte min absent", "ByteMin", nil, []byte("x"), []byte("x")},
		{"compare and clear equal", "CompareAndClear", []byte("v"), []byte("v"), nil},
		{"compare and clear different", "CompareAndClear", []byte("v"), []byte("w"), []byte("v")},
		{"compare and clear absent", "CompareAndClear", nil, []byte("v"), nil},
	} {
		subScenario(t, tc.name, func(t *testing.T, ks keyspace) {
			op := atomicOps[tc.op]
			key := ks.key("k")
			if tc.existing != nil {
				setAll(t, db, ks, "k", string(tc.existing))
			}
			tr := newTr(t, db)
			op(tr, key, tc.param)
			requireValue(t, tc.want, wait(t, tr.Get(key)), "read in the transaction")
			must(t, commit(tr))
			requireValue(t, tc.want, read(t, db, key), "read after commit")
		})
	}
}

func requireValue(t *testing.T, want, got []byte, msg string) {
	t.Helper()
	if want == nil {
		require.Nil(t, got, msg)
		return
	}
	require.Equal(t, want, got, msg)
}
