package kvtest_test

import (
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestConformanceEmbeddedMemory(t *testing.T) {
	t.Parallel()
	kvtest.RunConformance(t, kvtest.NewDB)
}

func TestConformanceEmbeddedDisk(t *testing.T) {
	t.Parallel()
	kvtest.RunConformance(t, kvtest.NewDiskDB)
}

// TestConformanceEmbeddedFaults runs the suite on an embedded store wrapped
// by faultkv at its default rates, whatever FDBREP_KV_FAULTS says: the
// semantics must hold under injected faults.
func TestConformanceEmbeddedFaults(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	kvtest.RunConformance(t, func(t testing.TB) kv.Database {
		db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true})
		seed++
		return kvtest.WithFaults(t, db, faultkv.DefaultOptions(seed))
	})
}
