package replicator

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The replicator's requests, connections and runs, counted under
// CouchDB's names (couch_replicator.requests, …) for _stats and
// Prometheus, so that CouchDB's dashboards work; the HTTP counters also
// per endpoint host, in Prometheus only.

// MetricHostPrefix starts the names of the per-host counters:
// couch_replicator.host.requests is served as
// couchdb_couch_replicator_host_requests_total{host="db.example.com:443"},
// one family beside CouchDB's unlabelled couchdb_couch_replicator_requests_total,
// so that sums over either family count each request once.
const MetricHostPrefix = "couch_replicator.host."

// HostSeriesMax bounds the hosts the per-host counters name: an
// endpoint's host is whatever its _replicator document says, and a
// writer of documents could otherwise make a series per host without
// end. The first HostSeriesMax hosts a process meets keep their own
// series; the later ones are counted together under HostOther.
const HostSeriesMax = 100

// HostOther is the host label of the hosts past HostSeriesMax.
const HostOther = "other"

// httpMetrics and runMetrics name the counter of each couch.Count and
// engine.Count.
var (
	httpMetrics = [couch.CountMax]string{MetricRequests, MetricResponsesSuccess, MetricResponsesFailure,
		MetricStreamResponsesSuccess, MetricStreamResponsesFailure, MetricConnectionCreates, MetricConnectionCloses,
		MetricConnectionAcquires, MetricConnectionReleases, MetricConnectionOwnerCrashes, MetricConnectionWorkerCrashes}
	runMetrics = [engine.CountMax]string{MetricWorkersStarted, MetricWorkerDeaths, MetricFailedStarts,
		MetricChangesReadFailures, MetricChangesReaderDeaths}
)

// CountHTTP counts an event of an endpoint's HTTP client, in all and for
// host: a couch.Options.Count (engine.ClientSettings.Count).
func (m *Metrics) CountHTTP(host string, c couch.Count) {
	m.v[httpMetrics[c]].Add(1)
	m.hosts.add(host)[c].Add(1)
}

// CountRun counts an event of a run: an engine.Options.Count.
func (m *Metrics) CountRun(c engine.Count) { m.v[runMetrics[c]].Add(1) }

// hostCounts are the HTTP counters per host.
type hostCounts struct {
	mu sync.RWMutex
	m  map[string]*[couch.CountMax]atomic.Int64
}

// add returns host's counters, made at its first event (HostOther's past
// HostSeriesMax hosts).
func (h *hostCounts) add(host string) *[couch.CountMax]atomic.Int64 {
	h.mu.RLock()
	cs := h.m[host]
	h.mu.RUnlock()
	if cs != nil {
		return cs
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*[couch.CountMax]atomic.Int64{}
	}
	if cs = h.m[host]; cs != nil {
		return cs
	}
	n := len(h.m)
	if _, ok := h.m[HostOther]; ok {
		n--
	}
	if n >= HostSeriesMax {
		host = HostOther
		if cs = h.m[host]; cs != nil {
			return cs
		}
	}
	cs = new([couch.CountMax]atomic.Int64)
	h.m[host] = cs
	return cs
}

// series returns the series of c, one per host, by host: with failures
// (CountMax: none), of c and failures together.
func (h *hostCounts) series(c, failures couch.Count) []Series {
	h.mu.RLock()
	out := make([]Series, 0, len(h.m))
	for host, cs := range h.m {
		v := cs[c].Load()
		if failures < couch.CountMax {
			v += cs[failures].Load()
		}
		out = append(out, Series{Labels: [][2]string{{"host", host}}, Value: float64(v)})
	}
	h.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Labels[0][1] < out[j].Labels[0][1] })
	return out
}

// observeHosts serves the per-host counters in Prometheus, named as
// CouchDB names the counters of all hosts (promTotals): the successes
// with the failures, as couchdb_couch_replicator_host_responses_total.
func (m *Metrics) observeHosts() {
	for c := range couch.CountMax {
		name, failures := MetricHostPrefix+c.Name(), couch.CountMax
		if f, ok := promTotals[httpMetrics[c]]; ok {
			name, failures = strings.TrimSuffix(name, ".success"), couch.Count(slices.Index(httpMetrics[:], f))
		}
		m.ObserveSeries(name, true, func() []Series { return m.hosts.series(c, failures) })
	}
}
