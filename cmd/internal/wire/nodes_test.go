package wire_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/cli"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// Issue 41 item 4, no replication node alive: a node with the api_frontend
// role alone, and a replication node that runs a continuous replication
// from a real CouchDB 3.5, then stops. The job goes back to pending and
// the views say why (no_replication_node, since it waits); POST
// /_replicate answers 500 timeout naming the cause once
// replicate_no_node_timeout_msec passed, and its job stays; fdbrep
// replicate prints the stall and says that the job stays. A replication
// node that joins runs them all.
func TestNoReplicationNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.CreateDB(t, "src")
	couch.AddDocs(t, "src", 0, 3)
	db := kvtest.NewDB(t)
	logs := &testutil.Logs{}
	fe := settings("fe@127.0.0.1", config.RoleAPIFrontend)
	fe["replicator"]["replicate_no_node_timeout_msec"] = "200"
	s := &service{t: t, url: "http://" + startNode(t, db, logs, fe, tuneDefault).Addr, logs: logs, db: db, tune: tuneDefault}
	info := func(row map[string]any) map[string]any {
		t.Helper()
		i, ok := row["info"].(map[string]any)
		require.True(t, ok, "info of %v", row)
		return i
	}

	_, stop := runNode(t, db, logs, settings("rep1@127.0.0.1", config.RoleReplication), tuneDefault)
	t.Cleanup(stop)
	r := s.do("PUT", "/_replicator/live", asAdmin, map[string]any{"source": couch.AuthDBURL("src"),
		"target": couch.AuthDBURL("tgt"), "create_target": true, "continuous": true})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Nil(t, info(s.waitDocState("_replicator", "live", "running"))["stall"])
	stop() // it leaves the membership, and puts its job back in the queue

	row := s.waitDocState("_replicator", "live", "pending")
	stall, ok := info(row)["stall"].(map[string]any)
	require.True(t, ok, "a pending job with no replication node alive shows a stall: %v", row)
	require.Equal(t, "no_replication_node", stall["reason"])
	require.Contains(t, stall["detail"], "no live node of the cluster has the replication role")
	require.Equal(t, row["last_updated"], stall["since"], "the node left no record: since the job waits")

	r = s.do("POST", "/_replicate", asAdmin, map[string]any{"source": couch.AuthDBURL("src"), "target": couch.AuthDBURL("tgt2"),
		"create_target": true})
	requireError(t, r, 500, "timeout")
	require.Contains(t, r.Body["reason"], "no replication node is alive in the cluster; the replication stays pending as job ")
	require.NotContains(t, r.Raw, ":"+couchtest.CouchPassword+"@")
	r = s.do("GET", "/_scheduler/jobs", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	jobs := r.Body["jobs"].([]any)
	require.Len(t, jobs, 2, "the POST's job stays: %s", r.Raw)
	for _, j := range jobs {
		require.Equal(t, "pending", j.(map[string]any)["state"])
		require.Equal(t, "no_replication_node", info(j.(map[string]any))["stall"].(map[string]any)["reason"])
	}

	// fdbrep replicate follows its job: the stall, not "pending: 0/?" alone,
	// then the cluster's reason.
	for _, k := range []string{cli.EnvCluster, cli.EnvUser, cli.EnvPassword, cli.EnvNetrc} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	t.Setenv("HOME", t.TempDir())
	var out bytes.Buffer
	err := cli.Replicate(context.Background(), []string{"-cluster", s.url, "-user", adminName, "-password", adminPass,
		"-progress", "plain", "-interval", "100ms", "-create-target", couch.AuthDBURL("src"), couch.AuthDBURL("tgt3")}, cli.Env{Stdout: &out, Stderr: &out})
	t.Logf("fdbrep replicate:\n%s%v", out.String(), err)
	var exit *cli.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, cli.ExitFailure, exit.Code)
	require.Regexp(t, `^no outcome: timeout: no replication node is alive in the cluster; the replication stays pending as job \S+ `+
		`.*; fdbrep replicate -cancel \S+ cancels it$`, err.Error())
	require.Regexp(t, `pending: 0/\? changes, 0 docs written, 0 failures; stalled: no_replication_node: no live node of the cluster `+
		`has the replication role; the job starts when one joins\n`, out.String())
	require.NotContains(t, out.String()+err.Error(), ":"+couchtest.CouchPassword+"@")

	// A replication node joins: every job runs, without a stall.
	startNode(t, db, logs, settings("rep2@127.0.0.1", config.RoleReplication), tuneDefault)
	require.Nil(t, info(s.waitDocState("_replicator", "live", "running"))["stall"])
	testutil.Eventually(t, "the POSTed replications copied their source", func() bool {
		return docCount(couch.AuthDBURL("tgt2")) == 3 && docCount(couch.AuthDBURL("tgt3")) == 3
	})
}
