package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Writes. Each validates its operands as FoundationDB does, keeps the first
// error for Commit (write methods return none), records the write in the
// write buffer and adds its write conflict range. Keys and values are
// copied: the caller may reuse its slices.

// checkKey returns the error FoundationDB gives an atomic operation or a
// watch of k: key_outside_legal_range for the system key space,
// key_too_large past kv.MaxKeySize. (A set or clear there is
// systemWriteErr's.)
func checkKey(k []byte) error {
	switch {
	case isSystem(k):
		return errOutsideLegalRange
	case len(k) > kv.MaxKeySize:
		return errKeyTooLarge
	}
	return nil
}

// checkWrite is checkKey, then value_too_large for a value (or atomic
// operand) past kv.MaxValueSize.
func checkWrite(k, v []byte) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if len(v) > kv.MaxValueSize {
		return errValueTooLarge
	}
	return nil
}

// exactRange validates an exact range for a write or a conflict range.
func exactRange(r kv.ExactRange) (b, e []byte, err error) {
	bk, ek := r.FDBRangeKeys()
	b, e = bk.FDBKey(), ek.FDBKey()
	if bytes.Compare(b, e) > 0 {
		return nil, nil, errInvertedRange
	}
	if bytes.Compare(b, maxReadKey) > 0 || bytes.Compare(e, maxReadKey) > 0 {
		return nil, nil, errOutsideLegalRange
	}
	return clone(b), clone(e), nil
}

// writeKey is a write of operand v (a value or an atomic operand) at key:
// if it is valid and may be buffered, record buffers it, given copies of
// the key and v, and the key's write conflict range is added.
func (tr *transaction) writeKey(key kv.KeyConvertible, v []byte, record func(k, v []byte)) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	if err := checkWrite(k, v); err != nil {
		tr.deferErr(err)
		return
	}
	ke, vc := keyAfterAnd(k, v)
	kc := ke[:len(k):len(k)]
	record(kc, vc)
	tr.addWrite(span{kc, ke})
}

func (tr *transaction) Set(key kv.KeyConvertible, value []byte) {
	if k := key.FDBKey(); isSystem(k) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.writable() {
			tr.deferErr(systemWriteErr(k))
		}
		return
	}
	tr.writeKey(key, value, tr.buf.set)
}

func (tr *transaction) Clear(key kv.KeyConvertible) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	if isSystem(k) {
		tr.deferErr(systemWriteErr(k))
		return
	}
	if len(k) > kv.MaxKeySize {
		return // cannot exist
	}
	ke := keyAfter(k)
	kc := ke[:len(k):len(k)]
	tr.buf.clear(kc)
	tr.addWrite(span{kc, ke})
}

func (tr *transaction) ClearRange(r kv.ExactRange) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	b, e, err := exactRange(r)
	if errors.Is(err, errOutsideLegalRange) {
		bk, _ := r.FDBRangeKeys()
		err = systemWriteErr(bk.FDBKey())
	}
	if err != nil {
		tr.deferErr(err)
		return
	}
	if bytes.Equal(b, e) {
		return
	}
	tr.buf.clearRange(b, e)
	tr.addWrite(span{b, e})
}

func (tr *transaction) atomicOp(op opType, key kv.KeyConvertible, param []byte) {
	tr.writeKey(key, param, func(k, p []byte) { tr.buf.atomicOp(op, k, p) })
}

func (tr *transaction) Add(key kv.KeyConvertible, param []byte)    { tr.atomicOp(opAdd, key, param) }
func (tr *transaction) BitAnd(key kv.KeyConvertible, param []byte) { tr.atomicOp(opBitAnd, key, param) }
func (tr *transaction) BitOr(key kv.KeyConvertible, param []byte)  { tr.atomicOp(opBitOr, key, param) }
func (tr *transaction) BitXor(key kv.KeyConvertible, param []byte) { tr.atomicOp(opBitXor, key, param) }
func (tr *transaction) Max(key kv.KeyConvertible, param []byte)    { tr.atomicOp(opMax, key, param) }
func (tr *transaction) Min(key kv.KeyConvertible, param []byte)    { tr.atomicOp(opMin, key, param) }
func (tr *transaction) ByteMax(key kv.KeyConvertible, param []byte) {
	tr.atomicOp(opByteMax, key, param)
}
func (tr *transaction) ByteMin(key kv.KeyConvertible, param []byte) {
	tr.atomicOp(opByteMin, key, param)
}
func (tr *transaction) CompareAndClear(key kv.KeyConvertible, param []byte) {
	tr.atomicOp(opCompareAndClear, key, param)
}

// versionstampOffset splits the 4-byte little-endian offset off b and
// checks that 10 bytes fit there.
func versionstampOffset(b []byte) ([]byte, int, error) {
	if len(b) < 4 {
		return nil, 0, errInvalidOperation
	}
	pos := int32(binary.LittleEndian.Uint32(b[len(b)-4:]))
	rest := b[:len(b)-4]
	if pos < 0 || int(pos)+10 > len(rest) {
		return nil, 0, errInvalidOperation
	}
	return rest, int(pos), nil
}

func (tr *transaction) SetVersionstampedKey(key kv.KeyConvertible, value []byte) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	// As FoundationDB, the size limits apply to the operands with their
	// 4-byte offsets, before the offset is checked.
	full := key.FDBKey()
	switch {
	case len(full) > kv.MaxKeySize:
		tr.deferErr(errKeyTooLarge)
		return
	case len(value) > kv.MaxValueSize:
		tr.deferErr(errValueTooLarge)
		return
	}
	k, pos, err := versionstampOffset(full)
	if err != nil {
		tr.deferErr(err)
		return
	}
	// The key lands somewhere in [k with the first stamp of the version
	// after the read version, k with 0xff...): a commit's version is above
	// its read version. That range is unreadable and write-conflicting, as
	// in FoundationDB (getVersionstampKeyRange). It leaves out the keys of
	// commits at the read version, which this transaction has seen.
	var rv int64
	if tr.ref.s != nil {
		rv = tr.ref.s.version + 1
	}
	begin := clone(k)
	binary.BigEndian.PutUint64(begin[pos:], uint64(rv))
	begin[pos+8], begin[pos+9] = 0, 0
	end := keyAfter(k)
	for i := pos; i < pos+10; i++ {
		end[i] = 0xff
	}
	if isSystem(begin) {
		tr.deferErr(errOutsideLegalRange)
		return
	}
	if bytes.Compare(end, maxReadKey) > 0 {
		end = clone(maxReadKey)
	}
	tr.buf.setVersionstampedKey(clone(k), clone(value), pos, span{begin, end})
	// The range is a write conflict range here (the resolver needs one);
	// FoundationDB's client does not send it, so it is kept apart and not
	// counted in the transaction's size.
	tr.vsw = append(tr.vsw, span{begin, end})
}

func (tr *transaction) SetVersionstampedValue(key kv.KeyConvertible, value []byte) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	// The size limit applies to the value with its 4-byte offset.
	if err := checkWrite(k, value); err != nil {
		tr.deferErr(err)
		return
	}
	v, pos, err := versionstampOffset(value)
	if err != nil {
		tr.deferErr(err)
		return
	}
	kc := clone(k)
	tr.buf.setVersionstampedValue(kc, clone(v), pos)
	tr.addWrite(span{kc, keyAfter(kc)})
}
