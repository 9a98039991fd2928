package wire_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// rowIDs returns the field key of each row of a listing.
func rowIDs(t *testing.T, r resp, list, key string) []string {
	t.Helper()
	require.Equal(t, 200, r.Status, r.Raw)
	var out []string
	for _, row := range r.Body[list].([]any) {
		out = append(out, fmt.Sprint(row.(map[string]any)[key]))
	}
	return out
}

// The scheduler listings page through the view index: limit, skip and
// fdbrep's start_key (alias startkey, JSON), for _scheduler/docs,
// _scheduler/docs/{db} and _scheduler/jobs; a malformed start key is a
// query_parse_error.
func TestSchedulerPages(t *testing.T) {
	t.Parallel()
	e := newService(t)
	for i := 0; i < 12; i++ {
		doc := repDoc("source", fmt.Sprintf("http://127.0.0.1:9/s%02d", i), "target", "http://127.0.0.1:9/t", "continuous", true)
		require.Equal(t, 201, e.do("PUT", fmt.Sprintf("/_replicator/d%02d", i), asAdmin, doc).Status)
	}
	// Once a node has started them they have their replication ids (the
	// jobs view's order) and keep them.
	for i := 0; i < 12; i++ {
		e.waitDocState("_replicator", fmt.Sprintf("d%02d", i), "running", "crashing")
	}

	q := func(path string, kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return path + "?" + v.Encode()
	}
	for _, tc := range []struct {
		name, path string
		want       []string
		offset     int
	}{
		{"first page", q("/_scheduler/docs", "limit", "5"), []string{"d00", "d01", "d02", "d03", "d04"}, 0},
		{"skip", q("/_scheduler/docs", "limit", "2", "skip", "3"), []string{"d03", "d04"}, 3},
		{"start_key", q("/_scheduler/docs", "limit", "3", "start_key", `["_replicator","d05"]`), []string{"d05", "d06", "d07"}, 0},
		{"start_key and skip", q("/_scheduler/docs", "limit", "3", "start_key", `["_replicator","d05"]`, "skip", "1"), []string{"d06", "d07", "d08"}, 1},
		{"start_key of a database", q("/_scheduler/docs", "limit", "2", "start_key", `"_replicator"`), []string{"d00", "d01"}, 0},
		{"startkey in one database", q("/_scheduler/docs/_replicator", "startkey", `"d10"`), []string{"d10", "d11"}, 0},
		{"between keys", q("/_scheduler/docs/_replicator", "startkey", `"d10x"`), []string{"d11"}, 0},
		{"by states", q("/_scheduler/docs/_replicator", "states", "pending,running,crashing", "limit", "1", "start_key", `"d07"`), []string{"d07"}, 0},
		{"past the end", q("/_scheduler/docs", "start_key", `["~"]`), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", tc.path, asAdmin, nil)
			require.Equal(t, tc.want, rowIDs(t, r, "docs", "doc_id"))
			require.EqualValues(t, 12, r.Body["total_rows"], "total_rows counts the whole view")
			require.EqualValues(t, tc.offset, r.Body["offset"])
		})
	}

	// _scheduler/jobs: each page starts at the key of the last row of the
	// one before, skipping that row.
	first := e.do("GET", "/_scheduler/jobs?limit=5", asAdmin, nil)
	require.EqualValues(t, 12, first.Body["total_rows"])
	all := rowIDs(t, first, "jobs", "id")
	last := first.Body["jobs"].([]any)[4].(map[string]any)
	for len(all) < 12 {
		key := fmt.Sprintf(`[%q,%q]`, last["id"], last["job_id"])
		r := e.do("GET", q("/_scheduler/jobs", "limit", "5", "skip", "1", "start_key", key), asAdmin, nil)
		page := rowIDs(t, r, "jobs", "id")
		require.NotEmpty(t, page)
		all = append(all, page...)
		rows := r.Body["jobs"].([]any)
		last = rows[len(rows)-1].(map[string]any)
	}
	require.Len(t, all, 12)
	require.IsIncreasing(t, all)
	full := rowIDs(t, e.do("GET", "/_scheduler/jobs", asAdmin, nil), "jobs", "id")
	require.Equal(t, full, all)

	for _, path := range []string{
		q("/_scheduler/docs", "start_key", "d05"),
		q("/_scheduler/docs", "start_key", "[]"),
		q("/_scheduler/docs", "startkey", `[1]`),
		q("/_scheduler/docs", "start_key", `["a","b","c"]`),
		q("/_scheduler/docs/_replicator", "start_key", `["_replicator","d05"]`),
		q("/_scheduler/jobs", "start_key", `["a","b","c"]`),
	} {
		requireError(t, e.do("GET", path, asAdmin, nil), 400, "query_parse_error")
	}
}
