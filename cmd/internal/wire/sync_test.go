package wire_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// Is it in sync? Against a real CouchDB 3.5, a continuous replication's
// _scheduler/docs row says caught_up once it has copied its source,
// turns false when new changes come and true again once they are copied;
// a target that refuses every document shows the stall
// target_refusing_writes; a target nobody listens at shows
// target_unreachable while the run retries, then backing_off until its
// retry, which POST /_scheduler/jobs/{id}/_retry brings forward.
func TestInSync(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	e := newServiceWith(t, func(c *scheduler.Config) {
		c.ProgressInterval = 50 * time.Millisecond
		// A crash backs off for an hour: only a retry on request runs
		// the job again within the test.
		c.MinBackoff, c.MaxBackoff = time.Hour, 2*time.Hour
	})
	info := func(doc string) map[string]any {
		r := e.do("GET", "/_scheduler/docs/_replicator/"+doc, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		i, _ := r.Body["info"].(map[string]any)
		if r.Body["state"] != "running" || i == nil {
			return nil
		}
		return i
	}

	t.Run("caught up, behind, caught up again", func(t *testing.T) {
		couch.CreateDB(t, "src")
		couch.AddDocs(t, "src", 0, 100)
		// Small batches, one worker: new changes take a while to copy.
		r := e.do("PUT", "/_replicator/live", asAdmin, map[string]any{"source": couch.AuthDBURL("src"),
			"target": couch.AuthDBURL("tgt"), "create_target": true, "continuous": true,
			"worker_processes": 1, "worker_batch_size": 10})
		require.Equal(t, 201, r.Status, r.Raw)
		var first map[string]any
		testutil.Eventually(t, "caught up with 100 documents", func() bool {
			first = info("live")
			return first != nil && first["caught_up"] == true
		})
		t.Logf("caught up: %v", first)
		require.Equal(t, float64(100), first["docs_written"])
		require.Equal(t, float64(0), first["eta_sec"])
		require.Nil(t, first["stall"])
		require.NotNil(t, first["caught_up_since"])
		require.NotNil(t, first["last_progress"])

		couch.AddDocs(t, "src", 100, 2000)
		var behind map[string]any
		testutil.Eventually(t, "behind after 2,000 new documents", func() bool {
			behind = info("live")
			return behind != nil && behind["caught_up"] == false
		})
		t.Logf("behind: %v", behind)
		require.Nil(t, behind["caught_up_since"])
		var again map[string]any
		testutil.Eventually(t, "caught up again", func() bool {
			again = info("live")
			return again != nil && again["caught_up"] == true && again["docs_written"] == float64(2100)
		})
		t.Logf("caught up again: %v", again)
		require.GreaterOrEqual(t, again["caught_up_since"], first["caught_up_since"])
		require.Greater(t, again["throughput"], float64(0))
		require.Nil(t, again["stall"])
	})

	t.Run("target refusing writes", func(t *testing.T) {
		couch.CreateDB(t, "few")
		couch.AddDocs(t, "few", 0, 5)
		couch.CreateDB(t, "guarded")
		couch.PutDoc(t, "guarded", map[string]any{"_id": "_design/guard", "validate_doc_update": `function(doc) {
			if (doc._id.indexOf("doc-") === 0) { throw({forbidden: "no documents today"}); }
		}`})
		r := e.do("PUT", "/_replicator/refused", asAdmin, map[string]any{"source": couch.AuthDBURL("few"),
			"target": couch.AuthDBURL("guarded"), "continuous": true})
		require.Equal(t, 201, r.Status, r.Raw)
		var i map[string]any
		testutil.Eventually(t, "the stall of a refusing target", func() bool {
			i = info("refused")
			return i != nil && i["stall"] != nil && i["doc_write_failures"] == float64(5)
		})
		t.Logf("refused: %v", i)
		stall := i["stall"].(map[string]any)
		require.Equal(t, "target_refusing_writes", stall["reason"])
		require.Contains(t, stall["detail"], "403 forbidden: no documents today")
		// Each refused document, in the views of the job.
		var failed []any
		testutil.Eventually(t, "the refused documents listed", func() bool {
			failed, _ = info("refused")["failed_docs"].([]any)
			return len(failed) == 5
		})
		var ids []string // in the order the workers met them
		for _, f := range failed {
			f := f.(map[string]any)
			ids = append(ids, f["id"].(string))
			require.Equal(t, float64(403), f["status"])
			require.Equal(t, "forbidden", f["error"])
			require.Equal(t, "no documents today", f["reason"])
			require.NotEmpty(t, f["rev"])
			require.NotEmpty(t, f["time"])
		}
		require.ElementsMatch(t, []string{"doc-00000000", "doc-00000001", "doc-00000002", "doc-00000003", "doc-00000004"}, ids)
		r = e.do("GET", "/_scheduler/docs/_replicator/refused", asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		r = e.do("GET", "/_scheduler/jobs/"+r.Body["id"].(string), asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Len(t, r.Body["info"].(map[string]any)["failed_docs"], 5)
		// Lists leave them out (a page would read them for every row).
		r = e.do("GET", "/_scheduler/docs/_replicator", asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		for _, row := range r.Body["docs"].([]any) {
			if i, ok := row.(map[string]any)["info"].(map[string]any); ok {
				require.NotContains(t, i, "failed_docs")
			}
		}
	})

	t.Run("target unreachable, then backing off", func(t *testing.T) {
		// A port nobody listens at: taken, then let go.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		name, pass := couch.Admin()
		nowhere := fmt.Sprintf("http://%s:%s@%s/nowhere", name, pass, addr)
		require.NoError(t, l.Close())
		couch.CreateDB(t, "lonely")
		couch.AddDocs(t, "lonely", 0, 3)
		r := e.do("PUT", "/_replicator/unreachable", asAdmin, map[string]any{"source": couch.AuthDBURL("lonely"),
			"target": nowhere, "create_target": true, "continuous": true, "retries_per_request": 3})
		require.Equal(t, 201, r.Status, r.Raw)
		var i map[string]any
		testutil.Eventually(t, "the stall of an unreachable target", func() bool {
			i = info("unreachable")
			return i != nil && i["stall"] != nil
		})
		t.Logf("unreachable: %v", i)
		stall := i["stall"].(map[string]any)
		require.Equal(t, "target_unreachable", stall["reason"])
		require.Contains(t, stall["detail"], "of 4")
		var row map[string]any
		testutil.Eventually(t, "crashing, backing off", func() bool {
			r := e.do("GET", "/_scheduler/docs/_replicator/unreachable", asAdmin, nil)
			row = r.Body
			return r.Body["state"] == "crashing"
		})
		t.Logf("crashing: %v", row)
		stall = row["info"].(map[string]any)["stall"].(map[string]any)
		require.Equal(t, "backing_off", stall["reason"])
		require.NotEmpty(t, stall["until"])
		require.Equal(t, float64(1), row["error_count"])

		// Retry now: for its owner and admins only, and only while it
		// crashes.
		retry := "/_scheduler/jobs/" + row["id"].(string) + "/_retry"
		r = e.do("POST", retry, asBob, nil)
		require.Equal(t, 404, r.Status, r.Raw)
		r = e.do("POST", retry, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, true, r.Body["ok"])
		require.Equal(t, row["id"], r.Body["id"])
		testutil.Eventually(t, "run again at once, crashed again", func() bool {
			r := e.do("GET", "/_scheduler/docs/_replicator/unreachable", asAdmin, nil)
			row = r.Body
			return r.Body["error_count"] == float64(2)
		})
		t.Logf("retried: %v", row)
		// A running job has no backoff to end.
		r = e.do("GET", "/_scheduler/docs/_replicator/live", asAdmin, nil)
		require.Equal(t, "running", r.Body["state"])
		r = e.do("POST", "/_scheduler/jobs/"+r.Body["id"].(string)+"/_retry", asAdmin, nil)
		require.Equal(t, 409, r.Status, r.Raw)
		require.Equal(t, "conflict", r.Body["error"])
		r = e.do("POST", "/_scheduler/jobs/no-such-job/_retry", asAdmin, nil)
		require.Equal(t, 404, r.Status, r.Raw)

		// The host answers again (CouchDB, behind a proxy on that port):
		// the node that crashed the job probes it at its next interval
		// and ends the backoff (an hour long) at once.
		l, err = net.Listen("tcp", addr)
		require.NoError(t, err)
		base, err := url.Parse(couch.URL())
		require.NoError(t, err)
		srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(base), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		back := time.Now()
		testutil.Eventually(t, "running again once its host answers", func() bool {
			r := e.do("GET", "/_scheduler/docs/_replicator/unreachable", asAdmin, nil)
			row = r.Body
			i, _ := r.Body["info"].(map[string]any)
			return r.Body["state"] == "running" && i != nil && i["docs_written"] == float64(3)
		})
		t.Logf("running again %v after its host answered: %v", time.Since(back).Round(time.Millisecond), row)
		require.Equal(t, 3, docCount(couch.AuthDBURL("nowhere")))
	})

	// stallOf waits for doc's stall to have reason, and returns it.
	stallOf := func(t *testing.T, doc, reason string) map[string]any {
		t.Helper()
		var st map[string]any
		testutil.Eventually(t, doc+"'s stall "+reason, func() bool {
			st, _ = info(doc)["stall"].(map[string]any)
			return st != nil && st["reason"] == reason
		})
		t.Logf("%s: %v", doc, st)
		return st
	}

	t.Run("source unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		gone := fmt.Sprintf("http://%s/gone", l.Addr())
		require.NoError(t, l.Close())
		r := e.do("PUT", "/_replicator/nosource", asAdmin, map[string]any{"source": gone,
			"target": couch.AuthDBURL("tgt"), "continuous": true, "retries_per_request": 3})
		require.Equal(t, 201, r.Status, r.Raw)
		st := stallOf(t, "nosource", "source_unreachable")
		require.Contains(t, st["detail"], "connection refused")
	})

	t.Run("retrying, then moving again", func(t *testing.T) {
		// The target answers 503 to writes until told otherwise.
		var refuse atomic.Bool
		refuse.Store(true)
		proxy := faultProxy(t, couch.URL(), func(w http.ResponseWriter, r *http.Request) bool {
			if refuse.Load() && strings.HasSuffix(r.URL.Path, "/_bulk_docs") {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error":"service_unavailable","reason":"busy"}`))
				return true
			}
			return false
		})
		couch.CreateDB(t, "busysrc")
		couch.AddDocs(t, "busysrc", 0, 10)
		name, pass := couch.Admin()
		r := e.do("PUT", "/_replicator/busy", asAdmin, map[string]any{"source": couch.AuthDBURL("busysrc"),
			"target": fmt.Sprintf("http://%s:%s@%s/busytgt", name, pass, proxy), "create_target": true,
			"continuous": true, "retries_per_request": 8})
		require.Equal(t, 201, r.Status, r.Raw)
		st := stallOf(t, "busy", "retrying")
		require.Contains(t, st["detail"], "503 service_unavailable")
		require.Contains(t, st["detail"], "of 9")
		require.Contains(t, st["detail"], proxy)
		refuse.Store(false)
		testutil.Eventually(t, "moving again, caught up", func() bool {
			i := info("busy")
			return i != nil && i["stall"] == nil && i["caught_up"] == true && i["docs_written"] == float64(10)
		})
	})

	t.Run("connection stalled", func(t *testing.T) {
		// The target's proxy takes requests for the database and never
		// answers them.
		hang := make(chan struct{})
		t.Cleanup(func() { close(hang) })
		proxy := faultProxy(t, couch.URL(), func(w http.ResponseWriter, r *http.Request) bool {
			if strings.HasPrefix(r.URL.Path, "/silent") {
				select {
				case <-hang:
				case <-r.Context().Done():
				}
				return true
			}
			return false
		})
		name, pass := couch.Admin()
		r := e.do("PUT", "/_replicator/silent", asAdmin, map[string]any{"source": couch.AuthDBURL("busysrc"),
			"target": fmt.Sprintf("http://%s:%s@%s/silent", name, pass, proxy), "continuous": true,
			"connection_timeout": 1000})
		require.Equal(t, 201, r.Status, r.Raw)
		st := stallOf(t, "silent", "connection_stalled")
		require.Contains(t, st["detail"], proxy)
	})

	t.Run("filtering", func(t *testing.T) {
		// A filter that takes its time over each document and passes none:
		// the source reads its changes for seconds, nothing comes.
		couch.CreateDB(t, "sieve")
		couch.PutDoc(t, "sieve", map[string]any{"_id": "_design/f", "filters": map[string]any{
			"none": `function(doc, req) { var t = Date.now(); while (Date.now() - t < 8) {} return false; }`}})
		couch.AddDocs(t, "sieve", 0, 3000)
		r := e.do("PUT", "/_replicator/sieve", asAdmin, map[string]any{"source": couch.AuthDBURL("sieve"),
			"target": couch.AuthDBURL("sieved"), "create_target": true, "continuous": true, "filter": "f/none"})
		require.Equal(t, 201, r.Status, r.Raw)
		st := stallOf(t, "sieve", "filtering")
		require.Contains(t, st["detail"], "none passing")
		i := info("sieve")
		require.Equal(t, false, i["caught_up"])
	})

	t.Run("metrics", func(t *testing.T) {
		// The jobs of the subtests above, per database and state, the
		// largest lag, the refused documents; in Prometheus' format.
		var text string
		testutil.Eventually(t, "the sync metrics", func() bool {
			r := e.do("GET", "/_node/_local/_prometheus", asAdmin, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			text = r.Raw
			return strings.Contains(text, `couchdb_couch_replicator_docs_refused_total{database="_replicator"} 5`) &&
				regexp.MustCompile(`couchdb_couch_replicator_sync_jobs\{database="_replicator",state="caught_up"\} [1-9]`).MatchString(text)
		})
		for _, want := range []string{
			"# TYPE couchdb_couch_replicator_sync_jobs gauge",
			`couchdb_couch_replicator_sync_jobs{database="_replicator",state="behind"} `,
			`couchdb_couch_replicator_sync_jobs{database="_replicator",state="stalled"} `,
			`couchdb_couch_replicator_sync_lag_changes{database="_replicator"} `,
			`couchdb_couch_replicator_sync_lag_seconds{database="_replicator"} `,
			"# TYPE couchdb_couch_replicator_docs_refused_total counter",
		} {
			require.Contains(t, text, want)
		}
		promtoolCheck(t, text, "check", "metrics")
	})

	t.Run("refused documents survive a move", func(t *testing.T) {
		// The node stops; another takes the jobs, and the refusals of the
		// first are still listed, the second's after them.
		e.node.Stop()
		e.addNode("node2@127.0.0.1")
		couch.AddDocs(t, "few", 5, 2)
		var failed []any
		testutil.Eventually(t, "the refusals of both nodes", func() bool {
			r := e.do("GET", "/_scheduler/docs/_replicator/refused", asAdmin, nil)
			i, _ := r.Body["info"].(map[string]any)
			failed, _ = i["failed_docs"].([]any)
			return r.Body["node"] == "node2@127.0.0.1" && len(failed) == 7 && i["doc_write_failures"] == float64(7)
		})
		// The first node's five, then the second's two (each group in the
		// order its workers met them).
		ids := make([]string, len(failed))
		for n, f := range failed {
			ids[n] = f.(map[string]any)["id"].(string)
		}
		require.ElementsMatch(t, []string{"doc-00000000", "doc-00000001", "doc-00000002", "doc-00000003", "doc-00000004"}, ids[:5])
		require.ElementsMatch(t, []string{"doc-00000005", "doc-00000006"}, ids[5:])
	})
}

// faultProxy serves a reverse proxy to base on 127.0.0.1 and returns its
// address: fault handles each request first, and the proxy the requests
// it did not (fault returned false).
func faultProxy(t *testing.T, base string, fault func(http.ResponseWriter, *http.Request) bool) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fault(w, r) {
			rp.ServeHTTP(w, r)
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// promtoolCheck runs promtool with args on input (Debian's prometheus
// package has it; .ci/run installs it), skipping where it is absent. Its
// one complaint allowed is about CouchDB's own counter names without
// "_total" (kept: dashboards made for CouchDB use them).
func promtoolCheck(t *testing.T, input string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is missing: CI must run this check (apt-get install prometheus)")
		}
		t.Log("promtool not found: the text is not checked by it (apt-get install prometheus)")
		return
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		couchName := strings.HasPrefix(line, "couchdb_httpd_request_methods ") || strings.HasPrefix(line, "couchdb_httpd_status_codes ")
		require.True(t, couchName && strings.HasSuffix(line, `counter metrics should have "_total" suffix`),
			"promtool %v: %s", args, out)
	}
}
