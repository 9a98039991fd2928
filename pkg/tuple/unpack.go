package tuple

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
)

// Unpack decodes a packed tuple. It returns an error wrapping ErrMalformed
// when b is not a valid encoding, and never panics.
func Unpack(b []byte) (Tuple, error) {
	d := decoder{b: b}
	t, err := d.decode()
	if err != nil {
		return nil, fmt.Errorf("%w: %w at offset %d", ErrMalformed, err, d.i)
	}
	return t, nil
}

// decoder decodes iteratively, keeping the tuples being built in a stack,
// so that deeply nested input cannot exhaust the goroutine stack.
type decoder struct {
	b []byte
	i int
}

var (
	errTruncated       = fmt.Errorf("truncated element")
	errUnterminated    = fmt.Errorf("unterminated nested tuple")
	errUnknownTypeCode = fmt.Errorf("unknown type code")
)

func (d *decoder) decode() (Tuple, error) {
	// cur is the tuple being built; stack holds the tuples it is nested
	// in, outermost first (none at the top level: no allocation).
	cur := make(Tuple, 0, d.count())
	var stack []Tuple
	for d.i < len(d.b) {
		code := d.b[d.i]
		if code == codeNested {
			stack = append(stack, cur)
			cur = Tuple{}
			d.i++
			continue
		}
		if code == codeNil && len(stack) > 0 {
			if d.i+1 < len(d.b) && d.b[d.i+1] == escape {
				cur = append(cur, nil)
				d.i += 2
				continue
			}
			// End of the nested tuple.
			top := len(stack) - 1
			cur, stack = append(stack[top], cur), stack[:top]
			d.i++
			continue
		}
		el, err := d.element(code)
		if err != nil {
			return nil, err
		}
		cur = append(cur, el)
	}
	if len(stack) > 0 {
		return nil, errUnterminated
	}
	return cur, nil
}

// count is how many elements the top level of d.b holds, from their
// codes and lengths alone, so that decode allocates its result once; 8
// when d.b is malformed (decode then fails on it).
func (d *decoder) count() int {
	n, depth := 0, 0
	for i := d.i; i < len(d.b); {
		code := d.b[i]
		switch {
		case code == codeNested:
			if depth == 0 {
				n++
			}
			depth++
			i++
			continue
		case code == codeNil && depth > 0:
			if i+1 < len(d.b) && d.b[i+1] == escape {
				i += 2
			} else {
				depth--
				i++
			}
			continue
		case code == codeBytes || code == codeString:
			j := i + 1
			for {
				k := bytes.IndexByte(d.b[j:], 0x00)
				if k < 0 {
					return 8
				}
				j += k + 1
				if j < len(d.b) && d.b[j] == escape {
					j++
					continue
				}
				break
			}
			i = j
		case code == codeNegBig || code == codePosBig:
			if i+1 >= len(d.b) {
				return 8
			}
			l := int(d.b[i+1])
			if code == codeNegBig {
				l ^= 0xff
			}
			i += 2 + l
		case code > codeNegBig && code < codePosBig:
			l := int(code) - codeIntZero
			i += 1 + max(l, -l)
		case fixedElements[code].decode != nil:
			i += 1 + fixedElements[code].size
		default:
			return 8
		}
		if depth == 0 {
			n++
		}
	}
	return n
}

// need returns the n bytes after the type code at d.i, or fails.
func (d *decoder) need(n int) ([]byte, error) {
	if len(d.b)-d.i-1 < n {
		return nil, errTruncated
	}
	return d.b[d.i+1 : d.i+1+n], nil
}

// element decodes the element at d.i, which is not a nested tuple or its
// end, and moves past it.
func (d *decoder) element(code byte) (TupleElement, error) {
	switch {
	case code == codeBytes:
		return d.bytes()
	case code == codeString:
		if b, ok := d.plain(); ok {
			return string(b), nil
		}
		b, err := d.bytes()
		if err != nil {
			return nil, err
		}
		return string(b), nil
	case code == codeNegBig || code == codePosBig:
		return d.bigInt(code)
	case code > codeNegBig && code < codePosBig:
		return d.int(code)
	}
	if f := fixedElements[code]; f.decode != nil {
		b, err := d.need(f.size)
		if err != nil {
			return nil, err
		}
		d.i += 1 + f.size
		return f.decode(b), nil
	}
	return nil, fmt.Errorf("%w 0x%02x", errUnknownTypeCode, code)
}

// fixedElements decodes, by type code, the elements of a fixed size: size
// bytes after the type code.
var fixedElements = [256]struct {
	size   int
	decode func(b []byte) TupleElement
}{
	codeNil:   {0, func([]byte) TupleElement { return nil }},
	codeFalse: {0, func([]byte) TupleElement { return false }},
	codeTrue:  {0, func([]byte) TupleElement { return true }},
	codeFloat: {4, func(b []byte) TupleElement {
		return math.Float32frombits(unorderFloat(binary.BigEndian.Uint32(b)))
	}},
	codeDouble: {8, func(b []byte) TupleElement {
		return math.Float64frombits(unorderFloat(binary.BigEndian.Uint64(b)))
	}},
	codeUUID: {16, func(b []byte) TupleElement { return UUID(b) }},
	codeVersionstamp: {12, func(b []byte) TupleElement {
		return Versionstamp{TransactionVersion: [10]byte(b[:10]), UserVersion: binary.BigEndian.Uint16(b[10:])}
	}},
}

// bytes decodes a byte string: bytes up to a 0x00 not followed by 0xff,
// with every 0x00 0xff turned back into 0x00.
func (d *decoder) bytes() ([]byte, error) {
	if b, ok := d.plain(); ok {
		return append(make([]byte, 0, len(b)), b...), nil
	}
	var out []byte
	for j := d.i + 1; j < len(d.b); {
		i := bytes.IndexByte(d.b[j:], 0x00)
		if i < 0 {
			break
		}
		out = append(out, d.b[j:j+i]...)
		j += i
		if j+1 < len(d.b) && d.b[j+1] == escape {
			out = append(out, 0x00)
			j += 2
			continue
		}
		d.i = j + 1
		return out, nil // not empty: plain took those without an escape
	}
	return nil, fmt.Errorf("unterminated byte string")
}

// plain returns the byte string at d.i, in place, and moves past it when
// it holds no escaped 0x00 (the common case: one copy, by the caller);
// otherwise it returns false and bytes decodes it.
func (d *decoder) plain() ([]byte, bool) {
	rest := d.b[d.i+1:]
	i := bytes.IndexByte(rest, 0x00)
	if i < 0 || i+1 < len(rest) && rest[i+1] == escape {
		return nil, false
	}
	d.i += i + 2
	return rest[:i], true
}

// int decodes an integer of at most 8 bytes (codes 0x0c to 0x1c).
func (d *decoder) int(code byte) (TupleElement, error) {
	mag, neg, n, err := d.intParts(code)
	if err != nil {
		return nil, err
	}
	d.i += 1 + n
	if v, ok := intValue(mag, neg); ok {
		return v, nil
	}
	if !neg {
		return mag, nil
	}
	return new(big.Int).Neg(new(big.Int).SetUint64(mag)), nil
}

// intParts reads the integer of at most 8 bytes at d.i (code 0x0c to
// 0x1c) without moving past it: its magnitude, its sign and its length n
// after the type code.
func (d *decoder) intParts(code byte) (mag uint64, neg bool, n int, err error) {
	n = int(code) - codeIntZero
	neg = n < 0
	if neg {
		n = -n
	}
	b, err := d.need(n)
	if err != nil {
		return 0, false, 0, err
	}
	var u uint64
	for _, c := range b {
		u = u<<8 | uint64(c)
	}
	if !neg {
		return u, false, n, nil
	}
	// u is the n-byte one's complement of the magnitude.
	mag = ^u
	if n < 8 {
		mag &= 1<<(8*n) - 1
	}
	return mag, true, n, nil
}

// intValue is the int64 of magnitude mag and sign neg, if it fits.
func intValue(mag uint64, neg bool) (int64, bool) {
	switch {
	case !neg && mag <= math.MaxInt64:
		return int64(mag), true
	case neg && mag <= 1<<63:
		return -int64(mag-1) - 1, true // no overflow at MinInt64
	}
	return 0, false
}

// bigInt decodes an integer of more than 8 bytes (codes 0x0b and 0x1d),
// normalizing to int64 or uint64 when it fits (a non-canonical encoding).
func (d *decoder) bigInt(code byte) (TupleElement, error) {
	lb, err := d.need(1)
	if err != nil {
		return nil, err
	}
	n := int(lb[0])
	if code == codeNegBig {
		n ^= 0xff
	}
	if len(d.b)-d.i-2 < n {
		return nil, errTruncated
	}
	b := d.b[d.i+2 : d.i+2+n]
	d.i += 2 + n
	v := new(big.Int)
	if code == codePosBig {
		v.SetBytes(b)
	} else {
		mag := make([]byte, n)
		for k, c := range b {
			mag[k] = ^c
		}
		v.SetBytes(mag)
		v.Neg(v)
	}
	switch {
	case v.IsInt64():
		return v.Int64(), nil
	case v.IsUint64():
		return v.Uint64(), nil
	}
	return v, nil
}
