package frontend

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// L2, L7, L8: replies the probe found wrong or missing.
func TestProbeFindingsLow(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, 201, e.do("PUT", "/_replicator/"+id, asAdmin, repDoc()).Status)
	}
	rev := e.do("GET", "/_replicator/b", asAdmin, nil).Body["_rev"].(string)
	require.Equal(t, 200, e.do("DELETE", "/_replicator/b?rev="+rev, asAdmin, nil).Status)

	// L2: a since value of all ones (an incomplete versionstamp) was a 500.
	requireError(t, e.do("GET", "/_replicator/_changes?since=ffffffffffffffffffffffff", asAdmin, nil), 400, "bad_request")

	// L7: CouchDB-shaped errors where the router answered otherwise.
	requireError(t, e.do("GET", "/_scheduler/foo", asAdmin, nil), 404, "not_found")
	r := e.do("GET", "/../_replicator", asAdmin, nil)
	require.NotEqual(t, 301, r.Status, r.Raw)
	require.Contains(t, []int{400, 404}, r.Status, r.Raw)
	require.NotEmpty(t, r.Body["error"], r.Raw)

	// L8: _all_docs with keys, by query and by POST.
	keys := url.QueryEscape(`["c","nope","b","a"]`)
	r = e.do("GET", "/_replicator/_all_docs?include_docs=true&keys="+keys, asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	rows := r.Body["rows"].([]any)
	require.Len(t, rows, 4)
	require.Equal(t, "c", rows[0].(map[string]any)["id"])
	require.Equal(t, "not_found", rows[1].(map[string]any)["error"])
	require.Equal(t, true, rows[2].(map[string]any)["value"].(map[string]any)["deleted"])
	require.Nil(t, rows[2].(map[string]any)["doc"])
	require.Equal(t, "a", rows[3].(map[string]any)["doc"].(map[string]any)["_id"])
	r = e.do("POST", "/_replicator/_all_docs", asAdmin, map[string]any{"keys": []string{"a"}})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Len(t, r.Body["rows"], 1)
	requireError(t, e.do("POST", "/_replicator/_all_docs", asAdmin, map[string]any{"keys": "a"}), 400, "query_parse_error")

	// L8: _changes?descending=true, newest first.
	r = e.do("GET", "/_replicator/_changes?descending=true", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	res := r.Body["results"].([]any)
	require.Len(t, res, 3)
	require.Equal(t, "b", res[0].(map[string]any)["id"], "the deletion is the newest change")
	require.Equal(t, "a", res[2].(map[string]any)["id"])
	r = e.do("GET", "/_replicator/_changes?descending=true&limit=1", asAdmin, nil)
	require.Len(t, r.Body["results"], 1)
	require.Equal(t, r.Body["results"].([]any)[0].(map[string]any)["seq"], r.Body["last_seq"])
}
