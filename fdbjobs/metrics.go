package fdbjobs

// Prometheus metrics of the job layer, per kind.

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsReadTimeoutDefault bounds the read of the counts (Counts) that
// each collection of Metrics makes per kind; a kind whose read fails or
// takes longer has no fdbjobs_jobs gauge in that collection.
const MetricsReadTimeoutDefault = 2 * time.Second

// Metrics are a Client's Prometheus metrics per kind (label "kind"), a
// prometheus.Collector to register on the caller's registry. Counters and
// histograms count what this process did:
//
//	fdbjobs_jobs_inserted_total    jobs Insert and InsertMany added (once their call returned)
//	fdbjobs_jobs_cancelled_total   jobs Cancel cancelled
//	fdbjobs_jobs_started_total     attempts a Runtime started
//	fdbjobs_jobs_completed_total   attempts whose end was written completed
//	fdbjobs_jobs_retried_total     attempts whose end was written pending again, for a retry
//	fdbjobs_jobs_discarded_total   attempts whose end was written discarded
//	fdbjobs_jobs_partition_waits_total jobs sent back to wait for a place or a start in their partition (SetPartitionLimit)
//	fdbjobs_jobs_running           attempts running now (gauge)
//	fdbjobs_job_wait_seconds       from a job's scheduled time to its attempt's start (histogram)
//	fdbjobs_job_run_seconds        an attempt's run, its middleware and Worker (histogram)
//
// and fdbjobs_jobs{kind, state} is the store's count of the kind's jobs
// in each state (Counts: pending is the queue's depth), read when the
// metrics are collected, for the kinds named to NewMetrics and those this
// Client inserted or worked since.
// Attempts handed back by a stopping Runtime, snoozed, or whose end could
// not be written (the job taken from the node) count as started only.
type Metrics struct {
	c                                                           *Client
	inserted, cancelled, started, completed, retried, discarded *prometheus.CounterVec
	partitionWaits                                              *prometheus.CounterVec
	running                                                     *prometheus.GaugeVec
	wait, run                                                   *prometheus.HistogramVec
	jobs                                                        *prometheus.Desc

	mu    sync.Mutex
	kinds map[string]bool // guarded by mu
}

// NewMetrics returns c's metrics and records them from then on (a Client
// has one Metrics: a second call replaces the first). The store's counts
// of kinds are collected from the first collection on, before this Client
// inserts or works any of them: a process that adds jobs with Add (which
// these metrics do not count), works them with Accept, or only watches a
// queue names its kinds here, or has no fdbjobs_jobs gauge of them.
func NewMetrics(c *Client, kinds ...string) *Metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fdbjobs_jobs_" + name + "_total", Help: help}, []string{"kind"})
	}
	// From 5 ms to about 6 h, for waits and runs alike.
	buckets := prometheus.ExponentialBuckets(0.005, 4, 12)
	m := &Metrics{
		c:              c,
		inserted:       counter("inserted", "Jobs inserted (Insert, InsertMany) by this process."),
		cancelled:      counter("cancelled", "Jobs cancelled (Cancel) by this process."),
		started:        counter("started", "Attempts started by this process's Runtimes."),
		completed:      counter("completed", "Attempts that ended with the job completed."),
		retried:        counter("retried", "Attempts that failed and left the job pending for a retry."),
		discarded:      counter("discarded", "Attempts that ended with the job discarded."),
		partitionWaits: counter("partition_waits", "Jobs sent back to wait for a place or a start in their partition (SetPartitionLimit)."),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fdbjobs_jobs_running",
			Help: "Attempts running in this process's Runtimes."}, []string{"kind"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fdbjobs_job_wait_seconds",
			Help: "Time from a job's scheduled time to the start of its attempt.", Buckets: buckets}, []string{"kind"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fdbjobs_job_run_seconds",
			Help: "Time an attempt ran (its middleware and Worker).", Buckets: buckets}, []string{"kind"}),
		jobs: prometheus.NewDesc("fdbjobs_jobs", "The store's jobs of the kind in each state (Counts).",
			[]string{"kind", "state"}, nil),
		kinds: map[string]bool{},
	}
	for _, k := range kinds {
		m.kinds[k] = true
	}
	c.metrics.Store(m)
	return m
}

func (m *Metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{m.inserted, m.cancelled, m.started, m.completed, m.retried, m.discarded, m.partitionWaits,
		m.running, m.wait, m.run}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range m.vecs() {
		v.Describe(ch)
	}
	ch <- m.jobs
}

// Collect implements prometheus.Collector: this process's counters, and
// the store's counts of the kinds seen, each read within
// MetricsReadTimeoutDefault.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, v := range m.vecs() {
		v.Collect(ch)
	}
	m.mu.Lock()
	kinds := make([]string, 0, len(m.kinds))
	for k := range m.kinds {
		kinds = append(kinds, k)
	}
	m.mu.Unlock()
	for _, kind := range kinds {
		ctx, cancel := context.WithTimeout(context.Background(), MetricsReadTimeoutDefault)
		n, err := m.c.Counts(ctx, nil, kind)
		cancel()
		if err != nil {
			m.c.cfg.Logger.Warn().Err(err).Str("kind", kind).Msg("fdbjobs: metrics: reading the counts")
			continue
		}
		for _, s := range countStates {
			ch <- prometheus.MustNewConstMetric(m.jobs, prometheus.GaugeValue, float64(*n.field(s)), kind, s)
		}
	}
}

// seen adds kind to those whose counts are collected.
func (m *Metrics) seen(kind string) {
	m.mu.Lock()
	m.kinds[kind] = true
	m.mu.Unlock()
}

// count adds n to kind's counter c; m may be nil (no Metrics).
func (m *Metrics) count(c func(*Metrics) *prometheus.CounterVec, kind string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.seen(kind)
	c(m).WithLabelValues(kind).Add(float64(n))
}

func metricInserted(m *Metrics) *prometheus.CounterVec  { return m.inserted }
func metricCancelled(m *Metrics) *prometheus.CounterVec { return m.cancelled }
func metricPartitionWaits(m *Metrics) *prometheus.CounterVec {
	return m.partitionWaits
}

// attempt records the start of an attempt at a job of kind due at due,
// and returns what records its end; m may be nil.
func (m *Metrics) attempt(kind string, due time.Time, clock interface{ Now() time.Time }) (end func()) {
	if m == nil {
		return func() {}
	}
	m.seen(kind)
	start := clock.Now()
	m.started.WithLabelValues(kind).Inc()
	if !due.IsZero() {
		m.wait.WithLabelValues(kind).Observe(max(0, start.Sub(due)).Seconds())
	}
	running := m.running.WithLabelValues(kind)
	running.Inc()
	return func() {
		running.Dec()
		m.run.WithLabelValues(kind).Observe(clock.Now().Sub(start).Seconds())
	}
}

// ended records an attempt's end as written: outcome OutcomeCompleted,
// OutcomeDiscarded, or "" for a retry; m may be nil.
func (m *Metrics) ended(kind, outcome string) {
	if m == nil {
		return
	}
	switch outcome {
	case OutcomeCompleted:
		m.completed.WithLabelValues(kind).Inc()
	case OutcomeDiscarded:
		m.discarded.WithLabelValues(kind).Inc()
	default:
		m.retried.WithLabelValues(kind).Inc()
	}
}
