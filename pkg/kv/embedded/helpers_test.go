package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// noEnv turns off the latency mode and budget check that the environment
// may ask for: this package's tests check semantics, with their own
// latency and budget tests.
func noEnv(o Options) Options {
	o.Latency, o.Budget = &kv.Latency{}, &kv.Budget{}
	return o
}

// openMem opens an in-memory store closed at the end of the test.
func openMem(t *testing.T, mod ...func(*Options)) *DB {
	t.Helper()
	o := noEnv(Options{InMemory: true})
	for _, m := range mod {
		m(&o)
	}
	db, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// openFakeClock is openMem on a store whose transaction lifetimes and
// timeouts run on the returned fake clock.
func openFakeClock(t *testing.T, mod ...func(*Options)) (*DB, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	return openMem(t, append(mod, func(o *Options) { o.Clock = clock })...), clock
}

// openDir opens an on-disk store in dir; the caller closes it.
func openDir(t *testing.T, dir string) *DB {
	t.Helper()
	db, err := Open(noEnv(Options{Dir: dir}))
	require.NoError(t, err)
	return db
}

func newTr(t *testing.T, db *DB) kv.Transaction {
	t.Helper()
	tr, err := db.CreateTransaction()
	require.NoError(t, err)
	t.Cleanup(tr.Cancel)
	return tr
}

// put commits key=value pairs.
func put(t *testing.T, db kv.Database, kvs ...string) {
	t.Helper()
	_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		for i := 0; i+1 < len(kvs); i += 2 {
			tr.Set(kv.Key(kvs[i]), []byte(kvs[i+1]))
		}
		return nil, nil
	})
	require.NoError(t, err)
}

// read returns the committed value of key ("" with ok false when absent).
func read(t *testing.T, db kv.Database, key string) (string, bool) {
	t.Helper()
	v, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(kv.Key(key)).Get()
	})
	require.NoError(t, err)
	return string(v), v != nil
}

func keysOf(kvs []kv.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, e := range kvs {
		out[i] = string(e.Key)
	}
	return out
}

func requireCode(t *testing.T, err error, code int) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, kv.HasCode(err, code), "want code %d, got %v", code, err)
}

// waitReady waits for a future with a generous bound so a broken test fails
// instead of hanging.
func waitReady[T any](t *testing.T, f kv.Future[T]) (T, error) {
	t.Helper()
	select {
	case <-f.Done():
		return f.Get()
	case <-time.After(30 * time.Second):
		t.Fatal("future not ready after 30s")
		var zero T
		return zero, nil
	}
}

// notReady asserts f is not ready once the store has processed a further
// commit (watches fire in the same batch step that would have triggered them).
func notReady[T any](t *testing.T, db *DB, f kv.Future[T]) {
	t.Helper()
	put(t, db, "\x00sync", "x")
	require.False(t, f.IsReady())
}
