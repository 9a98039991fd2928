package kvtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var watchTests = []conformanceTest{
	inScenario("FiresAfterChange", testWatchFires),
	inScenario("FiresOnClear", testWatchFiresOnClear),
	inScenario("FiresOnAtomicOp", testWatchFiresOnAtomic),
	inScenario("NotBeforeChange", testWatchNotBefore),
	inScenario("ChangedBeforeCommit", testWatchChangedBeforeCommit),
	inScenario("ManyWatchersOneKey", testWatchMany),
	inScenario("Cancel", testWatchCancel),
	inScenario("FailsWithCommit", testWatchFailedCommit),
	inScenario("AwaitRespectsContext", testWatchAwaitContext),
}

// watchOf sets a watch on key in tr. A watch that fails at once with an
// error a healthy FoundationDB may give any watch (as fault injection
// does) reruns the scenario.
func watchOf(t testing.TB, tr kv.Transaction, key kv.Key) kv.FutureNil {
	t.Helper()
	w := tr.Watch(key)
	if w.IsReady() {
		if _, err := w.Get(); err != nil && rerunnable(err) {
			tr.Cancel()
			panic(redo{err})
		}
	}
	return w
}

// watchCommitted sets a watch on key in its own transaction and commits it.
func watchCommitted(t *testing.T, db kv.Database, key kv.Key) kv.FutureNil {
	t.Helper()
	tr := newTr(t, db)
	wait(t, tr.Get(key))
	w := watchOf(t, tr, key)
	if err := commit(tr); err != nil {
		w.Cancel()
		must(t, err)
	}
	return w
}

// awaitWatch waits for w to fire. An error that fault injection could
// cause reruns the scenario.
func awaitWatch(t *testing.T, w kv.FutureNil) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := kv.Await(ctx, w)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "watch did not fire")
	must(t, err)
}

func testWatchFires(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("w"), "1")
	w := watchCommitted(t, db, ks.key("w"))
	defer w.Cancel()
	set(t, db, ks.key("w"), "2")
	awaitWatch(t, w)
	require.True(t, w.IsReady())
	select {
	case <-w.Done():
	default:
		t.Fatal("Done not closed after the watch fired")
	}
}

func testWatchFiresOnClear(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("w"), "1")
	w := watchCommitted(t, db, ks.key("w"))
	defer w.Cancel()
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		tr.ClearRange(ks.all())
		return nil, nil
	})
	require.NoError(t, err)
	awaitWatch(t, w)
}

func testWatchFiresOnAtomic(t *testing.T, db kv.Database, ks keyspace) {
	w := watchCommitted(t, db, ks.key("absent"))
	defer w.Cancel()
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		tr.Add(ks.key("absent"), kv.Int64(1))
		return nil, nil
	})
	require.NoError(t, err)
	awaitWatch(t, w)
}

// testWatchNotBefore: writes to other keys, and a watch set on a key
// written by its own transaction, do not fire it; the change does.
func testWatchNotBefore(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.Set(ks.key("w"), []byte("1"))
	w := watchOf(t, tr, ks.key("w"))
	defer w.Cancel()
	must(t, commit(tr))
	set(t, db, ks.key("other"), "x")
	set(t, db, ks.key("w\x00"), "x")
	set(t, db, ks.key("v"), "x")
	if w.IsReady() {
		_, err := w.Get()
		must(t, err)
		t.Fatal("watch fired although the key did not change")
	}
	set(t, db, ks.key("w"), "2")
	awaitWatch(t, w)
}

func testWatchCancel(t *testing.T, db kv.Database, ks keyspace) {
	w := watchCommitted(t, db, ks.key("w"))
	w.Cancel()
	_, err := w.Get()
	mustCode(t, err, kv.CodeOperationCancelled)
	<-w.Done()
	w.Cancel() // cancelling twice is harmless
}

// testWatchFailedCommit: a watch in a transaction whose commit fails fails
// with the commit's error.
func testWatchFailedCommit(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("w"), "1")
	tr := newTr(t, db)
	wait(t, tr.Get(ks.key("w")))
	w := watchOf(t, tr, ks.key("w"))
	defer w.Cancel()
	commitAfterWrite(t, db, ks, tr, "w", true)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := kv.Await(ctx, w)
	mustCode(t, err, kv.CodeNotCommitted)
}

// testWatchAwaitContext: kv.Await on a watch that does not fire returns
// when its context ends, and cancels the watch.
func testWatchAwaitContext(t *testing.T, db kv.Database, ks keyspace) {
	w := watchCommitted(t, db, ks.key("w"))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		close(started)
		_, err := kv.Await(ctx, w)
		result <- err
	}()
	<-started
	cancel()
	require.ErrorIs(t, <-result, context.Canceled)
	_, err := w.Get()
	mustCode(t, err, kv.CodeOperationCancelled)
}

// testWatchChangedBeforeCommit: a watch compares against the value its
// transaction read, so a change committed between that read and the watch's
// commit fires it.
func testWatchChangedBeforeCommit(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("w"), "1")
	tr := newTr(t, db)
	require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("w"))))
	w := watchOf(t, tr, ks.key("w"))
	defer w.Cancel()
	set(t, db, ks.key("w"), "2")
	must(t, commit(tr)) // read-only apart from the watch: no conflict
	awaitWatch(t, w)
}

// testWatchMany: every watch on a key fires on its change, whichever
// transaction set it.
func testWatchMany(t *testing.T, db kv.Database, ks keyspace) {
	const watchers = 20
	set(t, db, ks.key("w"), "1")
	var ws []kv.FutureNil
	defer func() {
		for _, w := range ws {
			w.Cancel()
		}
	}()
	for range watchers {
		ws = append(ws, watchCommitted(t, db, ks.key("w")))
	}
	tr := newTr(t, db)
	ws = append(ws, watchOf(t, tr, ks.key("w")), watchOf(t, tr, ks.key("w")))
	must(t, commit(tr))
	set(t, db, ks.key("w"), "2")
	for _, w := range ws {
		awaitWatch(t, w)
	}
}
