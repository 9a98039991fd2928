package subspace

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// inRange reports whether k lies in the exact range r.
func inRange(r kv.ExactRange, k []byte) bool {
	b, e := r.FDBRangeKeys()
	return bytes.Compare(b.FDBKey(), k) <= 0 && bytes.Compare(k, e.FDBKey()) < 0
}

func TestSubspace(t *testing.T) {
	jobs := Sub("fdbrep", "jobs")
	require.Equal(t, tuple.Tuple{"fdbrep", "jobs"}.Pack(), jobs.Bytes())
	require.Equal(t, kv.Key(jobs.Bytes()), jobs.FDBKey())

	repl := jobs.Sub("replication", int64(3))
	require.Equal(t, tuple.Tuple{"fdbrep", "jobs", "replication", int64(3)}.Pack(), repl.Bytes())

	key := repl.Pack(tuple.Tuple{"doc", nil})
	require.Equal(t, kv.Key(tuple.Tuple{"fdbrep", "jobs", "replication", int64(3), "doc", nil}.Pack()), key)
	require.True(t, jobs.Contains(key))
	require.True(t, repl.Contains(key))
	require.False(t, Sub("fdbrep", "other").Contains(key))

	got, err := repl.Unpack(key)
	require.NoError(t, err)
	require.Equal(t, tuple.Tuple{"doc", nil}, got)
	got, err = jobs.Unpack(key)
	require.NoError(t, err)
	require.Equal(t, tuple.Tuple{"replication", int64(3), "doc", nil}, got)

	_, err = Sub("other").Unpack(key)
	require.ErrorIs(t, err, ErrNotInSubspace)
	_, err = FromBytes([]byte("raw")).Unpack(kv.Key("raw\x03"))
	require.ErrorIs(t, err, tuple.ErrMalformed)

	require.True(t, inRange(jobs, key))
	require.False(t, inRange(jobs, jobs.Bytes()), "the prefix itself is outside the range")
	require.False(t, inRange(jobs, Sub("fdbrep", "jobz").Bytes()))
	b, e := jobs.FDBRangeKeys()
	sb, se := jobs.FDBRangeKeySelectors()
	require.Equal(t, kv.FirstGreaterOrEqual(b), sb)
	require.Equal(t, kv.FirstGreaterOrEqual(e), se)

	require.Equal(t, `Subspace(rawPrefix=\x02fdbrep\x00\x02jobs\x00)`, jobs.(interface{ String() string }).String())
}

func TestFromBytesCopies(t *testing.T) {
	raw := []byte("abc")
	s := FromBytes(raw)
	raw[0] = 'X'
	require.Equal(t, []byte("abc"), s.Bytes())
	require.Equal(t, kv.Key("abc\x15\x01"), s.Pack(tuple.Tuple{1}))
	// Sub never aliases its parent's prefix.
	a, b := s.Sub("a"), s.Sub("b")
	require.Equal(t, []byte("abc\x02a\x00"), a.Bytes())
	require.Equal(t, []byte("abc\x02b\x00"), b.Bytes())
}

func TestAllKeys(t *testing.T) {
	all := AllKeys()
	require.Empty(t, all.Bytes())
	b, e := all.FDBRangeKeys()
	require.Equal(t, kv.Key{0x00}, b.FDBKey())
	require.Equal(t, kv.Key{0xff}, e.FDBKey())
	require.True(t, all.Contains(kv.Key("anything")))
	got, err := all.Unpack(tuple.Tuple{"x", int64(1)})
	require.NoError(t, err)
	require.Equal(t, tuple.Tuple{"x", int64(1)}, got)
}

func TestPackWithVersionstamp(t *testing.T) {
	s := FromBytes([]byte("p"))
	key, err := s.PackWithVersionstamp(tuple.Tuple{"log", tuple.IncompleteVersionstamp(2)})
	require.NoError(t, err)
	want, err := tuple.Tuple{"log", tuple.IncompleteVersionstamp(2)}.PackWithVersionstamp([]byte("p"))
	require.NoError(t, err)
	require.Equal(t, kv.Key(want), key)
	require.Equal(t, []byte{1 + 5 + 1, 0, 0, 0}, []byte(key[len(key)-4:]), "offset after prefix, string and type code")

	_, err = s.PackWithVersionstamp(tuple.Tuple{"log"})
	require.ErrorIs(t, err, tuple.ErrNoIncompleteVersionstamp)
}

func TestSubPanicsOnBadElement(t *testing.T) {
	require.Panics(t, func() { Sub(struct{}{}) })
	require.Panics(t, func() { AllKeys().Sub(complex(1, 1)) })
}
