package wire_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// Both roles' /_node/_local/_prometheus, the ones deploy/prometheus
// scrapes (a frontend's API port, a replication node's health port),
// end with the job layer's metrics: the store's jobs of rep_jobs and
// rep_watch per state, on a node that never worked either; each family
// described once, and promtool's lint passes.
func TestJobLayerMetrics(t *testing.T) {
	t.Parallel()
	db := kvtest.NewDB(t)
	logs := &testutil.Logs{}
	fe := startNode(t, db, logs, settings("fe@127.0.0.1", config.RoleAPIFrontend), tuneDefault)
	scrape := func(url string, c *creds) string {
		t.Helper()
		r := testutil.Do(t, "GET", url+"/_node/_local/_prometheus", c, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		return r.Raw
	}
	// Each family's HELP and TYPE once, the job layer's after CouchDB's.
	check := func(text string) {
		t.Helper()
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "# ") {
				require.Equal(t, 1, strings.Count(text, line+"\n"), "%q twice in:\n%s", line, text)
			}
		}
		require.Less(t, strings.LastIndex(text, "# HELP couchdb_"), strings.Index(text, "# HELP fdbjobs_"), text)
		promtoolCheck(t, text, "check", "metrics")
	}

	// No replication node: the frontend's job waits in the queue.
	require.Equal(t, 201, testutil.Do(t, "PUT", "http://"+fe.Addr+"/_replicator/waits", asAdmin, repDoc()).Status)
	var text string
	testutil.Eventually(t, "the job pending in the frontend's metrics", func() bool {
		text = scrape("http://"+fe.Addr, asAdmin)
		return strings.Contains(text, "\n"+`fdbjobs_jobs{kind="rep_jobs",state="pending"} 1`+"\n")
	})
	require.Contains(t, text, "# TYPE fdbjobs_jobs gauge\n")
	for _, state := range []string{"running", "completed", "cancelled", "discarded"} {
		require.Contains(t, text, "\n"+`fdbjobs_jobs{kind="rep_jobs",state="`+state+`"} 0`+"\n")
	}
	require.Contains(t, text, "\n"+`fdbjobs_jobs{kind="rep_watch",state="pending"} 0`+"\n")
	require.NotContains(t, text, "fdbjobs_jobs_inserted_total", "jobs added with Add are not counted as inserted")
	check(text)
	requireError(t, testutil.Do(t, "GET", "http://"+fe.Addr+"/_node/_local/_prometheus", nil, nil), 401, "unauthorized")

	// A replication node's health port: the same counts of the store (its
	// job moves between states as it runs and fails).
	rep := settings("rep@127.0.0.1", config.RoleReplication)
	withHealth(rep)
	rn := startNode(t, db, logs, rep, tuneDefault)
	require.NotEmpty(t, rn.HealthAddr)
	text = scrape("http://"+rn.HealthAddr, nil)
	for _, kind := range []string{"rep_jobs", "rep_watch"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^fdbjobs_jobs\{kind="`+kind+`",state="pending"\} \d+$`), text)
	}
	require.Contains(t, text, "couchdb_couch_replicator_node_heartbeat_age_seconds ")
	check(text)
}
