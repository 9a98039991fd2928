package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// TestLifecycleLogs checks the one structured line per event an operator
// cares about (see doc.go, "Logs"): each names the job, its database and
// document and the node, and none carries a password.
func TestLifecycleLogs(t *testing.T) {
	logs := &testutil.Logs{}
	cfg := testConfig()
	cfg.Logger = logs.Logger()
	cfg.MaxJobs, cfg.MaxChurn = 1, 1
	cfg.HealthThreshold = 100 * time.Millisecond
	c, eng := simCluster(t, 1, cfg, 0, 0)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	const secret = "s3cret-pw"
	src := func(name string) string { return fmt.Sprintf("http://u:%s@127.0.0.1:9/%s/", secret, name) }
	doc := func(id string) func(map[string]any) bool {
		return func(m map[string]any) bool {
			return m["doc_id"] == id && m["db"] == "_replicator" && m["node"] == "node0" && m["job_id"] != ""
		}
	}

	// Added, started, completed.
	c.PutDoc("_replicator", "once", repDoc(src("once"), "http://127.0.0.1:9/t", false))
	logs.WaitFor(t, "replication added by document", func(m map[string]any) bool { return m["doc_id"] == "once" && m["state"] == "pending" })
	started := logs.WaitFor(t, "replication started", doc("once"))
	require.Contains(t, started["source"], "127.0.0.1:9/once/")
	require.EqualValues(t, engine.WorkerProcessesDefault, started["worker_processes"])
	done := logs.WaitFor(t, "replication completed", doc("once"))
	require.Contains(t, done, "docs_written")
	require.Contains(t, done, "duration")

	// Crashed, with why and when it is retried; then healed once it has
	// run for HealthThreshold.
	eng.SetFail("http://127.0.0.1:9/crash/", fmt.Errorf("%w: could not open http://127.0.0.1:9/crash/", engine.ErrDBNotFound))
	c.PutDoc("_replicator", "crash", repDoc(src("crash"), "http://127.0.0.1:9/t", true))
	crashed := logs.WaitFor(t, "replication crashed", doc("crash"))
	require.Equal(t, "db_not_found", crashed["error"])
	require.Contains(t, crashed["reason"], "could not open")
	require.EqualValues(t, 1, crashed["error_count"])
	retryAt, err := time.Parse(time.RFC3339, crashed["retry_at"].(string))
	require.NoError(t, err)
	require.True(t, retryAt.After(time.Now().Add(-time.Minute)), "retry_at is a time to come: %v", retryAt)
	eng.SetFail("http://127.0.0.1:9/crash/", nil)
	logs.WaitFor(t, "replication healed", doc("crash"))

	// Rotation: with room for one job, a second continuous job takes the
	// first one's turn.
	c.PutDoc("_replicator", "other", repDoc(src("other"), "http://127.0.0.1:9/t", true))
	stopped := logs.WaitFor(t, "replication stopped", func(m map[string]any) bool { return m["why"] == "rotation: another job's turn" })
	require.Contains(t, []any{"crash", "other"}, stopped["doc_id"])

	// Failed: the same replication twice for one owner.
	c.PutDoc("_replicator", "dup", repDoc(src("other"), "http://127.0.0.1:9/t", true))
	failed := logs.WaitFor(t, "replication failed", doc("dup"))
	require.Contains(t, failed["reason"], "already started")
	c.WaitDocState("_replicator", "dup", replicator.StateFailed)

	// Removed: a running job whose document is deleted stops, and its
	// node says why (its heartbeat finds the job gone).
	c.PutDoc("_replicator", "crash", nil)
	c.PutDoc("_replicator", "other", nil)
	c.PutDoc("_replicator", "gone", repDoc(src("gone"), "http://127.0.0.1:9/t", true))
	c.WaitDocState("_replicator", "gone", replicator.StateRunning)
	c.PutDoc("_replicator", "gone", nil)
	removed := logs.WaitFor(t, "replication stopped", doc("gone"))
	require.Contains(t, removed["why"], "its job was removed")

	require.NotContains(t, logs.String(), secret)
}
