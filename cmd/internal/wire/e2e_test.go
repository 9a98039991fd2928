package wire_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// TestSeedExamples runs the CouchDB replicator documentation's examples
// against real CouchDB 3.5 peers through the HTTP API.
func TestSeedExamples(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB peers")
	}
	// Peers first: cleanups run in reverse, so the node stops while they
	// still answer.
	src := couchtest.StartCouchDB(t)
	tgt := couchtest.StartCouchDB(t)
	e := newService(t)
	src.CreateDB(t, "foo")
	src.AddDocs(t, "foo", 0, 20)

	// 2.2.1: a continuous replication with basic auth in an auth object
	// and create_target.
	myRep := map[string]any{
		"source": src.AuthDBURL("foo"),
		"target": map[string]any{
			"url":  tgt.AuthDBURL("bar"),
			"auth": map[string]any{"basic": map[string]any{"username": couchtest.CouchAdmin, "password": couchtest.CouchPassword}},
		},
		"create_target": true,
		"continuous":    true,
	}
	r := e.do("PUT", "/_replicator/my_rep", asAdmin, myRep)
	require.Equal(t, 201, r.Status, r.Raw)
	d := e.waitDocState("_replicator", "my_rep", "running")
	require.Equal(t, "_replicator", d["database"])
	require.Equal(t, float64(0), d["error_count"])
	require.Contains(t, d["id"], "+continuous+create_target")
	testutil.Eventually(t, "20 docs in the target", func() bool { return docCount(tgt.AuthDBURL("bar")) == 20 })
	r = e.do("GET", "/_scheduler/jobs", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, r.Body["total_rows"])
	job := r.Body["jobs"].([]any)[0].(map[string]any)
	require.Equal(t, "my_rep", job["doc_id"])
	require.Equal(t, d["id"], job["id"])
	require.NotContains(t, r.Raw, "pass")
	r = e.do("GET", "/_scheduler/jobs/"+url.PathEscape(d["id"].(string)), asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	requireError(t, e.do("GET", "/_scheduler/jobs/nope", asAdmin, nil), 404, "not_found")
	testutil.Eventually(t, "an active task", func() bool {
		r := e.do("GET", "/_active_tasks", asAdmin, nil)
		return r.Status == 200 && len(r.List) == 1
	})

	// 2.2.2: a second document describing the same replication fails.
	dup := map[string]any{
		"source": src.AuthDBURL("foo"), "target": myRep["target"], "create_target": true, "continuous": true,
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/my_rep_dup", asAdmin, dup).Status)
	d = e.waitDocState("_replicator", "my_rep_dup", "failed")
	require.Contains(t, fmt.Sprint(d["info"]), "already started")
	require.Equal(t, "duplicate_job", d["info"].(map[string]any)["error"], "the info names the error")
	r = e.do("GET", "/_scheduler/docs/_replicator?states=failed", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, len(r.Body["docs"].([]any)))
	requireError(t, e.do("GET", "/_scheduler/docs?states=bogus", asAdmin, nil), 400, "query_parse_error")
	requireError(t, e.do("GET", "/_scheduler/docs?limit=x", asAdmin, nil), 400, "query_parse_error")
	// CouchDB's names whatever their case, and 3.x's states of documents
	// without a job yet, which none is here.
	r = e.do("GET", "/_scheduler/docs?states=FAILED,error", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, r.Body["total_rows"])
	for _, states := range []string{"error", "initializing", "initializing,error"} {
		r = e.do("GET", "/_scheduler/docs/_replicator?states="+states, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, map[string]any{"total_rows": 0.0, "offset": 0.0, "docs": []any{}}, r.Body, states)
	}

	// A crashing replication: the source is missing.
	crash := map[string]any{"source": src.AuthDBURL("missing"), "target": tgt.AuthDBURL("bar"), "continuous": true}
	require.Equal(t, 201, e.do("PUT", "/_replicator/my_rep_crashing", asAdmin, crash).Status)
	d = e.waitDocState("_replicator", "my_rep_crashing", "crashing")
	require.NotContains(t, fmt.Sprint(d), "pass")
	// The log says why, and when the job is retried.
	crashed := e.logs.WaitFor(t, "replication crashed", func(m map[string]any) bool { return m["doc_id"] == "my_rep_crashing" })
	require.Equal(t, "db_not_found", crashed["error"])
	require.Contains(t, crashed["reason"], "could not open")
	require.Contains(t, crashed, "retry_at")

	// 2.2.6: deleting the document cancels the replication.
	rev := e.do("GET", "/_replicator/my_rep", asAdmin, nil).Body["_rev"].(string)
	require.Equal(t, 200, e.do("DELETE", "/_replicator/my_rep?rev="+rev, asAdmin, nil).Status)
	requireError(t, e.do("GET", "/_scheduler/docs/_replicator/my_rep", asAdmin, nil), 404, "not_found")

	// 2.2.9: another replicator database, then deleting it stops its jobs.
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator/", asAdmin, nil).Status)
	repX := map[string]any{"source": src.AuthDBURL("foo"), "target": tgt.AuthDBURL("foo_x"), "create_target": true, "continuous": true}
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator/rep_from_X", asAdmin, repX).Status)
	e.waitDocState("another/_replicator", "rep_from_X", "running")
	// Unescaped slashes work in _scheduler/docs too.
	require.Equal(t, 200, e.do("GET", "/_scheduler/docs/another/_replicator/rep_from_X", asAdmin, nil).Status)
	require.Equal(t, 200, e.do("DELETE", "/another%2F_replicator/", asAdmin, nil).Status)
	testutil.Eventually(t, "rep_from_X gone", func() bool {
		r := e.do("GET", "/_scheduler/jobs", asAdmin, nil)
		return !strings.Contains(r.Raw, "rep_from_X")
	})

	// A one-shot replication document completes and the node writes
	// "completed" into it through the document store.
	once := map[string]any{"source": src.AuthDBURL("foo"), "target": tgt.AuthDBURL("once"), "create_target": true}
	r = e.do("PUT", "/_replicator/once", asAlice, once)
	require.Equal(t, 201, r.Status, r.Raw)
	e.waitDocState("_replicator", "once", "completed")
	testutil.Eventually(t, "completed state in the doc", func() bool {
		return e.do("GET", "/_replicator/once", asAlice, nil).Body["_replication_state"] == "completed"
	})
	doc := e.do("GET", "/_replicator/once", asAlice, nil).Body
	require.NotEmpty(t, doc["_replication_state_time"])
	require.NotNil(t, doc["_replication_stats"])
	require.Equal(t, aliceName, doc["owner"])
	require.Len(t, tgt.AllDocs(t, "once", false), 20)

	// Metrics reach _stats and _prometheus.
	r = e.do("GET", "/_node/_local/_stats", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, r.Body, "couch_replicator")
	r = e.do("GET", "/_node/_local/_prometheus", asAdmin, nil)
	require.Contains(t, r.Raw, "couchdb_couch_replicator_jobs_adds_total")
	require.Contains(t, r.Raw, "couchdb_httpd_requests_total")

	// No credential in any log line.
	require.NotContains(t, e.logs.String(), "pass\"")
	require.NotContains(t, e.logs.String(), ":pass@")
}

// TestReplicateEndpoint runs POST /_replicate: one-shot (200 with the
// checkpoint history), continuous (202), cancel (200), errors.
func TestReplicateEndpoint(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB peers")
	}
	src := couchtest.StartCouchDB(t)
	tgt := couchtest.StartCouchDB(t)
	e := newService(t)
	src.CreateDB(t, "a")
	src.AddDocs(t, "a", 0, 10)

	requireError(t, e.do("POST", "/_replicate", anon, map[string]any{"source": src.AuthDBURL("a")}), 401, "unauthorized")
	requireError(t, e.do("POST", "/_replicate", asAlice, "{}", "Content-Type", "text/plain"), 415, "bad_content_type")
	requireError(t, e.do("POST", "/_replicate", asAlice, map[string]any{"source": src.AuthDBURL("a")}), 400, "bad_request")
	requireError(t, e.do("POST", "/_replicate", asAlice, map[string]any{"source": src.AuthDBURL("a"), "target": tgt.AuthDBURL("b"), "continuous": "yes"}), 400, "bad_request")

	r := e.do("POST", "/_replicate", asAlice, map[string]any{"source": src.AuthDBURL("a"), "target": tgt.AuthDBURL("b"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["ok"])
	require.NotEmpty(t, r.Body["history"])
	require.Len(t, tgt.AllDocs(t, "b", false), 10)

	spec := map[string]any{"source": src.AuthDBURL("a"), "target": tgt.AuthDBURL("c"), "create_target": true, "continuous": true}
	r = e.do("POST", "/_replicate", asAlice, spec)
	require.Equal(t, 202, r.Status, r.Raw)
	id := r.Body["_local_id"].(string)
	require.Contains(t, id, "+continuous")
	// Bob may not cancel Alice's replication, nor learn that it exists;
	// she may.
	spec["cancel"] = true
	requireError(t, e.do("POST", "/_replicate", asBob, map[string]any{"replication_id": id, "cancel": true}), 404, "not_found")
	r = e.do("POST", "/_replicate", asAlice, spec)
	require.Equal(t, 200, r.Status, r.Raw)
	requireError(t, e.do("POST", "/_replicate", asAlice, spec), 404, "not_found")
}
