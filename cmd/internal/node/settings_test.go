package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// fair_share_window_sec maps to the replicator's window: the default
// config gives the replicator's default (fair share on), 0 disables it.
func TestReplicatorConfigFairShareWindow(t *testing.T) {
	db := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		environ []string
		want    time.Duration
	}{
		{"default", nil, replicator.FairShareWindowDefault},
		{"explicit hour", []string{config.EnvName("replicator", "fair_share_window_sec") + "=3600"}, time.Hour},
		{"ten minutes", []string{config.EnvName("replicator", "fair_share_window_sec") + "=600"}, 10 * time.Minute},
		{"disabled", []string{config.EnvName("replicator", "fair_share_window_sec") + "=0"}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(nil, tc.environ)
			require.NoError(t, err)
			rc, err := nodeConfig(cfg, clusterConfig(cfg, nil, replicator.NewMetrics()), nil, nil)
			require.NoError(t, err)
			n, err := scheduler.New(replicator.NewStore(db, jobs, nil), nil, rc)
			require.NoError(t, err)
			got := n.Config().FairShareWindow
			if tc.want < 0 {
				require.Negative(t, got, "fair share disabled")
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, 24*time.Hour, replicator.FairShareWindowDefault)
}

// The config file's defaults are the replicator's own: a node started
// without configuration schedules as the replicator package documents.
func TestReplicatorConfigDefaultsMatchThePackage(t *testing.T) {
	cfg := config.Default()
	got, err := nodeConfig(cfg, clusterConfig(cfg, nil, nil), nil, nil)
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"max_jobs", got.MaxJobs, scheduler.MaxJobsDefault},
		{"max_churn", got.MaxChurn, scheduler.MaxChurnDefault},
		{"max_acceptors", got.MaxAcceptors, scheduler.MaxAcceptorsDefault},
		{"interval", got.Interval, scheduler.IntervalDefault},
		{"min_run_time", got.MinRunTime, scheduler.MinRunTimeDefault},
		{"startup_jitter", got.StartupJitter, replicator.StartupJitterDefault},
		{"min_backoff", got.MinBackoff, scheduler.MinBackoffDefault},
		{"max_backoff", got.MaxBackoff, scheduler.MaxBackoffDefault},
		{"health_threshold", got.HealthThreshold, scheduler.HealthThresholdDefault},
		{"max_history", got.MaxHistory, replicator.MaxHistoryDefault},
		{"transient_job_max_age", got.TransientJobMaxAge, scheduler.TransientJobMaxAgeDefault},
		{"job_timeout", got.JobTimeout, replicator.JobTimeoutDefault},
		{"stats_update_interval", got.StatsUpdateInterval, scheduler.StatsUpdateIntervalDefault},
		{"usage_coeff", got.UsageCoeff, replicator.UsageCoeffDefault},
		{"priority_coeff", got.PriorityCoeff, replicator.PriorityCoeffDefault},
		{"fair_share_window", got.FairShareWindow, replicator.FairShareWindowDefault},
	} {
		require.EqualValues(t, c.want, c.got, c.name)
	}
}
