package wire_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// slowTarget is a proxy to a CouchDB that answers each _bulk_docs 100 ms
// late (a distant target), so that a replication is still copying when a
// test deletes or cancels it, and counts the _bulk_docs it forwarded.
type slowTarget struct {
	url    string // with the CouchDB's admin credentials
	writes atomic.Int64
}

func newSlowTarget(t *testing.T, couch *couchtest.Server) *slowTarget {
	t.Helper()
	u, err := url.Parse(couch.URL())
	require.NoError(t, err)
	s := &slowTarget{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk_docs") {
			time.Sleep(100 * time.Millisecond) // the peer's latency, not a wait of the test
			s.writes.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	name, pass := couch.Admin()
	s.url = strings.Replace(srv.URL, "://", "://"+url.UserPassword(name, pass).String()+"@", 1)
	return s
}

// A replication deleted or cancelled in the middle of a copy, against a
// real CouchDB 3.5, stops writing as soon as its node hears of it through
// the store's watches: its heartbeats here are a minute apart, so a stop
// within the test's wait is the watch's doing. Its document deleted, the
// node logs the stop with what the run wrote, and the target holds
// exactly that, then no more; a POST /_replicate cancel answers with the
// run's final counters, which are the target's count.
func TestRemovedReplicationStopsWriting(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	e := newServiceWith(t, func(c *scheduler.Config) {
		c.Interval, c.StatsUpdateInterval = time.Minute, time.Minute
	}, func(m map[string]map[string]string) { m["replicator"]["job_timeout_sec"] = "300" })
	couch.CreateDB(t, "src")
	couch.AddDocs(t, "src", 0, 5000)
	slow := newSlowTarget(t, couch)
	spec := func(tgt string) map[string]any {
		return map[string]any{"source": couch.AuthDBURL("src"), "target": slow.url + "/" + tgt, "create_target": true,
			"continuous": true, "worker_processes": 1, "worker_batch_size": 100}
	}
	copying := func(tgt string) {
		t.Helper()
		testutil.Eventually(t, tgt+" being copied", func() bool { return docCount(couch.AuthDBURL(tgt)) >= 300 })
	}

	// Deleted: the node logs the stop, with the run's counters.
	r := e.do("PUT", "/_replicator/del", asAdmin, spec("tgt"))
	require.Equal(t, 201, r.Status, r.Raw)
	rev := r.Body["rev"].(string)
	copying("tgt")
	r = e.do("DELETE", "/_replicator/del?rev="+rev, asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	stop := e.logs.WaitFor(t, "replication stopped", func(m map[string]any) bool { return m["doc_id"] == "del" })
	written := int(stop["docs_written"].(float64))
	writes := slow.writes.Load()
	require.Equal(t, written, docCount(couch.AuthDBURL("tgt")), "the run's counters are what the target took: %v", stop)
	require.Less(t, written, 5000, "the copy was stopped before its end")

	// Cancelled: the answer's counters are the target's count.
	r = e.do("POST", "/_replicate", asAdmin, spec("tgt2"))
	require.Equal(t, 202, r.Status, r.Raw)
	copying("tgt2")
	cancel := spec("tgt2")
	cancel["cancel"] = true
	r = e.do("POST", "/_replicate", asAdmin, cancel)
	require.Equal(t, 200, r.Status, r.Raw)
	stats, _ := r.Body["stats"].(map[string]any)
	require.NotNil(t, stats, "the cancel answers with the run's final counters: %s", r.Raw)
	require.Equal(t, docCount(couch.AuthDBURL("tgt2")), int(stats["docs_written"].(float64)), r.Raw)
	require.Less(t, int(stats["docs_written"].(float64)), 5000, "the copy was stopped before its end")

	// Nothing was written to the deleted replication's target since its
	// stop, while the second replication ran and stopped.
	require.Equal(t, written, docCount(couch.AuthDBURL("tgt")))
	require.Greater(t, slow.writes.Load(), writes, "the second replication wrote through the proxy meanwhile")
}
