package tuple

import "encoding/binary"

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
	mag, neg, n, err := r.d.intParts(c)
	if err != nil {
		return 0, false
	}
	v, ok := intValue(mag, neg)
	if ok {
		r.d.i += 1 + n
	}
	return v, ok
}

// Bool reads a boolean.
func (r *Reader) Bool() (v, ok bool) {
	c, ok := r.peek()
	if !ok || c != codeTrue && c != codeFalse {
		return false, false
	}
	r.d.i++
	return c == codeTrue, true
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
	c, ok := r.peek()
	if !ok || c == codeNested {
		return false
	}
	at := r.d.i
	if _, err := r.d.element(c); err != nil {
		r.d.i = at
		return false
	}
	return true
}
