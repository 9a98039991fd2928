package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// e2eEnv is a frontend wired to the real replicator with one replication
// node, all on one store: the whole service in one process.
type e2eEnv struct {
	*testEnv
	node *replicator.Node
}

func e2eConfig() replicator.Config {
	return replicator.Config{
		Interval: 100 * time.Millisecond, MinRunTime: 1, StartupJitter: 50 * time.Millisecond,
		MaxJobs: 10, MaxChurn: 10, MaxAcceptors: 2,
		MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second, HealthThreshold: time.Minute,
		JobTimeout: 5 * time.Second, StatsUpdateInterval: 100 * time.Millisecond,
		TransientJobMaxAge: time.Hour, ShutdownTimeout: 5 * time.Second, NodeName: "node1@127.0.0.1",
	}
}

func startJobs(t *testing.T, db kv.Database) *fdbjobs.Client {
	t.Helper()
	c, err := fdbjobs.New(db, fdbjobs.Config{ActivityMonitorMaxJitter: 100 * time.Millisecond, NotifierHoldoff: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c
}

func newE2E(t *testing.T) *e2eEnv {
	t.Helper()
	var node *replicator.Node
	env := newEnv(t, func(o *Options) {
		cfg := e2eConfig()
		cfg.Metrics = replicator.NewMetrics()
		cfg.DocUpdater = NewDocStore(o.DB, nil)
		fe, err := replicator.NewFrontend(o.DB, startJobs(t, o.DB), cfg)
		require.NoError(t, err)
		WithReplicator(o, fe)
		node, err = replicator.NewNode(o.DB, startJobs(t, o.DB), nil, cfg)
		require.NoError(t, err)
		require.NoError(t, node.Start(context.Background()))
		t.Cleanup(node.Stop)
	})
	return &e2eEnv{testEnv: env, node: node}
}

// docCount returns a peer database's doc_count, or -1 when it cannot be
// read (yet).
func docCount(dbURL string) int {
	res, err := http.Get(dbURL)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	var info struct {
		DocCount *int `json:"doc_count"`
	}
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&info) != nil || info.DocCount == nil {
		return -1
	}
	return *info.DocCount
}

// waitFor polls cond until it holds (bounded; the replication runs in the
// background).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *e2eEnv) waitDocState(db, id string, states ...string) map[string]any {
	e.t.Helper()
	var last map[string]any
	waitFor(e.t, fmt.Sprintf("%s/%s in %v", db, id, states), func() bool {
		r := e.do("GET", "/_scheduler/docs/"+url.PathEscape(db)+"/"+url.PathEscape(id), asAdmin, nil)
		last = r.body
		for _, s := range states {
			if r.status == 200 && r.body["state"] == s {
				return true
			}
		}
		return false
	})
	return last
}

// TestSeedExamples runs the CouchDB replicator documentation's examples
// against real pouchdb-server peers through the HTTP API.
func TestSeedExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pouchdb-server peers")
	}
	// Peers first: cleanups run in reverse, so the node stops while they
	// still answer.
	src := couchtest.StartPouchDB(t)
	tgt := couchtest.StartPouchDB(t, couchtest.WithAdmin("user", "pass"))
	e := newE2E(t)
	src.CreateDB(t, "foo")
	src.AddDocs(t, "foo", 0, 20)

	// 2.2.1: a continuous replication with basic auth in an auth object
	// and create_target.
	myRep := map[string]any{
		"source": src.DBURL("foo"),
		"target": map[string]any{
			"url":  tgt.DBURL("bar"),
			"auth": map[string]any{"basic": map[string]any{"username": "user", "password": "pass"}},
		},
		"create_target": true,
		"continuous":    true,
	}
	r := e.do("PUT", "/_replicator/my_rep", asAdmin, myRep)
	require.Equal(t, 201, r.status, r.raw)
	d := e.waitDocState("_replicator", "my_rep", "running")
	require.Equal(t, "_replicator", d["database"])
	require.Equal(t, float64(0), d["error_count"])
	require.Contains(t, d["id"], "+continuous+create_target")
	waitFor(t, "20 docs in the target", func() bool { return docCount(tgt.AuthDBURL("bar")) == 20 })
	r = e.do("GET", "/_scheduler/jobs", asAdmin, nil)
	require.Equal(t, 200, r.status, r.raw)
	require.EqualValues(t, 1, r.body["total_rows"])
	job := r.body["jobs"].([]any)[0].(map[string]any)
	require.Equal(t, "my_rep", job["doc_id"])
	require.Equal(t, d["id"], job["id"])
	require.NotContains(t, r.raw, "pass")
	r = e.do("GET", "/_scheduler/jobs/"+url.PathEscape(d["id"].(string)), asAdmin, nil)
	require.Equal(t, 200, r.status, r.raw)
	requireError(t, e.do("GET", "/_scheduler/jobs/nope", asAdmin, nil), 404, "not_found")
	waitFor(t, "an active task", func() bool {
		r := e.do("GET", "/_active_tasks", asAdmin, nil)
		return r.status == 200 && len(r.list) == 1
	})

	// 2.2.2: a second document describing the same replication fails.
	dup := map[string]any{
		"source": src.DBURL("foo"), "target": myRep["target"], "create_target": true, "continuous": true,
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/my_rep_dup", asAdmin, dup).status)
	d = e.waitDocState("_replicator", "my_rep_dup", "failed")
	require.Contains(t, fmt.Sprint(d["info"]), "already started")
	r = e.do("GET", "/_scheduler/docs/_replicator?states=failed", asAdmin, nil)
	require.Equal(t, 200, r.status, r.raw)
	require.EqualValues(t, 1, len(r.body["docs"].([]any)))
	requireError(t, e.do("GET", "/_scheduler/docs?states=bogus", asAdmin, nil), 400, "query_parse_error")
	requireError(t, e.do("GET", "/_scheduler/docs?limit=x", asAdmin, nil), 400, "query_parse_error")

	// A crashing replication: the source is missing.
	crash := map[string]any{"source": src.DBURL("missing"), "target": tgt.AuthDBURL("bar"), "continuous": true}
	require.Equal(t, 201, e.do("PUT", "/_replicator/my_rep_crashing", asAdmin, crash).status)
	d = e.waitDocState("_replicator", "my_rep_crashing", "crashing")
	require.NotContains(t, fmt.Sprint(d), "pass")

	// 2.2.6: deleting the document cancels the replication.
	rev := e.do("GET", "/_replicator/my_rep", asAdmin, nil).body["_rev"].(string)
	require.Equal(t, 200, e.do("DELETE", "/_replicator/my_rep?rev="+rev, asAdmin, nil).status)
	requireError(t, e.do("GET", "/_scheduler/docs/_replicator/my_rep", asAdmin, nil), 404, "not_found")

	// 2.2.9: another replicator database, then deleting it stops its jobs.
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator/", asAdmin, nil).status)
	repX := map[string]any{"source": src.DBURL("foo"), "target": tgt.AuthDBURL("foo_x"), "create_target": true, "continuous": true}
	require.Equal(t, 201, e.do("PUT", "/another%2F_replicator/rep_from_X", asAdmin, repX).status)
	e.waitDocState("another/_replicator", "rep_from_X", "running")
	// Unescaped slashes work in _scheduler/docs too.
	require.Equal(t, 200, e.do("GET", "/_scheduler/docs/another/_replicator/rep_from_X", asAdmin, nil).status)
	require.Equal(t, 200, e.do("DELETE", "/another%2F_replicator/", asAdmin, nil).status)
	waitFor(t, "rep_from_X gone", func() bool {
		r := e.do("GET", "/_scheduler/jobs", asAdmin, nil)
		return !strings.Contains(r.raw, "rep_from_X")
	})

	// A one-shot replication document completes and the node writes
	// "completed" into it through the DocStore.
	once := map[string]any{"source": src.DBURL("foo"), "target": tgt.AuthDBURL("once"), "create_target": true}
	r = e.do("PUT", "/_replicator/once", asAlice, once)
	require.Equal(t, 201, r.status, r.raw)
	e.waitDocState("_replicator", "once", "completed")
	waitFor(t, "completed state in the doc", func() bool {
		return e.do("GET", "/_replicator/once", asAlice, nil).body["_replication_state"] == "completed"
	})
	doc := e.do("GET", "/_replicator/once", asAlice, nil).body
	require.NotEmpty(t, doc["_replication_state_time"])
	require.NotNil(t, doc["_replication_stats"])
	require.Equal(t, aliceName, doc["owner"])
	require.Len(t, tgt.AllDocs(t, "once", false), 20)

	// Metrics reach _stats and _prometheus.
	r = e.do("GET", "/_node/_local/_stats", asAdmin, nil)
	require.Equal(t, 200, r.status)
	require.Contains(t, r.body, "couch_replicator")
	r = e.do("GET", "/_node/_local/_prometheus", asAdmin, nil)
	require.Contains(t, r.raw, "couchdb_couch_replicator_jobs_adds_total")
	require.Contains(t, r.raw, "couchdb_httpd_requests_total")

	// No credential in any log line.
	require.NotContains(t, e.logs.String(), "pass\"")
	require.NotContains(t, e.logs.String(), ":pass@")
}

// TestReplicateEndpoint runs POST /_replicate: one-shot (200 with the
// checkpoint history), continuous (202), cancel (200), errors.
func TestReplicateEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pouchdb-server peers")
	}
	src := couchtest.StartPouchDB(t)
	tgt := couchtest.StartPouchDB(t)
	e := newE2E(t)
	src.CreateDB(t, "a")
	src.AddDocs(t, "a", 0, 10)

	requireError(t, e.do("POST", "/_replicate", anon, map[string]any{"source": src.DBURL("a")}), 401, "unauthorized")
	requireError(t, e.do("POST", "/_replicate", asAlice, "{}", "Content-Type", "text/plain"), 415, "bad_content_type")
	requireError(t, e.do("POST", "/_replicate", asAlice, map[string]any{"source": src.DBURL("a")}), 400, "bad_request")
	requireError(t, e.do("POST", "/_replicate", asAlice, map[string]any{"source": src.DBURL("a"), "target": tgt.DBURL("b"), "continuous": "yes"}), 400, "bad_request")

	r := e.do("POST", "/_replicate", asAlice, map[string]any{"source": src.DBURL("a"), "target": tgt.DBURL("b"), "create_target": true})
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, true, r.body["ok"])
	require.NotEmpty(t, r.body["history"])
	require.Len(t, tgt.AllDocs(t, "b", false), 10)

	spec := map[string]any{"source": src.DBURL("a"), "target": tgt.DBURL("c"), "create_target": true, "continuous": true}
	r = e.do("POST", "/_replicate", asAlice, spec)
	require.Equal(t, 202, r.status, r.raw)
	id := r.body["_local_id"].(string)
	require.Contains(t, id, "+continuous")
	// Bob may not cancel Alice's replication; she may.
	spec["cancel"] = true
	requireError(t, e.do("POST", "/_replicate", asBob, map[string]any{"replication_id": id, "cancel": true}), 401, "unauthorized")
	r = e.do("POST", "/_replicate", asAlice, spec)
	require.Equal(t, 200, r.status, r.raw)
	requireError(t, e.do("POST", "/_replicate", asAlice, spec), 404, "not_found")
}
