package frontend

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/repdb"
)

// bulk posts docs to _bulk_docs.
func (e *testEnv) bulk(c *creds, newEdits bool, docs ...map[string]any) resp {
	e.t.Helper()
	body := map[string]any{"docs": docs}
	if !newEdits {
		body["new_edits"] = false
	}
	return e.do("POST", "/_replicator/_bulk_docs", c, body)
}

// entries returns a _bulk_docs reply's entries.
func entries(t *testing.T, r resp) []map[string]any {
	t.Helper()
	require.Equal(t, 201, r.Status, r.Raw)
	out := make([]map[string]any, len(r.List))
	for i, x := range r.List {
		out[i] = x.(map[string]any)
	}
	return out
}

// replicated is a document as a replicator sends it (new_edits=false).
func replicated(id string, path []string, extra ...any) map[string]any {
	d := repDoc(extra...)
	d["_id"], d["_rev"] = id, path[0]
	ids := make([]any, len(path))
	for i, r := range path {
		_, h, _ := strings.Cut(r, "-")
		ids[i] = h
	}
	pos, _ := repdb.RevPos(path[0])
	d["_revisions"] = map[string]any{"start": pos, "ids": ids}
	return d
}

// _bulk_docs writes each document as a PUT would: the rules, the job in
// the same transaction, one outcome each; Fauxton deletes with it.
func TestBulkDocs(t *testing.T) {
	e := newEnv(t)
	r := e.bulk(asAlice, true,
		repDoc("_id", "a"),
		repDoc(),
		repDoc("_id", "_bad"),
		repDoc("_id", "invalid", "source", "ftp://x"),
		repDoc("_id", "stale", "_rev", "1-abc"),
		repDoc("_id", "_design/d"),
		repDoc("_id", "bobs", "owner", bobName),
	)
	res := entries(t, r)
	require.Len(t, res, 7)
	require.Equal(t, true, res[0]["ok"])
	require.Equal(t, "a", res[0]["id"])
	require.NotEmpty(t, res[1]["id"], "an id is chosen")
	for i, want := range []string{"", "", "illegal_docid", "forbidden", "conflict", "forbidden", "forbidden"} {
		if want != "" {
			require.Equal(t, want, res[i]["error"], "entry %d: %v", i, res[i])
			require.NotEmpty(t, res[i]["reason"])
		}
	}
	require.Equal(t, "1-abc", res[4]["rev"])
	job := e.rep.job(t, e.db, "_replicator", "a")
	require.Equal(t, aliceName, job["owner"], "the job committed with the document")
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "invalid"))

	// One document twice in a request: written in order, the second
	// conflicts; many documents at once all land.
	res = entries(t, e.bulk(asAlice, true, repDoc("_id", "twice"), repDoc("_id", "twice", "continuous", true)))
	require.Equal(t, true, res[0]["ok"])
	require.Equal(t, "conflict", res[1]["error"])
	many := make([]map[string]any, 50)
	for i := range many {
		many[i] = repDoc("_id", fmt.Sprintf("many%02d", i))
	}
	for i, r := range entries(t, e.bulk(asAlice, true, many...)) {
		require.Equal(t, fmt.Sprintf("many%02d", i), r["id"], "request order")
		require.Equal(t, true, r["ok"], "%v", r)
	}

	// Fauxton deletes replications with _bulk_docs; Bob may not delete
	// Alice's.
	rev := res[0]["rev"].(string)
	del := map[string]any{"_id": "a", "_rev": rev, "_deleted": true}
	require.Equal(t, "forbidden", entries(t, e.bulk(asBob, true, del))[0]["error"])
	res = entries(t, e.bulk(asAlice, true, del))
	require.Equal(t, true, res[0]["ok"], "%v", res)
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "a"))
	requireError(t, e.do("GET", "/_replicator/a", asAlice, nil), 404, "not_found")

	for _, tc := range []struct {
		c      *creds
		body   any
		hdr    []string
		status int
		err    string
	}{
		{anon, map[string]any{"docs": []any{}}, nil, 401, "unauthorized"},
		{asAlice, map[string]any{"docs": []any{}}, []string{"Content-Type", "text/plain"}, 415, "bad_content_type"},
		{asAlice, map[string]any{}, nil, 400, "bad_request"},
		{asAlice, map[string]any{"docs": "x"}, nil, 400, "bad_request"},
		{asAlice, map[string]any{"docs": []any{1}}, nil, 400, "bad_request"},
		{asAlice, map[string]any{"docs": []any{}, "new_edits": "no"}, nil, 400, "bad_request"},
		{asAlice, "[]", nil, 400, "bad_request"},
	} {
		requireError(t, e.do("POST", "/_replicator/_bulk_docs", tc.c, tc.body, tc.hdr...), tc.status, tc.err)
	}
	requireError(t, e.do("GET", "/_replicator/_bulk_docs", asAlice, nil), 405, "method_not_allowed")
	requireError(t, e.do("POST", "/x%2F_replicator/_bulk_docs", asAdmin, map[string]any{"docs": []any{}}), 404, "not_found")
}

// new_edits=false stores revisions as given, conflicts included, answers
// only failures, and keeps the rules of a write: validation, owners.
func TestBulkDocsReplicated(t *testing.T) {
	e := newEnv(t)
	res := entries(t, e.bulk(asAdmin, false,
		replicated("r", []string{"2-b", "1-a"}, "owner", aliceName),
		replicated("r", []string{"2-c", "1-a"}, "owner", aliceName, "target", "http://tgt.example/other"),
		replicated("r", []string{"2-b", "1-a"}, "owner", aliceName), // again: nothing to do
		replicated("bad", []string{"1-x"}, "source", "ftp://x"),
		repDoc("_id", "norev"),
		replicated("del", []string{"3-z", "2-y", "1-x"}),
	))
	require.Len(t, res, 2, "only failures: %v", res)
	require.Equal(t, map[string]any{"id": "bad", "rev": "1-x", "error": "forbidden", "reason": res[0]["reason"]}, res[0])
	require.Equal(t, "bad_request", res[1]["error"])
	require.Equal(t, "norev", res[1]["id"])

	r := e.do("GET", "/_replicator/r?conflicts=true&revs=true", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "2-c", r.Body["_rev"])
	require.Equal(t, []any{"2-b"}, r.Body["_conflicts"])
	require.Equal(t, map[string]any{"start": float64(2), "ids": []any{"c", "a"}}, r.Body["_revisions"])
	require.Equal(t, "http://tgt.example/other", e.rep.job(t, e.db, "_replicator", "r")["target"], "the job follows the winner")
	require.Equal(t, "3-z", e.do("GET", "/_replicator/del", asAdmin, nil).Body["_rev"])

	// Bob cannot graft a branch onto Alice's document, nor write one in
	// her name.
	res = entries(t, e.bulk(asBob, false, replicated("r", []string{"3-q", "2-c", "1-a"}, "owner", bobName)))
	require.Equal(t, "forbidden", res[0]["error"])
	res = entries(t, e.bulk(asBob, false, replicated("new", []string{"1-q"}, "owner", aliceName)))
	require.Equal(t, "forbidden", res[0]["error"])

	// PUT ?new_edits=false, as replicators write design documents.
	ddoc := replicated("_design/x", []string{"4-d", "3-c"})
	r = e.do("PUT", "/_replicator/_design/x?new_edits=false", asAdmin, ddoc)
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "4-d", r.Body["rev"])
	require.Equal(t, []any{map[string]any{"rev": "4-d", "status": "available"}, map[string]any{"rev": "3-c", "status": "missing"}},
		e.do("GET", "/_replicator/_design/x?revs_info=true", asAdmin, nil).Body["_revs_info"])
	requireError(t, e.do("PUT", "/_replicator/y?new_edits=false", asAdmin, repDoc()), 400, "bad_request")
	requireError(t, e.do("PUT", "/_replicator/y?new_edits=false", asAdmin, repDoc("_rev", "1-a", "_revisions", map[string]any{"start": 2, "ids": []any{"b", "a"}})), 400, "bad_request")
	requireError(t, e.do("PUT", "/_replicator/y?new_edits=maybe", asAdmin, repDoc()), 400, "query_parse_error")
}

// _revs_diff, _bulk_get and GET with rev, open_revs and the metadata
// options read every leaf; readers who do not own a document get it
// without credentials, whichever way they read it.
func TestRevisionReads(t *testing.T) {
	e := newEnv(t)
	secret := "http://alice:pa55word@src.example/db"
	entries(t, e.bulk(asAdmin, false,
		replicated("d", []string{"3-c", "2-b", "1-a"}, "owner", aliceName, "source", secret),
		replicated("d", []string{"2-x", "1-a"}, "owner", aliceName, "source", secret),
		replicated("d", []string{"4-z", "3-y", "2-b", "1-a"}, "_deleted", true),
	))

	r := e.do("POST", "/_replicator/_revs_diff", asBob, map[string]any{"d": []any{"3-c", "5-n"}, "other": []any{"1-o"}, "same": []any{}})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, map[string]any{
		"d":     map[string]any{"missing": []any{"5-n"}, "possible_ancestors": []any{"3-c", "2-x", "4-z"}},
		"other": map[string]any{"missing": []any{"1-o"}},
	}, r.Body)
	requireError(t, e.do("POST", "/_replicator/_revs_diff", asBob, map[string]any{"d": []any{"bad"}}), 400, "bad_request")
	requireError(t, e.do("POST", "/_replicator/_revs_diff", asBob, map[string]any{"d": "3-c"}), 400, "bad_request")

	r = e.do("POST", "/_replicator/_bulk_get?revs=true", asBob, map[string]any{"docs": []any{
		map[string]any{"id": "d", "rev": "2-x"},
		map[string]any{"id": "d"},
		map[string]any{"id": "d", "rev": "2-b"},
		map[string]any{"id": "nope"},
		map[string]any{"rev": "1-a"},
		map[string]any{"id": "d", "rev": "garbage"},
	}})
	require.Equal(t, 200, r.Status, r.Raw)
	require.NotContains(t, r.Raw, "pa55word")
	results := r.Body["results"].([]any)
	require.Len(t, results, 6)
	first := results[0].(map[string]any)["docs"].([]any)[0].(map[string]any)["ok"].(map[string]any)
	require.Equal(t, "2-x", first["_rev"])
	require.Equal(t, "http://src.example/db", first["source"])
	require.Equal(t, map[string]any{"start": float64(2), "ids": []any{"x", "a"}}, first["_revisions"])
	require.Len(t, results[1].(map[string]any)["docs"], 3, "every leaf, the deletion too")
	errOf := func(i int) map[string]any {
		return results[i].(map[string]any)["docs"].([]any)[0].(map[string]any)["error"].(map[string]any)
	}
	require.Equal(t, map[string]any{"id": "d", "rev": "2-b", "error": "not_found", "reason": "missing"}, errOf(2))
	require.Equal(t, map[string]any{"id": "nope", "rev": "undefined", "error": "not_found", "reason": "missing"}, errOf(3))
	require.Equal(t, "bad_request", errOf(4)["error"])
	require.Equal(t, "bad_request", errOf(5)["error"])
	// Alice, the owner, sees her credentials.
	r = e.do("POST", "/_replicator/_bulk_get", asAlice, map[string]any{"docs": []any{map[string]any{"id": "d", "rev": "3-c"}}})
	require.Contains(t, r.Raw, "pa55word")
	requireError(t, e.do("POST", "/_replicator/_bulk_get", asAlice, map[string]any{}), 400, "bad_request")

	for _, tc := range []struct {
		query string
		check func(r resp)
	}{
		{"?rev=2-x", func(r resp) { require.Equal(t, "2-x", r.Body["_rev"]) }},
		{"?rev=4-z", func(r resp) { require.Equal(t, true, r.Body["_deleted"]) }},
		{"?rev=1-a&latest=true", func(r resp) { require.Equal(t, "3-c", r.Body["_rev"]) }},
		{"?meta=true", func(r resp) {
			require.Equal(t, []any{"2-x"}, r.Body["_conflicts"])
			require.Equal(t, []any{"4-z"}, r.Body["_deleted_conflicts"])
			require.Len(t, r.Body["_revs_info"], 3)
		}},
		{"?open_revs=all&revs=true", func(r resp) {
			require.Len(t, r.List, 3)
			require.Equal(t, "3-c", r.List[0].(map[string]any)["ok"].(map[string]any)["_rev"])
		}},
		{`?open_revs=["2-x","9-q"]&latest=true`, func(r resp) {
			require.Equal(t, []any{map[string]any{"missing": "9-q"}}, r.List[1:])
		}},
	} {
		r := e.do("GET", "/_replicator/d"+tc.query, asBob, nil)
		require.Equal(t, 200, r.Status, "%s: %s", tc.query, r.Raw)
		require.NotContains(t, r.Raw, "pa55word", tc.query)
		tc.check(r)
	}
	requireError(t, e.do("GET", "/_replicator/d?rev=2-b", asBob, nil), 404, "not_found")
	requireError(t, e.do("GET", "/_replicator/d?rev=x", asBob, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/d?open_revs=[1]", asBob, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/nope?open_revs=all", asBob, nil), 404, "not_found")

	// Resolving the conflict: delete the losing branch by its rev.
	r = e.do("DELETE", "/_replicator/d?rev=2-x", asAlice, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	r = e.do("GET", "/_replicator/d?conflicts=true", asAlice, nil)
	require.Nil(t, r.Body["_conflicts"])

	// _all_docs with conflicts, as PouchDB asks for first revisions.
	r = e.do("POST", "/_replicator/_all_docs?include_docs=true&conflicts=true", asBob, map[string]any{"keys": []any{"d"}})
	require.Equal(t, 200, r.Status, r.Raw)
	require.NotContains(t, r.Raw, "pa55word")
}
