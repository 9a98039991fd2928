package embedded

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkResolver resolves batches of 20 read-modify-write transactions
// (one point read, two point writes among 100,000 keys) read at the
// previous batch's version, forgetting versions as the commit leader does.
func BenchmarkResolver(b *testing.B) {
	const keys, batch = 100_000, 20
	rng := rand.New(rand.NewPCG(1, 2))
	point := func() span {
		k := fmt.Appendf(nil, "bench/%08d", rng.IntN(keys))
		e := keyAfter(k)
		return span{e[:len(k):len(k)], e}
	}
	type txn struct{ reads, writes []span }
	txns := make([]txn, 4096)
	for i := range txns {
		txns[i] = txn{reads: []span{point()}, writes: coalesce([]span{point(), point()})}
	}
	r := newResolver()
	b.ReportAllocs()
	b.ResetTimer()
	v := int64(1)
	for i := range b.N {
		t := txns[i%len(txns)]
		if i%batch == 0 {
			v++
			r.gc(v-2, 2*2*batch+16)
		}
		if !r.conflicts(t.reads, v-1) {
			for _, w := range t.writes {
				r.insert(w, v)
			}
		}
	}
	b.ReportMetric(float64(r.tree.Len()), "history")
}
