package subspace

import (
	"bytes"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Subspace is a region of the key space: every key that starts with its
// prefix. It is a kv.KeyConvertible (the prefix) and a kv.ExactRange (the
// keys [prefix+0x00, prefix+0xff), where keys packed from tuples live).
type Subspace interface {
	// Sub returns the subspace whose prefix is this one's followed by the
	// packed elements. It panics as tuple.Tuple.Pack does.
	Sub(el ...tuple.TupleElement) Subspace
	// Bytes returns the prefix. Do not modify it.
	Bytes() []byte
	// Pack returns the prefix followed by the packed t. It panics as
	// tuple.Tuple.Pack does.
	Pack(t tuple.Tuple) kv.Key
	// PackWithVersionstamp returns a key for
	// kv.Transaction.SetVersionstampedKey: the prefix, the packed t, which
	// must hold exactly one incomplete versionstamp, and the 4-byte offset
	// of that versionstamp.
	PackWithVersionstamp(t tuple.Tuple) (kv.Key, error)
	// Unpack returns the tuple encoded in k after the prefix. It fails with
	// ErrNotInSubspace when k does not start with the prefix, and with
	// tuple.ErrMalformed when the rest of k is not a tuple.
	Unpack(k kv.KeyConvertible) (tuple.Tuple, error)
	// Contains reports whether k starts with the prefix.
	Contains(k kv.KeyConvertible) bool

	kv.KeyConvertible
	kv.ExactRange
}

type subspace struct {
	prefix []byte
}

// AllKeys returns the subspace with the empty prefix: the whole key space.
func AllKeys() Subspace { return subspace{prefix: []byte{}} }

// Sub returns the subspace whose prefix is the packed elements. It panics as
// tuple.Tuple.Pack does.
func Sub(el ...tuple.TupleElement) Subspace {
	return subspace{prefix: tuple.Tuple(el).Pack()}
}

// FromBytes returns the subspace with a copy of b as its raw prefix.
func FromBytes(b []byte) Subspace {
	return subspace{prefix: append([]byte{}, b...)}
}

// String renders the subspace as Subspace(rawPrefix=<printable prefix>).
func (s subspace) String() string {
	return fmt.Sprintf("Subspace(rawPrefix=%s)", kv.Printable(s.prefix))
}

func (s subspace) Sub(el ...tuple.TupleElement) Subspace {
	return subspace{prefix: concat(s.prefix, tuple.Tuple(el).Pack())}
}

func (s subspace) Bytes() []byte { return s.prefix }

func (s subspace) Pack(t tuple.Tuple) kv.Key {
	// The full slice expression makes the append copy the prefix.
	return t.AppendPack(s.prefix[:len(s.prefix):len(s.prefix)])
}

func (s subspace) PackWithVersionstamp(t tuple.Tuple) (kv.Key, error) {
	return t.PackWithVersionstamp(s.prefix)
}

func (s subspace) Unpack(k kv.KeyConvertible) (tuple.Tuple, error) {
	key := k.FDBKey()
	if !bytes.HasPrefix(key, s.prefix) {
		return nil, fmt.Errorf("%w: %s is not in %s", ErrNotInSubspace, kv.Printable(key), s)
	}
	return tuple.Unpack(key[len(s.prefix):])
}

func (s subspace) Contains(k kv.KeyConvertible) bool {
	return bytes.HasPrefix(k.FDBKey(), s.prefix)
}

func (s subspace) FDBKey() kv.Key { return s.prefix }

func (s subspace) FDBRangeKeys() (kv.KeyConvertible, kv.KeyConvertible) {
	return concat(s.prefix, []byte{0x00}), concat(s.prefix, []byte{0xff})
}

func (s subspace) FDBRangeKeySelectors() (kv.Selectable, kv.Selectable) {
	b, e := s.FDBRangeKeys()
	return kv.FirstGreaterOrEqual(b), kv.FirstGreaterOrEqual(e)
}

func concat(a, b []byte) kv.Key {
	out := make(kv.Key, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}
