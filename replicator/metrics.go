package replicator

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Metric names, as CouchDB's couch_replicator stats (priv/stats_descriptions.cfg).
const (
	MetricJobsAdds             = "couch_replicator.jobs.adds"
	MetricJobsRemoves          = "couch_replicator.jobs.removes"
	MetricJobsAccepts          = "couch_replicator.jobs.accepts"
	MetricJobsStarts           = "couch_replicator.jobs.starts"
	MetricJobsStops            = "couch_replicator.jobs.stops"
	MetricJobsCrashes          = "couch_replicator.jobs.crashes"
	MetricJobsRunning          = "couch_replicator.jobs.running"
	MetricJobsAccepting        = "couch_replicator.jobs.accepting"
	MetricJobsReschedules      = "couch_replicator.jobs.reschedules"
	MetricJobsPending          = "couch_replicator.jobs.pending"
	MetricJobsPreempted        = "couch_replicator.jobs.preempted"
	MetricJobsMoves            = "couch_replicator.jobs.moves"
	MetricJobsHoldsLost        = "couch_replicator.jobs.holds_lost"
	MetricJobsCompleted        = "couch_replicator.jobs.completed"
	MetricJobsFailed           = "couch_replicator.jobs.failed"
	MetricDocsDBsCreated       = "couch_replicator.docs.dbs_created"
	MetricDocsDBsDeleted       = "couch_replicator.docs.dbs_deleted"
	MetricDocsDBChanges        = "couch_replicator.docs.db_changes"
	MetricDocsFailedUpdates    = "couch_replicator.docs.failed_state_updates"
	MetricDocsCompletedUpdates = "couch_replicator.docs.completed_state_updates"
	MetricCheckpointsSuccess   = "couch_replicator.checkpoints.success"
	MetricCheckpointsFailure   = "couch_replicator.checkpoints.failure"
	MetricTransientJobsRemoved = "couch_replicator.jobs.transient_removed"
	// MetricJobsParks counts the continuous jobs this node parked, and
	// MetricJobsWakes the parked jobs it woke (not CouchDB metrics; see
	// doc.go, "Parking").
	MetricJobsParks = "couch_replicator.jobs.parks"
	MetricJobsWakes = "couch_replicator.jobs.wakes"
	// MetricJobsHeldBack counts the jobs this node accepted and put back
	// without running because their owner ran as many replications as a
	// user may (not a CouchDB metric; see doc.go, "Per-user limits").
	MetricJobsHeldBack = "couch_replicator.jobs.held_back"
	// MetricJobsParked is a gauge: the replications parked, cluster-wide,
	// as a replication node last read it (every interval).
	MetricJobsParked = "couch_replicator.jobs.parked"
	// MetricCredentialsResealed counts the _replicator documents and jobs
	// whose credentials this node moved to its current sealing key
	// (reseal.go; not a CouchDB metric).
	MetricCredentialsResealed = "couch_replicator.credentials.resealed"
	// MetricNodeHeartbeatAge is a gauge read when the metrics are: how
	// long ago (whole seconds) the node's last membership heartbeat
	// committed; it grows while the node cannot reach the store
	// (Metrics.Observe; not a CouchDB metric). Prometheus names carry
	// their unit in full (promtool's lint).
	MetricNodeHeartbeatAge = "couch_replicator.node.heartbeat_age_seconds"
	// MetricJobsInsecure counts the replications added with an http://
	// endpoint while [replicator] valid_endpoint_protocols_log is on (not
	// a CouchDB metric: CouchDB only logs them).
	MetricJobsInsecure = "couch_replicator.jobs.insecure"
	// MetricBudgetRequestWaits counts the requests of this node's runs
	// that waited for a token of a budget of requests per second
	// (HostPacer; not a CouchDB metric): a budget that holds requests
	// back makes it grow.
	MetricBudgetRequestWaits = "couch_replicator.budget.request_waits"
)

// CouchDB's counters of the replicator's requests, connections and runs
// (couch.Count, engine.Count; see counts.go), each also per endpoint host
// in Prometheus (MetricHostPrefix).
const (
	MetricRequests                = "couch_replicator.requests"
	MetricResponsesSuccess        = "couch_replicator.responses.success"
	MetricResponsesFailure        = "couch_replicator.responses.failure"
	MetricStreamResponsesSuccess  = "couch_replicator.stream_responses.success"
	MetricStreamResponsesFailure  = "couch_replicator.stream_responses.failure"
	MetricConnectionCreates       = "couch_replicator.connection.creates"
	MetricConnectionCloses        = "couch_replicator.connection.closes"
	MetricConnectionAcquires      = "couch_replicator.connection.acquires"
	MetricConnectionReleases      = "couch_replicator.connection.releases"
	MetricConnectionOwnerCrashes  = "couch_replicator.connection.owner_crashes"
	MetricConnectionWorkerCrashes = "couch_replicator.connection.worker_crashes"
	MetricWorkersStarted          = "couch_replicator.workers_started"
	MetricWorkerDeaths            = "couch_replicator.worker_deaths"
	MetricFailedStarts            = "couch_replicator.failed_starts"
	MetricChangesReadFailures     = "couch_replicator.changes_read_failures"
	MetricChangesReaderDeaths     = "couch_replicator.changes_reader_deaths"
	// MetricChangesManagerDeaths and MetricChangesQueueDeaths stay 0:
	// a run has no changes manager nor queue process (its queue is a
	// channel the reader fills and the workers drain); they are served so
	// that CouchDB's dashboards find every counter they chart.
	MetricChangesManagerDeaths = "couch_replicator.changes_manager_deaths"
	MetricChangesQueueDeaths   = "couch_replicator.changes_queue_deaths"
)

// Labelled series, per replicator database (the label "database"; "" for
// POST /_replicate's jobs), of the jobs running on this node; Prometheus
// only (Metrics.ObserveSeries). Their label values are bounded by the
// node's running jobs (max_jobs, 500 by default) whatever the cluster's
// size: a node reports only the databases it runs jobs of, and
// MetricDocsRefused only those it met refusals of (reset with the
// process).
const (
	// MetricSyncJobs counts the node's running jobs per database and
	// state: "caught_up", "behind" or "stalled" (engine.Sync; a stalled
	// job counts as stalled only).
	MetricSyncJobs = "couch_replicator.sync.jobs"
	// MetricSyncLagChanges is the largest changes_pending among them.
	MetricSyncLagChanges = "couch_replicator.sync.lag_changes"
	// MetricSyncLagSeconds is the longest time one of them has been
	// behind (since it was last caught up, or since its run started).
	MetricSyncLagSeconds = "couch_replicator.sync.lag_seconds"
	// MetricDocsRefused counts the documents targets refused, per
	// database.
	MetricDocsRefused = "couch_replicator.docs.refused"
)

// Series is one labelled value of a metric (Metrics.ObserveSeries).
type Series struct {
	Labels [][2]string // name, value
	Value  float64
}

// gauges tells gauges from counters.
var gauges = map[string]bool{MetricJobsRunning: true, MetricJobsAccepting: true, MetricJobsPending: true, MetricJobsParked: true}

var metricNames = []string{
	MetricJobsAdds, MetricJobsRemoves, MetricJobsAccepts, MetricJobsStarts, MetricJobsStops,
	MetricJobsCrashes, MetricJobsRunning, MetricJobsAccepting, MetricJobsReschedules, MetricJobsPending,
	MetricJobsPreempted, MetricJobsMoves, MetricJobsHoldsLost, MetricJobsCompleted, MetricJobsFailed,
	MetricDocsDBsCreated, MetricDocsDBsDeleted, MetricDocsDBChanges, MetricDocsFailedUpdates,
	MetricDocsCompletedUpdates, MetricCheckpointsSuccess, MetricCheckpointsFailure, MetricTransientJobsRemoved,
	MetricJobsParks, MetricJobsWakes, MetricJobsParked, MetricCredentialsResealed, MetricJobsInsecure, MetricJobsHeldBack,
	MetricBudgetRequestWaits,
	MetricRequests, MetricResponsesSuccess, MetricResponsesFailure, MetricStreamResponsesSuccess,
	MetricStreamResponsesFailure, MetricConnectionCreates, MetricConnectionCloses, MetricConnectionAcquires,
	MetricConnectionReleases, MetricConnectionOwnerCrashes, MetricConnectionWorkerCrashes, MetricWorkersStarted,
	MetricWorkerDeaths, MetricFailedStarts, MetricChangesReadFailures, MetricChangesReaderDeaths,
	MetricChangesManagerDeaths, MetricChangesQueueDeaths,
}

// Metrics holds this process's replicator counters and gauges. It is safe
// for concurrent use; the zero value is not usable, call NewMetrics.
type Metrics struct {
	v map[string]*atomic.Int64

	obsMu  sync.Mutex
	obs    map[string]func() int64 // gauges read at snapshot time
	series map[string]seriesSource

	hosts hostCounts // the HTTP counters per endpoint host
}

type seriesSource struct {
	counter bool
	f       func() []Series
}

// NewMetrics returns a set of counters at zero.
func NewMetrics() *Metrics {
	m := &Metrics{v: make(map[string]*atomic.Int64, len(metricNames))}
	for _, n := range metricNames {
		m.v[n] = new(atomic.Int64)
	}
	m.observeHosts()
	return m
}

// Add adds d to a counter.
func (m *Metrics) Add(name string, d int64) { m.v[name].Add(d) }

// Inc adds one to a counter.
func (m *Metrics) Inc(name string) { m.v[name].Add(1) }

// Observe adds a gauge whose value f gives each time the metrics are read
// (f must be quick and safe for concurrent use); a negative value is not
// shown.
func (m *Metrics) Observe(name string, f func() int64) {
	m.obsMu.Lock()
	defer m.obsMu.Unlock()
	if m.obs == nil {
		m.obs = map[string]func() int64{}
	}
	m.obs[name] = f
}

// ObserveSeries adds a labelled metric, counter or gauge, whose series f
// gives each time the Prometheus text is rendered (f must be quick and
// safe for concurrent use). _stats leaves them out (its shape has no
// labels).
func (m *Metrics) ObserveSeries(name string, counter bool, f func() []Series) {
	m.obsMu.Lock()
	defer m.obsMu.Unlock()
	if m.series == nil {
		m.series = map[string]seriesSource{}
	}
	m.series[name] = seriesSource{counter: counter, f: f}
}

// Set sets a gauge.
func (m *Metrics) Set(name string, v int64) { m.v[name].Store(v) }

// CountOnCommit adds n to counter name once tr commits: a transaction
// function may run several times (retries), and only the attempt that
// commits counts (kv.Locals.OnCommit). An attempt that committed but reported
// commit_unknown_result does not count; its retry counts what it does
// itself (see doc.go, "Failure trade-offs").
func (m *Metrics) CountOnCommit(tr kv.Transaction, name string, n int) {
	if n <= 0 {
		return
	}
	tr.Locals().OnCommit(func() { m.Add(name, int64(n)) })
}

// Metric is one counter or gauge of a snapshot.
type Metric struct {
	Name  string `json:"name"`
	Type  string `json:"type"` // "counter" or "gauge"
	Value int64  `json:"value"`
}

// Snapshot returns every metric, sorted by name.
func (m *Metrics) Snapshot() []Metric {
	out := make([]Metric, 0, len(m.v))
	for n, v := range m.v {
		typ := "counter"
		if gauges[n] {
			typ = "gauge"
		}
		out = append(out, Metric{Name: n, Type: typ, Value: v.Load()})
	}
	m.obsMu.Lock()
	for n, f := range m.obs {
		if v := f(); v >= 0 {
			out = append(out, Metric{Name: n, Type: "gauge", Value: v})
		}
	}
	m.obsMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Value returns one metric's value (0 for an unknown name).
func (m *Metrics) Value(name string) int64 {
	if v, ok := m.v[name]; ok {
		return v.Load()
	}
	return 0
}

// StatsJSON nests the metrics as CouchDB's _stats does:
// "couch_replicator.jobs.adds" becomes {"jobs": {"adds": {...}}} (the
// value of "couch_replicator" in /_node/_local/_stats).
func (m *Metrics) StatsJSON() map[string]any {
	out := map[string]any{}
	for _, x := range m.Snapshot() {
		parts := strings.Split(strings.TrimPrefix(x.Name, "couch_replicator."), ".")
		node := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := node[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[p] = next
			}
			node = next
		}
		node[parts[len(parts)-1]] = map[string]any{"value": x.Value, "type": x.Type, "desc": x.Name}
	}
	return out
}

// promTotals are the counters of successes that Prometheus shows as
// CouchDB's couch_prometheus shows them: as the total of the successes and
// the failures, named without "success"
// (couchdb_couch_replicator_responses_total), beside the failures under
// their own name (couchdb_couch_replicator_responses_failure_total).
var promTotals = map[string]string{
	MetricCheckpointsSuccess:     MetricCheckpointsFailure,
	MetricResponsesSuccess:       MetricResponsesFailure,
	MetricStreamResponsesSuccess: MetricStreamResponsesFailure,
}

// promName is the Prometheus name of a metric, without _total.
func promName(name string) string { return "couchdb_" + strings.ReplaceAll(name, ".", "_") }

// Prometheus renders the metrics in Prometheus' text format with
// CouchDB's names (couchdb_couch_replicator_jobs_adds_total; see
// promTotals).
func (m *Metrics) Prometheus() string {
	var b strings.Builder
	for _, x := range m.Snapshot() {
		name, h := promName(x.Name), help(x.Name)
		if failures, ok := promTotals[x.Name]; ok {
			name = promName(strings.TrimSuffix(x.Name, ".success"))
			x.Value += m.Value(failures)
			h = "CouchDB's " + x.Name + " and " + failures + " together"
		}
		typ := "gauge"
		if x.Type == "counter" {
			name += "_total"
			typ = "counter"
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", name, h, name, typ, name, x.Value)
	}
	m.obsMu.Lock()
	names := make([]string, 0, len(m.series))
	for n := range m.series {
		names = append(names, n)
	}
	sort.Strings(names)
	srcs := make([]seriesSource, len(names))
	for i, n := range names {
		srcs[i] = m.series[n]
	}
	m.obsMu.Unlock()
	for i, n := range names {
		name, typ := promName(n), "gauge"
		if srcs[i].counter {
			name, typ = name+"_total", "counter"
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help(n), name, typ)
		for _, s := range srcs[i].f() {
			b.WriteString(name)
			if len(s.Labels) > 0 {
				b.WriteByte('{')
				for j, l := range s.Labels {
					if j > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=\"%s\"", l[0], labelEscaper.Replace(l[1]))
				}
				b.WriteByte('}')
			}
			fmt.Fprintf(&b, " %s\n", strconv.FormatFloat(s.Value, 'g', -1, 64))
		}
	}
	return b.String()
}

// helps describe the metrics whose names do not say enough; the others
// are described by their names.
var helps = map[string]string{
	MetricJobsRunning:          "replication jobs running on this node",
	MetricJobsPending:          "replication jobs waiting for a slot, cluster-wide",
	MetricJobsAccepting:        "acceptors of this node waiting for a job",
	MetricNodeHeartbeatAge:     "seconds (whole) since this node's last membership heartbeat committed",
	MetricSyncJobs:             "running jobs of this node per replicator database and state (caught_up, behind, stalled)",
	MetricSyncLagChanges:       "largest changes_pending among this node's running jobs of the database",
	MetricSyncLagSeconds:       "longest time one of this node's running jobs of the database has been behind its source",
	MetricDocsRefused:          "documents the targets of this node's jobs of the database refused",
	MetricJobsParks:            "continuous replications this node parked: caught up and idle, they gave their slot back",
	MetricJobsWakes:            "parked replications this node woke: their source changed, or their sweep came",
	MetricJobsParked:           "replications parked, cluster-wide: caught up, waiting for a change to their source without a slot",
	MetricJobsInsecure:         "replications added with an http:// endpoint while [replicator] valid_endpoint_protocols_log is on",
	MetricChangesManagerDeaths: "CouchDB's couch_replicator.changes_manager_deaths: always 0, fdbrep's runs have no changes manager",
	MetricChangesQueueDeaths:   "CouchDB's couch_replicator.changes_queue_deaths: always 0, fdbrep's runs have no changes queue process",
}

// help is a metric's HELP text.
func help(name string) string {
	if h, ok := helps[name]; ok {
		return h
	}
	if c, ok := strings.CutPrefix(name, MetricHostPrefix); ok {
		return "CouchDB's couch_replicator." + c + " per endpoint host and port (the first " +
			strconv.Itoa(HostSeriesMax) + " hosts; the later ones as host=\"" + HostOther + "\")"
	}
	return "CouchDB's " + name
}

// labelEscaper escapes a label value for Prometheus' text format.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
