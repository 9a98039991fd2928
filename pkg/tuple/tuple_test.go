package tuple

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

func bigFromString(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 0)
	if !ok {
		panic("bad big.Int literal " + s)
	}
	return v
}

func TestPackKnownEncodings(t *testing.T) {
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	tests := []struct {
		name string
		in   TupleElement
		hex  string
	}{
		{"nil", nil, "00"},
		{"bytes with zero", []byte("foo\x00bar"), "01 666f6f 00ff 626172 00"},
		{"kv.Key as bytes", kv.Key("ab"), "01 6162 00"},
		{"unicode string", "F\u00d4O\u0000bar", "02 46c3944f 00ff 626172 00"},
		{"empty string", "", "02 00"},
		{"nested with nil and empty", Tuple{[]byte("foo\x00bar"), nil, Tuple{}}, "05 01666f6f00ff62617200 00ff 0500 00"},
		{"zero", 0, "14"},
		{"one", int8(1), "15 01"},
		{"255", uint8(255), "15 ff"},
		{"256", int16(256), "16 0100"},
		{"minus one", int32(-1), "13 fe"},
		{"minus 255", -255, "13 00"},
		{"minus 256", -256, "12 feff"},
		{"max int64", int64(math.MaxInt64), "1c 7fffffffffffffff"},
		{"min int64", int64(math.MinInt64), "0c 7fffffffffffffff"},
		{"max uint64", uint64(math.MaxUint64), "1c ffffffffffffffff"},
		{"uint", uint(7), "15 07"},
		{"uint16", uint16(7), "15 07"},
		{"uint32", uint32(7), "15 07"},
		{"big small", big.NewInt(-3), "13 fc"},
		{"big value type", *big.NewInt(300), "16 012c"},
		{"big -(2^64-1)", new(big.Int).Neg(new(big.Int).Sub(two64, big.NewInt(1))), "0c 0000000000000000"},
		{"big 2^64", two64, "1d 09 010000000000000000"},
		{"big -2^64", new(big.Int).Neg(two64), "0b f6 feffffffffffffffff"},
		{"float32 3.14", float32(3.14), "20 c048f5c3"},
		{"float32 -3.14", float32(-3.14), "20 3fb70a3c"},
		{"float64 3.14", 3.14, "21 c0091eb851eb851f"},
		{"float64 -0", math.Copysign(0, -1), "21 7fffffffffffffff"},
		{"float64 +0", 0.0, "21 8000000000000000"},
		{"false", false, "26"},
		{"true", true, "27"},
		{"uuid", UUID{0: 0x01, 15: 0xff}, "30 010000000000000000000000000000ff"},
		{"versionstamp", Versionstamp{TransactionVersion: [10]byte{9: 1}, UserVersion: 0x0203}, "33 00000000000000000001 0203"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := mustHex(t, tc.hex)
			got, err := Tuple{tc.in}.TryPack()
			require.NoError(t, err)
			require.Equal(t, want, got)
			back, err := Unpack(got)
			require.NoError(t, err)
			requireSameTuple(t, normalize(Tuple{tc.in}), back)
		})
	}
}

func TestPackErrors(t *testing.T) {
	huge := new(big.Int).Lsh(big.NewInt(1), 8*255) // 256 bytes
	tests := []struct {
		name string
		in   Tuple
		want error
	}{
		{"unsupported type", Tuple{struct{}{}}, ErrUnsupportedType},
		{"unsupported nested", Tuple{Tuple{1, complex(1, 2)}}, ErrUnsupportedType},
		{"nil big.Int", Tuple{(*big.Int)(nil)}, ErrUnsupportedType},
		{"integer too large", Tuple{huge}, ErrIntegerTooLarge},
		{"negative integer too large", Tuple{new(big.Int).Neg(huge)}, ErrIntegerTooLarge},
		{"incomplete versionstamp", Tuple{"a", IncompleteVersionstamp(1)}, ErrIncompleteVersionstamp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.in.TryPack()
			require.ErrorIs(t, err, tc.want)
			require.PanicsWithError(t, err.Error(), func() { tc.in.Pack() })
		})
	}
	// The largest magnitude, 255 bytes, packs.
	maxBig := new(big.Int).Sub(huge, big.NewInt(1))
	for _, v := range []*big.Int{maxBig, new(big.Int).Neg(maxBig)} {
		b, err := Tuple{v}.TryPack()
		require.NoError(t, err)
		require.Len(t, b, 2+255)
		back, err := Unpack(b)
		require.NoError(t, err)
		require.Zero(t, v.Cmp(back[0].(*big.Int)))
	}
}

func TestUnpackIntegerTypes(t *testing.T) {
	tests := []struct {
		in   TupleElement
		want TupleElement
	}{
		{uint64(math.MaxInt64), int64(math.MaxInt64)},
		{uint64(math.MaxInt64) + 1, uint64(math.MaxInt64) + 1},
		{int64(math.MinInt64), int64(math.MinInt64)},
		{new(big.Int).Sub(big.NewInt(math.MinInt64), big.NewInt(1)), bigFromString("-9223372036854775809")},
		{bigFromString("18446744073709551616"), bigFromString("18446744073709551616")},
		{7, int64(7)},
	}
	for _, tc := range tests {
		got, err := Unpack(Tuple{tc.in}.Pack())
		require.NoError(t, err)
		require.IsType(t, tc.want, got[0])
		require.Zero(t, compareElements(tc.want, got[0]), "%v", got)
	}
}

func TestUnpackMalformed(t *testing.T) {
	tests := []struct{ name, hex string }{
		{"unknown code", "03"},
		{"unterminated bytes", "01 6162"},
		{"unterminated escaped bytes", "01 00ff"},
		{"truncated int", "16 01"},
		{"truncated negative int", "0c 0000"},
		{"truncated big length", "1d"},
		{"truncated big", "1d 09 0102"},
		{"truncated negative big", "0b f6 fe"},
		{"truncated float", "20 0102"},
		{"truncated double", "21 01020304"},
		{"truncated uuid", "30 0102"},
		{"truncated versionstamp", "33 0102"},
		{"unterminated nested", "05 15 01"},
		{"unterminated deep nested", "05 05 05 00 00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unpack(mustHex(t, tc.hex))
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func TestUnpackNonCanonicalIntegers(t *testing.T) {
	// Other encoders may use a longer form than needed; the value counts.
	got, err := Unpack(mustHex(t, "1d 01 05  0b fe fa  16 0005"))
	require.NoError(t, err)
	require.Equal(t, Tuple{int64(5), int64(-5), int64(5)}, got)
}

func TestUnpackDeepNesting(t *testing.T) {
	const depth = 100_000
	b := append(bytes.Repeat([]byte{codeNested}, depth), bytes.Repeat([]byte{0x00}, depth)...)
	top, err := Unpack(b)
	require.NoError(t, err)
	require.Equal(t, b, top.Pack())
	got := top
	for range depth {
		require.Len(t, got, 1)
		got = got[0].(Tuple)
	}
	require.Empty(t, got)
}

func TestVersionstamps(t *testing.T) {
	vs := IncompleteVersionstamp(7)
	require.False(t, vs.IsComplete())

	tests := []struct {
		name   string
		prefix []byte
		in     Tuple
		offset uint32
	}{
		{"alone", nil, Tuple{vs}, 1},
		{"after prefix and elements", []byte("pre"), Tuple{"ab", vs}, 3 + 4 + 1},
		{"nested", []byte{0x01}, Tuple{int64(1), Tuple{nil, vs}}, 1 + 2 + 1 + 2 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			has, err := tc.in.HasIncompleteVersionstamp()
			require.NoError(t, err)
			require.True(t, has)
			key, err := tc.in.PackWithVersionstamp(tc.prefix)
			require.NoError(t, err)

			body := key[:len(key)-4]
			off := uint32(key[len(key)-4]) | uint32(key[len(key)-3])<<8 | uint32(key[len(key)-2])<<16 | uint32(key[len(key)-1])<<24
			require.Equal(t, tc.offset, off)
			require.Equal(t, incompleteVersion[:], body[off:off+10])
			require.True(t, bytes.HasPrefix(body, tc.prefix))

			// What the commit does: fill in the transaction version.
			filled := slices.Clone(body)
			copy(filled[off:], []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 2})
			got, err := Unpack(filled[len(tc.prefix):])
			require.NoError(t, err)
			has, err = got.HasIncompleteVersionstamp()
			require.NoError(t, err)
			require.False(t, has)
			require.Equal(t, filled[len(tc.prefix):], got.Pack())
		})
	}

	_, err := Tuple{"no versionstamp", Versionstamp{UserVersion: 1}}.PackWithVersionstamp(nil)
	require.ErrorIs(t, err, ErrNoIncompleteVersionstamp)
	two := Tuple{vs, Tuple{IncompleteVersionstamp(8)}}
	_, err = two.HasIncompleteVersionstamp()
	require.ErrorIs(t, err, ErrMultipleVersionstamps)
	_, err = two.PackWithVersionstamp(nil)
	require.ErrorIs(t, err, ErrMultipleVersionstamps)
	_, err = Tuple{vs, struct{}{}}.PackWithVersionstamp(nil)
	require.ErrorIs(t, err, ErrUnsupportedType)

	require.Equal(t, mustHex(t, "ffffffffffffffffffff 0007"), vs.Bytes())
	require.Equal(t, `Versionstamp(\x00\x00\x00\xaa\x00\xbb\x00\xcc\x00\xdd, 620)`,
		Versionstamp{[10]byte{0, 0, 0, 0xaa, 0, 0xbb, 0, 0xcc, 0, 0xdd}, 620}.String())
}

func TestTupleString(t *testing.T) {
	uuid := UUID{0x11, 0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	tests := []struct {
		in   Tuple
		want string
	}{
		{Tuple{[]byte("hello"), "world", 42, 0x99}, `(b"hello", "world", 42, 153)`},
		{Tuple{nil, Tuple{"Ok", Tuple{1, 2}, "Go"}, 42}, `(<nil>, ("Ok", (1, 2), "Go"), 42)`},
		{Tuple{"Bool", true, false}, `("Bool", true, false)`},
		{Tuple{"UUID", uuid}, `("UUID", UUID(1100aabb-ccdd-eeff-1100-aabbccddeeff))`},
		{Tuple{}, `()`},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.in.String())
	}
}

func TestTupleRange(t *testing.T) {
	prefix := Tuple{"jobs", int64(1)}
	b, e := prefix.FDBRangeKeys()
	inside := Tuple{"jobs", int64(1), "x"}.Pack()
	require.Negative(t, bytes.Compare(b.FDBKey(), inside))
	require.Positive(t, bytes.Compare(e.FDBKey(), inside))
	for _, outside := range []Tuple{prefix, {"jobs", int64(2)}, {"jobs"}, {"jobs", int64(0), "x"}} {
		k := outside.Pack()
		require.False(t, bytes.Compare(b.FDBKey(), k) <= 0 && bytes.Compare(k, e.FDBKey()) < 0, "%v", outside)
	}
	sb, se := prefix.FDBRangeKeySelectors()
	require.Equal(t, kv.FirstGreaterOrEqual(b), sb)
	require.Equal(t, kv.FirstGreaterOrEqual(e), se)
	require.Equal(t, kv.Key(prefix.Pack()), prefix.FDBKey())
}

// gen draws random tuples from a small pool of interesting values, so that
// generated tuples often share prefixes and collide.
type gen struct{ r *rand.Rand }

func (g gen) tuple(depth int) Tuple {
	t := make(Tuple, g.r.IntN(4))
	for i := range t {
		t[i] = g.element(depth)
	}
	return t
}

func (g gen) element(depth int) TupleElement {
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	switch g.r.IntN(13) {
	case 0:
		return nil
	case 1:
		return g.bytes()
	case 2:
		return string(g.bytes())
	case 3:
		if depth > 2 {
			return nil
		}
		return g.tuple(depth + 1)
	case 4:
		return []TupleElement{0, 1, -1, 255, 256, -255, -256, math.MaxInt64, math.MinInt64, int8(-128), uint16(65535)}[g.r.IntN(11)]
	case 5:
		switch g.r.IntN(3) {
		case 0:
			return g.r.Int64() >> g.r.IntN(64)
		case 1:
			return -(g.r.Int64() >> g.r.IntN(64))
		default:
			return g.r.Uint64() >> g.r.IntN(64)
		}
	case 6:
		mag := make([]byte, g.r.IntN(80)+1)
		for i := range mag {
			mag[i] = byte(g.r.Uint32())
		}
		v := new(big.Int).SetBytes(mag)
		switch g.r.IntN(4) {
		case 0:
			v.Neg(v)
		case 1:
			v.Add(v, two64)
		case 2:
			v.Neg(v.Add(v, two64))
		}
		return v
	case 7:
		return []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.5, -1.5, float32(math.Inf(1)), float32(math.Inf(-1)),
			float32(math.NaN()), -float32(math.NaN()), math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32,
			float32(g.r.NormFloat64())}[g.r.IntN(14)]
	case 8:
		return []float64{0, math.Copysign(0, -1), 1, -1, 1.5, -1.5, math.Inf(1), math.Inf(-1),
			math.NaN(), math.Copysign(math.NaN(), -1), math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64,
			g.r.NormFloat64() * 1e10}[g.r.IntN(14)]
	case 9:
		return g.r.IntN(2) == 0
	case 10:
		var u UUID
		for i := range u {
			u[i] = []byte{0, 1, 0xff}[g.r.IntN(3)]
		}
		return u
	case 11:
		var v Versionstamp
		for i := range v.TransactionVersion {
			v.TransactionVersion[i] = []byte{0, 1, 0xfe}[g.r.IntN(3)]
		}
		v.UserVersion = uint16(g.r.IntN(3))
		return v
	default:
		return kv.Key(g.bytes())
	}
}

func (g gen) bytes() []byte {
	b := make([]byte, g.r.IntN(4))
	for i := range b {
		b[i] = []byte{0x00, 0x01, 'a', 0xfe, 0xff}[g.r.IntN(5)]
	}
	return b
}

// normalize returns t with every element of the type Unpack returns.
func normalize(t Tuple) Tuple {
	out := make(Tuple, len(t))
	for i, el := range t {
		switch v := el.(type) {
		case Tuple:
			out[i] = normalize(v)
		case kv.Key:
			out[i] = []byte(v)
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, *big.Int, big.Int:
			b := toBig(v)
			switch {
			case b.IsInt64():
				out[i] = b.Int64()
			case b.IsUint64():
				out[i] = b.Uint64()
			default:
				out[i] = b
			}
		default:
			out[i] = el
		}
	}
	return out
}

// requireSameTuple checks that got has want's values and types, comparing
// with the model order (which tells NaNs and zeros apart by their bits).
func requireSameTuple(t *testing.T, want, got Tuple) {
	t.Helper()
	require.Len(t, got, len(want), "want %v, got %v", want, got)
	for i := range want {
		require.IsType(t, want[i], got[i], "element %d of %v", i, got)
		if w, ok := want[i].(Tuple); ok {
			requireSameTuple(t, w, got[i].(Tuple))
			continue
		}
		require.Zero(t, compareElements(want[i], got[i]), "element %d: want %v, got %v", i, want[i], got[i])
	}
}

func toBig(el TupleElement) *big.Int {
	switch v := el.(type) {
	case int:
		return big.NewInt(int64(v))
	case int8:
		return big.NewInt(int64(v))
	case int16:
		return big.NewInt(int64(v))
	case int32:
		return big.NewInt(int64(v))
	case int64:
		return big.NewInt(v)
	case uint:
		return new(big.Int).SetUint64(uint64(v))
	case uint8:
		return new(big.Int).SetUint64(uint64(v))
	case uint16:
		return new(big.Int).SetUint64(uint64(v))
	case uint32:
		return new(big.Int).SetUint64(uint64(v))
	case uint64:
		return new(big.Int).SetUint64(v)
	case *big.Int:
		return v
	case big.Int:
		return &v
	}
	return nil
}

// rank is the model's type order: FDB's type codes.
func rank(el TupleElement) int {
	switch v := el.(type) {
	case nil:
		return 0x00
	case []byte, kv.Key:
		return 0x01
	case string:
		return 0x02
	case Tuple:
		return 0x05
	case float32:
		return 0x20
	case float64:
		return 0x21
	case bool:
		if v {
			return 0x27
		}
		return 0x26
	case UUID:
		return 0x30
	case Versionstamp:
		return 0x33
	}
	if toBig(el) != nil {
		return 0x14
	}
	panic("no rank for " + strconv.Quote(Tuple{el}.String()))
}

// compareTuples is the model of FDB's tuple order, written from the
// values, not from the encoding.
func compareTuples(a, b Tuple) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareElements(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

func compareElements(a, b TupleElement) int {
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	switch av := a.(type) {
	case nil, bool:
		return 0
	case []byte, kv.Key, string:
		return bytes.Compare(asBytes(a), asBytes(b))
	case Tuple:
		return compareTuples(av, b.(Tuple))
	case float32:
		return compareFloats(float64(av), float64(b.(float32)), math.Signbit(float64(av)), math.Signbit(float64(b.(float32))),
			uint64(math.Float32bits(av)), uint64(math.Float32bits(b.(float32))))
	case float64:
		bv := b.(float64)
		return compareFloats(av, bv, math.Signbit(av), math.Signbit(bv), math.Float64bits(av), math.Float64bits(bv))
	case UUID:
		bv := b.(UUID)
		return bytes.Compare(av[:], bv[:])
	case Versionstamp:
		bv := b.(Versionstamp)
		if c := bytes.Compare(av.TransactionVersion[:], bv.TransactionVersion[:]); c != 0 {
			return c
		}
		return cmp.Compare(av.UserVersion, bv.UserVersion)
	}
	return toBig(a).Cmp(toBig(b))
}

func asBytes(el TupleElement) []byte {
	switch v := el.(type) {
	case []byte:
		return v
	case kv.Key:
		return v
	case string:
		return []byte(v)
	}
	return nil
}

// compareFloats orders -NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN; NaNs
// of one sign order by their payload bits (larger payload further out).
func compareFloats(a, b float64, aNeg, bNeg bool, aBits, bBits uint64) int {
	class := func(f float64, neg bool) int {
		switch {
		case math.IsNaN(f) && neg:
			return 0
		case math.IsNaN(f):
			return 2
		}
		return 1
	}
	ca, cb := class(a, aNeg), class(b, bNeg)
	if c := cmp.Compare(ca, cb); c != 0 {
		return c
	}
	switch ca {
	case 0:
		return -cmp.Compare(aBits, bBits)
	case 2:
		return cmp.Compare(aBits, bBits)
	}
	if c := cmp.Compare(a, b); c != 0 {
		return c
	}
	switch { // -0 before +0
	case aNeg && !bNeg:
		return -1
	case !aNeg && bNeg:
		return 1
	}
	return 0
}

func sign(c int) int { return cmp.Compare(c, 0) }

func TestPackOrderMatchesTupleOrder(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(testutil.Seed(t), 1))}
	const n = 400
	tuples := make([]Tuple, n)
	packed := make([][]byte, n)
	for i := range tuples {
		tuples[i] = g.tuple(0)
		packed[i] = tuples[i].Pack()
	}
	for i := range tuples {
		for j := range tuples {
			want := sign(compareTuples(tuples[i], tuples[j]))
			got := sign(bytes.Compare(packed[i], packed[j]))
			if want != got {
				require.Failf(t, "order mismatch", "model says %v cmp %v = %d, packed bytes %x cmp %x = %d",
					tuples[i], tuples[j], want, packed[i], packed[j], got)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(testutil.Seed(t), 2))}
	for range 2000 {
		in := g.tuple(0)
		packed := in.Pack()
		out, err := Unpack(packed)
		require.NoError(t, err, "Unpack(%x) of %v", packed, in)
		requireSameTuple(t, normalize(in), out)
		require.Equal(t, packed, out.Pack())
		// A prefix tuple packs to a prefix and its range holds the longer one.
		if len(in) > 1 {
			b, e := in[:1].FDBRangeKeys()
			require.True(t, bytes.Compare(b.FDBKey(), packed) <= 0 && bytes.Compare(packed, e.FDBKey()) < 0)
		}
	}
}

func FuzzUnpack(f *testing.F) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	for range 50 {
		f.Add(g.tuple(0).Pack())
	}
	f.Add([]byte{codeNested, codeNested, 0x00})
	f.Add([]byte{codeNegBig, 0x00})
	f.Add([]byte{codePosBig, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		tup, err := Unpack(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		// Whatever decodes packs again to an encoding of the same tuple.
		if has, _ := tup.HasIncompleteVersionstamp(); has {
			return
		}
		again, err := Unpack(tup.Pack())
		require.NoError(t, err)
		requireSameTuple(t, tup, again)
	})
}

func BenchmarkPack(b *testing.B) {
	t := Tuple{"fdbrep", "jobs", "replication", int64(1234567), []byte("job-id\x00x"), 3.25, true, UUID{1}}
	for b.Loop() {
		_ = t.Pack()
	}
}

func BenchmarkUnpack(b *testing.B) {
	packed := Tuple{"fdbrep", "jobs", "replication", int64(1234567), []byte("job-id\x00x"), 3.25, true, UUID{1}}.Pack()
	for b.Loop() {
		if _, err := Unpack(packed); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "jobs", "a\x00b", "\x00\x00", "\xff\x00"} {
		require.Equal(t, Tuple{"x", s}.Pack(), AppendString(Tuple{"x"}.Pack(), s), "%q", s)
	}
}

// Unpack sizes its result from a first pass over the codes: the count is
// the number of top-level elements, nested tuples and escapes included.
func TestDecoderCount(t *testing.T) {
	vs := IncompleteVersionstamp(3)
	vs.TransactionVersion[0] = 1
	for _, tup := range []Tuple{
		{},
		{nil},
		{"a\x00b", []byte{0, 0xff, 0}, int64(-1 << 40), uint64(1 << 63), true, false, 1.5, float32(2)},
		{Tuple{nil, Tuple{}, "x\x00"}, nil, Tuple{Tuple{Tuple{}}}, int64(0)},
		{new(big.Int).Lsh(big.NewInt(1), 100), new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 100)), UUID{}, vs},
	} {
		d := decoder{b: tup.Pack()}
		require.Equal(t, len(tup), d.count(), "%v", tup)
	}
}
