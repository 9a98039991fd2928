package wire_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator"
)

// Budgets per host (issue 46 item 5), against CouchDB 3.5: with
// [replicator] max_jobs_per_host 1, set at run time, a second replication
// with CouchDB as an endpoint waits while the first runs, pending with the
// stall budget naming CouchDB's host, and runs once the first is paused (a
// paused replication gives its place back). A value out of range is
// refused with the key named.
func TestHostBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	for _, db := range []string{"hb-src1", "hb-src2"} {
		couch.CreateDB(t, db)
		for i := range 5 {
			couch.PutDoc(t, db, map[string]any{"_id": fmt.Sprintf("d%d", i)})
		}
	}
	e := newService(t)
	path := "/_node/_local/_config/replicator/max_jobs_per_host"
	r := e.do("PUT", path, asAdmin, `"-1"`)
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "max_jobs_per_host")
	require.Equal(t, 200, e.do("PUT", path, asAdmin, strconv.Quote("1")).Status)
	testutil.Eventually(t, "the budget applied by the replication node", func() bool {
		return e.node.Config().MaxJobsPerHost == 1
	})

	first := map[string]any{"source": couch.AuthDBURL("hb-src1"), "target": couch.AuthDBURL("hb-tgt1"),
		"create_target": true, "continuous": true}
	r = e.do("PUT", "/_replicator/first", asAdmin, first)
	require.Equal(t, 201, r.Status, r.Raw)
	e.waitDocState("_replicator", "first", "running")

	second := map[string]any{"source": couch.AuthDBURL("hb-src2"), "target": couch.AuthDBURL("hb-tgt2"), "create_target": true}
	require.Equal(t, 201, e.do("PUT", "/_replicator/second", asAdmin, second).Status)
	var stall map[string]any
	testutil.Eventually(t, "the second replication held back by CouchDB's budget", func() bool {
		v := e.do("GET", "/_scheduler/docs/_replicator/second", asAdmin, nil)
		info, _ := v.Body["info"].(map[string]any)
		stall, _ = info["stall"].(map[string]any)
		return v.Body["state"] == "pending" && stall != nil && stall["reason"] == "budget"
	})
	require.Equal(t, replicator.HostOf(couch.URL()), stall["host"], "%v", stall)
	require.Contains(t, stall["detail"], "max_jobs_per_host")
	require.LessOrEqual(t, docCount(couch.AuthDBURL("hb-tgt2")), 0, "nothing replicated while held back (-1: not even created)")

	// The first one paused gives its place to the second.
	first["_rev"], first["paused"] = r.Body["rev"], true
	require.Equal(t, 201, e.do("PUT", "/_replicator/first", asAdmin, first).Status)
	e.waitDocState("_replicator", "second", "completed")
	require.Equal(t, 5, docCount(couch.AuthDBURL("hb-tgt2")))
}

// Budgets of requests per host, and per host and user (issue 46 item 5),
// against CouchDB 3.5 behind a proxy that counts what reaches it: with
// [replicator] max_requests_per_host_per_sec 5 (or
// max_requests_per_host_user_per_sec 5, the replication logging in as
// CouchDB's admin), a one-shot replication whose source and target are on
// that host sends at most 5 requests a second on average (and a second's
// worth at once), so its requests take their time, counted in
// _prometheus as they wait; it completes, whole.
func TestHostRequestBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.CreateDB(t, "rb-src")
	for i := range 40 {
		couch.PutDoc(t, "rb-src", map[string]any{"_id": fmt.Sprintf("d%02d", i)})
	}
	target, err := url.Parse(couch.URL())
	require.NoError(t, err)
	for _, key := range []string{"max_requests_per_host_per_sec", "max_requests_per_host_user_per_sec"} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var seen []time.Time
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/_session" {
					mu.Lock()
					seen = append(seen, time.Now())
					mu.Unlock()
				}
				httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
			}))
			t.Cleanup(proxy.Close)
			viaProxy := func(db string) string {
				u, err := url.Parse(couch.AuthDBURL(db))
				require.NoError(t, err)
				u.Host = strings.TrimPrefix(proxy.URL, "http://")
				return u.String()
			}

			const rate = 5
			e := newService(t, func(m map[string]map[string]string) {
				m["replicator"][key] = strconv.Itoa(rate)
				m["replicator"]["deny_loopback_endpoints"] = "false"
			})
			tgt := "rb-tgt-" + strings.ReplaceAll(key, "_", "-")
			r := e.do("PUT", "/_replicator/paced", asAdmin, map[string]any{"source": viaProxy("rb-src"), "target": viaProxy(tgt),
				"create_target": true, "worker_batch_size": 5})
			require.Equal(t, 201, r.Status, r.Raw)
			e.waitDocState("_replicator", "paced", "completed")
			require.Equal(t, 40, docCount(couch.AuthDBURL(tgt)))
			m := e.do("GET", "/_node/_local/_prometheus", asAdmin, nil)
			require.Equal(t, 200, m.Status)
			require.Regexp(t, `(?m)^couchdb_couch_replicator_budget_request_waits_total [1-9]`, m.Raw, "the requests that waited counted")

			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, seen)
			took := seen[len(seen)-1].Sub(seen[0]).Seconds()
			require.LessOrEqual(t, float64(len(seen)), rate*(took+1)+1, "%d requests in %.1f s", len(seen), took)
			require.Greater(t, len(seen), 2*rate, "enough requests to see the budget")
			t.Logf("%d requests in %.1f s (budget %d a second)", len(seen), took, rate)
		})
	}
}
