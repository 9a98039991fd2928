package embedded

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func le(v uint64, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, v)
	return b[:n]
}

func TestApplyAtomic(t *testing.T) {
	b := func(bs ...byte) []byte { return bs }
	for _, tc := range []struct {
		name     string
		op       opType
		existing []byte // nil: absent
		param    []byte
		want     []byte // nil: absent
	}{
		{"add", opAdd, le(40, 8), le(2, 8), le(42, 8)},
		{"add absent", opAdd, nil, b(7, 0), b(7, 0)},
		{"add empty existing", opAdd, []byte{}, b(7), b(7)},
		{"add empty param", opAdd, b(1, 2), []byte{}, []byte{}},
		{"add carries", opAdd, b(0xff, 0x00), b(0x01, 0x00), b(0x00, 0x01)},
		{"add wraps", opAdd, b(0xff, 0xff), b(0x01, 0x00), b(0x00, 0x00)},
		{"add extends existing", opAdd, b(0x05), b(0x01, 0x01), b(0x06, 0x01)},
		{"add truncates existing", opAdd, b(0x05, 0x01, 0x09), b(0x01), b(0x06)},
		{"and", opBitAnd, b(0x0f, 0xf0), b(0x3c, 0x3c), b(0x0c, 0x30)},
		{"and absent stores param", opBitAnd, nil, b(0x3c), b(0x3c)},
		{"and empty existing", opBitAnd, []byte{}, b(0x3c), b(0x00)},
		{"and short existing", opBitAnd, b(0xff), b(0x0f, 0x0f), b(0x0f, 0x00)},
		{"or", opBitOr, b(0x0f, 0x00), b(0x30, 0x01), b(0x3f, 0x01)},
		{"or absent", opBitOr, nil, b(0x30), b(0x30)},
		{"or long existing", opBitOr, b(0x01, 0x02), b(0x10), b(0x11)},
		{"xor", opBitXor, b(0xff, 0x0f), b(0x0f, 0x0f), b(0xf0, 0x00)},
		{"xor short existing", opBitXor, b(0xff), b(0x0f, 0x0f), b(0xf0, 0x0f)},
		{"max param larger", opMax, le(5, 8), le(9, 8), le(9, 8)},
		{"max existing larger", opMax, le(9, 8), le(5, 8), le(9, 8)},
		{"max little-endian", opMax, b(0x00, 0x02), b(0xff, 0x01), b(0x00, 0x02)},
		{"max absent", opMax, nil, le(3, 8), le(3, 8)},
		{"max existing extended", opMax, b(0x09), b(0x05, 0x00), b(0x09, 0x00)},
		{"max existing truncated", opMax, b(0x09, 0x07), b(0x05), b(0x09)},
		{"min param smaller", opMin, le(9, 8), le(5, 8), le(5, 8)},
		{"min existing smaller", opMin, le(5, 8), le(9, 8), le(5, 8)},
		{"min little-endian", opMin, b(0x00, 0x02), b(0xff, 0x01), b(0xff, 0x01)},
		{"min absent stores param", opMin, nil, le(3, 8), le(3, 8)},
		{"min empty existing is zero", opMin, []byte{}, b(0x03), b(0x00)},
		{"byte max", opByteMax, []byte("apple"), []byte("banana"), []byte("banana")},
		{"byte max existing", opByteMax, []byte("cherry"), []byte("banana"), []byte("cherry")},
		{"byte max prefix", opByteMax, []byte("ab"), []byte("a"), []byte("ab")},
		{"byte max absent", opByteMax, nil, []byte("x"), []byte("x")},
		{"byte min", opByteMin, []byte("apple"), []byte("banana"), []byte("apple")},
		{"byte min prefix", opByteMin, []byte("ab"), []byte("a"), []byte("a")},
		{"byte min absent", opByteMin, nil, []byte("x"), []byte("x")},
		{"compare and clear equal", opCompareAndClear, []byte("v"), []byte("v"), nil},
		{"compare and clear different", opCompareAndClear, []byte("v"), []byte("w"), []byte("v")},
		{"compare and clear absent", opCompareAndClear, nil, []byte("v"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := applyAtomic(tc.op, tc.existing, tc.existing != nil, tc.param)
			if tc.want == nil {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.want, got)

			// The same through the store: in the transaction and after commit.
			db := openMem(t)
			if tc.existing != nil {
				put(t, db, "k", string(tc.existing))
			}
			tr := newTr(t, db)
			atomicByOp[tc.op](tr, kv.Key("k"), tc.param)
			v, err := tr.Get(kv.Key("k")).Get()
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			_, err = tr.Commit().Get()
			require.NoError(t, err)
			v2, ok := read(t, db, "k")
			require.True(t, ok)
			require.Equal(t, string(tc.want), v2)
		})
	}
}

var atomicByOp = map[opType]func(kv.Transaction, kv.KeyConvertible, []byte){
	opAdd: kv.Transaction.Add, opBitAnd: kv.Transaction.BitAnd, opBitOr: kv.Transaction.BitOr,
	opBitXor: kv.Transaction.BitXor, opMax: kv.Transaction.Max, opMin: kv.Transaction.Min,
	opByteMax: kv.Transaction.ByteMax, opByteMin: kv.Transaction.ByteMin,
	opCompareAndClear: kv.Transaction.CompareAndClear,
}

// TestConcurrentAdds: atomic adds never conflict and none is lost, also
// when many land in one batch.
func TestConcurrentAdds(t *testing.T) {
	db := openMem(t)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
					tr.Add(kv.Key("n"), le(1, 8))
					return nil, nil
				})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	v, _ := read(t, db, "n")
	require.Equal(t, uint64(workers*each), binary.LittleEndian.Uint64([]byte(v)))
}
