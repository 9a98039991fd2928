package node

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator"
)

// A scrape answers while the store does not: each kind's read of its
// counts gives up after fdbjobs.MetricsReadTimeoutDefault, and the text
// has the replicator's metrics without the store's counts.
func TestMetricsStoreHangs(t *testing.T) {
	db := faultkv.NewCuttable(kvtest.NewDB(t))
	var logs testutil.SyncBuffer
	log := zerolog.New(&logs)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{Logger: &log})
	require.NoError(t, err)
	reg, err := jobsRegistry(jobs)
	require.NoError(t, err)
	m := &nodeMetrics{Metrics: replicator.NewMetrics(), jobs: reg, log: &log}
	require.Contains(t, m.Prometheus(), "\n"+`fdbjobs_jobs{kind="rep_watch",state="pending"} 0`+"\n")

	db.Hang(time.Hour)
	text := m.Prometheus()
	require.Contains(t, text, "\ncouchdb_couch_replicator_jobs_adds_total 0\n")
	require.NotContains(t, text, "fdbjobs_jobs{")
	for _, kind := range []string{replicator.JobType, replicator.WatchType} {
		require.Contains(t, logs.String(), `"kind":"`+kind+`"`)
	}
	require.Contains(t, logs.String(), "reading the counts")
}
