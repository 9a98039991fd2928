package replicator_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The replicator's request, connection and run counters are CouchDB's:
// each couch.Count and engine.Count moves the counter of CouchDB's name,
// in _stats (nested as CouchDB nests them) and in Prometheus (named as
// CouchDB's couch_prometheus names them), where the HTTP ones are also
// served per endpoint host, for the first HostSeriesMax hosts, the others
// together as "other".
func TestCouchDBCounters(t *testing.T) {
	m := replicator.NewMetrics()
	for c := range couch.CountMax {
		m.CountHTTP("db.example.com:443", c)
		require.EqualValues(t, 1, m.Value("couch_replicator."+c.Name()), c.Name())
	}
	for c := range engine.CountMax {
		m.CountRun(c)
		require.EqualValues(t, 1, m.Value("couch_replicator."+c.Name()), c.Name())
	}
	for i := range replicator.HostSeriesMax + 5 {
		m.CountHTTP(fmt.Sprintf("h%d.example.com:5984", i), couch.CountRequest)
	}
	m.CountHTTP("db.example.com:443", couch.CountRequest) // an early host keeps its series
	require.EqualValues(t, replicator.HostSeriesMax+7, m.Value(replicator.MetricRequests))

	stats := m.StatsJSON()
	for _, path := range [][]string{{"requests"}, {"responses", "success"}, {"stream_responses", "failure"},
		{"connection", "owner_crashes"}, {"workers_started"}, {"changes_reader_deaths"}, {"changes_manager_deaths"},
		{"changes_queue_deaths"}, {"failed_starts"}} {
		var node any = stats
		for _, p := range path {
			node = node.(map[string]any)[p]
		}
		stat, ok := node.(map[string]any)
		require.True(t, ok, "_stats has couch_replicator.%s", strings.Join(path, "."))
		require.Equal(t, "counter", stat["type"])
	}

	text := m.Prometheus()
	for _, want := range []string{
		"# TYPE couchdb_couch_replicator_requests_total counter\ncouchdb_couch_replicator_requests_total 107\n",
		// The successes with the failures, as CouchDB's couch_prometheus
		// names them.
		"couchdb_couch_replicator_responses_total 2\n",
		"couchdb_couch_replicator_responses_failure_total 1\n",
		"couchdb_couch_replicator_stream_responses_total 2\n",
		"couchdb_couch_replicator_stream_responses_failure_total 1\n",
		"couchdb_couch_replicator_checkpoints_total 0\n",
		`couchdb_couch_replicator_host_responses_total{host="db.example.com:443"} 2` + "\n",
		`couchdb_couch_replicator_host_responses_failure_total{host="db.example.com:443"} 1` + "\n",
		"couchdb_couch_replicator_connection_acquires_total 1\n",
		"couchdb_couch_replicator_worker_deaths_total 1\n",
		"couchdb_couch_replicator_changes_read_failures_total 1\n",
		"# TYPE couchdb_couch_replicator_host_requests_total counter\n",
		`couchdb_couch_replicator_host_requests_total{host="db.example.com:443"} 2` + "\n",
		`couchdb_couch_replicator_host_requests_total{host="h0.example.com:5984"} 1` + "\n",
		`couchdb_couch_replicator_host_requests_total{host="other"} 6` + "\n",
		`couchdb_couch_replicator_host_connection_worker_crashes_total{host="db.example.com:443"} 1` + "\n",
	} {
		require.Contains(t, text, want)
	}
	require.Equal(t, replicator.HostSeriesMax+1, strings.Count(text, "couchdb_couch_replicator_host_requests_total{"),
		"the first hosts and other")
	require.NotContains(t, text, "h104.example.com")
	require.NotContains(t, text, "success_total", "CouchDB's Prometheus has no …_success_total")
}
