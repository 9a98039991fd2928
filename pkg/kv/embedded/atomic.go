package embedded

import "bytes"

// opType identifies a mutation in a transaction's log.
type opType uint8

const (
	opSet opType = iota
	opClear
	opClearRange
	opAdd
	opBitAnd
	opBitOr
	opBitXor
	opMax
	opMin
	opByteMax
	opByteMin
	opCompareAndClear
	opVersionstampedKey
	opVersionstampedValue
)

// isAtomic reports whether t is an atomic read-modify-write op.
func (t opType) isAtomic() bool { return t >= opAdd && t <= opCompareAndClear }

// applyAtomic evaluates atomic op t with param on an existing value (present
// reports whether the key exists) exactly as FoundationDB does at API
// version 510 and later. It returns the new value and whether the key exists
// afterwards (only CompareAndClear can remove it).
func applyAtomic(t opType, existing []byte, present bool, param []byte) ([]byte, bool) {
	switch t {
	case opAdd:
		return doAdd(existing, param), true
	case opBitAnd:
		if !present {
			return clone(param), true
		}
		return doBitwise(existing, param, func(a, b byte) byte { return a & b }, false), true
	case opBitOr:
		return doBitwise(existing, param, func(a, b byte) byte { return a | b }, true), true
	case opBitXor:
		return doBitwise(existing, param, func(a, b byte) byte { return a ^ b }, true), true
	case opMax:
		if len(existing) == 0 || len(param) == 0 {
			return clone(param), true
		}
		if compareLE(existing, param) > 0 {
			return resize(existing, len(param)), true
		}
		return clone(param), true
	case opMin:
		if !present || len(param) == 0 {
			return clone(param), true
		}
		if compareLE(existing, param) < 0 {
			return resize(existing, len(param)), true
		}
		return clone(param), true
	case opByteMax:
		if !present || bytes.Compare(existing, param) <= 0 {
			return clone(param), true
		}
		return clone(existing), true
	case opByteMin:
		if !present || bytes.Compare(existing, param) >= 0 {
			return clone(param), true
		}
		return clone(existing), true
	case opCompareAndClear:
		if !present || bytes.Equal(existing, param) {
			return nil, false
		}
		return clone(existing), true
	}
	panic("embedded: not an atomic op")
}

// doAdd adds two little-endian integers; the result has param's length.
func doAdd(existing, param []byte) []byte {
	if len(existing) == 0 || len(param) == 0 {
		return clone(param)
	}
	out := make([]byte, len(param))
	carry := 0
	for i := range param {
		s := int(param[i]) + carry
		if i < len(existing) {
			s += int(existing[i])
		}
		out[i] = byte(s)
		carry = s >> 8
	}
	return out
}

// doBitwise combines existing and param bytewise over param's length. Bytes
// of param beyond existing are combined with zero (And) or kept (Or, Xor:
// keepTail). An empty existing value yields param for Or and Xor, as in
// FoundationDB.
func doBitwise(existing, param []byte, f func(a, b byte) byte, keepTail bool) []byte {
	if keepTail && len(existing) == 0 {
		return clone(param)
	}
	out := make([]byte, len(param))
	for i := range param {
		if i < len(existing) {
			out[i] = f(existing[i], param[i])
		} else if keepTail {
			out[i] = param[i]
		}
	}
	return out
}

// compareLE compares existing, truncated or zero-extended to len(param),
// with param, both as unsigned little-endian integers.
func compareLE(existing, param []byte) int {
	for i := len(param) - 1; i >= 0; i-- {
		var e byte
		if i < len(existing) {
			e = existing[i]
		}
		if e != param[i] {
			if e < param[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// resize returns a copy of b truncated or zero-extended to n bytes.
func resize(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	out := make([]byte, len(b))
	copy(out, b)
	return out
}
