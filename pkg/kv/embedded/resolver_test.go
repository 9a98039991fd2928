package embedded

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestResolverModel checks the conflict history against a brute-force
// model (every write range with its version) under random writes, queries
// and garbage collection.
func TestResolverModel(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	key := func() []byte {
		n := rng.IntN(3)
		k := make([]byte, n)
		for i := range k {
			k[i] = byte('a' + rng.IntN(4))
		}
		return k
	}
	rangeOf := func() span {
		a, b := key(), key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		if bytes.Equal(a, b) {
			b = keyAfter(a)
		}
		return span{a, b}
	}
	type write struct {
		s span
		v int64
	}
	r := newResolver()
	var model []write
	version := int64(0)
	for step := range 3000 {
		switch rng.IntN(10) {
		case 0:
			// Forget everything up to a recent version.
			h := version - int64(rng.IntN(20))
			r.gc(h, 1+rng.IntN(50))
		case 1, 2, 3, 4:
			version++
			for range 1 + rng.IntN(3) {
				s := rangeOf()
				r.insert(s, version)
				model = append(model, write{s, version})
			}
		default:
			rv := version - int64(rng.IntN(30))
			if rv < r.horizon {
				continue // such a transaction gets transaction_too_old
			}
			q := []span{rangeOf()}
			want := false
			for _, w := range model {
				if w.v > rv && bytes.Compare(w.s.begin, q[0].end) < 0 && bytes.Compare(q[0].begin, w.s.end) < 0 {
					want = true
				}
			}
			require.Equal(t, want, r.conflicts(q, rv), "step %d: read %q..%q at %d", step, q[0].begin, q[0].end, rv)
		}
	}
	// A full sweep at the newest version leaves just the first entry.
	for range 100 {
		r.gc(version, 1000)
	}
	require.Equal(t, 1, r.tree.Len())
}

func TestCoalesce(t *testing.T) {
	s := func(b, e string) span { return span{[]byte(b), []byte(e)} }
	got := coalesce([]span{s("d", "f"), s("a", "b"), s("b", "c"), s("e", "g"), s("x", "y")})
	require.Equal(t, []span{s("a", "c"), s("d", "g"), s("x", "y")}, got)
}
