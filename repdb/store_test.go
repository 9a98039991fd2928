package repdb

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestWriteRetryAfterCommit replays a write's transaction function after
// its first attempt committed, as the retry loop does after
// commit_unknown_result: the replay must report the committed rev, not a
// conflict, and write nothing more.
func TestWriteRetryAfterCommit(t *testing.T) {
	ctx := context.Background()
	db := kvtest.NewDB(t)
	s := New(db, Options{})
	require.NoError(t, s.CreateDB(ctx, "_replicator", "u1", nil))
	require.NoError(t, s.CreateDB(ctx, "_replicator", "u1", nil), "replayed create with the same uuid")
	require.ErrorIs(t, s.CreateDB(ctx, "_replicator", "u2", nil), ErrDBExists)

	for _, deleted := range []bool{false, true} {
		body := map[string]any{"source": "http://a/b"}
		w := Write{DB: "_replicator", ID: "d"}
		if deleted {
			w.Deleted, w.Body = true, map[string]any{}
			cur, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (*Doc, error) { return s.Get(tr, "_replicator", "d") })
			require.NoError(t, err)
			w.BaseRev = cur.Rev
		} else {
			w.Body = body
		}
		canonical, _ := json.Marshal(w.Body)
		var produced attempts
		attempt := func() (string, error) {
			return kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) {
				return s.writeTx(tr, w, canonical, &produced)
			})
		}
		rev1, err := attempt()
		require.NoError(t, err)
		rev2, err := attempt() // the replay
		require.NoError(t, err)
		require.Equal(t, rev1, rev2)
		// Without the memory of the first attempt it is a real conflict.
		produced = nil
		_, err = attempt()
		require.ErrorIs(t, err, ErrConflict)
	}
	// A replay still finds its revision after someone else wrote on top of
	// it (the replicator recording a state, say).
	w := Write{DB: "_replicator", ID: "h", Body: map[string]any{"v": 1}}
	canonical, _ := json.Marshal(w.Body)
	var produced attempts
	first, err := kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) { return s.writeTx(tr, w, canonical, &produced) })
	require.NoError(t, err)
	other := Write{DB: "_replicator", ID: "h", BaseRev: first, Body: map[string]any{"v": 2}}
	_, err = s.Write(ctx, other)
	require.NoError(t, err)
	again, err := kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) { return s.writeTx(tr, w, canonical, &produced) })
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.NoError(t, s.DeleteDB(ctx, "_replicator", nil))
	require.NoError(t, s.CreateDB(ctx, "_replicator", "u3", nil))
	w = Write{DB: "_replicator", ID: "d", Body: map[string]any{}}
	_, err = s.Write(ctx, w)
	require.NoError(t, err)
	w = Write{DB: "_replicator", ID: "d", Body: map[string]any{}}
	_, err = s.Write(ctx, w)
	require.ErrorIs(t, err, ErrConflict)
	cur, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (*Doc, error) { return s.Get(tr, "_replicator", "d") })
	require.NoError(t, err)
	_, err = s.Write(ctx, Write{DB: "_replicator", ID: "d", BaseRev: cur.Rev, Deleted: true, Body: map[string]any{}})
	require.NoError(t, err)
	var rows []Change
	_, err = s.Feed(ctx, "_replicator", ChangesQuery{Limit: -1}, func(c Change) error {
		rows = append(rows, c)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, rows, 1, "one changes row per document")
	info, err := s.Info(ctx, "_replicator")
	require.NoError(t, err)
	require.Equal(t, int64(0), info.DocCount)
	require.Equal(t, int64(1), info.DelCount)
}

// The replicator's state writes: fields as CouchDB's replicator writes
// them, no new revision for a replayed write, nothing for a document that
// is gone.
func TestDocStates(t *testing.T) {
	ctx := context.Background()
	db := kvtest.NewDB(t)
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := New(db, Options{Clock: clk})
	require.NoError(t, s.CreateDB(ctx, "_replicator", "u1", nil))
	_, err := s.Write(ctx, Write{DB: "_replicator", ID: "rep", Body: map[string]any{"owner": "alice", "source": "http://a/b"}})
	require.NoError(t, err)
	write := func(f func(tr kv.Transaction) error) {
		t.Helper()
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) { return nil, f(tr) })
		require.NoError(t, err)
	}
	get := func() *Doc {
		t.Helper()
		d, err := s.ReadDoc(ctx, "_replicator", "rep")
		require.NoError(t, err)
		return d
	}
	completed := func(tr kv.Transaction) error {
		return s.DocCompleted(ctx, tr, "_replicator", "rep", json.RawMessage(`{"docs_written":3}`))
	}
	write(completed)
	d := get()
	require.Equal(t, "completed", d.Body["_replication_state"])
	require.Equal(t, "2026-01-02T03:04:05Z", d.Body["_replication_state_time"])
	require.Equal(t, map[string]any{"docs_written": json.Number("3")}, d.Body["_replication_stats"])
	require.Equal(t, "alice", d.Body["owner"])
	// The same update again (a replayed transaction) writes nothing.
	write(completed)
	require.Equal(t, d.Rev, get().Rev)
	// Failed: reason kept, stats dropped, time changes with the state.
	clk.Advance(24 * time.Hour)
	write(func(tr kv.Transaction) error { return s.DocFailed(ctx, tr, "_replicator", "rep", "boom") })
	d = get()
	require.Equal(t, "failed", d.Body["_replication_state"])
	require.Equal(t, "boom", d.Body["_replication_state_reason"])
	require.Nil(t, d.Body["_replication_stats"])
	require.Equal(t, "2026-01-03T03:04:05Z", d.Body["_replication_state_time"])
	// A missing document, or database, is left alone.
	write(func(tr kv.Transaction) error { return s.DocFailed(ctx, tr, "_replicator", "nope", "x") })
	write(func(tr kv.Transaction) error { return s.DocFailed(ctx, tr, "x/_replicator", "rep", "x") })
}
