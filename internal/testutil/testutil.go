// Package testutil is the project's shared test toolkit: a log sink safe
// for concurrent writes and one whose lines a test can wait for (Logs),
// the goroutine-leak check every package's TestMain runs, waits on test
// signals, HTTP helpers, and a bounded condition wait for the few outcomes
// no signal reports (state in another process, or in a peer).
package testutil

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fdbrep/fdbrep/internal/testsignal"
)

// WaitTimeout bounds every wait of this package: a wait that takes longer
// is a hang, reported as a test failure. It is not a speed expectation.
const WaitTimeout = 60 * time.Second

// SyncBuffer is a bytes.Buffer safe for concurrent writes: a log sink for
// services whose output a test inspects.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// leakOptions ignore goroutines that outlive a test by design: idle
// keep-alive connections of http.DefaultClient to servers that are gone
// close asynchronously, and FoundationDB's network thread runs for the
// life of the process once a database was opened (tests on FoundationDB).
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreTopFunction("github.com/apple/foundationdb/bindings/go/src/fdb._Cfunc_fdb_run_network"),
}

// VerifyTestMain runs the package's tests and fails the run if any
// goroutine is left behind once they are done (services not stopped,
// stores not closed). Call it from TestMain.
//
// cleanups run after the tests and the check, before the process exits.
func VerifyTestMain(m *testing.M, cleanups ...func()) {
	opts := leakOptions
	if len(cleanups) > 0 {
		opts = append(slices.Clip(opts), goleak.Cleanup(func(int) {
			for _, f := range cleanups {
				f()
			}
		}))
	}
	goleak.VerifyTestMain(m, opts...)
}

// NoLeaks makes t fail if, once it and its cleanups are done, goroutines
// are left that were not running when NoLeaks was called. Call it first in
// a test, before the test registers cleanups (stores, services), since
// cleanups run last-in first-out. goleak retries for a while, so
// goroutines on their way out are not counted. Not for parallel tests.
func NoLeaks(t testing.TB) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		goleak.VerifyNone(t, append([]goleak.Option{before}, leakOptions...)...)
	})
}

// Wait returns the next value of an initialised signal, failing t after
// WaitTimeout.
func Wait[T any](t testing.TB, s *testsignal.Signal[T]) T {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	select {
	case v := <-s.C():
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for a test signal", WaitTimeout)
		panic("unreachable")
	}
}

// Recv returns the next value from ch, failing t after WaitTimeout: a
// receive that a bug in the code under test cannot turn into a hung test.
func Recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting on a channel", WaitTimeout)
		panic("unreachable")
	}
}

// WaitUntil receives values of an initialised signal until cond accepts
// one, and returns it; it fails t after WaitTimeout.
func WaitUntil[T any](t testing.TB, s *testsignal.Signal[T], what string, cond func(T) bool) T {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	for {
		select {
		case v := <-s.C():
			if cond(v) {
				return v
			}
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s", WaitTimeout, what)
		}
	}
}

// Eventually checks cond with a growing pause (1 ms doubling to 100 ms)
// until it holds, failing t after WaitTimeout. Use it only where nothing
// signals the outcome: state in another process or in a replication peer.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, WaitTimeout, what, cond)
}

// EventuallyWithin is Eventually bounded by timeout instead: for the waits
// on a peer's own work that a loaded machine slows down more (CouchDB's
// replicator copying a database).
func EventuallyWithin(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// SeedEnv names the environment variable that replays a randomized test.
const SeedEnv = "FDBREP_TEST_SEED"

// Seed returns the seed of a randomized test: SeedFrom with SeedEnv.
func Seed(t testing.TB) uint64 {
	t.Helper()
	return SeedFrom(t, SeedEnv)
}

// SeedFrom returns the seed of a randomized test: $env when set (to
// replay a failure), else the clock. It logs the seed with the line that
// replays it.
func SeedFrom(t testing.TB, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(env); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, env, seed)
	return seed
}
