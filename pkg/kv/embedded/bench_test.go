package embedded

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// BenchmarkRMW runs read-modify-write transactions (read one key, write
// two) from parallel clients on an in-memory store: the CPU cost of the
// transaction layer without disk syncs. cmd/fdbrep-bench kv measures the
// durable figures.
func BenchmarkRMW(b *testing.B) {
	db, err := Open(Options{InMemory: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const keys = 10_000
	key := func(i int) kv.Key { return kv.Key(fmt.Sprintf("bench/%08d", i)) }
	val := make([]byte, 200)
	_, err = db.Transact(b.Context(), func(tr kv.Transaction) (any, error) {
		for i := range keys {
			tr.Set(key(i), val)
		}
		return nil, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(8)
	cpu0 := cpuTime()
	b.ResetTimer()
	defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			k1, k2 := key(rng.IntN(keys)), key(rng.IntN(keys))
			_, err := db.Transact(b.Context(), func(tr kv.Transaction) (any, error) {
				if _, err := tr.Get(k1).Get(); err != nil {
					return nil, err
				}
				tr.Set(k1, val)
				tr.Set(k2, val)
				return nil, nil
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
