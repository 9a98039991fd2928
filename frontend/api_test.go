package frontend

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestServerEndpoints(t *testing.T) {
	e := newEnv(t)

	r := e.do("GET", "/", anon, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "Welcome", r.body["couchdb"])
	require.Equal(t, "test", r.body["version"])

	r = e.do("GET", "/_up", anon, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "ok", r.body["status"])

	r = e.do("GET", "/_uuids?count=3", anon, nil)
	require.Equal(t, 200, r.status)
	require.Len(t, r.body["uuids"], 3)
	require.Len(t, r.body["uuids"].([]any)[0], 32)
	requireError(t, e.do("GET", "/_uuids?count=1001", anon, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_uuids?count=x", anon, nil), 400, "bad_request")

	// _replicator exists after Init; _all_dbs is admin-only.
	requireError(t, e.do("GET", "/_all_dbs", anon, nil), 401, "unauthorized")
	requireError(t, e.do("GET", "/_all_dbs", asAlice, nil), 401, "unauthorized")
	r = e.do("GET", "/_all_dbs", asAdmin, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, []any{"_replicator"}, r.list)

	requireError(t, e.do("POST", "/_up", anon, nil), 405, "method_not_allowed")
	requireError(t, e.do("GET", "/_nonsense", asAdmin, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/_design", asAdmin, nil), 400, "illegal_docid")
}

func TestReplicatorDatabases(t *testing.T) {
	e := newEnv(t)
	// The seed's example: another%2F_replicator.
	r := e.do("PUT", "/another%2F_replicator/", asAdmin, nil)
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, map[string]any{"ok": true}, r.body)
	requireError(t, e.do("PUT", "/another%2F_replicator", asAdmin, nil), 412, "file_exists")
	require.Equal(t, []any{"_replicator", "another/_replicator"}, e.do("GET", "/_all_dbs", asAdmin, nil).list)

	r = e.do("GET", "/another%2F_replicator", asAlice, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "another/_replicator", r.body["db_name"])
	require.EqualValues(t, 0, r.body["doc_count"])
	require.Equal(t, "0", r.body["update_seq"])

	// Non-replicator names are refused with a clear error.
	for _, name := range []string{"foo", "Another%2F_replicator", "a%2Fb", "_users", "x%2F_replicator%2Fy"} {
		r := e.do("PUT", "/"+name, asAdmin, nil)
		require.Equal(t, 400, r.status, "%s: %s", name, r.raw)
	}
	// Only admins create and delete databases.
	requireError(t, e.do("PUT", "/b%2F_replicator", asAlice, nil), 401, "unauthorized")
	requireError(t, e.do("PUT", "/b%2F_replicator", anon, nil), 401, "unauthorized")
	requireError(t, e.do("DELETE", "/another%2F_replicator", asBob, nil), 401, "unauthorized")
	requireError(t, e.do("DELETE", "/another%2F_replicator?rev=1-x", asAdmin, nil), 400, "bad_request")

	// Docs and jobs go with the database.
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator/rep_from_X", asAdmin, repDoc()).status)
	require.NotNil(t, e.rep.job(t, e.db, "another/_replicator", "rep_from_X"))
	r = e.do("DELETE", "/another%2F_replicator/", asAdmin, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, map[string]any{"ok": true}, r.body)
	require.Nil(t, e.rep.job(t, e.db, "another/_replicator", "rep_from_X"))
	requireError(t, e.do("GET", "/another%2F_replicator", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("DELETE", "/another%2F_replicator", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("GET", "/another%2F_replicator/rep_from_X", asAdmin, nil), 404, "not_found")
	// Recreated: empty.
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator", asAdmin, nil).status)
	requireError(t, e.do("GET", "/another%2F_replicator/rep_from_X", asAdmin, nil), 404, "not_found")
	require.EqualValues(t, 0, e.do("GET", "/another%2F_replicator", asAdmin, nil).body["doc_count"])
}

func TestDocumentMVCC(t *testing.T) {
	e := newEnv(t)
	r := e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("continuous", true))
	require.Equal(t, 201, r.status, r.raw)
	rev1 := r.body["rev"].(string)
	require.Regexp(t, `^1-[0-9a-f]{32}$`, rev1)
	require.Equal(t, `"`+rev1+`"`, r.header.Get("ETag"))

	// Create again without rev: conflict.
	requireError(t, e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc()), 409, "conflict")
	// Stale rev: conflict. Right rev: 2-…
	requireError(t, e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("_rev", "1-00000000000000000000000000000000")), 409, "conflict")
	r = e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("_rev", rev1, "continuous", false))
	require.Equal(t, 201, r.status, r.raw)
	rev2 := r.body["rev"].(string)
	require.True(t, strings.HasPrefix(rev2, "2-"))
	requireError(t, e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("_rev", rev1)), 409, "conflict")
	// ?rev= and body _rev must agree.
	requireError(t, e.do("PUT", "/_replicator/my_rep?rev="+rev1, asAdmin, repDoc("_rev", rev2)), 400, "bad_request")

	r = e.do("GET", "/_replicator/my_rep", asAdmin, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, rev2, r.body["_rev"])
	require.Equal(t, "my_rep", r.body["_id"])
	require.Equal(t, false, r.body["continuous"])
	require.Equal(t, adminName, r.body["owner"])
	requireError(t, e.do("GET", "/_replicator/my_rep?rev="+rev1, asAdmin, nil), 404, "not_found")
	revs := e.do("GET", "/_replicator/my_rep?revs=true", asAdmin, nil).body["_revisions"].(map[string]any)
	require.EqualValues(t, 2, revs["start"])
	require.Equal(t, []any{rev2[2:], rev1[2:]}, revs["ids"])

	// Delete needs the current rev.
	requireError(t, e.do("DELETE", "/_replicator/my_rep", asAdmin, nil), 409, "conflict")
	requireError(t, e.do("DELETE", "/_replicator/my_rep?rev="+rev1, asAdmin, nil), 409, "conflict")
	r = e.do("DELETE", "/_replicator/my_rep?rev="+rev2, asAdmin, nil)
	require.Equal(t, 200, r.status, r.raw)
	rev3 := r.body["rev"].(string)
	require.True(t, strings.HasPrefix(rev3, "3-"))
	r = e.do("GET", "/_replicator/my_rep", asAdmin, nil)
	requireError(t, r, 404, "not_found")
	require.Equal(t, "deleted", r.body["reason"])
	requireError(t, e.do("GET", "/_replicator/nope", asAdmin, nil), 404, "not_found")
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "my_rep"))

	// Recreating a deleted doc continues its rev line.
	r = e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc())
	require.Equal(t, 201, r.status, r.raw)
	require.True(t, strings.HasPrefix(r.body["rev"].(string), "4-"))

	// If-Match works as the rev.
	rev4 := r.body["rev"].(string)
	r = e.do("DELETE", "/_replicator/my_rep", asAdmin, nil, "If-Match", `"`+rev4+`"`)
	require.Equal(t, 200, r.status, r.raw)

	// POST creates with a generated id, or the body's.
	r = e.do("POST", "/_replicator", asAdmin, repDoc())
	require.Equal(t, 201, r.status, r.raw)
	require.Len(t, r.body["id"], 32)
	r = e.do("POST", "/_replicator", asAdmin, repDoc("_id", "named"))
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, "named", r.body["id"])
	requireError(t, e.do("POST", "/_replicator", asAdmin, repDoc("_id", "named")), 409, "conflict")
	requireError(t, e.do("POST", "/_replicator", asAdmin, "{}", "Content-Type", "text/plain"), 415, "bad_content_type")
}

func TestDocIDsAndSpecialMembers(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		path   string
		body   any
		status int
		err    string
	}{
		{"/_replicator/_foo", repDoc(), 400, "illegal_docid"},
		{"/_replicator/ok", repDoc("_attachments", map[string]any{}), 400, "doc_validation"},
		{"/_replicator/ok", repDoc("_deleted", "yes"), 400, "doc_validation"},
		{"/_replicator/ok", repDoc("_id", "other"), 400, "bad_request"},
		{"/_replicator/ok", repDoc("_rev", 5), 400, "bad_request"},
		{"/_replicator/ok", repDoc("_rev", "garbage"), 400, "bad_request"},
		{"/_replicator/" + strings.Repeat("x", 1025), repDoc(), 400, "illegal_docid"},
	} {
		r := e.do("PUT", tc.path, asAdmin, tc.body)
		requireError(t, r, tc.status, tc.err)
	}
	// Slashes in ids are escaped.
	r := e.do("PUT", "/_replicator/a%2Fb", asAdmin, repDoc())
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, "a/b", r.body["id"])
	require.Equal(t, "a/b", e.do("GET", "/_replicator/a%2Fb", asAdmin, nil).body["_id"])
	// _replication_* fields pass.
	r = e.do("PUT", "/_replicator/st", asAdmin, repDoc("_replication_state", "completed"))
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, "completed", e.do("GET", "/_replicator/st", asAdmin, nil).body["_replication_state"])
	// Exact numbers survive.
	r = e.do("PUT", "/_replicator/num", asAdmin, `{"source":"http://a/b","target":"http://c/d","since_seq":12345678901234567890}`)
	require.Equal(t, 201, r.status, r.raw)
	require.Contains(t, e.do("GET", "/_replicator/num", asAdmin, nil).raw, "12345678901234567890")
	require.Equal(t, 0, len(e.do("GET", "/_replicator/_all_docs?startkey=%22zzz%22", asAdmin, nil).body["rows"].([]any)))
}

func TestDesignAndLocalDocs(t *testing.T) {
	e := newEnv(t)
	// Design docs: admin only, no validation, no job.
	requireError(t, e.do("PUT", "/_replicator/_design/x", asAlice, map[string]any{"views": map[string]any{}}), 403, "forbidden")
	r := e.do("PUT", "/_replicator/_design/x", asAdmin, map[string]any{"views": map[string]any{}})
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, "_design/x", r.body["id"])
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "_design/x"))
	require.Equal(t, 200, e.do("GET", "/_replicator/_design/x", asAlice, nil).status)
	// Design docs may also be addressed with an escaped slash.
	require.Equal(t, 200, e.do("GET", "/_replicator/_design%2Fx", asAdmin, nil).status)

	// Local docs: revs 0-N, not in _all_docs or _changes, no job.
	r = e.do("PUT", "/_replicator/_local/cp", asAlice, map[string]any{"anything": 1})
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, "0-1", r.body["rev"])
	requireError(t, e.do("PUT", "/_replicator/_local/cp", asAlice, map[string]any{"anything": 2}), 409, "conflict")
	r = e.do("PUT", "/_replicator/_local/cp", asAlice, map[string]any{"anything": 2, "_rev": "0-1"})
	require.Equal(t, "0-2", r.body["rev"], r.raw)
	require.EqualValues(t, 2, e.do("GET", "/_replicator/_local/cp", asAlice, nil).body["anything"])
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "_local/cp"))
	rows := e.do("GET", "/_replicator/_all_docs", asAdmin, nil).body["rows"].([]any)
	require.Len(t, rows, 1) // the design doc
	require.Equal(t, 200, e.do("DELETE", "/_replicator/_local/cp?rev=0-2", asAlice, nil).status)
	requireError(t, e.do("GET", "/_replicator/_local/cp", asAlice, nil), 404, "not_found")
}

func TestAllDocsAndChanges(t *testing.T) {
	e := newEnv(t)
	revs := map[string]string{}
	for _, id := range []string{"c", "a", "b", "d"} {
		r := e.do("PUT", "/_replicator/"+id, asAdmin, repDoc())
		require.Equal(t, 201, r.status, r.raw)
		revs[id] = r.body["rev"].(string)
	}
	r := e.do("DELETE", "/_replicator/d?rev="+revs["d"], asAdmin, nil)
	require.Equal(t, 200, r.status)
	revs["d"] = r.body["rev"].(string)

	r = e.do("GET", "/_replicator/_all_docs", asAlice, nil)
	require.Equal(t, 200, r.status)
	require.EqualValues(t, 3, r.body["total_rows"])
	ids := func(rows any) []string {
		var out []string
		for _, row := range rows.([]any) {
			out = append(out, row.(map[string]any)["id"].(string))
		}
		return out
	}
	require.Equal(t, []string{"a", "b", "c"}, ids(r.body["rows"]))
	row := r.body["rows"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"rev": revs["a"]}, row["value"])
	require.Nil(t, row["doc"])

	for q, want := range map[string][]string{
		"limit=2":                      {"a", "b"},
		"skip=1":                       {"b", "c"},
		"limit=1&skip=1":               {"b"},
		"descending=true":              {"c", "b", "a"},
		`startkey="b"`:                 {"b", "c"},
		`endkey="b"`:                   {"a", "b"},
		`start_key="b"&end_key="b"`:    {"b"},
		`descending=true&startkey="b"`: {"b", "a"},
		"limit=0":                      nil,
	} {
		r := e.do("GET", "/_replicator/_all_docs?"+strings.ReplaceAll(q, `"`, "%22"), asAdmin, nil)
		require.Equal(t, 200, r.status, "%s: %s", q, r.raw)
		require.Equal(t, want, ids(r.body["rows"]), q)
	}
	r = e.do("GET", "/_replicator/_all_docs?include_docs=true&limit=1", asAdmin, nil)
	require.Equal(t, "a", r.body["rows"].([]any)[0].(map[string]any)["doc"].(map[string]any)["_id"])
	for _, q := range []string{"limit=x", "limit=-1", "skip=no", "include_docs=maybe", "startkey=b"} {
		requireError(t, e.do("GET", "/_replicator/_all_docs?"+q, asAdmin, nil), 400, "query_parse_error")
	}

	// Changes: one row per doc, in write order; deletions flagged.
	r = e.do("GET", "/_replicator/_changes", asAdmin, nil)
	require.Equal(t, 200, r.status, r.raw)
	res := r.body["results"].([]any)
	require.Len(t, res, 4)
	require.Equal(t, []string{"c", "a", "b", "d"}, ids(res))
	last := res[3].(map[string]any)
	require.Equal(t, true, last["deleted"])
	require.Equal(t, []any{map[string]any{"rev": revs["d"]}}, last["changes"])
	require.Equal(t, last["seq"], r.body["last_seq"])
	info := e.do("GET", "/_replicator", asAdmin, nil).body
	require.Equal(t, last["seq"], info["update_seq"])
	require.EqualValues(t, 3, info["doc_count"])
	require.EqualValues(t, 1, info["doc_del_count"])

	// since and limit; an update moves a doc to the end.
	since := res[1].(map[string]any)["seq"].(string)
	r = e.do("GET", "/_replicator/_changes?since="+since, asAdmin, nil)
	require.Equal(t, []string{"b", "d"}, ids(r.body["results"]))
	r = e.do("PUT", "/_replicator/c", asAdmin, repDoc("_rev", revs["c"]))
	require.Equal(t, 201, r.status)
	r = e.do("GET", "/_replicator/_changes?limit=2&include_docs=true", asAdmin, nil)
	require.Equal(t, []string{"a", "b"}, ids(r.body["results"]))
	require.Equal(t, "a", r.body["results"].([]any)[0].(map[string]any)["doc"].(map[string]any)["_id"])
	r = e.do("GET", "/_replicator/_changes?since="+url.QueryEscape(r.body["last_seq"].(string)), asAdmin, nil)
	require.Equal(t, []string{"d", "c"}, ids(r.body["results"]))
	r = e.do("GET", "/_replicator/_changes?since=now", asAdmin, nil)
	require.Empty(t, r.body["results"])
	requireError(t, e.do("GET", "/_replicator/_changes?since=zz", asAdmin, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/_changes?feed=continuous", asAdmin, nil), 400, "bad_request")
}

func TestMethodsAndMissingDB(t *testing.T) {
	e := newEnv(t)
	requireError(t, e.do("PATCH", "/_replicator/x", asAdmin, nil), 405, "method_not_allowed")
	requireError(t, e.do("GET", "/x%2F_replicator/doc", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("PUT", "/x%2F_replicator/doc", asAdmin, repDoc()), 404, "not_found")
	requireError(t, e.do("GET", "/x%2F_replicator/_all_docs", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("GET", "/x%2F_replicator/_changes", asAdmin, nil), 404, "not_found")
	r := e.do("HEAD", "/_replicator", asAdmin, nil)
	require.Equal(t, 200, r.status)
	require.Empty(t, r.raw)
	require.Equal(t, http.StatusNotFound, e.do("HEAD", "/_replicator/none", asAdmin, nil).status)
	_ = fmt.Sprint()
}
