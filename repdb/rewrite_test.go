package repdb

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// RewriteBodies changes the bodies of every leaf a document keeps (the
// winner, a conflict, a deleted winner's) and nothing a read or the
// changes feed shows besides them: revisions, leaves, sequence.
func TestRewriteBodies(t *testing.T) {
	ctx := context.Background()
	s, db := newTestStore(t)
	repl := func(id string, path []string, deleted bool, body map[string]any) {
		t.Helper()
		_, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: id, Revisions: path, Deleted: deleted, Body: body})
		require.NoError(t, err)
	}
	repl("d", []string{"2-b", "1-a"}, false, map[string]any{"v": "old-b", "keep": "b"})
	repl("d", []string{"2-c", "1-a"}, false, map[string]any{"v": "old-c", "keep": "c"})
	repl("gone", []string{"1-x"}, false, map[string]any{"v": "old-x"})
	repl("gone", []string{"2-y", "1-x"}, true, map[string]any{"v": "old-y"})
	repl("same", []string{"1-s"}, false, map[string]any{"v": "new"})
	repl("_design/x", []string{"1-dx"}, false, map[string]any{"v": "old-dx"})
	before := feed(t, s, ChangesQuery{Limit: -1, AllLeaves: true})

	upper := func(rev string, body map[string]any) (map[string]any, bool, error) {
		v, _ := body["v"].(string)
		if !strings.HasPrefix(v, "old-") {
			return body, false, nil
		}
		body["v"] = "new-" + strings.TrimPrefix(v, "old-") + "@" + rev
		return body, true, nil
	}
	// Whether any attempt found something to change: one retried after a
	// commit_unknown_result that did commit finds nothing left.
	rewrite := func(id string) (changed bool) {
		t.Helper()
		_, err := kv.Transact(ctx, db, func(tr kv.Transaction) (bool, error) {
			c, err := s.RewriteBodies(tr, testDB, id, upper)
			changed = changed || c
			return c, err
		})
		require.NoError(t, err)
		return changed
	}
	for _, tc := range []struct {
		id      string
		changed bool
	}{{"d", true}, {"gone", true}, {"same", false}, {"missing", false}} {
		require.Equal(t, tc.changed, rewrite(tc.id), tc.id)
		require.False(t, rewrite(tc.id), "%s: a second rewrite finds nothing to do", tc.id)
	}

	all := openAll(t, s, db, "d")
	require.Equal(t, "2-c", all[0].Rev)
	require.Equal(t, map[string]any{"v": "new-c@2-c", "keep": "c"}, all[0].Body)
	require.Equal(t, []string{"2-b"}, all[0].Conflicts)
	require.Equal(t, map[string]any{"v": "new-b@2-b", "keep": "b"}, all[1].Body)
	require.Equal(t, []string{"2-b", "1-a"}, all[1].Path)
	gone := openAll(t, s, db, "gone")
	require.True(t, gone[0].Deleted)
	require.Equal(t, "new-y@2-y", gone[0].Body["v"])
	_, err := s.ReadDoc(ctx, testDB, "gone")
	require.ErrorIs(t, err, ErrDocDeleted)
	require.Equal(t, before, feed(t, s, ChangesQuery{Limit: -1, AllLeaves: true}), "no new sequence, the same leaves")
	live, dels := counts(t, s)
	require.Equal(t, [2]int64{3, 1}, [2]int64{live, dels})

	_, err = kv.Transact(ctx, db, func(tr kv.Transaction) (bool, error) {
		return s.RewriteBodies(tr, "nodb", "d", upper)
	})
	require.ErrorIs(t, err, ErrDBNotFound)

	// The walk over a database's documents, deleted ones too.
	type page struct {
		ids  []string
		next string
	}
	ids := func(after string, limit int) page {
		t.Helper()
		out, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (page, error) {
			ids, next, err := s.ReplicationDocIDs(tr, testDB, after, limit)
			return page{ids, next}, err
		})
		require.NoError(t, err)
		return out
	}
	require.Equal(t, page{[]string{"d", "gone", "same"}, ""}, ids("", 10))
	require.Equal(t, page{nil, "_design/x"}, ids("", 1), "a design document is passed by")
	require.Equal(t, page{[]string{"d", "gone"}, "gone"}, ids("_design/x", 2))
	require.Equal(t, page{nil, ""}, ids("same", 10))
}
