package embedded

import "bytes"

// keyAfter returns k followed by a zero byte: the first key after k.
func keyAfter(k []byte) []byte {
	out := make([]byte, len(k)+1)
	copy(out, k)
	return out
}

// keyAfterAnd returns keyAfter(k) and a copy of v (never nil) in one
// allocation; neither has room to grow into the other.
func keyAfterAnd(k, v []byte) (ke, vc []byte) {
	buf := make([]byte, len(k)+1+len(v))
	copy(buf, k)
	copy(buf[len(k)+1:], v)
	return buf[: len(k)+1 : len(k)+1], buf[len(k)+1:]
}

// isSystem reports whether k lies in the system key space, from "\xff" on,
// which transactions can neither read nor write.
func isSystem(k []byte) bool { return bytes.Compare(k, maxReadKey) >= 0 }

// specialKeys begins FoundationDB's special key space, which no write may
// touch without the special_key_space_enable_writes option.
var specialKeys = []byte{0xff, 0xff}

// systemWriteErr is FoundationDB's error for a set or clear at k in the
// system key space: special_keys_write_disabled in its special key space,
// key_outside_legal_range elsewhere. (Atomic operations there are
// key_outside_legal_range wherever they are.)
func systemWriteErr(k []byte) error {
	if bytes.Compare(k, specialKeys) >= 0 {
		return errSpecialKeysWrite
	}
	return errOutsideLegalRange
}
