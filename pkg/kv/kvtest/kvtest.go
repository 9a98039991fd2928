package kvtest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
)

// NewDB opens an empty in-memory embedded store for one test and closes it
// when the test ends; with FDBREP_KV_BACKEND=fdb, a new tenant of the
// FoundationDB cluster instead, emptied and deleted when the test ends.
// When FDBREP_KV_FAULTS enables fault injection (see faultkv.FromEnv), the
// store is wrapped with it and the seed is logged. FDBREP_KV_LATENCY and
// FDBREP_KV_BUDGET apply as to every embedded store (see OpenEmbedded); a
// transaction over the budget fails the test.
func NewDB(t testing.TB) kv.Database {
	t.Helper()
	if OnFoundationDB(t) {
		return WithEnvFaults(t, openTenant(t, ""))
	}
	return open(t, embedded.Options{InMemory: true})
}

// NewDiskDB is NewDB on a durable store in a fresh t.TempDir().
func NewDiskDB(t testing.TB) kv.Database {
	t.Helper()
	return OpenDiskDB(t, t.TempDir())
}

// OpenDiskDB is NewDB on a durable store in dir, for tests that close a
// store and open it again (the store in dir must be closed first). With
// FDBREP_KV_BACKEND=fdb, dir names a tenant that lives as long as the test
// that first opened it.
func OpenDiskDB(t testing.TB, dir string) kv.Database {
	t.Helper()
	if OnFoundationDB(t) {
		return WithEnvFaults(t, openTenant(t, dir))
	}
	return open(t, embedded.Options{Dir: dir})
}

func open(t testing.TB, opts embedded.Options) kv.Database {
	t.Helper()
	return WithEnvFaults(t, OpenEmbedded(t, opts))
}

// OpenEmbedded opens an embedded store with opts for one test and closes it
// when the test ends, without fault injection. The store reads
// FDBREP_KV_LATENCY and FDBREP_KV_BUDGET as every embedded store does,
// unless opts sets Latency or Budget. A transaction that goes over the
// budget fails with a *kv.BudgetError naming its call site and, through
// t.Errorf, fails the test too (unless the test called ExemptFromBudget or
// opts sets OnBudgetExceeded).
func OpenEmbedded(t testing.TB, opts embedded.Options) *embedded.DB {
	t.Helper()
	switch {
	case budgetExemptions.has(t):
		opts.Budget = &kv.Budget{}
	case opts.Budget == nil && durationExemptions.has(t):
		b, err := kv.BudgetFromEnv()
		require.NoError(t, err)
		b.Duration = 0
		opts.Budget = &b
	}
	if opts.OnBudgetExceeded == nil {
		opts.OnBudgetExceeded = budgetReporter(t)
	}
	db, err := embedded.Open(opts)
	require.NoError(t, err)
	closeOnCleanup(t, db)
	return db
}

// ExemptFromBudget turns the budget check of FDBREP_KV_BUDGET off for the
// stores that t and its subtests open from now on with this package's
// helpers: for tests that go over it on purpose (transaction_too_large,
// the five second lifetime).
func ExemptFromBudget(t testing.TB) { budgetExemptions.add(t) }

// ExemptFromBudgetDuration turns the duration part of FDBREP_KV_BUDGET's
// check off, and keeps its size part, for the stores that t and its
// subtests open from now on with this package's helpers: for tests that
// run hundreds of goroutines, whose transactions stay open longer than
// FoundationDB's advice only while they wait for a core (beside the other
// packages' tests, on a machine of two).
func ExemptFromBudgetDuration(t testing.TB) { durationExemptions.add(t) }

// The tests that called ExemptFromBudget and ExemptFromBudgetDuration.
var budgetExemptions, durationExemptions = exemptions{m: &sync.Map{}}, exemptions{m: &sync.Map{}}

// exemptions are tests exempted from a check, with their subtests.
type exemptions struct{ m *sync.Map }

func (e exemptions) add(t testing.TB) {
	name := t.Name()
	e.m.Store(name, true)
	t.Cleanup(func() { e.m.Delete(name) })
}

func (e exemptions) has(t testing.TB) bool {
	name := t.Name()
	for {
		if _, ok := e.m.Load(name); ok {
			return true
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// budgetReporter fails t for each transaction over the budget; after t has
// ended (a goroutine that outlived it), it writes to standard error.
func budgetReporter(t testing.TB) func(*kv.BudgetError) {
	var (
		mu   sync.Mutex
		done bool
	)
	// Registered before the store's Close, so it runs after it.
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return func(e *kv.BudgetError) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			fmt.Fprintln(os.Stderr, e.Error())
			return
		}
		t.Errorf("%v", e)
	}
}

// WithEnvFaults wraps db with fault injection when FDBREP_KV_FAULTS enables
// it, logging the seed to replay with, and returns db unchanged otherwise.
// NewDB and NewDiskDB call it; tests that open stores themselves can too.
func WithEnvFaults(t testing.TB, db kv.Database) kv.Database {
	t.Helper()
	opts, on, err := faultkv.FromEnv()
	require.NoError(t, err)
	if !on {
		return db
	}
	return WithFaults(t, db, opts)
}

// WithFaults wraps db with fault injection at opts, logs the seed and, when
// the test ends, what was injected.
func WithFaults(t testing.TB, db kv.Database, opts faultkv.Options) kv.Database {
	t.Helper()
	require.NoError(t, opts.Validate())
	t.Logf("kvtest: storage fault injection on, seed %d (replay: %s)", opts.Seed, replayEnv(opts))
	f := faultkv.Wrap(db, opts)
	t.Cleanup(func() { t.Logf("kvtest: injected faults: %s", f.Stats()) })
	return f
}

func replayEnv(o faultkv.Options) string {
	return fmt.Sprintf("%s=seed=%d,commit_unknown=%g,not_committed=%g,too_old=%g,read_too_old=%g,timed_out=%g,"+
		"proxy_memory=%g,process_behind=%g,future_version=%g,grv_memory=%g,tag_throttled=%g,watch=%g",
		faultkv.EnvVar, o.Seed, o.CommitUnknownResult, o.NotCommitted, o.TransactionTooOld, o.ReadTooOld, o.TimedOut,
		o.ProxyMemoryLimit, o.ProcessBehind, o.FutureVersion, o.GRVProxyMemoryLimit, o.TagThrottled, o.WatchFailure)
}

// closeOnCleanup closes db when the test ends; a test may close it first.
func closeOnCleanup(t testing.TB, db kv.Database) {
	t.Cleanup(func() {
		if err := db.Close(); err != nil && !errors.Is(err, kv.ErrDatabaseClosed) {
			t.Errorf("kvtest: close database: %v", err)
		}
	})
}

// OpenFullableDisk opens an in-memory embedded store on a disk whose
// writes fail with ENOSPC while full is set: a full disk without filling
// one, for tests of what the layers above do then.
func OpenFullableDisk(t testing.TB) (db *embedded.DB, full *atomic.Bool) {
	t.Helper()
	full = &atomic.Bool{}
	disk := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) {
			return syscall.ENOSPC
		}
		return nil
	}))
	return OpenEmbedded(t, embedded.Options{InMemory: true, FS: disk}), full
}
