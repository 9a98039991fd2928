package wire_test

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// CouchDB 3.5's [replicator] keys and counters, set alike on a real
// CouchDB 3.5 and on a node, through each one's _config API (a change at
// run time): both answer alike, and the node's _stats and Prometheus
// carry CouchDB's counters under CouchDB's names.
func TestCouchDB35ReplicatorKeys(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.EnsureDB(t, "_replicator")
	e := newService(t)
	couchDo := func(t *testing.T, method, path string, body any) resp {
		t.Helper()
		return testutil.Do(t, method, couch.URL()+path, &creds{Name: couchtest.CouchAdmin, Pass: couchtest.CouchPassword}, body)
	}
	// set sets [replicator] key on the node and, with onCouch, on CouchDB,
	// until the test ends. The replication node applies it at its next
	// interval: applied tells when it has.
	set := func(t *testing.T, key, value string, onCouch bool, applied func(scheduler.Config) bool) {
		t.Helper()
		path := "/_node/_local/_config/replicator/" + key
		require.Equal(t, 200, e.do("PUT", path, asAdmin, strconv.Quote(value)).Status)
		t.Cleanup(func() { e.do("DELETE", path, asAdmin, nil) })
		if onCouch {
			require.Equal(t, 200, couchDo(t, "PUT", path, strconv.Quote(value)).Status)
			t.Cleanup(func() { couchDo(t, "DELETE", path, nil) })
		}
		testutil.Eventually(t, "["+key+"] applied by the replication node", func() bool { return applied(e.node.Config()) })
	}
	// both sends a request to CouchDB and to the node, which must answer
	// alike.
	both := func(t *testing.T, method, path string, body any, status int) {
		t.Helper()
		c := couchDo(t, method, path, body)
		require.Equal(t, status, c.Status, "CouchDB: %s", c.Raw)
		f := e.do(method, path, asAdmin, body)
		require.Equal(t, status, f.Status, f.Raw)
		require.Equal(t, c.Body, f.Body)
	}

	t.Run("valid_endpoint_protocols", func(t *testing.T) {
		// A replication written while http was allowed: it crashes (no
		// peer there) and starts again and again.
		r := e.do("PUT", "/_replicator/before", asAdmin, map[string]any{"source": "http://127.0.0.1:1/a",
			"target": "http://127.0.0.1:1/b", "continuous": true, "retries_per_request": 0})
		require.Equal(t, 201, r.Status, r.Raw)
		e.waitDocState("_replicator", "before", "crashing")

		set(t, "valid_endpoint_protocols", "https", true, func(c scheduler.Config) bool {
			return slices.Equal(c.Protocols.Endpoint, []string{"https"})
		})
		set(t, "valid_proxy_protocols", "https,socks5", true, func(c scheduler.Config) bool {
			return slices.Equal(c.Protocols.Proxy, []string{"https", "socks5"})
		})
		// Its next start fails it, as CouchDB fails such a document when
		// it reads it again.
		d := e.waitDocState("_replicator", "before", "failed")
		require.Contains(t, fmt.Sprint(d["info"]), "endpoint has an invalid url")

		https := "https://127.0.0.1:1/"
		for i, doc := range []map[string]any{
			{"source": "http://127.0.0.1:1/a", "target": https + "b"},
			{"source": https + "a", "target": "http://127.0.0.1:1/b"},
			{"source": https + "a", "target": https + "b", "proxy": "http://127.0.0.1:3128"},
			{"source": https + "a", "target": https + "b", "target_proxy": "http://127.0.0.1:3128"},
		} {
			both(t, "PUT", "/_replicator/refused"+strconv.Itoa(i), doc, 403)
			both(t, "POST", "/_replicate", doc, 400)
		}
		r = e.do("PUT", "/_replicator/tls", asAdmin, map[string]any{"source": https + "a", "target": https + "b",
			"proxy": "socks5://127.0.0.1:1080"})
		require.Equal(t, 201, r.Status, r.Raw)
	})

	t.Run("valid_endpoint_protocols_log", func(t *testing.T) {
		insecure := func() float64 {
			var v float64
			r := e.do("GET", "/_node/_local/_stats/couch_replicator/jobs/insecure/value", asAdmin, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			_, err := fmt.Sscan(r.Raw, &v)
			require.NoError(t, err, r.Raw)
			return v
		}
		before := insecure()
		set(t, "valid_endpoint_protocols_log", "true", false, func(c scheduler.Config) bool { return c.Protocols.LogInsecure })
		// Databases of their own: CouchDB's replication id leaves the
		// scheme out, so http://…/a to https://…/b would be the earlier
		// subtest's "tls" replication, and fail as its duplicate if "tls"
		// has started by then.
		r := e.do("PUT", "/_replicator/plain", asAdmin, map[string]any{"source": "http://127.0.0.1:1/plain",
			"target": "https://127.0.0.1:1/plain-target", "ibrowse_options": "[{prefer_ipv6, true}]"})
		require.Equal(t, 201, r.Status, r.Raw)
		e.logs.WaitFor(t, "security warning: replication has an insecure (http) endpoint ([replicator] valid_endpoint_protocols_log)",
			func(m map[string]any) bool {
				return m["doc_id"] == "plain" && m["endpoint"] == "source" && m["url"] == "http://127.0.0.1:1/plain/"
			})
		e.logs.WaitFor(t, "replication field not implemented by fdbrep; ignored", func(m map[string]any) bool {
			return m["doc_id"] == "plain" && m["field"] == "ibrowse_options"
		})
		require.Equal(t, before+1, insecure())
		r = e.do("PUT", "/_replicator/secure", asAdmin, map[string]any{"source": "https://127.0.0.1:1/a",
			"target": "https://127.0.0.1:1/b"})
		require.Equal(t, 201, r.Status, r.Raw)
		require.Equal(t, before+1, insecure(), "https endpoints only")
		_, found := e.logs.Find("security warning: replication has an insecure (http) endpoint ([replicator] valid_endpoint_protocols_log)",
			func(m map[string]any) bool { return m["doc_id"] == "secure" })
		require.False(t, found)
	})

	t.Run("max_document_id_length", func(t *testing.T) {
		set(t, "max_document_id_length", "16", true, func(c scheduler.Config) bool { return c.JobDefaults.MaxDocIDLength == 16 })
		couch.CreateDB(t, "ids")
		for _, id := range []string{"short", "exactly-16-bytes", "seventeen-bytes-x"} {
			couch.PutDoc(t, "ids", map[string]any{"_id": id})
		}
		c := couchDo(t, "POST", "/_replicate", map[string]any{"source": couch.AuthDBURL("ids"),
			"target": couch.AuthDBURL("ids-couch"), "create_target": true})
		require.Equal(t, 200, c.Status, c.Raw)
		f := e.do("POST", "/_replicate", asAdmin, map[string]any{"source": couch.AuthDBURL("ids"),
			"target": couch.AuthDBURL("ids-fdbrep"), "create_target": true})
		require.Equal(t, 200, f.Status, f.Raw)
		ch, fh := c.Body["history"].([]any)[0].(map[string]any), f.Body["history"].([]any)[0].(map[string]any)
		for _, k := range []string{"docs_written", "doc_write_failures", "missing_checked", "missing_found"} {
			require.Equal(t, ch[k], fh[k], k)
		}
		require.Equal(t, float64(1), fh["doc_write_failures"])
		ids := func(db string) []string {
			var out []string
			for _, r := range couch.AllDocs(t, db, false) {
				out = append(out, r.ID)
			}
			return out
		}
		require.Equal(t, []string{"exactly-16-bytes", "short"}, ids("ids-fdbrep"))
		require.Equal(t, ids("ids-couch"), ids("ids-fdbrep"))
	})

	t.Run("request_timeout", func(t *testing.T) {
		// A source that answers nothing for a minute, well within its
		// connection_timeout: request_timeout ends the request.
		set(t, "request_timeout", "500", false, func(c scheduler.Config) bool {
			return c.JobDefaults.RequestTimeout == 500*time.Millisecond
		})
		stalled := couchtest.NewFaultProxy(t, couch.URL(), couchtest.FaultConfig{RateStall: 1, Stall: time.Minute})
		via := strings.Replace(couch.AuthDBURL("ids"), strings.TrimPrefix(couch.URL(), "http://"), strings.TrimPrefix(stalled.URL(), "http://"), 1)
		r := e.do("PUT", "/_replicator/slow", asAdmin, map[string]any{"source": via, "target": couch.AuthDBURL("slow"),
			"connection_timeout": 60000, "retries_per_request": 0})
		require.Equal(t, 201, r.Status, r.Raw)
		d := e.waitDocState("_replicator", "slow", "crashing")
		require.Contains(t, fmt.Sprint(d["info"]), "request_timeout")
	})

	t.Run("counters", func(t *testing.T) {
		// Every request, response, connection and run counter CouchDB's
		// _stats and Prometheus show, the node shows under the same name.
		c := couchDo(t, "GET", "/_node/_local/_stats/couch_replicator", nil)
		require.Equal(t, 200, c.Status, c.Raw)
		cs := c.Body
		f := e.do("GET", "/_node/_local/_stats/couch_replicator", asAdmin, nil)
		require.Equal(t, 200, f.Status, f.Raw)
		ours := regexp.MustCompile(`^(requests|responses|stream_responses|connection|workers_started|worker_deaths|failed_starts|changes_)`)
		value := func(stats map[string]any, path string) (float64, bool) {
			var node any = stats
			for _, p := range strings.Split(path, ".") {
				m, ok := node.(map[string]any)
				if !ok {
					return 0, false
				}
				node = m[p]
			}
			m, ok := node.(map[string]any)
			if !ok || m["type"] != "counter" {
				return 0, false
			}
			v, ok := m["value"].(float64)
			return v, ok
		}
		var names []string
		for k, v := range cs {
			if !ours.MatchString(k) {
				continue
			}
			if _, leaf := v.(map[string]any)["type"]; leaf {
				names = append(names, k)
				continue
			}
			for sub := range v.(map[string]any) {
				names = append(names, k+"."+sub)
			}
		}
		require.Len(t, names, 18, "CouchDB 3.5's counters: %v", names)
		for _, n := range names {
			_, ok := value(f.Body, n)
			require.True(t, ok, "couch_replicator.%s in the node's _stats", n)
		}
		for _, n := range []string{"requests", "responses.success", "stream_responses.success", "connection.creates",
			"connection.acquires", "connection.releases", "failed_starts", "workers_started"} {
			v, _ := value(f.Body, n)
			require.Positive(t, v, "couch_replicator.%s moved", n)
		}

		// Prometheus: CouchDB's names for them (responses_total, …), and
		// the node's per endpoint host.
		c = couchDo(t, "GET", "/_node/_local/_prometheus", nil)
		require.Equal(t, 200, c.Status, c.Raw)
		text := c.Raw
		r := e.do("GET", "/_node/_local/_prometheus", asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		counter := regexp.MustCompile(`(?m)^(couchdb_couch_replicator_(?:requests|responses|stream_responses|connection|workers_started|worker_deaths|failed_starts|changes)[a-z_]*_total) `)
		var promNames []string
		for _, m := range counter.FindAllStringSubmatch(text, -1) {
			promNames = append(promNames, m[1])
		}
		require.Len(t, promNames, 18, "CouchDB 3.5's: %v", promNames)
		for _, n := range promNames {
			require.Regexp(t, `(?m)^`+n+` \d+$`, r.Raw)
		}
		u, err := url.Parse(couch.URL())
		require.NoError(t, err)
		require.Regexp(t, `(?m)^couchdb_couch_replicator_host_requests_total\{host="`+regexp.QuoteMeta(u.Host)+`"\} [1-9]\d*$`, r.Raw)
		require.Regexp(t, `(?m)^couchdb_couch_replicator_host_responses_total\{host="`+regexp.QuoteMeta(u.Host)+`"\} [1-9]\d*$`, r.Raw)
		promtoolCheck(t, r.Raw, "check", "metrics")
	})
}
