package replicator

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/subspace"
)

var fmtSprintf = fmt.Sprintf

// JobType is the fdbjobs type of replication jobs.
const JobType = "rep_jobs"

// Defaults of Config. Durations are CouchDB 4.x's unless noted.
const (
	// MaxJobsDefault is the most jobs a replication node runs in steady
	// state (it may briefly run up to MaxJobs+MaxChurn, see doc.go).
	MaxJobsDefault = 500
	// MaxChurnDefault is the most extra jobs a node starts per interval
	// while runnable jobs are pending, and so the most it preempts.
	MaxChurnDefault = 100
	// MaxAcceptorsDefault is the most idle acceptors per node.
	MaxAcceptorsDefault = 2
	// IntervalDefault is the rescheduling interval (jittered by up to a
	// third).
	IntervalDefault = 15 * time.Second
	// MinRunTimeDefault is how long a continuous job runs at least before
	// it may be preempted.
	MinRunTimeDefault = 60 * time.Second
	// StartupJitterDefault bounds the random wait of an acceptor that found
	// no runnable job (it also wakes as soon as a job is enqueued).
	StartupJitterDefault = 5 * time.Second
	// MinBackoffDefault is the first crash's backoff; each further
	// consecutive crash doubles it.
	MinBackoffDefault = 32 * time.Second
	// MaxBackoffDefault caps the crash backoff (2 days).
	MaxBackoffDefault = 48 * time.Hour
	// MaxBackoffLimit is the largest MaxBackoff accepted (30 days).
	MaxBackoffLimit = 30 * 24 * time.Hour
	// HealthThresholdDefault: a job that ran this long without crashing is
	// healed (its consecutive error count goes back to 0).
	HealthThresholdDefault = 2 * time.Minute
	// MaxHistoryDefault is the number of history events kept per job.
	MaxHistoryDefault = 10
	// TransientJobMaxAgeDefault is how long finished transient jobs stay
	// readable before the cleanup removes them.
	TransientJobMaxAgeDefault = 24 * time.Hour
	// JobTimeoutDefault is the rep_jobs activity timeout: a running job
	// whose node sends no heartbeat for this long is re-enqueued by the
	// fdbjobs activity monitor.
	JobTimeoutDefault = 61 * time.Second
	// StatsUpdateIntervalDefault is the heartbeat period of a running job
	// (capped at a third of JobTimeout); checkpoints also beat.
	StatsUpdateIntervalDefault = 10 * time.Second
	// ShutdownTimeoutDefault bounds how long Node.Stop waits for jobs to
	// checkpoint and re-enqueue themselves.
	ShutdownTimeoutDefault = 5 * time.Second
	// SharesDefault is a _replicator database's fair-share weight when not
	// configured; SharesMin and SharesMax bound configured values.
	SharesDefault = 100
	SharesMin     = 1
	SharesMax     = 1000
	// UsageCoeffDefault is the fair-share usage decay per interval (K1):
	// usage halves in about 13 intervals. CouchDB 3.x decays by 0.5 per
	// interval, but its priorities integrate usage over time; here a job's
	// priority is fixed when it is enqueued, so usage must be smoothed
	// over longer than a rotation cycle or the order oscillates.
	UsageCoeffDefault = 0.95
	// FairShareWindowDefault is the largest scheduling offset fair share
	// gives a database that used more than its share (see doc.go).
	FairShareWindowDefault = time.Hour
)

// SubspaceDefault holds the replicator's own keys when Config.Subspace is
// nil.
var SubspaceDefault = subspace.Sub("fdbrep_replicator")

// Config configures a Frontend and a Node. The zero value gives the
// defaults. Every node and frontend of a cluster should use the same
// Subspace, JobTimeout, Shares, UsageCoeff and FairShareWindow.
type Config struct {
	// Subspace holds the replicator's keys (replication ids, database
	// identities, fair-share usage). Defaults to SubspaceDefault.
	Subspace subspace.Subspace
	// NodeName names this node in job data and monitoring ("node" fields).
	// Defaults to the host name.
	NodeName string

	MaxJobs             int
	MaxChurn            int
	MaxAcceptors        int
	Interval            time.Duration
	MinRunTime          time.Duration
	StartupJitter       time.Duration
	MinBackoff          time.Duration
	MaxBackoff          time.Duration
	HealthThreshold     time.Duration
	MaxHistory          int
	TransientJobMaxAge  time.Duration
	JobTimeout          time.Duration
	StatsUpdateInterval time.Duration
	ShutdownTimeout     time.Duration

	// Shares maps _replicator database names to fair-share weights in
	// [SharesMin, SharesMax]; missing databases get SharesDefault.
	Shares map[string]int
	// UsageCoeff is the per-interval decay of fair-share usage, in [0, 1].
	// Zero means UsageCoeffDefault; use a tiny positive value for "forget
	// at once".
	UsageCoeff float64
	// FairShareWindow: see FairShareWindowDefault. Negative disables fair
	// share (every job is enqueued at the current time).
	FairShareWindow time.Duration

	// DocUpdater writes terminal states into _replicator documents, in the
	// job's finishing transaction (nodes only). Nil writes nothing.
	DocUpdater DocUpdater
	// Metrics receives the counters; nil makes a private set. Pass the
	// same Metrics to a Frontend and a Node in one process to serve one
	// set.
	Metrics *Metrics
	// Clock is the time source (tests pass a fake clock). Defaults to the
	// real clock.
	Clock clockwork.Clock
	// Logger receives log lines; defaults to discarding them.
	Logger *zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.Subspace == nil {
		c.Subspace = SubspaceDefault
	}
	if c.NodeName == "" {
		c.NodeName = defaultNodeName()
	}
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	defD := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	def(&c.MaxJobs, MaxJobsDefault)
	def(&c.MaxChurn, MaxChurnDefault)
	def(&c.MaxAcceptors, MaxAcceptorsDefault)
	def(&c.MaxHistory, MaxHistoryDefault)
	defD(&c.Interval, IntervalDefault)
	defD(&c.MinRunTime, MinRunTimeDefault)
	defD(&c.StartupJitter, StartupJitterDefault)
	defD(&c.MinBackoff, MinBackoffDefault)
	defD(&c.MaxBackoff, MaxBackoffDefault)
	defD(&c.HealthThreshold, HealthThresholdDefault)
	defD(&c.TransientJobMaxAge, TransientJobMaxAgeDefault)
	defD(&c.JobTimeout, JobTimeoutDefault)
	defD(&c.StatsUpdateInterval, StatsUpdateIntervalDefault)
	defD(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	defD(&c.FairShareWindow, FairShareWindowDefault)
	if c.UsageCoeff == 0 {
		c.UsageCoeff = UsageCoeffDefault
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.MaxJobs < 0:
		return bad("max_jobs %d is negative", c.MaxJobs)
	case c.MaxChurn < 0:
		return bad("max_churn %d is negative", c.MaxChurn)
	case c.MaxAcceptors < 0:
		return bad("max_acceptors %d is negative", c.MaxAcceptors)
	case c.MaxHistory < 1:
		return bad("max_history %d is under 1", c.MaxHistory)
	case c.Interval < time.Millisecond:
		return bad("interval %v is under a millisecond", c.Interval)
	case c.MinRunTime < 0:
		return bad("min_run_time %v is negative", c.MinRunTime)
	case c.StartupJitter < 0:
		return bad("startup_jitter %v is negative", c.StartupJitter)
	case c.MinBackoff < time.Millisecond:
		return bad("min_backoff %v is under a millisecond", c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return bad("max_backoff %v is under min_backoff %v", c.MaxBackoff, c.MinBackoff)
	case c.MaxBackoff > MaxBackoffLimit:
		return bad("max_backoff %v is over %v", c.MaxBackoff, MaxBackoffLimit)
	case c.HealthThreshold < 0:
		return bad("health_threshold %v is negative", c.HealthThreshold)
	case c.TransientJobMaxAge < 0:
		return bad("transient_job_max_age %v is negative", c.TransientJobMaxAge)
	case c.JobTimeout < 3*time.Millisecond:
		return bad("job timeout %v is under 3ms", c.JobTimeout)
	case c.StatsUpdateInterval < 0:
		return bad("stats update interval %v is negative", c.StatsUpdateInterval)
	case c.ShutdownTimeout < 0:
		return bad("shutdown timeout %v is negative", c.ShutdownTimeout)
	case c.UsageCoeff < 0 || c.UsageCoeff > 1:
		return bad("usage_coeff %v is not in [0, 1]", c.UsageCoeff)
	}
	for db, s := range c.Shares {
		if s < SharesMin || s > SharesMax {
			return bad("shares of %q: %d is not in [%d, %d]", db, s, SharesMin, SharesMax)
		}
	}
	return nil
}

// shares returns key's fair-share weight.
func (c Config) shares(key string) int {
	if s, ok := c.Shares[key]; ok {
		return s
	}
	return SharesDefault
}

// heartbeat is the period of a running job's Update.
// stopGraceMax bounds how long a stopping run (Node.Stop, rotation, a
// filter change) may take to write its final checkpoint before its
// requests are cancelled; at most half of ShutdownTimeout is used, so the
// job is re-enqueued within the shutdown timeout.
const stopGraceMax = 2 * time.Second

func (c Config) stopGrace() time.Duration { return min(stopGraceMax, c.ShutdownTimeout/2) }

func (c Config) heartbeat() time.Duration {
	hb := c.StatsUpdateInterval
	if hb == 0 || hb > c.JobTimeout/3 {
		hb = c.JobTimeout / 3
	}
	return hb
}
