package tuple

import (
	"encoding/binary"
	"fmt"
)

// Append functions and Reader pack and unpack a tuple of a layout the
// caller knows, element by element, without building a Tuple or boxing its
// elements: for the records of a hot path (a job row is read and written
// several times in each job's life). The Append functions produce what
// Pack does; Reader reads the canonical encodings Pack produces (not the
// long forms of small integers Unpack also takes, nor nested tuples).

// AppendNil appends the encoding of a nil element to dst.
func AppendNil(dst []byte) []byte { return append(dst, codeNil) }

// AppendBytes appends the encoding of the byte string b to dst.
func AppendBytes(dst, b []byte) []byte {
	e := encoder{buf: dst}
	e.bytes(codeBytes, b)
	return e.buf
}

// AppendInt appends the encoding of the integer i to dst.
func AppendInt(dst []byte, i int64) []byte {
	e := encoder{buf: dst}
	e.int(i)
	return e.buf
}

// AppendBool appends the encoding of b to dst.
func AppendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, codeTrue)
	}
	return append(dst, codeFalse)
}

// AppendVersionstamp appends the encoding of v to dst, complete or not:
// the transaction version of an incomplete one is at offset len(dst)+1,
// which a key or value for SetVersionstampedKey or SetVersionstampedValue
// ends with (4 bytes, little-endian), as PackWithVersionstamp's.
func AppendVersionstamp(dst []byte, v Versionstamp) []byte {
	dst = append(dst, codeVersionstamp)
	dst = append(dst, v.TransactionVersion[:]...)
	return binary.BigEndian.AppendUint16(dst, v.UserVersion)
}

// Reader reads the top-level elements of a packed tuple in order, each
// as the type its caller expects. A read of the wrong type, or past the
// end, returns false and leaves the reader where it was.
type Reader struct{ d decoder }

// NewReader returns a Reader of the packed tuple b.
func NewReader(b []byte) Reader { return Reader{decoder{b: b}} }

// Done reports whether every element was read.
func (r *Reader) Done() bool { return r.d.i >= len(r.d.b) }

func (r *Reader) peek() (byte, bool) {
	if r.Done() {
		return 0, false
	}
	return r.d.b[r.d.i], true
}

// Nil reads a nil element.
func (r *Reader) Nil() bool {
	if c, ok := r.peek(); !ok || c != codeNil {
		return false
	}
	r.d.i++
	return true
}

// Bytes reads a byte string, copied.
func (r *Reader) Bytes() ([]byte, bool) {
	if c, ok := r.peek(); !ok || c != codeBytes {
		return nil, false
	}
	b, err := r.d.bytes()
	return b, err == nil
}

// Int reads an integer that fits an int64.
func (r *Reader) Int() (int64, bool) {
	c, ok := r.peek()
	if !ok || c <= codeNegBig || c >= codePosBig {
		return 0, false
	}
	at := r.d.i
	n := int(c) - codeIntZero
	neg := n < 0
	if neg {
		n = -n
	}
	b, err := r.d.need(n)
	if err != nil {
		return 0, false
	}
	var u uint64
	for _, x := range b {
		u = u<<8 | uint64(x)
	}
	if neg {
		mag := ^u
		if n < 8 {
			mag &= 1<<(8*n) - 1
		}
		if mag > 1<<63 {
			r.d.i = at
			return 0, false
		}
		r.d.i += 1 + n
		return -int64(mag-1) - 1, true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	r.d.i += 1 + n
	return int64(u), true
}

// Bool reads a boolean.
func (r *Reader) Bool() (v, ok bool) {
	switch c, _ := r.peek(); {
	case r.Done():
		return false, false
	case c == codeTrue:
		r.d.i++
		return true, true
	case c == codeFalse:
		r.d.i++
		return false, true
	}
	return false, false
}

// Versionstamp reads a versionstamp.
func (r *Reader) Versionstamp() (Versionstamp, bool) {
	if c, ok := r.peek(); !ok || c != codeVersionstamp {
		return Versionstamp{}, false
	}
	b, err := r.d.need(12)
	if err != nil {
		return Versionstamp{}, false
	}
	r.d.i += 13
	return Versionstamp{TransactionVersion: [10]byte(b[:10]), UserVersion: binary.BigEndian.Uint16(b[10:])}, true
}

// Skip reads an element of any type but a nested tuple.
func (r *Reader) Skip() bool {
	if r.Done() {
		return false
	}
	at := r.d.i
	code := r.d.b[at]
	var err error
	if code == codeNested {
		err = fmt.Errorf("nested")
	} else {
		_, err = r.d.element(code)
	}
	if err != nil {
		r.d.i = at
		return false
	}
	return true
}
