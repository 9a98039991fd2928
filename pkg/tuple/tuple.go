package tuple

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// TupleElement is one element of a Tuple: a value of one of the types listed
// in the package documentation.
type TupleElement any

// Tuple is an ordered list of elements that packs into a key whose byte
// order is the tuple order. A Tuple is a kv.KeyConvertible (its packed
// bytes) and a kv.ExactRange (every key of a tuple it is a proper prefix
// of).
type Tuple []TupleElement

// UUID is a 16-byte UUID element. Convert other UUID types to it, for
// example tuple.UUID(googleUUID).
type UUID [16]byte

// String renders u in the canonical 8-4-4-4-12 hexadecimal form.
func (u UUID) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Versionstamp is a 12-byte versionstamp element: the 10-byte transaction
// version that a commit assigns, followed by a 2-byte version chosen by the
// application to order several versionstamps of one transaction.
type Versionstamp struct {
	TransactionVersion [10]byte
	UserVersion        uint16
}

// incompleteVersion marks a versionstamp whose transaction version the
// commit has yet to fill in.
var incompleteVersion = [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// IncompleteVersionstamp returns a versionstamp for PackWithVersionstamp:
// the commit fills in its transaction version.
func IncompleteVersionstamp(userVersion uint16) Versionstamp {
	return Versionstamp{TransactionVersion: incompleteVersion, UserVersion: userVersion}
}

// IsComplete reports whether v carries a transaction version.
func (v Versionstamp) IsComplete() bool { return v.TransactionVersion != incompleteVersion }

// Bytes returns the 12-byte encoding of v: the transaction version, then
// the user version big-endian.
func (v Versionstamp) Bytes() []byte {
	b := make([]byte, 12)
	copy(b, v.TransactionVersion[:])
	binary.BigEndian.PutUint16(b[10:], v.UserVersion)
	return b
}

// String renders v as Versionstamp(<printable transaction version>, <user
// version>).
func (v Versionstamp) String() string {
	return fmt.Sprintf("Versionstamp(%s, %d)", kv.Printable(v.TransactionVersion[:]), v.UserVersion)
}

// Type codes of FoundationDB's tuple encoding.
const (
	codeNil          = 0x00
	codeBytes        = 0x01
	codeString       = 0x02
	codeNested       = 0x05
	codeNegBig       = 0x0b // negative integer of more than 8 bytes
	codeIntZero      = 0x14 // 0x0c..0x13 negative, 0x15..0x1c positive, by byte count
	codePosBig       = 0x1d // positive integer of more than 8 bytes
	codeFloat        = 0x20
	codeDouble       = 0x21
	codeFalse        = 0x26
	codeTrue         = 0x27
	codeUUID         = 0x30
	codeVersionstamp = 0x33

	// escape follows a 0x00 byte inside a byte string, and a nil inside a
	// nested tuple, so that 0x00 alone can terminate them.
	escape = 0xff
)

// Pack returns the encoding of t. It panics with an error wrapping
// ErrUnsupportedType, ErrIntegerTooLarge or ErrIncompleteVersionstamp on
// bad input, as FDB's Pack does; TryPack returns the error instead.
func (t Tuple) Pack() []byte {
	b, err := t.TryPack()
	if err != nil {
		panic(err)
	}
	return b
}

// TryPack is Pack returning an error instead of panicking.
func (t Tuple) TryPack() ([]byte, error) {
	return t.appendPack(nil)
}

// AppendPack appends the encoding of t to dst and returns the extended
// slice, as strconv's Append functions do: a prefix and the tuple in one
// allocation (subspace.Pack). It panics as Pack does.
func (t Tuple) AppendPack(dst []byte) []byte {
	b, err := t.appendPack(dst)
	if err != nil {
		panic(err)
	}
	return b
}

// AppendString appends the encoding of the string element s to dst, as
// Tuple{s}.AppendPack(dst) does without boxing s: keys built in a hot
// path allocate once.
func AppendString(dst []byte, s string) []byte {
	e := encoder{buf: dst}
	e.string(codeString, s)
	return e.buf
}

func (t Tuple) appendPack(dst []byte) ([]byte, error) {
	e := encoder{buf: slices.Grow(dst, t.sizeHint()), versionstampAt: -1}
	if err := e.tuple(t, false); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// sizeHint is about the encoded size of t (exact but for the escapes of
// 0x00 bytes in byte strings, and large integers), so that packing
// allocates once.
func (t Tuple) sizeHint() int {
	n := 0
	for _, el := range t {
		switch v := el.(type) {
		case nil, bool:
			n += 2
		case []byte:
			n += len(v) + 2
		case string:
			n += len(v) + 2
		case Tuple:
			n += v.sizeHint() + 2
		case UUID:
			n += 17
		case Versionstamp:
			n += 13
		case kv.Key:
			n += len(v) + 2
		default:
			n += 9 // integers and floats
		}
	}
	return n
}

// PackWithVersionstamp returns prefix followed by the encoding of t, which
// must hold exactly one incomplete versionstamp, followed by the offset of
// that versionstamp's transaction version in the result as a 4-byte
// little-endian integer: a key for kv.Transaction.SetVersionstampedKey (FDB
// API version 520 and later).
func (t Tuple) PackWithVersionstamp(prefix []byte) ([]byte, error) {
	has, err := t.HasIncompleteVersionstamp()
	if err != nil {
		return nil, err
	}
	if !has {
		return nil, ErrNoIncompleteVersionstamp
	}
	e := encoder{buf: append(make([]byte, 0, len(prefix)+32), prefix...), versionstampAt: -1, allowIncomplete: true}
	if err := e.tuple(t, false); err != nil {
		return nil, err
	}
	if e.versionstampAt > math.MaxUint32 {
		return nil, fmt.Errorf("tuple: versionstamp offset %d does not fit in 4 bytes", e.versionstampAt)
	}
	return binary.LittleEndian.AppendUint32(e.buf, uint32(e.versionstampAt)), nil
}

// HasIncompleteVersionstamp reports whether t, or a tuple nested in it,
// holds an incomplete versionstamp. It fails with ErrMultipleVersionstamps
// when it holds more than one.
func (t Tuple) HasIncompleteVersionstamp() (bool, error) {
	n := t.countIncomplete()
	if n > 1 {
		return true, fmt.Errorf("%w: %d", ErrMultipleVersionstamps, n)
	}
	return n == 1, nil
}

func (t Tuple) countIncomplete() int {
	n := 0
	for _, el := range t {
		switch el := el.(type) {
		case Versionstamp:
			if !el.IsComplete() {
				n++
			}
		case Tuple:
			n += el.countIncomplete()
		}
	}
	return n
}

// FDBKey returns the packed tuple, making a Tuple a kv.KeyConvertible. It
// panics as Pack does.
func (t Tuple) FDBKey() kv.Key { return t.Pack() }

// FDBRangeKeys returns the bounds of the range of keys that encode tuples
// having t as a proper prefix: [Pack(t)+0x00, Pack(t)+0xff). It panics as
// Pack does.
func (t Tuple) FDBRangeKeys() (kv.KeyConvertible, kv.KeyConvertible) {
	p := t.Pack()
	return kv.Key(appendCopy(p, 0x00)), kv.Key(appendCopy(p, 0xff))
}

// FDBRangeKeySelectors returns selectors for FDBRangeKeys, making a Tuple a
// kv.Range.
func (t Tuple) FDBRangeKeySelectors() (kv.Selectable, kv.Selectable) {
	b, e := t.FDBRangeKeys()
	return kv.FirstGreaterOrEqual(b), kv.FirstGreaterOrEqual(e)
}

// String renders t for humans, as FDB's binding does:
// ("text", b"bytes", 42, <nil>, (1, 2)).
func (t Tuple) String() string {
	var sb strings.Builder
	t.format(&sb)
	return sb.String()
}

func (t Tuple) format(sb *strings.Builder) {
	sb.WriteByte('(')
	for i, el := range t {
		if i > 0 {
			sb.WriteString(", ")
		}
		switch el := el.(type) {
		case nil:
			sb.WriteString("<nil>")
		case Tuple:
			el.format(sb)
		case string:
			sb.WriteString(strconv.Quote(el))
		case []byte:
			sb.WriteString(`b"` + kv.Printable(el) + `"`)
		case UUID:
			sb.WriteString("UUID(" + el.String() + ")")
		default:
			fmt.Fprintf(sb, "%v", el)
		}
	}
	sb.WriteByte(')')
}

func appendCopy(a []byte, b ...byte) []byte {
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// encoder appends encoded elements to buf.
type encoder struct {
	buf []byte
	// versionstampAt is the offset in buf of the incomplete versionstamp's
	// transaction version, or -1.
	versionstampAt  int
	allowIncomplete bool
}

func (e *encoder) tuple(t Tuple, nested bool) error {
	if nested {
		e.buf = append(e.buf, codeNested)
	}
	for i, el := range t {
		if err := e.element(el, nested); err != nil {
			if nested {
				return err
			}
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	if nested {
		e.buf = append(e.buf, 0x00)
	}
	return nil
}

func (e *encoder) element(el TupleElement, nested bool) error {
	switch v := el.(type) {
	case nil:
		e.buf = append(e.buf, codeNil)
		if nested {
			e.buf = append(e.buf, escape)
		}
	case Tuple:
		return e.tuple(v, true)
	case []byte:
		e.bytes(codeBytes, v)
	case string:
		e.string(codeString, v)
	case bool:
		if v {
			e.buf = append(e.buf, codeTrue)
		} else {
			e.buf = append(e.buf, codeFalse)
		}
	case int:
		e.int(int64(v))
	case int8:
		e.int(int64(v))
	case int16:
		e.int(int64(v))
	case int32:
		e.int(int64(v))
	case int64:
		e.int(v)
	case uint:
		e.uint(uint64(v))
	case uint8:
		e.uint(uint64(v))
	case uint16:
		e.uint(uint64(v))
	case uint32:
		e.uint(uint64(v))
	case uint64:
		e.uint(v)
	case *big.Int:
		if v == nil {
			return fmt.Errorf("%w: nil *big.Int", ErrUnsupportedType)
		}
		return e.bigInt(v)
	case big.Int:
		return e.bigInt(&v)
	case float32:
		e.buf = append(e.buf, codeFloat)
		e.buf = binary.BigEndian.AppendUint32(e.buf, orderFloat(math.Float32bits(v)))
	case float64:
		e.buf = append(e.buf, codeDouble)
		e.buf = binary.BigEndian.AppendUint64(e.buf, orderFloat(math.Float64bits(v)))
	case UUID:
		e.buf = append(e.buf, codeUUID)
		e.buf = append(e.buf, v[:]...)
	case Versionstamp:
		e.buf = append(e.buf, codeVersionstamp)
		if !v.IsComplete() {
			if !e.allowIncomplete {
				return ErrIncompleteVersionstamp
			}
			if e.versionstampAt >= 0 {
				return ErrMultipleVersionstamps
			}
			e.versionstampAt = len(e.buf)
		}
		e.buf = append(e.buf, v.TransactionVersion[:]...)
		e.buf = binary.BigEndian.AppendUint16(e.buf, v.UserVersion)
	case kv.KeyConvertible:
		e.bytes(codeBytes, v.FDBKey())
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedType, el)
	}
	return nil
}

// bytes appends code, b with each 0x00 escaped as 0x00 0xff, and a 0x00
// terminator.
func (e *encoder) bytes(code byte, b []byte) { e.buf = appendEscaped(e.buf, code, b, bytes.IndexByte) }

// string is bytes for a string, without converting it.
func (e *encoder) string(code byte, s string) {
	e.buf = appendEscaped(e.buf, code, s, strings.IndexByte)
}

// appendEscaped appends code, s a run between 0x00 bytes at a time, each
// 0x00 escaped, and the terminator (index: bytes' or strings' IndexByte).
func appendEscaped[T string | []byte](buf []byte, code byte, s T, index func(T, byte) int) []byte {
	buf = append(buf, code)
	for {
		i := index(s, 0x00)
		if i < 0 {
			break
		}
		buf = append(append(buf, s[:i+1]...), escape)
		s = s[i+1:]
	}
	return append(append(buf, s...), 0x00)
}

func byteLen(u uint64) int {
	n := 0
	for u != 0 {
		n++
		u >>= 8
	}
	return n
}

// uint appends u as 0x14+n and its n big-endian bytes.
func (e *encoder) uint(u uint64) {
	n := byteLen(u)
	e.buf = append(e.buf, byte(codeIntZero+n))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], u)
	e.buf = append(e.buf, b[8-n:]...)
}

// int appends i; a negative i as 0x14-n and the n-byte one's complement of
// its magnitude, so that more negative numbers sort first.
func (e *encoder) int(i int64) {
	if i >= 0 {
		e.uint(uint64(i))
		return
	}
	mag := uint64(-i) // -MinInt64 wraps to 1<<63, which is its magnitude
	n := byteLen(mag)
	e.buf = append(e.buf, byte(codeIntZero-n))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ^mag)
	e.buf = append(e.buf, b[8-n:]...)
}

func (e *encoder) bigInt(v *big.Int) error {
	if v.IsInt64() {
		e.int(v.Int64())
		return nil
	}
	if v.IsUint64() {
		e.uint(v.Uint64())
		return nil
	}
	mag := new(big.Int).Abs(v).Bytes()
	n := len(mag)
	if n > 255 {
		return fmt.Errorf("%w: %d bytes", ErrIntegerTooLarge, n)
	}
	if v.Sign() > 0 { // more than 8 bytes, since it does not fit a uint64
		e.buf = append(e.buf, codePosBig, byte(n))
		e.buf = append(e.buf, mag...)
		return nil
	}
	if n <= 8 { // between -(2^64-1) and MinInt64-1
		e.buf = append(e.buf, byte(codeIntZero-n))
	} else {
		e.buf = append(e.buf, codeNegBig, byte(n)^0xff)
	}
	for _, c := range mag { // one's complement of the magnitude
		e.buf = append(e.buf, ^c)
	}
	return nil
}

// orderFloat maps the IEEE bits of a float32 or float64 to bits that sort
// as the floats do: a negative number has every bit flipped, a positive
// one its sign bit.
func orderFloat[T uint32 | uint64](bits T) T {
	sign := ^(^T(0) >> 1)
	if bits&sign != 0 {
		return ^bits
	}
	return bits | sign
}

// unorderFloat is the inverse of orderFloat.
func unorderFloat[T uint32 | uint64](bits T) T {
	sign := ^(^T(0) >> 1)
	if bits&sign != 0 {
		return bits &^ sign
	}
	return ^bits
}
