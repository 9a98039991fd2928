package embedded_test

import (
	"testing"

	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestCycle runs FoundationDB's Cycle workload (see kvtest.Cycle) on a
// larger ring with more writers than the conformance suite does, in memory
// and on disk: any lost update or non-serializable interleaving breaks the
// ring.
func TestCycle(t *testing.T) {
	opts := kvtest.CycleOptions{Keys: 16, Workers: 8, TxPerWorker: 40}
	t.Run("memory", func(t *testing.T) { kvtest.Cycle(t, kvtest.NewDB(t), opts) })
	t.Run("disk", func(t *testing.T) { kvtest.Cycle(t, kvtest.NewDiskDB(t), opts) })
}
