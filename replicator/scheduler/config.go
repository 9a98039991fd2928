package scheduler

import (
	"cmp"
	"context"
	"os"
	"time"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// Defaults of Config. Durations are CouchDB 4.x's unless noted.
const (
	// MaxJobsDefault is the most jobs a replication node runs at once.
	MaxJobsDefault = 500
	// MaxChurnDefault is the most jobs a node stops per interval to give
	// their slots to waiting jobs (rotation), or moves to lighter nodes.
	MaxChurnDefault = 100
	// MaxAcceptorsDefault is how many fetchers of the node's Runtime
	// accept replication jobs at once (max_acceptors, read at start).
	MaxAcceptorsDefault = 2
	// IntervalDefault is the rescheduling interval (jittered by up to a
	// third).
	IntervalDefault = 15 * time.Second
	// MinRunTimeDefault is how long a continuous job runs at least before
	// it may be preempted.
	MinRunTimeDefault = 60 * time.Second
	// MinBackoffDefault is the first crash's backoff; each further
	// consecutive crash doubles it.
	MinBackoffDefault = 32 * time.Second
	// MaxBackoffDefault caps the crash backoff (2 days).
	MaxBackoffDefault = 48 * time.Hour
	// MaxBackoffLimit is the largest MaxBackoff accepted (30 days), also
	// [replicator] max_backoff_penalty_sec's upper bound.
	MaxBackoffLimit = 30 * 24 * time.Hour
	// HealthThresholdDefault: a job that ran this long without crashing is
	// healed (its consecutive error count goes back to 0).
	HealthThresholdDefault = 2 * time.Minute
	// TransientJobMaxAgeDefault is how long finished transient jobs stay
	// readable after their last update before the job layer's sweeper
	// removes them (the Runtime's RetainFinished).
	TransientJobMaxAgeDefault = 24 * time.Hour
	// StatsUpdateIntervalDefault is the heartbeat period of a running job
	// (capped at Interval and at a third of the job timeout); checkpoints
	// also beat.
	StatsUpdateIntervalDefault = 10 * time.Second
	// ProgressIntervalDefault is how often a node writes the live counters
	// of its running jobs that changed (see doc.go, "Live progress").
	ProgressIntervalDefault = time.Second
	// ShutdownTimeoutDefault bounds how long Node.Stop waits for jobs to
	// checkpoint and re-enqueue themselves.
	ShutdownTimeoutDefault = 5 * time.Second
	// ParkAfterDefault is how long a continuous replication stays caught
	// up with no change before it parks while no job waits for a slot,
	// where its source's server gives a _db_updates feed (see doc.go,
	// "When a replication parks"): several minutes, so that a replication
	// written to now and then does not park and wake at each write (a
	// wake costs a run's setup, about 7 requests).
	ParkAfterDefault = 5 * time.Minute
	// ParkWhenWaitingAfterDefault is how long a continuous replication
	// stays caught up with no change before it parks while jobs wait for
	// a slot: seconds, so that a slot an idle replication holds goes to
	// one with work to do about as soon as its own work is done.
	ParkWhenWaitingAfterDefault = 2 * time.Second
	// ParkNever as Config.ParkAfter turns parking off ([replicator]
	// park_after_sec 0): continuous jobs hold their slots as in CouchDB
	// 3.x.
	ParkNever time.Duration = -1
	// ParkSweepDefault is how long a parked replication waits at most: it
	// runs again then even if nothing woke it (fdbrep's own).
	ParkSweepDefault = 24 * time.Hour
	// MaxWatchesDefault is the most watch jobs a node follows at once,
	// beside its replication slots (see doc.go, "Watches").
	MaxWatchesDefault = 100
	// WatchPollIntervalDefault is how long a polling watch waits after a
	// poll cycle before the next.
	WatchPollIntervalDefault = time.Minute
	// WatchPollRateDefault is the most exact checks per second a node's
	// polling watches make in all.
	WatchPollRateDefault = 20
	// MaxJobsPerUserPercentDefault is how many replications of one user
	// who is not a server admin run at once in the whole cluster, in
	// percent of the max_jobs of the node that starts one (rounded up, at
	// least 1; see doc.go, "Per-user limits"): a quarter, so that at
	// least four users share a node's slots when they all want more, and
	// a user alone still runs a quarter of them at once (the others take
	// turns). 125 at the default max_jobs; 1 at max_jobs 3. Server admins'
	// replications are not limited: one person on their own cluster loses
	// nothing.
	MaxJobsPerUserPercentDefault = 25
	// MaxJobsPerHostDefault is how many replications with an endpoint on
	// one host (scheme, name and port) run at once in the whole cluster
	// (see doc.go, "Budgets per host"): 0, no budget, as in CouchDB. An
	// operator whose endpoints answer 429 beyond some number of clients
	// (a hosted CouchDB plan) sets one.
	MaxJobsPerHostDefault = 0
	// MaxJobsPerHostMax bounds MaxJobsPerHost and MaxJobsPerHostUser.
	MaxJobsPerHostMax = 100_000
	// MaxJobsPerHostUserDefault is how many replications with an endpoint
	// on one host that logs in as one user (its username, or its token's
	// client id) run at once in the whole cluster: 0, no budget.
	MaxJobsPerHostUserDefault = 0
	// MaxRequestsPerHostPerSecDefault is how many requests a second the
	// replications of the whole cluster send to one endpoint host at most
	// (see doc.go, "Budgets per host"): 0, no budget, as in CouchDB.
	MaxRequestsPerHostPerSecDefault = 0
	// MaxRequestsPerHostUserPerSecDefault is how many requests a second
	// the replications of the whole cluster send to one endpoint host
	// logging in as one user at most: 0, no budget.
	MaxRequestsPerHostUserPerSecDefault = 0
	// MaxRequestsPerHostPerSecMax bounds MaxRequestsPerHostPerSec and
	// MaxRequestsPerHostUserPerSec.
	MaxRequestsPerHostPerSecMax = 1_000_000
	// HeldByHostRecheck is how many intervals a job held back by a host's
	// budget waits at most before a node takes it again: a replication of
	// the host that stops wakes one waiting job at once.
	HeldByHostRecheck = 4
	// OneShotStallPreemptDefault is how long a one-shot run may make no
	// progress (its counters unchanged, no batch finished) while other
	// jobs wait for a slot before its node stops it and queues it behind
	// them (see doc.go, "Stalled one-shot runs"): a minute, twice
	// CouchDB's default connection_timeout, so that a peer that is merely
	// slow keeps its run, and one that never answers holds a slot about a
	// minute while others wait.
	OneShotStallPreemptDefault = time.Minute
	// StallPreemptNever as Config.OneShotStallPreempt ([replicator]
	// one_shot_stall_preempt_sec 0): one-shot runs are never stopped, as
	// in CouchDB 3.x.
	StallPreemptNever time.Duration = -1
	// parkCheckTimeout bounds an exact check of a parked job (one request
	// to its source).
	parkCheckTimeout = 30 * time.Second
)

// stopGraceMax bounds how long a stopping run (Node.Stop, rotation, a
// filter change) may take to write its final checkpoint before its
// requests are cancelled; at most half of ShutdownTimeout is used, so the
// job is re-enqueued within the shutdown timeout.
const stopGraceMax = 2 * time.Second

// Config configures a Node: the cluster-wide settings every node and
// frontend shares (replicator.Config), and this node's own. The zero value
// gives the defaults.
type Config struct {
	replicator.Config

	// NodeName names this node in job data and monitoring ("node" fields).
	// Defaults to the host name. The node's lines name it through its
	// logger (Config.Logger), which must carry it as a "node" field, as
	// the composition root's does: a line of its own would repeat the key.
	NodeName string

	MaxJobs             int
	MaxChurn            int
	MaxAcceptors        int
	Interval            time.Duration
	MinRunTime          time.Duration
	MinBackoff          time.Duration
	MaxBackoff          time.Duration
	HealthThreshold     time.Duration
	TransientJobMaxAge  time.Duration
	StatsUpdateInterval time.Duration
	ProgressInterval    time.Duration
	ShutdownTimeout     time.Duration
	// ParkAfter is how long a continuous job stays caught up with no
	// change before it parks; ParkNever (any negative value): never, and
	// rotation re-queues caught-up jobs as it stops them (0 takes the
	// default).
	ParkAfter time.Duration
	// ParkWhenWaitingAfter is how long a continuous job stays caught up
	// with no change before it parks while jobs wait for a slot (0 takes
	// the default).
	ParkWhenWaitingAfter time.Duration
	// ParkSweep is how long a parked job waits at most before it runs
	// again.
	ParkSweep time.Duration
	// MaxWatches, WatchPollInterval and WatchPollRate: see their defaults.
	MaxWatches        int
	WatchPollInterval time.Duration
	WatchPollRate     int

	// MaxJobsPerUserPercent bounds the replications of one user who is
	// not a server admin that run at once, cluster-wide, in percent of
	// MaxJobs (Config.userLimit; 0 takes the default).
	MaxJobsPerUserPercent int
	// MaxJobsPerHost bounds the replications with an endpoint on one host
	// that run at once, cluster-wide; 0 (the default): no bound.
	MaxJobsPerHost int
	// MaxJobsPerHostUser bounds, likewise, those with an endpoint on one
	// host that logs in as one user; 0 (the default): no bound.
	MaxJobsPerHostUser int
	// MaxRequestsPerHostPerSec bounds the requests a second the runs of
	// the whole cluster send to one endpoint host; 0 (the default): no
	// bound.
	MaxRequestsPerHostPerSec int
	// MaxRequestsPerHostUserPerSec bounds, likewise, those to one host
	// logging in as one user; 0 (the default): no bound.
	MaxRequestsPerHostUserPerSec int
	// OneShotStallPreempt is how long a one-shot run may make no progress
	// while jobs wait for a slot before it is stopped and queued behind
	// them; StallPreemptNever (any negative value): never (0 takes the
	// default).
	OneShotStallPreempt time.Duration

	// NonAdmins are the configured accounts ([users]) that are not server
	// admins (not in [admins], no _admin in [user_roles]): a webhook one of
	// them made as a server admin hears only their own replications again.
	// SetConfig puts them in force at once.
	NonAdmins map[string]bool
	// JobDefaults fill the tunables a replication leaves unset (CouchDB's
	// node-wide [replicator] worker_processes and the like).
	JobDefaults replicator.JobDefaults

	// DocUpdater writes terminal states into _replicator documents, in the
	// job's finishing transaction. Nil writes nothing.
	DocUpdater replicator.DocUpdater

	// Cluster is how the node learns which replication nodes are alive and
	// how many jobs each runs, and publishes its own count (the node's
	// cluster.Node): with it the nodes balance their jobs (see doc.go,
	// "Balance"). Nil: the node does not balance.
	Cluster Membership
}

// Membership is the part of a cluster.Node the scheduler uses.
type Membership interface {
	// Members returns the nodes alive at now, with their loads.
	Members(ctx context.Context, now time.Time) ([]cluster.Member, error)
	// SetLoad publishes this node's load.
	SetLoad(ctx context.Context, l cluster.Load) error
}

func (c Config) withDefaults() Config {
	c.Config = c.Config.WithDefaults()
	c.NodeName = cmp.Or(c.NodeName, defaultNodeName())
	c.MaxJobs = cmp.Or(c.MaxJobs, MaxJobsDefault)
	c.MaxChurn = cmp.Or(c.MaxChurn, MaxChurnDefault)
	c.MaxAcceptors = cmp.Or(c.MaxAcceptors, MaxAcceptorsDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.MinRunTime = cmp.Or(c.MinRunTime, MinRunTimeDefault)
	c.MinBackoff = cmp.Or(c.MinBackoff, MinBackoffDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, MaxBackoffDefault)
	c.HealthThreshold = cmp.Or(c.HealthThreshold, HealthThresholdDefault)
	c.TransientJobMaxAge = cmp.Or(c.TransientJobMaxAge, TransientJobMaxAgeDefault)
	c.StatsUpdateInterval = cmp.Or(c.StatsUpdateInterval, StatsUpdateIntervalDefault)
	c.ProgressInterval = cmp.Or(c.ProgressInterval, ProgressIntervalDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.ParkAfter = cmp.Or(c.ParkAfter, ParkAfterDefault)
	c.ParkSweep = cmp.Or(c.ParkSweep, ParkSweepDefault)
	c.ParkWhenWaitingAfter = cmp.Or(c.ParkWhenWaitingAfter, ParkWhenWaitingAfterDefault)
	c.MaxWatches = cmp.Or(c.MaxWatches, MaxWatchesDefault)
	c.WatchPollInterval = cmp.Or(c.WatchPollInterval, WatchPollIntervalDefault)
	c.WatchPollRate = cmp.Or(c.WatchPollRate, WatchPollRateDefault)
	c.MaxJobsPerUserPercent = cmp.Or(c.MaxJobsPerUserPercent, MaxJobsPerUserPercentDefault)
	c.OneShotStallPreempt = cmp.Or(c.OneShotStallPreempt, OneShotStallPreemptDefault)
	return c
}

// CheckConfig reports whether New or SetConfig would accept cfg (with
// its zero fields defaulted); the error wraps replicator.ErrInvalidConfig.
func CheckConfig(cfg Config) error { return cfg.withDefaults().validate() }

func (c Config) validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if err := c.JobDefaults.Validate(); err != nil {
		return err
	}
	bad := replicator.InvalidConfig
	switch {
	case c.MaxJobs < 0:
		return bad("max_jobs %d is negative", c.MaxJobs)
	case c.MaxChurn < 0:
		return bad("max_churn %d is negative", c.MaxChurn)
	case c.MaxAcceptors < 0 || c.MaxAcceptors > fdbjobs.FetchersMax:
		return bad("max_acceptors %d is out of 1..%d", c.MaxAcceptors, fdbjobs.FetchersMax)
	case c.MaxJobs > fdbjobs.ConcurrencyMax:
		return bad("max_jobs %d is over %d, the most jobs one node runs", c.MaxJobs, fdbjobs.ConcurrencyMax)
	case c.Interval < time.Millisecond:
		return bad("interval %v is under a millisecond", c.Interval)
	case c.MinRunTime < 0:
		return bad("min_run_time %v is negative", c.MinRunTime)
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
	case c.StatsUpdateInterval < 0:
		return bad("stats update interval %v is negative", c.StatsUpdateInterval)
	case c.ProgressInterval < time.Millisecond:
		return bad("progress interval %v is under a millisecond", c.ProgressInterval)
	case c.ShutdownTimeout < 0:
		return bad("shutdown timeout %v is negative", c.ShutdownTimeout)
	case c.ParkSweep < time.Millisecond:
		return bad("park sweep %v is under a millisecond", c.ParkSweep)
	case c.ParkWhenWaitingAfter < 0:
		return bad("park_when_waiting_after %v is negative", c.ParkWhenWaitingAfter)
	case c.MaxWatches < 1:
		return bad("max_watches %d is under 1", c.MaxWatches)
	case c.WatchPollInterval < time.Millisecond:
		return bad("watch poll interval %v is under a millisecond", c.WatchPollInterval)
	case c.WatchPollRate < 1:
		return bad("watch poll rate %d is under 1", c.WatchPollRate)
	case c.MaxJobsPerUserPercent < 1:
		return bad("max_jobs_per_user_percent %d is under 1", c.MaxJobsPerUserPercent)
	case c.MaxJobsPerHost < 0 || c.MaxJobsPerHost > MaxJobsPerHostMax:
		return bad("max_jobs_per_host %d is outside [0, %d]", c.MaxJobsPerHost, MaxJobsPerHostMax)
	case c.MaxJobsPerHostUser < 0 || c.MaxJobsPerHostUser > MaxJobsPerHostMax:
		return bad("max_jobs_per_host_user %d is outside [0, %d]", c.MaxJobsPerHostUser, MaxJobsPerHostMax)
	case c.MaxRequestsPerHostPerSec < 0 || c.MaxRequestsPerHostPerSec > MaxRequestsPerHostPerSecMax:
		return bad("max_requests_per_host_per_sec %d is outside [0, %d]", c.MaxRequestsPerHostPerSec, MaxRequestsPerHostPerSecMax)
	case c.MaxRequestsPerHostUserPerSec < 0 || c.MaxRequestsPerHostUserPerSec > MaxRequestsPerHostPerSecMax:
		return bad("max_requests_per_host_user_per_sec %d is outside [0, %d]", c.MaxRequestsPerHostUserPerSec, MaxRequestsPerHostPerSecMax)
	}
	return nil
}

// budgets are the budgets of running replications per host, and per
// host and user.
func (c Config) budgets() replicator.Budgets {
	return replicator.Budgets{PerHost: c.MaxJobsPerHost, PerHostUser: c.MaxJobsPerHostUser}
}

// userLimit is how many replications of one user who is not a server
// admin may run at once in the whole cluster: MaxJobsPerUserPercent of
// MaxJobs, rounded up, at least 1.
func (c Config) userLimit() int {
	return max(1, (c.MaxJobs*c.MaxJobsPerUserPercent+99)/100)
}

// stallPreempts reports whether one-shot runs that make no progress are
// stopped while jobs wait.
func (c Config) stallPreempts() bool { return c.OneShotStallPreempt > 0 }

// parks reports whether continuous jobs park when idle.
func (c Config) parks() bool { return c.ParkAfter > 0 }

// stopGrace is how long a stopping run may take for its final checkpoint.
func (c Config) stopGrace() time.Duration { return min(stopGraceMax, c.ShutdownTimeout/2) }

// acceptWaitMax bounds how long a fetcher that found no runnable job
// waits on the queue's watch before it looks again: StartupJitter, at
// most one Interval. A watch wakes it as soon as a job is enqueued; the
// bound matters for jobs whose scheduled time comes without a write (a
// crashing job's backoff ending), which it sees within this time.
func (c Config) acceptWaitMax() time.Duration { return min(c.StartupJitter, c.Interval) }

// heartbeat is the period of a running job's Update: StatsUpdateInterval,
// at most Interval (a job whose document was deleted stops within an
// interval: the heartbeat finds it removed) and a third of the job
// timeout.
func (c Config) heartbeat() time.Duration {
	hb := c.StatsUpdateInterval
	if hb == 0 {
		hb = c.JobTimeout / 3
	}
	return min(hb, c.Interval, c.JobTimeout/3)
}

// backoffJitter is the part of a crash's backoff taken off at random.
const backoffJitter = 0.25

// retryPolicy is the crash backoff as the job layer's retry policy:
// min(MinBackoff * 2^(n-1), MaxBackoff) after the n-th consecutive crash,
// minus up to a quarter.
func (c Config) retryPolicy() fdbjobs.ExponentialRetry {
	return fdbjobs.ExponentialRetry{Min: c.MinBackoff, Max: c.MaxBackoff, Jitter: backoffJitter}
}

// backoff is the wait after the n-th consecutive crash (n >= 1), with
// jitter in [0, 1) picking how much of the quarter is taken off (chosen
// outside the crash's transaction: replicator.Change.Jitter).
func (c Config) backoff(n int, jitter float64) time.Duration {
	return c.retryPolicy().Delay(n, jitter)
}

func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "fdbrep"
	}
	return h
}
