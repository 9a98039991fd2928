package kvtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
)

// NewDB opens an empty in-memory embedded store for one test and closes it
// when the test ends. When FDBREP_KV_FAULTS enables fault injection (see
// faultkv.FromEnv), the store is wrapped with it and the seed is logged.
func NewDB(t testing.TB) kv.Database {
	t.Helper()
	return open(t, embedded.Options{InMemory: true})
}

// NewDiskDB is NewDB on a durable store in a fresh t.TempDir().
func NewDiskDB(t testing.TB) kv.Database {
	t.Helper()
	return OpenDiskDB(t, t.TempDir())
}

// OpenDiskDB is NewDB on a durable store in dir, for tests that close a
// store and open it again (the store in dir must be closed first).
func OpenDiskDB(t testing.TB, dir string) kv.Database {
	t.Helper()
	return open(t, embedded.Options{Dir: dir})
}

func open(t testing.TB, opts embedded.Options) kv.Database {
	t.Helper()
	db, err := embedded.Open(opts)
	require.NoError(t, err)
	closeOnCleanup(t, db)
	return WithEnvFaults(t, db)
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
	return fmt.Sprintf("%s=seed=%d,commit_unknown=%g,not_committed=%g,too_old=%g,read_too_old=%g,timed_out=%g",
		faultkv.EnvVar, o.Seed, o.CommitUnknownResult, o.NotCommitted, o.TransactionTooOld, o.ReadTooOld, o.TimedOut)
}

// closeOnCleanup closes db when the test ends; a test may close it first.
func closeOnCleanup(t testing.TB, db kv.Database) {
	t.Cleanup(func() {
		if err := db.Close(); err != nil && !errors.Is(err, kv.ErrDatabaseClosed) {
			t.Errorf("kvtest: close database: %v", err)
		}
	})
}
