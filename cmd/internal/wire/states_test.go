package wire_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// unreachable is a replication document whose endpoints never answer: its
// job crashes and retries, never writing into the document.
func unreachable(n string, extra ...any) map[string]any {
	return repDoc(append([]any{"source", "http://127.0.0.1:9/src-" + n, "target", "http://127.0.0.1:9/tgt-" + n, "continuous", true}, extra...)...)
}

// The replicator's own fields on documents that arrive, as CouchDB
// treats them: completed and failed documents without a job are not run
// again, and _scheduler/docs shows them as they ended; a job that runs again (a 2.x "triggered" document, a changed
// replication) clears the stale fields; conflicts and deletions through
// _bulk_docs move the job with the winning revision.
func TestReplicationStateFields(t *testing.T) {
	t.Parallel()
	e := newService(t)
	docState := func(id string) int {
		return e.do("GET", "/_scheduler/docs/_replicator/"+id, asAdmin, nil).Status
	}

	// Completed or failed, no job: stored as they are, not run, and shown
	// as they ended (404 before: CouchDB lists them).
	for _, tc := range []struct {
		state string
		extra []any
		info  map[string]any
	}{
		{"completed", []any{"_replication_stats", map[string]any{"docs_read": 5, "docs_written": 5}},
			map[string]any{"docs_read": 5.0, "docs_written": 5.0}},
		{"failed", []any{"_replication_state_reason", "boom"}, map[string]any{"error": "error", "reason": "boom"}},
	} {
		state := tc.state
		r := e.do("PUT", "/_replicator/"+state, asAdmin, unreachable(state, append([]any{"_replication_state", state,
			"_replication_state_time", "2024-01-01T00:00:00Z"}, tc.extra...)...))
		require.Equal(t, 201, r.Status, r.Raw)
		require.Equal(t, state, e.do("GET", "/_replicator/"+state, asAdmin, nil).Body["_replication_state"])
		r = e.do("GET", "/_scheduler/docs/_replicator/"+state, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, state, r.Body["state"], r.Raw)
		require.Equal(t, "2024-01-01T00:00:00Z", r.Body["last_updated"], r.Raw)
		require.Nil(t, r.Body["id"], r.Raw)
		for k, v := range tc.info {
			require.Equal(t, v, r.Body["info"].(map[string]any)[k], "%s: %s", k, r.Raw)
		}
		r = e.do("GET", "/_scheduler/docs/_replicator?states="+state, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.EqualValues(t, 1, r.Body["total_rows"], "listed and counted: %s", r.Raw)
	}
	require.NotContains(t, e.do("GET", "/_scheduler/jobs", asAdmin, nil).Raw, "/src-completed", "no job runs")

	// A 2.x document replicated in with its "triggered" state runs, and
	// gets a revision without the stale fields.
	r := e.do("POST", "/_replicator/_bulk_docs", asAdmin, map[string]any{"new_edits": false, "docs": []any{
		func() map[string]any {
			d := unreachable("legacy", "_replication_state", "triggered", "_replication_id", "abc")
			d["_id"], d["_rev"] = "legacy", "1-aaa"
			return d
		}(),
	}})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Empty(t, r.List)
	e.waitDocState("_replicator", "legacy", "pending", "running", "crashing")
	doc := e.do("GET", "/_replicator/legacy?revs=true", asAdmin, nil).Body
	require.NotContains(t, doc, "_replication_state")
	require.NotContains(t, doc, "_replication_id")
	require.Equal(t, []any{doc["_rev"].(string)[2:], "aaa"}, doc["_revisions"].(map[string]any)["ids"])

	// A running job's document marked completed by hand stays as it is
	// (the replicator records its own result so); the same document with
	// another target runs again and loses the stale fields.
	r = e.do("PUT", "/_replicator/edit", asAdmin, unreachable("edit"))
	require.Equal(t, 201, r.Status)
	e.waitDocState("_replicator", "edit", "pending", "running", "crashing")
	r = e.do("PUT", "/_replicator/edit", asAdmin, unreachable("edit", "_rev", r.Body["rev"], "_replication_state", "completed"))
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "completed", e.do("GET", "/_replicator/edit", asAdmin, nil).Body["_replication_state"])
	changed := unreachable("edit", "_rev", r.Body["rev"], "_replication_state", "completed", "_replication_stats", map[string]any{"docs_read": 1})
	changed["target"] = "http://127.0.0.1:9/elsewhere"
	r = e.do("PUT", "/_replicator/edit", asAdmin, changed)
	require.Equal(t, 201, r.Status, r.Raw)
	doc = e.do("GET", "/_replicator/edit", asAdmin, nil).Body
	require.Equal(t, r.Body["rev"], doc["_rev"], "the reply names the stored revision")
	require.NotContains(t, doc, "_replication_state")
	require.NotContains(t, doc, "_replication_stats")
	info := e.waitDocState("_replicator", "edit", "pending", "running", "crashing")
	require.Equal(t, "http://127.0.0.1:9/elsewhere/", info["target"])

	// A conflict replicated in: the job follows the winner; deleting the
	// winner (as Fauxton deletes, with _bulk_docs) gives the job to the
	// other branch; deleting that removes it.
	branch := func(rev, n string) map[string]any {
		d := unreachable(n)
		d["_id"], d["_rev"] = "conflict", rev
		return d
	}
	r = e.do("POST", "/_replicator/_bulk_docs", asAdmin, map[string]any{"new_edits": false,
		"docs": []any{branch("1-aaa", "low"), branch("1-bbb", "high")}})
	require.Equal(t, 201, r.Status, r.Raw)
	info = e.waitDocState("_replicator", "conflict", "pending", "running", "crashing")
	require.Equal(t, "http://127.0.0.1:9/tgt-high/", info["target"])
	del := func(rev string) {
		r := e.do("POST", "/_replicator/_bulk_docs", asAdmin, map[string]any{"docs": []any{
			map[string]any{"_id": "conflict", "_rev": rev, "_deleted": true}}})
		require.Equal(t, 201, r.Status, r.Raw)
		require.Equal(t, true, r.List[0].(map[string]any)["ok"], r.Raw)
	}
	del("1-bbb")
	// The job changed in the write's transaction: no wait.
	r = e.do("GET", "/_scheduler/docs/_replicator/conflict", asAdmin, nil)
	require.Equal(t, "http://127.0.0.1:9/tgt-low/", r.Body["target"], r.Raw)
	del("1-aaa")
	require.Equal(t, 404, docState("conflict"))
}
