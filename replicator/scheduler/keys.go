package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
)

// The [replicator] keys of a replication node's own settings (Config),
// each declared once: its default is this package's constant.
var (
	keyMaxJobs = config.RegisterInt("replicator", "max_jobs", MaxJobsDefault, 1, fdbjobs.ConcurrencyMax,
		"Most replication jobs running on one replication node.", config.Live(config.ApplyReplication))
	keyMaxChurn = config.RegisterInt("replicator", "max_churn", MaxChurnDefault, 1, config.Unbounded,
		"Most jobs one node stops per scheduling interval to give their slots to waiting jobs (rotation, when more continuous jobs are runnable than the nodes may run), or moves to nodes that run fewer; jobs stopped because max_jobs was lowered count against it but all stop. It does not bound starts: a node takes pending jobs into all the room it has under max_jobs (under its share of the jobs while the nodes balance).",
		config.Live(config.ApplyReplication))
	keyMaxAcceptors = config.RegisterInt("replicator", "max_acceptors", MaxAcceptorsDefault, 1, fdbjobs.FetchersMax,
		"Acceptors of one node (fetchers of its job Runtime), each taking up to 25 pending jobs at a time; read when the node starts.")
	keyInterval = config.RegisterDuration("replicator", "interval_sec", time.Second, IntervalDefault, time.Second, config.Forever,
		"Seconds between scheduling cycles.", config.Live(config.ApplyReplication))
	_ = config.RegisterDuration("replicator", "interval", time.Millisecond, IntervalDefault, time.Second, config.Forever,
		"CouchDB 3.x's name for the scheduling interval, in milliseconds; set interval_sec or interval, not both.",
		config.Live(config.ApplyReplication), config.AliasOf("interval_sec"))
	keyMinRunTime = config.RegisterDuration("replicator", "min_run_time_sec", time.Second, MinRunTimeDefault, time.Second, config.Forever,
		"A continuous job runs at least this long before the scheduler may stop it for another.", config.Live(config.ApplyReplication))
	keyTransientJobMaxAge = config.RegisterDuration("replicator", "transient_job_max_age_sec", time.Second, TransientJobMaxAgeDefault, time.Second, config.Forever,
		"Finished /_replicate jobs are forgotten this long after their last update.", config.Live(config.ApplyReplication))
	keyMinBackoff = config.RegisterDuration("replicator", "min_backoff_penalty_sec", time.Second, MinBackoffDefault, time.Second, config.Forever,
		"Delay before a crashed job is retried after its first consecutive crash, doubled at each further one; each delay is shortened by up to a quarter at random.",
		config.Live(config.ApplyReplication))
	keyMaxBackoff = config.RegisterDuration("replicator", "max_backoff_penalty_sec", time.Second, MaxBackoffDefault, time.Second, MaxBackoffLimit,
		"Greatest delay before a crashed job is retried (before its random shortening by up to a quarter); at least min_backoff_penalty_sec.",
		config.Live(config.ApplyReplication))
	keyHealthThreshold = config.RegisterDuration("replicator", "health_threshold_sec", time.Second, HealthThresholdDefault, time.Second, config.Forever,
		"A job that has run this long since its last start is healed: its count of consecutive crashes, which doubles its backoff at each crash, starts again (at its next stats update while it runs; a crash later than this counts as the first). A crash sooner adds to the count.",
		config.Live(config.ApplyReplication))
	_ = config.RegisterDuration("replicator", "health_threshold", time.Second, HealthThresholdDefault, time.Second, config.Forever,
		"CouchDB 3.x's name for health_threshold_sec, in seconds too; set health_threshold_sec or health_threshold, not both.",
		config.Live(config.ApplyReplication), config.AliasOf("health_threshold_sec"))
	keyProgressInterval = config.RegisterDuration("replicator", "progress_interval_msec", time.Millisecond, ProgressIntervalDefault, 100*time.Millisecond, time.Minute,
		"Milliseconds between a replication node's writes of the live counters of its running jobs that changed (documents read and written, sequences), which _active_tasks and the _scheduler views show between heartbeats: one transaction per node per interval, about 400 bytes per job whose counters moved.",
		config.Live(config.ApplyReplication))
	keyParkAfter = config.RegisterDuration("replicator", "park_after_sec", time.Second, ParkAfterDefault, 0, config.Forever,
		"Seconds a continuous replication stays caught up with no change to copy before it parks while no replication waits for a slot: it checkpoints, gives its slot and connections back, and waits in the store until a change to its source wakes it (docs/COMPAT.md, \"Parked replications\"). It parks so only where its source's server gives it a _db_updates feed, which wakes it within about a second of a change; without one it keeps its slot, as in CouchDB. 0: replications never park, and hold their slot while idle as CouchDB's do.",
		config.Live(config.ApplyReplication))
	keyParkWhenWaitingAfter = config.RegisterDuration("replicator", "park_when_waiting_after_sec", time.Second, ParkWhenWaitingAfterDefault, time.Second, config.Forever,
		"Seconds a continuous replication stays caught up with no change to copy before it parks while other replications wait for a slot, so that its slot goes to one with work to do. Without a _db_updates feed at its source it parks so only where its watch's poll (watch_poll_interval_sec) is no slower than rotation would bring it back (at least min_run_time_sec: with the defaults, whenever one waits); one that rotation stops while caught up parks under the same rule. park_after_sec 0 turns this off too.",
		config.Live(config.ApplyReplication))
	keyParkSweep = config.RegisterDuration("replicator", "park_sweep_sec", time.Second, ParkSweepDefault, time.Second, config.Forever,
		"Seconds a parked replication waits at most: it runs again then, whether or not a change woke it.",
		config.Live(config.ApplyReplication))
	keyMaxWatches = config.RegisterInt("replicator", "max_watches", MaxWatchesDefault, 1, 100_000,
		"Most watches of parked replications one replication node follows at once, beside its max_jobs slots: a watch follows one source server's _db_updates feed for the parked replications of that server and user, or polls them. It bounds the templates (one _replicator document for many databases) a node follows at once too.",
		config.Live(config.ApplyReplication))
	keyWatchPollInterval = config.RegisterDuration("replicator", "watch_poll_interval_sec", time.Second, WatchPollIntervalDefault, time.Second, config.Forever,
		"Seconds between two poll cycles of a watch whose source server gives no _db_updates feed (it checks each parked replication of that server once a cycle).",
		config.Live(config.ApplyReplication))
	keyWatchPollRate = config.RegisterInt("replicator", "watch_poll_rate", WatchPollRateDefault, 1, 100_000,
		"Most requests per second a replication node's polling watches make in all, one per parked replication checked.",
		config.Live(config.ApplyReplication))
	keyMaxJobsPerUserPercent = config.RegisterInt("replicator", "max_jobs_per_user_percent", MaxJobsPerUserPercentDefault, 1, 100_000,
		"Most replications of one user who is not a server admin that run at once in the whole cluster, in percent of max_jobs (of the node that starts one; rounded up, at least 1): 125 at the default max_jobs. A node that takes a job of a user who runs that many puts it back without running it, behind the jobs that wait (its view shows the stall user_limit), and the user's continuous replications take turns; server admins' replications are not limited (docs/COMPAT.md, \"Per-user limits\").",
		config.Live(config.ApplyReplication))
	keyMaxJobsPerHost = config.RegisterInt("replicator", "max_jobs_per_host", MaxJobsPerHostDefault, 0, MaxJobsPerHostMax,
		"Most replications with an endpoint (source or target) on one host (scheme, name and port) that run at once in the whole cluster; 0: no bound. A node that takes a job of a host that runs that many puts it back without running it (its view shows the stall budget, naming the host), and the next replication of the host to stop wakes it (docs/COMPAT.md, \"Budgets per host\"). Turn it on once every node runs a version that has it.",
		config.Live(config.ApplyReplication))
	keyMaxJobsPerHostUser = config.RegisterInt("replicator", "max_jobs_per_host_user", MaxJobsPerHostUserDefault, 0, MaxJobsPerHostMax,
		"Most replications with an endpoint on one host that logs in as one user (its username, or its token's client id) that run at once in the whole cluster; 0: no bound. As max_jobs_per_host, for a host whose quota is per account (docs/COMPAT.md, \"Budgets per host\").",
		config.Live(config.ApplyReplication))
	keyMaxRequestsPerHostPerSec = config.RegisterInt("replicator", "max_requests_per_host_per_sec", MaxRequestsPerHostPerSecDefault, 0, MaxRequestsPerHostPerSecMax,
		"Most requests a second that the replications of the whole cluster send to one endpoint host (scheme, name and port), on average; 0: no bound. Each host's budget is a token bucket in the store holding a second's worth, from which each replication node takes a tenth of a second's worth at a time. The per-node back-off on 429 answers applies beside it (docs/COMPAT.md, \"Budgets per host\").",
		config.Live(config.ApplyReplication), config.InUnit("requests per second"))
	keyMaxRequestsPerHostUserPerSec = config.RegisterInt("replicator", "max_requests_per_host_user_per_sec", MaxRequestsPerHostUserPerSecDefault, 0, MaxRequestsPerHostPerSecMax,
		"Most requests a second that the replications of the whole cluster send to one endpoint host logging in as one user (its username, or its token's client id), on average; 0: no bound. As max_requests_per_host_per_sec, for a host whose quota of requests is per account (docs/COMPAT.md, \"Budgets per host\"); a request counts against both.",
		config.Live(config.ApplyReplication), config.InUnit("requests per second"))
	keyOneShotStallPreempt = config.RegisterDuration("replicator", "one_shot_stall_preempt_sec", time.Second, OneShotStallPreemptDefault, 0, config.Forever,
		"Seconds a one-shot replication may make no progress (no document read or written, no batch finished) while other replications wait for a slot before its node stops it, with a final checkpoint if it can, and queues it behind them; a POST /_replicate that started it goes on waiting for its result. 0: one-shot replications are never stopped, as in CouchDB.",
		config.Live(config.ApplyReplication))
	keyStatsUpdateInterval = config.RegisterDuration("replicator", "stats_update_interval_sec", time.Second, StatsUpdateIntervalDefault, time.Second, config.Forever,
		"Seconds between writes of a running job's stats to its job data (its heartbeat; at most interval_sec and a third of job_timeout_sec); checkpoints write them too.",
		config.Live(config.ApplyReplication))
)

func init() {
	config.RegisterCheck(func(c *config.Config) error {
		if lo, hi := keyMinBackoff.Get(c), keyMaxBackoff.Get(c); hi < lo {
			return fmt.Errorf("%w: [replicator] %s %d (%s) is under %s %d (%s)", config.ErrInvalidValue,
				keyMaxBackoff.Name(), hi/time.Second, c.Source("replicator", keyMaxBackoff.Name()),
				keyMinBackoff.Name(), lo/time.Second, c.Source("replicator", keyMinBackoff.Name()))
		}
		return nil
	})
}

// FromConfig returns a replication node's settings from c: the cluster's
// (replicator.FromConfig), the node's name, its [replicator] keys and the
// replications' defaults. The rest (DocUpdater, Cluster, Logger, Metrics)
// is the caller's; the Config is not checked (see CheckConfig).
func FromConfig(c *config.Config) (Config, error) {
	defaults, err := replicator.JobDefaultsFromConfig(c)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Config:                       replicator.FromConfig(c),
		NodeName:                     c.NodeName(),
		MaxJobs:                      int(keyMaxJobs.Get(c)),
		MaxChurn:                     int(keyMaxChurn.Get(c)),
		MaxAcceptors:                 int(keyMaxAcceptors.Get(c)),
		Interval:                     keyInterval.Get(c),
		MinRunTime:                   keyMinRunTime.Get(c),
		MinBackoff:                   keyMinBackoff.Get(c),
		MaxBackoff:                   keyMaxBackoff.Get(c),
		HealthThreshold:              keyHealthThreshold.Get(c),
		TransientJobMaxAge:           keyTransientJobMaxAge.Get(c),
		StatsUpdateInterval:          keyStatsUpdateInterval.Get(c),
		ProgressInterval:             keyProgressInterval.Get(c),
		ParkAfter:                    cmp.Or(keyParkAfter.Get(c), ParkNever), // 0: never
		ParkSweep:                    keyParkSweep.Get(c),
		ParkWhenWaitingAfter:         keyParkWhenWaitingAfter.Get(c),
		MaxWatches:                   int(keyMaxWatches.Get(c)),
		WatchPollInterval:            keyWatchPollInterval.Get(c),
		WatchPollRate:                int(keyWatchPollRate.Get(c)),
		MaxJobsPerUserPercent:        int(keyMaxJobsPerUserPercent.Get(c)),
		MaxJobsPerHost:               int(keyMaxJobsPerHost.Get(c)),
		MaxJobsPerHostUser:           int(keyMaxJobsPerHostUser.Get(c)),
		MaxRequestsPerHostPerSec:     int(keyMaxRequestsPerHostPerSec.Get(c)),
		MaxRequestsPerHostUserPerSec: int(keyMaxRequestsPerHostUserPerSec.Get(c)),
		OneShotStallPreempt:          cmp.Or(keyOneShotStallPreempt.Get(c), StallPreemptNever), // 0: never
		JobDefaults:                  defaults,
		NonAdmins:                    nonAdmins(c),
	}, nil
}

// nonAdmins are c's accounts that are not server admins.
func nonAdmins(c *config.Config) map[string]bool {
	admins := c.Admins()
	out := map[string]bool{}
	for name := range c.Users() {
		if _, admin := admins[name]; !admin && !slices.Contains(c.UserRoles(name), "_admin") {
			out[name] = true
		}
	}
	return out
}
