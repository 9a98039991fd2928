package node

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// The settings of a node's services, from its configuration.

// The [couch_jobs] keys: the job layer's settings (fdbjobs.Config), whose
// defaults are its constants. They are declared here, where the
// replicator configures its job layer: package fdbjobs, a library of its
// own, does not read fdbrep's configuration.
var (
	keyMonitorJitter = config.RegisterDuration("couch_jobs", "activity_monitor_max_jitter_msec", time.Millisecond, fdbjobs.ActivityMonitorMaxJitterDefault, time.Millisecond, config.Forever,
		"Cap of the random delay added to each activity monitor period.")
	keyNotifierHoldoff = config.RegisterDuration("couch_jobs", "type_monitor_holdoff_msec", time.Millisecond, fdbjobs.NotifierHoldoffDefault, time.Millisecond, config.Forever,
		"Least time between two rounds of a job notifier.")
	keyTypeCheckPeriod = config.RegisterDuration("couch_jobs", "type_check_period_msec", time.Millisecond, fdbjobs.TypeCheckPeriodDefault, time.Millisecond, config.Forever,
		"How often the list of job types is re-read as a fallback.")
	keyBatchSize = config.RegisterInt("couch_jobs", "batch_size", fdbjobs.BatchSizeDefault, 1, 100_000,
		"Jobs the activity monitor and notifier handle per transaction, initially.")
	keyMigrate = config.RegisterBool("couch_jobs", "migrate", false,
		"At start, rewrite a store whose jobs an earlier fdbrep wrote (job key layout 1, before 2026-11, or 2, without counts per state) into this version's layout, in place; without it such a store is refused. Stop every node of the earlier version first: it cannot read the new layout, nor keep the counts.")
)

// clusterConfig is the replicator's cluster-wide settings from cfg.
func clusterConfig(cfg *config.Config, log *zerolog.Logger, metrics *replicator.Metrics) replicator.Config {
	c := replicator.FromConfig(cfg)
	c.Metrics, c.Logger = metrics, log
	return c
}

// nodeConfig is a replication node's settings from cfg, adjusted by tune
// when not nil (Options.Tune).
func nodeConfig(cfg *config.Config, cluster replicator.Config, docs replicator.DocUpdater, tune func(*scheduler.Config)) (scheduler.Config, error) {
	c, err := scheduler.FromConfig(cfg)
	if err != nil {
		return scheduler.Config{}, err
	}
	c.DocUpdater = docs
	if tune != nil {
		tune(&c)
	}
	c.Config = cluster // not tuned: the control plane and the store share it
	return c, nil
}

func jobsConfig(cfg *config.Config, log *zerolog.Logger, members func() (string, []string)) fdbjobs.Config {
	return fdbjobs.Config{
		Members:                  members,
		Logger:                   log,
		ActivityMonitorMaxJitter: keyMonitorJitter.Get(cfg),
		NotifierHoldoff:          keyNotifierHoldoff.Get(cfg),
		TypeCheckPeriod:          keyTypeCheckPeriod.Get(cfg),
		BatchSize:                int(keyBatchSize.Get(cfg)),
		TimeUnit:                 replicator.TimeUnit,
	}
}

// checkConfig is what a configuration must pass, beyond the registry's
// rules, before a node applies it: the replication node's settings built
// from it (job defaults, socket_options, the scheduler's own checks),
// whatever the node's roles, so that a cluster-wide value is good for
// every node.
func checkConfig(c *config.Config) error {
	ncfg, err := nodeConfig(c, clusterConfig(c, nil, nil), nil, nil)
	if err != nil {
		return err
	}
	return scheduler.CheckConfig(ncfg)
}
