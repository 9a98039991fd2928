package tuple

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Append functions write what Pack writes, and a Reader reads it back
// element by element; a read of another type leaves the Reader in place.
func TestAppendAndReader(t *testing.T) {
	vs := Versionstamp{TransactionVersion: [10]byte{1, 0, 3}, UserVersion: 9}
	ints := []int64{0, 1, -1, 255, -256, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64}
	var b []byte
	want := Tuple{}
	for _, i := range ints {
		b, want = AppendInt(b, i), append(want, i)
	}
	b = AppendNil(AppendBytes(AppendBool(AppendBool(b, true), false), []byte{0, 'a', 0}))
	b = AppendVersionstamp(AppendString(b, "s\x00"), vs)
	want = append(want, true, false, []byte{0, 'a', 0}, nil, "s\x00", vs)
	require.Equal(t, want.Pack(), b)

	r := NewReader(b)
	for _, i := range ints {
		_, ok := r.Bool()
		require.False(t, ok)
		got, ok := r.Int()
		require.True(t, ok)
		require.Equal(t, i, got)
	}
	v, ok := r.Bool()
	require.True(t, ok && v)
	v, ok = r.Bool()
	require.True(t, ok && !v)
	require.False(t, r.Nil())
	by, ok := r.Bytes()
	require.True(t, ok)
	require.Equal(t, []byte{0, 'a', 0}, by)
	require.True(t, r.Nil())
	_, ok = r.Int()
	require.False(t, ok)
	require.True(t, r.Skip())
	got, ok := r.Versionstamp()
	require.True(t, ok)
	require.Equal(t, vs, got)
	require.True(t, r.Done())
	require.False(t, r.Skip())
	require.False(t, r.Nil())

	// Integers past an int64 are not Int's.
	r = NewReader(Tuple{uint64(math.MaxUint64)}.Pack())
	_, ok = r.Int()
	require.False(t, ok)
	// Truncated input.
	r = NewReader([]byte{0x16, 1})
	_, ok = r.Int()
	require.False(t, ok)
}
