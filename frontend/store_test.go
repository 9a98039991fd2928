package frontend

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
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
	s := &store{db: db, sub: SubspaceDefault}
	require.NoError(t, s.createDB(ctx, "_replicator", "u1", nil))
	require.NoError(t, s.createDB(ctx, "_replicator", "u1", nil), "replayed create with the same uuid")
	require.ErrorIs(t, s.createDB(ctx, "_replicator", "u2", nil), ErrDBExists)

	for _, deleted := range []bool{false, true} {
		body := map[string]any{"source": "http://a/b"}
		w := writeReq{db: "_replicator", id: "d"}
		if deleted {
			w.deleted, w.body = true, map[string]any{}
			cur, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (*doc, error) { return s.getDoc(tr, "_replicator", "d") })
			require.NoError(t, err)
			w.baseRev = cur.rev
		} else {
			w.body = body
		}
		canonical, _ := json.Marshal(w.body)
		var produced []string
		attempt := func() (string, error) {
			return kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) {
				return s.writeDocTx(tr, w, canonical, &produced)
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
	w := writeReq{db: "_replicator", id: "h", body: map[string]any{"v": 1}}
	canonical, _ := json.Marshal(w.body)
	var produced []string
	first, err := kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) { return s.writeDocTx(tr, w, canonical, &produced) })
	require.NoError(t, err)
	other := writeReq{db: "_replicator", id: "h", baseRev: first, body: map[string]any{"v": 2}}
	_, err = s.writeDoc(ctx, other)
	require.NoError(t, err)
	again, err := kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) { return s.writeDocTx(tr, w, canonical, &produced) })
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.NoError(t, s.deleteDB(ctx, "_replicator", nil))
	require.NoError(t, s.createDB(ctx, "_replicator", "u3", nil))
	w = writeReq{db: "_replicator", id: "d", body: map[string]any{}}
	_, err = s.writeDoc(ctx, w)
	require.NoError(t, err)
	w = writeReq{db: "_replicator", id: "d", baseRev: "", deleted: false, body: map[string]any{}}
	_, err = s.writeDoc(ctx, w)
	require.ErrorIs(t, err, ErrConflict)
	cur, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (*doc, error) { return s.getDoc(tr, "_replicator", "d") })
	require.NoError(t, err)
	_, err = s.writeDoc(ctx, writeReq{db: "_replicator", id: "d", baseRev: cur.rev, deleted: true, body: map[string]any{}})
	require.NoError(t, err)
	rows, _, err := s.changes(ctx, "_replicator", "", -1, false)
	require.NoError(t, err)
	require.Len(t, rows, 1, "one changes row per document")
	info, err := s.info(ctx, "_replicator")
	require.NoError(t, err)
	require.Equal(t, int64(0), info.docCount)
	require.Equal(t, int64(1), info.delCount)
}

func TestDocStoreUpdateDocState(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := e.do("PUT", "/_replicator/rep", asAlice, repDoc())
	require.Equal(t, 201, r.status)
	ds := NewDocStore(e.db, nil)
	ds.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	update := func(state, reason string, stats json.RawMessage) {
		_, err := e.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			return nil, ds.UpdateDocState(ctx, tr, "_replicator", "rep", state, reason, stats)
		})
		require.NoError(t, err)
	}
	update(StateCompleted, "", json.RawMessage(`{"docs_written":3}`))
	d := e.do("GET", "/_replicator/rep", asAlice, nil).body
	require.Equal(t, "completed", d["_replication_state"])
	require.Equal(t, "2026-01-02T03:04:05Z", d["_replication_state_time"])
	require.Equal(t, map[string]any{"docs_written": float64(3)}, d["_replication_stats"])
	require.Equal(t, aliceName, d["owner"])
	rev := d["_rev"]
	// The same update again (a replayed transaction) writes nothing.
	update(StateCompleted, "", json.RawMessage(`{"docs_written":3}`))
	require.Equal(t, rev, e.do("GET", "/_replicator/rep", asAlice, nil).body["_rev"])
	// Failed: reason kept, stats dropped, time changes with the state.
	ds.now = func() time.Time { return time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC) }
	update(StateFailed, "boom", nil)
	d = e.do("GET", "/_replicator/rep", asAlice, nil).body
	require.Equal(t, "failed", d["_replication_state"])
	require.Equal(t, "boom", d["_replication_state_reason"])
	require.Nil(t, d["_replication_stats"])
	require.Equal(t, "2026-01-03T00:00:00Z", d["_replication_state_time"])
	// A deleted or missing document is left alone; other states are refused.
	_, err := e.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, ds.UpdateDocState(ctx, tr, "_replicator", "nope", StateFailed, "x", nil)
	})
	require.NoError(t, err)
	_, err = e.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, ds.UpdateDocState(ctx, tr, "_replicator", "rep", "running", "", nil)
	})
	require.Error(t, err)
}

func TestGzipBodiesAndChangesFilter(t *testing.T) {
	e := newEnv(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"source":"http://a/b","target":"http://c/d"}`))
	require.NoError(t, zw.Close())
	r := e.do("PUT", "/_replicator/gz", asAdmin, buf.Bytes(), "Content-Encoding", "gzip")
	require.Equal(t, 201, r.status, r.raw)
	requireError(t, e.do("PUT", "/_replicator/gz2", asAdmin, []byte("not gzip"), "Content-Encoding", "gzip"), 400, "bad_request")
	requireError(t, e.do("PUT", "/_replicator/gz2", asAdmin, "{}", "Content-Encoding", "br"), 415, "bad_content_type")
	// A gzip bomb is cut at the size limit.
	buf.Reset()
	zw = gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"x":"`))
	_, _ = zw.Write(bytes.Repeat([]byte("a"), 4<<20))
	_, _ = zw.Write([]byte(`"}`))
	require.NoError(t, zw.Close())
	requireError(t, e.do("PUT", "/_replicator/bomb", asAdmin, buf.Bytes(), "Content-Encoding", "gzip"), 413, "too_large")

	require.Equal(t, 201, e.do("PUT", "/_replicator/other", asAdmin, repDoc()).status)
	r = e.do("POST", "/_replicator/_changes?filter=_doc_ids", asAdmin, map[string]any{"doc_ids": []string{"gz"}})
	require.Equal(t, 200, r.status, r.raw)
	require.Len(t, r.body["results"], 1)
	r = e.do("GET", `/_replicator/_changes?filter=_doc_ids&doc_ids=%5B%22other%22%5D`, asAdmin, nil)
	require.Len(t, r.body["results"], 1)
	requireError(t, e.do("GET", "/_replicator/_changes?filter=ddoc/f", asAdmin, nil), 400, "bad_request")
}

func TestOptionsFromConfig(t *testing.T) {
	cfg, err := config.FromMap(map[string]map[string]string{
		"admins":      {"root": "pw"},
		"users":       {"u": "-pbkdf2-" + mustHex(t, "upw", "sha", "salt", 3) + ",salt,3"},
		"user_roles":  {"u": "a,b"},
		"chttpd_auth": {"iterations": "3", "secret": "s3", "timeout": "60", "auth_cache_size": "0"},
		"chttpd":      {"max_json_depth": "5", "admin_only_all_dbs": "false"},
	})
	require.NoError(t, err)
	o, plain, err := OptionsFromConfig(cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"root"}, plain)
	require.Equal(t, []byte("s3"), o.Secret)
	require.Equal(t, time.Minute, o.SessionTimeout)
	require.Equal(t, 5, o.MaxJSONDepth)
	require.True(t, o.PublicAllDBs)
	require.Equal(t, -1, o.AuthCacheSize)
	require.Equal(t, []string{"a", "b"}, o.Accounts.byName["u"].roles)
	ok, err := verifyPassword(o.Accounts.byName["u"].hash, "upw")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = verifyPassword(o.Accounts.byName["root"].hash, "pw")
	require.NoError(t, err)
	require.True(t, ok)
}
