package kv

import (
	"bytes"
	"fmt"
	"strings"
)

// Key is a FoundationDB key: an arbitrary byte string. Keys sort in
// lexicographic byte order. User keys are below "\xff"; keys from "\xff" on
// belong to the system and are refused by writes.
type Key []byte

// KeyConvertible is implemented by anything that can be used as a key: Key
// itself, tuple.Tuple, subspace.Subspace.
type KeyConvertible interface {
	FDBKey() Key
}

// FDBKey returns k itself.
func (k Key) FDBKey() Key { return k }

// String renders k printably, escaping bytes outside printable ASCII as \xNN,
// as FoundationDB's fdb.Printable does.
func (k Key) String() string { return Printable(k) }

// Printable renders b printably: printable ASCII as is (with a backslash
// doubled), every other byte as \xNN.
func Printable(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		switch {
		case c == '\\':
			sb.WriteString(`\\`)
		case c >= 32 && c < 127:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, `\x%02x`, c)
		}
	}
	return sb.String()
}

// KeyValue is one entry returned by a range read.
type KeyValue struct {
	Key   Key
	Value []byte
}

// SystemKeyPrefix is the first key of the system key space. Keys at or after
// it cannot be written through this API.
var SystemKeyPrefix = Key{0xff}

// Strinc returns the first key that sorts after every key that has prefix as
// a prefix: prefix with trailing 0xff bytes removed and its last byte
// incremented. It fails when prefix is empty or consists only of 0xff bytes.
func Strinc(prefix []byte) (Key, error) {
	p := bytes.TrimRight(prefix, "\xff")
	if len(p) == 0 {
		return nil, fmt.Errorf("kv: key %q must contain at least one byte that is not 0xff", prefix)
	}
	out := make([]byte, len(p))
	copy(out, p)
	out[len(out)-1]++
	return out, nil
}

// KeyAfter returns the first key after k: k followed by a zero byte.
func KeyAfter(k []byte) Key {
	out := make([]byte, len(k)+1)
	copy(out, k)
	return out
}
