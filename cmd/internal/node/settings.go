package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// The settings of a node's services, from its configuration.

func secs(cfg *config.Config, key string) time.Duration {
	return time.Duration(cfg.Int("replicator", key)) * time.Second
}

func millis(cfg *config.Config, section, key string) time.Duration {
	return time.Duration(cfg.Int(section, key)) * time.Millisecond
}

// fairShareWindow maps fair_share_window_sec to Config.FairShareWindow:
// the default (86400) is the replicator's FairShareWindowDefault with fair
// share on; 0 disables fair share, which the replicator spells as a
// negative window (its zero value means "use the default").
func fairShareWindow(cfg *config.Config) time.Duration {
	window := secs(cfg, "fair_share_window_sec")
	if window == 0 {
		return -1
	}
	return window
}

// clusterConfig maps [replicator] and [replicator.shares] to the
// replicator's cluster-wide settings.
func clusterConfig(cfg *config.Config, log *zerolog.Logger, metrics *replicator.Metrics) replicator.Config {
	return replicator.Config{
		JobTimeout:      secs(cfg, "job_timeout_sec"),
		JobShards:       int(cfg.Int("replicator", "job_shards")),
		MaxHistory:      int(cfg.Int("replicator", "max_history")),
		StartupJitter:   millis(cfg, "replicator", "startup_jitter"),
		Shares:          cfg.AllShares(),
		UsageCoeff:      cfg.Float("replicator", "usage_coeff"),
		PriorityCoeff:   cfg.Float("replicator", "priority_coeff"),
		FairShareWindow: fairShareWindow(cfg),
		Metrics:         metrics,
		Logger:          log,
	}
}

// nodeConfig maps [replicator] to a replication node's settings.
func nodeConfig(cfg *config.Config, cluster replicator.Config, docs replicator.DocUpdater) (scheduler.Config, error) {
	defaults, err := JobDefaults(cfg)
	if err != nil {
		return scheduler.Config{}, err
	}
	return scheduler.Config{
		Config:              cluster,
		NodeName:            cfg.NodeName(),
		MaxJobs:             int(cfg.Int("replicator", "max_jobs")),
		MaxChurn:            int(cfg.Int("replicator", "max_churn")),
		MaxAcceptors:        int(cfg.Int("replicator", "max_acceptors")),
		Interval:            cfg.Interval(),
		MinRunTime:          secs(cfg, "min_run_time_sec"),
		MinBackoff:          secs(cfg, "min_backoff_penalty_sec"),
		MaxBackoff:          secs(cfg, "max_backoff_penalty_sec"),
		HealthThreshold:     cfg.HealthThreshold(),
		TransientJobMaxAge:  secs(cfg, "transient_job_max_age_sec"),
		StatsUpdateInterval: secs(cfg, "stats_update_interval_sec"),
		ProgressInterval:    millis(cfg, "replicator", "progress_interval_msec"),
		JobDefaults:         defaults,
		DocUpdater:          docs,
	}, nil
}

// JobDefaults maps [replicator]'s defaults of the replications' own
// settings; socket_options that fdbrep cannot apply is an error.
func JobDefaults(cfg *config.Config) (replicator.JobDefaults, error) {
	retries := int(cfg.Int("replicator", "retries_per_request"))
	if retries == 0 {
		retries = -1 // the engine's "no retries"
	}
	socket, err := couch.ParseSocketOptions(cfg.String("replicator", "socket_options"))
	if err != nil {
		return replicator.JobDefaults{}, fmt.Errorf("%w: [replicator] %s", config.ErrInvalidValue,
			strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
	}
	return replicator.JobDefaults{
		WorkerProcesses:    int(cfg.Int("replicator", "worker_processes")),
		WorkerBatchSize:    int(cfg.Int("replicator", "worker_batch_size")),
		HTTPConnections:    int(cfg.Int("replicator", "http_connections")),
		ConnectionTimeout:  millis(cfg, "replicator", "connection_timeout"),
		RetriesPerRequest:  retries,
		CheckpointInterval: millis(cfg, "replicator", "checkpoint_interval"),
		NoCheckpoints:      !cfg.Bool("replicator", "use_checkpoints"),
		NoBulkGet:          !cfg.Bool("replicator", "use_bulk_get"),
		SocketOptions:      &socket,
	}, nil
}

// ClientSettings maps [replicator]'s TLS and authentication keys to the
// settings of every replication's HTTP clients, reading the certificate
// files: a missing or unreadable file, or a wrong key passphrase, is a
// configuration error here, at start-up.
func ClientSettings(cfg *config.Config) (engine.ClientSettings, error) {
	depth := int(cfg.Int("replicator", "ssl_certificate_max_depth"))
	if depth == 0 {
		depth = couch.MaxDepthNone
	}
	tlsCfg, err := couch.TLSSettings{
		NoVerify:    !cfg.Bool("replicator", "verify_ssl_certificates"),
		CAFile:      cfg.String("replicator", "ssl_trusted_certificates_file"),
		MaxDepth:    depth,
		CertFile:    cfg.String("replicator", "cert_file"),
		KeyFile:     cfg.String("replicator", "key_file"),
		KeyPassword: cfg.String("replicator", "password"),
	}.Config()
	if err != nil {
		return engine.ClientSettings{}, fmt.Errorf("%w: %s", config.ErrInvalidValue,
			strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
	}
	auth := couch.AuthBasic
	if slices.Contains(cfg.List("replicator", "auth_plugins"), "couch_replicator_auth_session") {
		auth = couch.AuthSession
	}
	return engine.ClientSettings{
		TLS:                    tlsCfg,
		Auth:                   auth,
		SessionRefreshInterval: secs(cfg, "session_refresh_interval_sec"),
		IdleConnTimeout:        millis(cfg, "replicator", "connection_close_interval"),
	}, nil
}

func jobsConfig(cfg *config.Config, log *zerolog.Logger, members func() (string, []string)) fdbjobs.Config {
	return fdbjobs.Config{
		Members:                  members,
		Logger:                   log,
		ActivityMonitorMaxJitter: millis(cfg, "couch_jobs", "activity_monitor_max_jitter_msec"),
		NotifierHoldoff:          millis(cfg, "couch_jobs", "type_monitor_holdoff_msec"),
		TypeCheckPeriod:          millis(cfg, "couch_jobs", "type_check_period_msec"),
		BatchSize:                int(cfg.Int("couch_jobs", "batch_size")),
		TimeUnit:                 replicator.TimeUnit,
	}
}

// checkConfig is what a configuration must pass, beyond the registry's
// rules, before a node applies it: the replication node's settings built
// from it (job defaults, socket_options, the scheduler's own checks),
// whatever the node's roles, so that a cluster-wide value is good for
// every node.
func checkConfig(c *config.Config) error {
	ncfg, err := nodeConfig(c, clusterConfig(c, nil, nil), nil)
	if err != nil {
		return err
	}
	return scheduler.CheckConfig(ncfg)
}
