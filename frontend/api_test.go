package frontend

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/repdb"
)

func TestServerEndpoints(t *testing.T) {
	e := newEnv(t)

	r := e.do("GET", "/", anon, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "Welcome", r.Body["couchdb"])
	require.Equal(t, "test", r.Body["version"])
	require.NotContains(t, r.Body, "uuid", "no server UUID configured")

	r = e.requireUp(t)
	require.Equal(t, "ok", r.Body["status"])

	r = e.do("GET", "/_uuids?count=3", anon, nil)
	require.Equal(t, 200, r.Status)
	require.Len(t, r.Body["uuids"], 3)
	require.Len(t, r.Body["uuids"].([]any)[0], 32)
	requireError(t, e.do("GET", "/_uuids?count=1001", anon, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_uuids?count=x", anon, nil), 400, "bad_request")

	// _replicator exists after Init; _all_dbs is admin-only.
	requireError(t, e.do("GET", "/_all_dbs", anon, nil), 401, "unauthorized")
	requireError(t, e.do("GET", "/_all_dbs", asAlice, nil), 401, "unauthorized")
	r = e.do("GET", "/_all_dbs", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, []any{"_replicator"}, r.List)

	requireError(t, e.do("POST", "/_up", anon, nil), 405, "method_not_allowed")
	requireError(t, e.do("GET", "/_nonsense", asAdmin, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/_design", asAdmin, nil), 400, "illegal_docid")
}

func TestReplicatorDatabases(t *testing.T) {
	e := newEnv(t)
	// The seed's example: another%2F_replicator.
	r := e.do("PUT", "/another%2F_replicator/", asAdmin, nil)
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, map[string]any{"ok": true}, r.Body)
	requireError(t, e.do("PUT", "/another%2F_replicator", asAdmin, nil), 412, "file_exists")
	require.Equal(t, []any{"_replicator", "another/_replicator"}, e.do("GET", "/_all_dbs", asAdmin, nil).List)

	r = e.do("GET", "/another%2F_replicator", asAlice, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "another/_replicator", r.Body["db_name"])
	require.EqualValues(t, 0, r.Body["doc_count"])
	require.Equal(t, "0", r.Body["update_seq"])

	// Non-replicator names are refused with a clear error.
	for _, name := range []string{"foo", "Another%2F_replicator", "a%2Fb", "_users", "x%2F_replicator%2Fy"} {
		r := e.do("PUT", "/"+name, asAdmin, nil)
		require.Equal(t, 400, r.Status, "%s: %s", name, r.Raw)
	}
	// Only admins create and delete databases.
	requireError(t, e.do("PUT", "/b%2F_replicator", asAlice, nil), 401, "unauthorized")
	requireError(t, e.do("PUT", "/b%2F_replicator", anon, nil), 401, "unauthorized")
	requireError(t, e.do("DELETE", "/another%2F_replicator", asBob, nil), 401, "unauthorized")
	requireError(t, e.do("DELETE", "/another%2F_replicator?rev=1-x", asAdmin, nil), 400, "bad_request")

	// Docs and jobs go with the database.
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator/rep_from_X", asAdmin, repDoc()).Status)
	require.NotNil(t, e.rep.job(t, e.db, "another/_replicator", "rep_from_X"))
	r = e.do("DELETE", "/another%2F_replicator/", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, map[string]any{"ok": true}, r.Body)
	require.Nil(t, e.rep.job(t, e.db, "another/_replicator", "rep_from_X"))
	requireError(t, e.do("GET", "/another%2F_replicator", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("DELETE", "/another%2F_replicator", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("GET", "/another%2F_replicator/rep_from_X", asAdmin, nil), 404, "not_found")
	// Recreated: empty.
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator", asAdmin, nil).Status)
	requireError(t, e.do("GET", "/another%2F_replicator/rep_from_X", asAdmin, nil), 404, "not_found")
	require.EqualValues(t, 0, e.do("GET", "/another%2F_replicator", asAdmin, nil).Body["doc_count"])
}

func TestDocumentMVCC(t *testing.T) {
	e := newEnv(t)
	r := e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("continuous", true))
	require.Equal(t, 201, r.Status, r.Raw)
	rev1 := r.Body["rev"].(string)
	require.Regexp(t, `^1-[0-9a-f]{32}$`, rev1)
	require.Equal(t, `"`+rev1+`"`, r.Header.Get("ETag"))

	// Create again without rev: conflict.
	requireError(t, e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc()), 409, "conflict")
	// Stale rev: conflict. Right rev: 2-…
	requireError(t, e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("_rev", "1-00000000000000000000000000000000")), 409, "conflict")
	r = e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("_rev", rev1, "continuous", false))
	require.Equal(t, 201, r.Status, r.Raw)
	rev2 := r.Body["rev"].(string)
	require.True(t, strings.HasPrefix(rev2, "2-"))
	requireError(t, e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc("_rev", rev1)), 409, "conflict")
	// ?rev= and body _rev must agree.
	requireError(t, e.do("PUT", "/_replicator/my_rep?rev="+rev1, asAdmin, repDoc("_rev", rev2)), 400, "bad_request")

	r = e.do("GET", "/_replicator/my_rep", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, rev2, r.Body["_rev"])
	require.Equal(t, "my_rep", r.Body["_id"])
	require.Equal(t, false, r.Body["continuous"])
	require.Equal(t, adminName, r.Body["owner"])
	requireError(t, e.do("GET", "/_replicator/my_rep?rev="+rev1, asAdmin, nil), 404, "not_found")
	revs := e.do("GET", "/_replicator/my_rep?revs=true", asAdmin, nil).Body["_revisions"].(map[string]any)
	require.EqualValues(t, 2, revs["start"])
	require.Equal(t, []any{rev2[2:], rev1[2:]}, revs["ids"])

	// Delete needs the current rev.
	requireError(t, e.do("DELETE", "/_replicator/my_rep", asAdmin, nil), 409, "conflict")
	requireError(t, e.do("DELETE", "/_replicator/my_rep?rev="+rev1, asAdmin, nil), 409, "conflict")
	r = e.do("DELETE", "/_replicator/my_rep?rev="+rev2, asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	rev3 := r.Body["rev"].(string)
	require.True(t, strings.HasPrefix(rev3, "3-"))
	r = e.do("GET", "/_replicator/my_rep", asAdmin, nil)
	requireError(t, r, 404, "not_found")
	require.Equal(t, "deleted", r.Body["reason"])
	requireError(t, e.do("GET", "/_replicator/nope", asAdmin, nil), 404, "not_found")
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "my_rep"))

	// Recreating a deleted doc continues its rev line.
	r = e.do("PUT", "/_replicator/my_rep", asAdmin, repDoc())
	require.Equal(t, 201, r.Status, r.Raw)
	require.True(t, strings.HasPrefix(r.Body["rev"].(string), "4-"))

	// If-Match works as the rev.
	rev4 := r.Body["rev"].(string)
	r = e.do("DELETE", "/_replicator/my_rep", asAdmin, nil, "If-Match", `"`+rev4+`"`)
	require.Equal(t, 200, r.Status, r.Raw)

	// POST creates with a generated id, or the body's.
	r = e.do("POST", "/_replicator", asAdmin, repDoc())
	require.Equal(t, 201, r.Status, r.Raw)
	require.Len(t, r.Body["id"], 32)
	r = e.do("POST", "/_replicator", asAdmin, repDoc("_id", "named"))
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "named", r.Body["id"])
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
		{"/_replicator/ok", repDoc("_attachments", map[string]any{"a.txt": map[string]any{"data": "eA=="}}), 415, "bad_content_type"},
		{"/_replicator/ok", repDoc("_bogus", 1), 400, "doc_validation"},
		{"/_replicator/ok", repDoc("_revisions", "nope"), 400, "bad_request"},
		{"/_replicator/ok", repDoc("_deleted", "yes"), 400, "doc_validation"},
		{"/_replicator/ok", repDoc("_id", "other"), 400, "bad_request"},
		{"/_replicator/ok", repDoc("_rev", 5), 400, "bad_request"},
		{"/_replicator/ok", repDoc("_rev", "garbage"), 400, "bad_request"},
		{"/_replicator/" + strings.Repeat("x", 1025), repDoc(), 400, "illegal_docid"},
		{"/_replicator/" + strings.Repeat("x", repdb.MaxDocIDLength+1), repDoc(), 400, "illegal_docid"}, // L1: was a 500 from the job layer
	} {
		r := e.do("PUT", tc.path, asAdmin, tc.body)
		requireError(t, r, tc.status, tc.err)
	}
	// Slashes in ids are escaped.
	r := e.do("PUT", "/_replicator/a%2Fb", asAdmin, repDoc())
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "a/b", r.Body["id"])
	require.Equal(t, "a/b", e.do("GET", "/_replicator/a%2Fb", asAdmin, nil).Body["_id"])
	// _replication_* fields pass.
	r = e.do("PUT", "/_replicator/st", asAdmin, repDoc("_replication_state", "completed"))
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "completed", e.do("GET", "/_replicator/st", asAdmin, nil).Body["_replication_state"])
	// Exact numbers survive.
	r = e.do("PUT", "/_replicator/num", asAdmin, `{"source":"http://a/b","target":"http://c/d","since_seq":12345678901234567890}`)
	require.Equal(t, 201, r.Status, r.Raw)
	require.Contains(t, e.do("GET", "/_replicator/num", asAdmin, nil).Raw, "12345678901234567890")
	require.Equal(t, 0, len(e.do("GET", "/_replicator/_all_docs?startkey=%22zzz%22", asAdmin, nil).Body["rows"].([]any)))
}

func TestDesignAndLocalDocs(t *testing.T) {
	e := newEnv(t)
	// Design docs: admin only, no validation, no job.
	requireError(t, e.do("PUT", "/_replicator/_design/x", asAlice, map[string]any{"views": map[string]any{}}), 403, "forbidden")
	r := e.do("PUT", "/_replicator/_design/x", asAdmin, map[string]any{"views": map[string]any{}})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "_design/x", r.Body["id"])
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "_design/x"))
	require.Equal(t, 200, e.do("GET", "/_replicator/_design/x", asAlice, nil).Status)
	// Design docs may also be addressed with an escaped slash.
	require.Equal(t, 200, e.do("GET", "/_replicator/_design%2Fx", asAdmin, nil).Status)

	// Local docs: revs 0-N, not in _all_docs or _changes, no job.
	r = e.do("PUT", "/_replicator/_local/cp", asAlice, map[string]any{"anything": 1})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "0-1", r.Body["rev"])
	requireError(t, e.do("PUT", "/_replicator/_local/cp", asAlice, map[string]any{"anything": 2}), 409, "conflict")
	r = e.do("PUT", "/_replicator/_local/cp", asAlice, map[string]any{"anything": 2, "_rev": "0-1"})
	require.Equal(t, "0-2", r.Body["rev"], r.Raw)
	require.EqualValues(t, 2, e.do("GET", "/_replicator/_local/cp", asAlice, nil).Body["anything"])
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "_local/cp"))
	rows := e.do("GET", "/_replicator/_all_docs", asAdmin, nil).Body["rows"].([]any)
	require.Len(t, rows, 1) // the design doc
	require.Equal(t, 200, e.do("DELETE", "/_replicator/_local/cp?rev=0-2", asAlice, nil).Status)
	requireError(t, e.do("GET", "/_replicator/_local/cp", asAlice, nil), 404, "not_found")
}

func TestAllDocsAndChanges(t *testing.T) {
	e := newEnv(t)
	revs := map[string]string{}
	for _, id := range []string{"c", "a", "b", "d"} {
		r := e.do("PUT", "/_replicator/"+id, asAdmin, repDoc())
		require.Equal(t, 201, r.Status, r.Raw)
		revs[id] = r.Body["rev"].(string)
	}
	r := e.do("DELETE", "/_replicator/d?rev="+revs["d"], asAdmin, nil)
	require.Equal(t, 200, r.Status)
	revs["d"] = r.Body["rev"].(string)

	r = e.do("GET", "/_replicator/_all_docs", asAlice, nil)
	require.Equal(t, 200, r.Status)
	require.EqualValues(t, 3, r.Body["total_rows"])
	ids := func(rows any) []string {
		var out []string
		for _, row := range rows.([]any) {
			out = append(out, row.(map[string]any)["id"].(string))
		}
		return out
	}
	require.Equal(t, []string{"a", "b", "c"}, ids(r.Body["rows"]))
	row := r.Body["rows"].([]any)[0].(map[string]any)
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
		require.Equal(t, 200, r.Status, "%s: %s", q, r.Raw)
		require.Equal(t, want, ids(r.Body["rows"]), q)
	}
	r = e.do("GET", "/_replicator/_all_docs?include_docs=true&limit=1", asAdmin, nil)
	require.Equal(t, "a", r.Body["rows"].([]any)[0].(map[string]any)["doc"].(map[string]any)["_id"])
	for _, q := range []string{"limit=x", "limit=-1", "skip=no", "include_docs=maybe", "startkey=b"} {
		requireError(t, e.do("GET", "/_replicator/_all_docs?"+q, asAdmin, nil), 400, "query_parse_error")
	}

	// Changes: one row per doc, in write order; deletions flagged.
	r = e.do("GET", "/_replicator/_changes", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	res := r.Body["results"].([]any)
	require.Len(t, res, 4)
	require.Equal(t, []string{"c", "a", "b", "d"}, ids(res))
	last := res[3].(map[string]any)
	require.Equal(t, true, last["deleted"])
	require.Equal(t, []any{map[string]any{"rev": revs["d"]}}, last["changes"])
	require.Equal(t, last["seq"], r.Body["last_seq"])
	info := e.do("GET", "/_replicator", asAdmin, nil).Body
	require.Equal(t, last["seq"], info["update_seq"])
	require.EqualValues(t, 3, info["doc_count"])
	require.EqualValues(t, 1, info["doc_del_count"])

	// since and limit; an update moves a doc to the end.
	since := res[1].(map[string]any)["seq"].(string)
	r = e.do("GET", "/_replicator/_changes?since="+since, asAdmin, nil)
	require.Equal(t, []string{"b", "d"}, ids(r.Body["results"]))
	r = e.do("PUT", "/_replicator/c", asAdmin, repDoc("_rev", revs["c"]))
	require.Equal(t, 201, r.Status)
	r = e.do("GET", "/_replicator/_changes?limit=2&include_docs=true", asAdmin, nil)
	require.Equal(t, []string{"a", "b"}, ids(r.Body["results"]))
	require.Equal(t, "a", r.Body["results"].([]any)[0].(map[string]any)["doc"].(map[string]any)["_id"])
	r = e.do("GET", "/_replicator/_changes?since="+url.QueryEscape(r.Body["last_seq"].(string)), asAdmin, nil)
	require.Equal(t, []string{"d", "c"}, ids(r.Body["results"]))
	r = e.do("GET", "/_replicator/_changes?since=now", asAdmin, nil)
	require.Empty(t, r.Body["results"])
	requireError(t, e.do("GET", "/_replicator/_changes?since=zz", asAdmin, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/_changes?feed=bogus", asAdmin, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/_changes?style=bogus", asAdmin, nil), 400, "bad_request")
}

func TestMethodsAndMissingDB(t *testing.T) {
	e := newEnv(t)
	requireError(t, e.do("PATCH", "/_replicator/x", asAdmin, nil), 405, "method_not_allowed")
	requireError(t, e.do("GET", "/x%2F_replicator/doc", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("PUT", "/x%2F_replicator/doc", asAdmin, repDoc()), 404, "not_found")
	requireError(t, e.do("GET", "/x%2F_replicator/_all_docs", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("GET", "/x%2F_replicator/_changes", asAdmin, nil), 404, "not_found")
	r := e.do("HEAD", "/_replicator", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Raw)
	require.Equal(t, http.StatusNotFound, e.do("HEAD", "/_replicator/none", asAdmin, nil).Status)
	_ = fmt.Sprint()
}

// HEAD is answered wherever GET is, as CouchDB does: GET's status, no
// body. A 405 lists HEAD with GET.
func TestHeadWhereverGet(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{
		"/_active_tasks", "/_scheduler/jobs", "/_scheduler/docs", "/_scheduler/docs/_replicator", "/_session",
		"/_uuids", "/_node/_local/_config", "/_replicator/_changes", "/_replicator/_security",
	} {
		get, head := e.do("GET", path, asAdmin, nil), e.do("HEAD", path, asAdmin, nil)
		require.NotEqual(t, http.StatusMethodNotAllowed, head.Status, path)
		require.Equal(t, get.Status, head.Status, path)
		require.Empty(t, head.Raw, path)
	}
	r := e.do("DELETE", "/_scheduler/jobs", asAdmin, nil)
	requireError(t, r, 405, "method_not_allowed")
	require.Equal(t, "Only GET,HEAD allowed", r.Body["reason"])
	require.Equal(t, http.StatusMethodNotAllowed, e.do("HEAD", "/_replicate", asAdmin, nil).Status, "POST only")
}
