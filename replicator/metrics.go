package replicator

import (
	"sort"
	"sync/atomic"
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
)

// metricKind tells counters from gauges.
var gauges = map[string]bool{MetricJobsRunning: true, MetricJobsAccepting: true, MetricJobsPending: true}

var metricNames = []string{
	MetricJobsAdds, MetricJobsRemoves, MetricJobsAccepts, MetricJobsStarts, MetricJobsStops,
	MetricJobsCrashes, MetricJobsRunning, MetricJobsAccepting, MetricJobsReschedules, MetricJobsPending,
	MetricJobsPreempted, MetricJobsCompleted, MetricJobsFailed,
	MetricDocsDBsCreated, MetricDocsDBsDeleted, MetricDocsDBChanges, MetricDocsFailedUpdates,
	MetricDocsCompletedUpdates, MetricCheckpointsSuccess, MetricCheckpointsFailure, MetricTransientJobsRemoved,
}

// Metrics holds this process's replicator counters and gauges. It is safe
// for concurrent use; the zero value is not usable, call NewMetrics.
type Metrics struct {
	v map[string]*atomic.Int64
}

// NewMetrics returns a set of counters at zero.
func NewMetrics() *Metrics {
	m := &Metrics{v: make(map[string]*atomic.Int64, len(metricNames))}
	for _, n := range metricNames {
		m.v[n] = new(atomic.Int64)
	}
	return m
}

func (m *Metrics) add(name string, d int64) { m.v[name].Add(d) }
func (m *Metrics) inc(name string)          { m.v[name].Add(1) }
func (m *Metrics) set(name string, v int64) { m.v[name].Store(v) }

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
