package wire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// A replication between two databases of a real CouchDB 3.5 shows its
// counters moving in _active_tasks and _scheduler/docs while it runs,
// though its heartbeats and checkpoints are an hour apart: the node
// writes its running jobs' counters every progress interval, and
// changes_pending (CouchDB's sequences are opaque) counts down from the
// source's count at the start by the changes processed.
func TestProgressMovesWhileItRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	// No heartbeat while it runs (every 20 minutes: a third of the job
	// timeout), so that what the views show comes from the live counters.
	e := newServiceWith(t, func(c *scheduler.Config) {
		c.Interval, c.StatsUpdateInterval = time.Hour, time.Hour
		c.ProgressInterval = 50 * time.Millisecond
	}, func(m map[string]map[string]string) { m["replicator"]["job_timeout_sec"] = "3600" })
	const docs = 20_000
	couch.CreateDB(t, "src")
	couch.AddDocs(t, "src", 0, docs)
	// Small batches, one worker: the run takes many round trips.
	rep := map[string]any{"source": couch.AuthDBURL("src"), "target": couch.AuthDBURL("tgt"), "create_target": true,
		"worker_processes": 1, "worker_batch_size": 100, "checkpoint_interval": 3_600_000}
	r := e.do("PUT", "/_replicator/big", asAdmin, rep)
	require.Equal(t, 201, r.Status, r.Raw)

	// Each look at the views while the job runs: what they say it wrote.
	var tasks, rows []float64
	var pending []any // changes_pending while documents are written
	testutil.Eventually(t, "the replication completed", func() bool {
		r := e.do("GET", "/_active_tasks", asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		for _, x := range r.List {
			if n, ok := x.(map[string]any)["docs_written"].(float64); ok {
				tasks = append(tasks, n)
			}
		}
		r = e.do("GET", "/_scheduler/docs/_replicator/big", asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		if r.Body["state"] == "running" {
			if info, ok := r.Body["info"].(map[string]any); ok {
				rows = append(rows, info["docs_written"].(float64))
				if info["docs_written"].(float64) > 0 {
					pending = append(pending, info["changes_pending"])
				}
			}
		}
		return r.Body["state"] == "completed"
	})
	t.Logf("docs_written seen in _active_tasks: %v; in _scheduler/docs: %v", tasks, rows)
	for _, seen := range [][]float64{tasks, rows} {
		between := map[float64]bool{}
		for _, n := range seen {
			if n > 0 && n < docs {
				between[n] = true
			}
		}
		require.GreaterOrEqual(t, len(between), 2, "the counters moved while the job ran: %v", seen)
	}
	require.NotEmpty(t, pending)
	for _, p := range pending {
		require.IsType(t, float64(0), p, "changes_pending is known while the job runs: %v", pending)
	}
	t.Logf("changes_pending seen: %v", pending)
	require.Less(t, pending[len(pending)-1], pending[0], "changes_pending counts down as the job runs")
	require.Equal(t, docs, docCount(couch.AuthDBURL("tgt")))
}
