package kvtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// OpenFunc opens a fresh, empty database for one test and arranges for it to
// be closed when the test ends. It must tolerate the test closing the
// database itself first.
type OpenFunc func(t testing.TB) kv.Database

// RunConformance runs the conformance suite against the backend that open
// returns. Each subtest opens its own database. The suite holds under fault
// injection: where a test expects a particular outcome of a hand-driven
// transaction, a retryable error it did not expect (such as an injected
// not_committed) makes it rerun the scenario on fresh keys.
//
// One subtest (Limits/TransactionTooOld) waits out FoundationDB's five
// second transaction lifetime; it is skipped with -short.
func RunConformance(t *testing.T, open OpenFunc) {
	t.Helper()
	groups := []struct {
		name  string
		tests []conformanceTest
	}{
		{"Serializability", serializabilityTests},
		{"Conflicts", conflictTests},
		{"ReadYourWrites", readYourWritesTests},
		{"Model", modelTests},
		{"Reads", readTests},
		{"Versionstamps", versionstampTests},
		{"Watches", watchTests},
		{"AtomicOps", atomicTests},
		{"Limits", limitTests},
		{"Transactions", transactionTests},
		{"RetryLoop", retryLoopTests},
		{"Context", contextTests},
		{"Versions", versionTests},
		{"Errors", errorTests},
		{"Fidelity", fidelityTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, ct := range g.tests {
				t.Run(ct.name, func(t *testing.T) { ct.run(t, open) })
			}
		})
	}
}

type conformanceTest struct {
	name string
	run  func(t *testing.T, open OpenFunc)
}

// onDB is a conformance test of one fresh database.
func onDB(name string, test func(t *testing.T, db kv.Database)) conformanceTest {
	return conformanceTest{name, func(t *testing.T, open OpenFunc) { test(t, open(t)) }}
}

// inScenario is a conformance test that is one scenario on one fresh
// database.
func inScenario(name string, test func(t *testing.T, db kv.Database, ks keyspace)) conformanceTest {
	return conformanceTest{name, func(t *testing.T, open OpenFunc) {
		db := open(t)
		scenario(t, func(ks keyspace) { test(t, db, ks) })
	}}
}

// ctxBg is the context of operations that need no cancellation.
var ctxBg = context.Background()

// waitTimeout bounds every wait on a signal (a watch, a goroutine) so that a
// broken backend fails the test instead of hanging it. It is not a speed
// expectation.
const waitTimeout = 2 * time.Minute

// scenarioAttempts bounds how often a scenario is rerun after unexpected
// retryable errors, which fault injection produces.
const scenarioAttempts = 200

// scenarioSeq numbers scenario attempts, so that every attempt of every
// scenario uses keys of its own, also when scenarios share a database.
var scenarioSeq atomic.Uint64

// redo is the panic value with which a scenario asks to be rerun.
type redo struct{ err error }

// keyspace prefixes the keys of one scenario attempt, so that a rerun never
// sees what an earlier, partly committed attempt wrote.
type keyspace string

func (ks keyspace) key(name string) kv.Key { return kv.Key(string(ks) + name) }

func (ks keyspace) rangeOf(begin, end string) kv.KeyRange {
	return kv.KeyRange{Begin: ks.key(begin), End: ks.key(end)}
}

func (ks keyspace) all() kv.KeyRange {
	r, err := kv.PrefixRange([]byte(ks))
	if err != nil {
		panic(err)
	}
	return r
}

// scenario runs fn with a fresh keyspace until it runs to the end without
// asking for a rerun (see must), at most scenarioAttempts times.
func scenario(t *testing.T, fn func(ks keyspace)) {
	t.Helper()
	var last error
	for range scenarioAttempts {
		ks := keyspace(fmt.Sprintf("s%06d/", scenarioSeq.Add(1)))
		err := runScenario(func() { fn(ks) })
		if err == nil {
			return
		}
		last = err
	}
	t.Fatalf("scenario rerun %d times after retryable errors; last: %v", scenarioAttempts, last)
}

func runScenario(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if rd, ok := r.(redo); ok {
				err = rd.err
				return
			}
			panic(r)
		}
	}()
	fn()
	return nil
}

// subScenario runs fn as a scenario in the subtest name.
func subScenario(t *testing.T, name string, fn func(t *testing.T, ks keyspace)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		scenario(t, func(ks keyspace) { fn(t, ks) })
	})
}

// must fails the test on a non-retryable error and reruns the scenario on a
// retryable one, or on too_many_watches, with which FoundationDB may fail
// any watch. Use it only inside scenario.
func must(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if rerunnable(err) {
		panic(redo{err})
	}
	require.NoError(t, err)
}

// rerunnable reports whether err may come from a healthy backend at any
// time (as fault injection produces), so that the scenario is rerun.
func rerunnable(err error) bool {
	return kv.IsRetryable(err) || kv.HasCode(err, kv.CodeTooManyWatches)
}

// mustCode requires err to carry code; another retryable error reruns the
// scenario. Use it only inside scenario.
func mustCode(t testing.TB, err error, code int) {
	t.Helper()
	if kv.HasCode(err, code) {
		return
	}
	if err != nil && rerunnable(err) {
		panic(redo{err})
	}
	require.Failf(t, "wrong error", "want %s, got %v", kv.Error{Code: code}.Name(), err)
}

// wait returns f's result, rerunning the scenario on a retryable error.
func wait[T any](t testing.TB, f kv.Future[T]) T {
	t.Helper()
	v, err := f.Get()
	must(t, err)
	return v
}

func slice(t testing.TB, r kv.RangeResult) []kv.KeyValue {
	t.Helper()
	kvs, err := r.GetSliceWithError()
	must(t, err)
	return kvs
}

func commit(tr kv.Transaction) error {
	_, err := tr.Commit().Get()
	return err
}

func newTr(t testing.TB, db kv.Database) kv.Transaction {
	t.Helper()
	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	return tr
}

// transactRuns is db's retry loop around fn, which gets the number of its
// run (1 for the first). It returns the loop's result and error, and how
// many runs there were.
func transactRuns(ctx context.Context, db kv.Transactor, fn func(tr kv.Transaction, run int) (any, error)) (any, int, error) {
	runs := 0
	ret, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		runs++
		return fn(tr, runs)
	})
	return ret, runs, err
}

// setAll commits the keys and values of pairs (key, value, key, value…)
// under ks in one transaction of its own retry loop.
func setAll(t testing.TB, db kv.Database, ks keyspace, pairs ...string) {
	t.Helper()
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		for i := 0; i+1 < len(pairs); i += 2 {
			tr.Set(ks.key(pairs[i]), []byte(pairs[i+1]))
		}
		return nil, nil
	})
	require.NoError(t, err)
}

// set commits key=value in its own retry loop.
func set(t testing.TB, db kv.Database, key kv.Key, value string) {
	t.Helper()
	_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		tr.Set(key, []byte(value))
		return nil, nil
	})
	require.NoError(t, err)
}

// read returns the committed value of key, nil when absent.
func read(t testing.TB, db kv.Database, key kv.Key) []byte {
	t.Helper()
	v, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(key).Get()
	})
	require.NoError(t, err)
	return v
}

// readAll returns the committed contents of r.
func readAll(t testing.TB, db kv.Database, r kv.Range) []kv.KeyValue {
	t.Helper()
	kvs, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.GetRange(r, kv.RangeOptions{}).GetSliceWithError()
	})
	require.NoError(t, err)
	return kvs
}

// keysOf returns the keys of kvs with prefix removed, as strings.
func keysOf(kvs []kv.KeyValue, prefix keyspace) []string {
	out := make([]string, len(kvs))
	for i, e := range kvs {
		out[i] = string(e.Key[len(prefix):])
	}
	return out
}

// SeedEnv names the environment variable that fixes the seed of the
// suite's randomized tests, to replay a failure: FDBREP_KVTEST_SEED=<seed>.
const SeedEnv = "FDBREP_KVTEST_SEED"

// Seed returns the seed of a randomized test (from SeedEnv if set, else
// from the clock) and logs it, with how to replay it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	return testutil.SeedFrom(t, SeedEnv)
}
