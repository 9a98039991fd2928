package embedded

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// requireFires waits for the watch w and requires it to have fired.
func requireFires(t *testing.T, w kv.FutureNil, msgAndArgs ...any) {
	t.Helper()
	_, err := waitReady(t, w)
	require.NoError(t, err, msgAndArgs...)
}

// watchKey sets a watch on key in a committed transaction.
func watchKey(t *testing.T, db *DB, key string) kv.FutureNil {
	t.Helper()
	tr := newTr(t, db)
	w := tr.Watch(kv.Key(key))
	_, err := tr.Commit().Get()
	require.NoError(t, err)
	t.Cleanup(w.Cancel)
	return w
}

func TestWatchFires(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(tr kv.Transaction)
	}{
		{"set", func(tr kv.Transaction) { tr.Set(kv.Key("w"), []byte("2")) }},
		{"clear", func(tr kv.Transaction) { tr.Clear(kv.Key("w")) }},
		{"clear range", func(tr kv.Transaction) { tr.ClearRange(kr("a", "z")) }},
		{"atomic", func(tr kv.Transaction) { tr.Add(kv.Key("w"), []byte{1}) }},
		{"versionstamped value", func(tr kv.Transaction) {
			tr.SetVersionstampedValue(kv.Key("w"), append(make([]byte, 10), 0, 0, 0, 0))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openMem(t)
			put(t, db, "w", "1")
			w := watchKey(t, db, "w")
			notReady(t, db, w)
			_, err := db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
				tc.change(tr)
				return nil, nil
			})
			require.NoError(t, err)
			requireFires(t, w)
		})
	}
}

func TestWatchDoesNotFireOnSameValue(t *testing.T) {
	db := openMem(t)
	put(t, db, "w", "1")
	w := watchKey(t, db, "w")
	put(t, db, "w", "1")
	notReady(t, db, w)
	_, err := db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
		tr.Clear(kv.Key("absent"))
		tr.ClearRange(kr("x", "y"))
		return nil, nil
	})
	require.NoError(t, err)
	notReady(t, db, w)
	put(t, db, "w", "2")
	requireFires(t, w)
}

func TestWatchAbsentKey(t *testing.T) {
	db := openMem(t)
	w := watchKey(t, db, "w")
	notReady(t, db, w)
	put(t, db, "w", "")
	requireFires(t, w, "an empty value differs from absent")
}

func TestWatchChangedBeforeArming(t *testing.T) {
	db := openMem(t)
	put(t, db, "w", "1")
	// Read-only: the watch arms at the newest state and fires at once.
	tr := newTr(t, db)
	w := tr.Watch(kv.Key("w"))
	put(t, db, "w", "2") // after the watch's read version, before its commit
	_, err := tr.Commit().Get()
	require.NoError(t, err)
	requireFires(t, w)
	// With writes, the watch's read conflicts with the change, as on
	// FoundationDB: the commit fails, and the watch with it.
	tr = newTr(t, db)
	w = tr.Watch(kv.Key("w"))
	put(t, db, "w", "3")
	tr.Set(kv.Key("other"), nil)
	_, err = tr.Commit().Get()
	requireCode(t, err, kv.CodeNotCommitted)
	_, err = waitReady(t, w)
	requireCode(t, err, kv.CodeNotCommitted)
}

func TestWatchOwnWriteAfterWatch(t *testing.T) {
	db := openMem(t)
	put(t, db, "w", "1")
	tr := newTr(t, db)
	w := tr.Watch(kv.Key("w"))
	tr.Set(kv.Key("w"), []byte("mine"))
	_, err := tr.Commit().Get()
	require.NoError(t, err)
	requireFires(t, w, "the transaction's own later write changes the watched value")

	tr = newTr(t, db)
	tr.Set(kv.Key("w"), []byte("before"))
	w = tr.Watch(kv.Key("w"))
	_, err = tr.Commit().Get()
	require.NoError(t, err)
	notReady(t, db, w)
	w.Cancel()
}

func TestWatchFailures(t *testing.T) {
	t.Run("commit conflict", func(t *testing.T) {
		db := openMem(t)
		tr := newTr(t, db)
		_, err := tr.Get(kv.Key("r")).Get()
		require.NoError(t, err)
		w := tr.Watch(kv.Key("w"))
		tr.Set(kv.Key("x"), nil)
		put(t, db, "r", "1")
		_, err = tr.Commit().Get()
		requireCode(t, err, kv.CodeNotCommitted)
		_, err = waitReady(t, w)
		requireCode(t, err, kv.CodeNotCommitted)
	})
	for _, tc := range []struct {
		name string
		end  func(kv.Transaction)
	}{{"reset", kv.Transaction.Reset}, {"cancel before commit", kv.Transaction.Cancel}} {
		t.Run(tc.name, func(t *testing.T) {
			db := openMem(t)
			tr := newTr(t, db)
			w := tr.Watch(kv.Key("w"))
			tc.end(tr)
			_, err := waitReady(t, w)
			requireCode(t, err, kv.CodeTransactionCancelled)
		})
	}
	t.Run("cancel after commit leaves it", func(t *testing.T) {
		db := openMem(t)
		tr := newTr(t, db)
		w := tr.Watch(kv.Key("w"))
		_, err := tr.Commit().Get()
		require.NoError(t, err)
		tr.Cancel()
		notReady(t, db, w)
		put(t, db, "w", "1")
		requireFires(t, w)
	})
	t.Run("future cancel", func(t *testing.T) {
		db := openMem(t)
		w := watchKey(t, db, "w")
		w.Cancel()
		_, err := waitReady(t, w)
		requireCode(t, err, kv.CodeOperationCancelled)
		require.Equal(t, 0, db.watches.count())
	})
	t.Run("too many", func(t *testing.T) {
		db := openMem(t, func(o *Options) { o.MaxWatches = 2 })
		w1 := watchKey(t, db, "a")
		watchKey(t, db, "b")
		tr := newTr(t, db)
		_, err := waitReady(t, tr.Watch(kv.Key("c")))
		requireCode(t, err, kv.CodeTooManyWatches)
		w1.Cancel()
		watchKey(t, db, "c")
	})
	t.Run("timeout", func(t *testing.T) {
		db, clock := openFakeClock(t)
		tr := newTr(t, db)
		require.NoError(t, tr.Options().SetTimeout(50))
		w := tr.Watch(kv.Key("w"))
		_, err := tr.Commit().Get()
		require.NoError(t, err)
		clock.Advance(49 * time.Millisecond)
		notReady(t, db, w)
		clock.Advance(time.Millisecond)
		_, err = waitReady(t, w)
		requireCode(t, err, kv.CodeTransactionTimedOut)
	})
	t.Run("unreadable", func(t *testing.T) {
		db := openMem(t)
		tr := newTr(t, db)
		tr.SetVersionstampedValue(kv.Key("w"), append(make([]byte, 10), 0, 0, 0, 0))
		_, err := waitReady(t, tr.Watch(kv.Key("w")))
		requireCode(t, err, kv.CodeAccessedUnreadable)
	})
}

func TestWatchManyWaiters(t *testing.T) {
	db := openMem(t)
	var ws []kv.FutureNil
	for range 20 {
		ws = append(ws, watchKey(t, db, "w"))
	}
	ws = append(ws, watchKey(t, db, "other"))
	put(t, db, "w", "x")
	for _, w := range ws[:20] {
		requireFires(t, w)
	}
	notReady(t, db, ws[20])
	require.Equal(t, 1, db.watches.count())
}
