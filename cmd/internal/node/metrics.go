package node

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// nodeMetrics are what a node's /_node/_local/_prometheus serves, on the
// API port and on the health port alike: the replicator's metrics,
// written by hand under CouchDB's names, then the job layer's
// (fdbjobs.Metrics of the node's Client, for the kinds rep_jobs and
// rep_watch) in Prometheus' text format from a registry of the node's
// own. Their names do not overlap (couchdb_… and fdbjobs_…), so no
// family is written twice. _stats has the replicator's only.
//
// The job layer's counters and histograms count what this process did
// (the jobs its Client inserted and cancelled, the attempts its Runtime
// ran: the watches); fdbjobs_jobs{kind,state} is the store's count,
// the same on every node. Each scrape reads it: one snapshot read per
// kind of the kind's count keys (a few dozen, whatever the number of
// jobs), each bounded by fdbjobs.MetricsReadTimeoutDefault (2 s), one
// after the other: a scrape waits at most 4 s for them when the store is
// slow or unreachable, under Prometheus' 10 s scrape timeout, and a read
// that fails or times out leaves its kind's gauge out of that scrape (and
// logs a warning).
type nodeMetrics struct {
	*replicator.Metrics
	jobs *prometheus.Registry
	log  *zerolog.Logger
}

// jobsRegistry returns a registry of jobs' metrics (fdbjobs.NewMetrics,
// which records from then on) with the replicator's kinds.
func jobsRegistry(jobs *fdbjobs.Client) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(fdbjobs.NewMetrics(jobs, replicator.JobType, replicator.WatchType)); err != nil {
		return nil, err
	}
	return reg, nil
}

// Prometheus renders the replicator's metrics, then the job layer's.
func (m *nodeMetrics) Prometheus() string {
	var b strings.Builder
	b.WriteString(m.Metrics.Prometheus())
	families, err := m.jobs.Gather()
	if err != nil { // what was gathered is still written
		m.log.Warn().Err(err).Msg("metrics: gathering the job layer's")
	}
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			m.log.Warn().Err(err).Str("metric", f.GetName()).Msg("metrics: writing the job layer's")
		}
	}
	return b.String()
}
