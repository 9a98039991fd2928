package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/node"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// The runtime configuration and membership of whole nodes (serve and
// cluster in this process), and the server admin of a first run.

var adm = &testutil.Creds{Name: "adm", Pass: "pass"}

// countRunning returns how many of the documents' jobs run, per
// /_scheduler/docs.
func countRunning(t *testing.T, base string, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		r := testutil.Do(t, "GET", base+"/_scheduler/docs/_replicator/"+url.PathEscape(id), adm, nil)
		if r.Body["state"] == "running" {
			n++
		}
	}
	return n
}

// reschedules returns the node's count of scheduling intervals.
func reschedules(t *testing.T, base string) int64 {
	t.Helper()
	r := testutil.Do(t, "GET", base+"/_node/_local/_stats/couch_replicator/jobs/reschedules/value", adm, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	var n int64
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &n), r.Raw)
	return n
}

// Issue 11's "done when": PUT /_node/_local/_config/replicator/max_jobs
// takes effect within one interval, without a restart: lowering it stops
// the excess (even jobs younger than min_run_time), raising it starts the
// pending jobs again.
func TestRuntimeMaxJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pouchdb-server")
	}
	peer := couchtest.StartPouchDB(t)
	t.Setenv("FDBREP_ADMINS__ADM", "pass")
	t.Setenv("FDBREP_CHTTPD_AUTH__ITERATIONS", "10")
	t.Setenv("FDBREP_LOG__REQUESTS", "false")
	t.Setenv("FDBREP_REPLICATOR__INTERVAL_SEC", "1")
	t.Setenv("FDBREP_REPLICATOR__STARTUP_JITTER", "100")
	t.Setenv("FDBREP_REPLICATOR__MIN_RUN_TIME_SEC", "3600")
	// Parking off: the idle jobs a lower max_jobs stops would park, and a
	// parked replication shows running.
	t.Setenv("FDBREP_REPLICATOR__PARK_AFTER_SEC", "0")
	addr, logs := startServe(t, "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json")
	base := "http://" + addr
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})

	var ids []string
	for i := range 3 {
		src := fmt.Sprintf("src%d", i)
		peer.CreateDB(t, src)
		peer.AddDocs(t, src, 0, 5)
		id := fmt.Sprintf("rep%d", i)
		ids = append(ids, id)
		r := testutil.Do(t, "PUT", base+"/_replicator/"+id, adm, map[string]any{
			"source": peer.DBURL(src), "target": peer.DBURL(src + "-copy"), "create_target": true, "continuous": true})
		require.Equal(t, 201, r.Status, r.Raw)
	}
	testutil.Eventually(t, "3 jobs running", func() bool { return countRunning(t, base, ids) == 3 })

	for _, tc := range []struct {
		value, old string
		want       int
	}{{"1", "500", 1}, {"3", "1", 3}} {
		before := reschedules(t, base)
		r := testutil.Do(t, "PUT", base+"/_node/_local/_config/replicator/max_jobs", adm, `"`+tc.value+`"`)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, `"`+tc.old+`"`+"\n", r.Raw)
		testutil.Eventually(t, fmt.Sprintf("%d jobs running", tc.want), func() bool { return countRunning(t, base, ids) == tc.want })
		// Applied at the node's next interval, which stops the excess or
		// starts acceptors for the pending jobs: done before the one
		// after.
		require.LessOrEqual(t, reschedules(t, base)-before, int64(2), "max_jobs %s", tc.value)
	}
	require.Contains(t, logs.String(), `"section":"replicator","key":"max_jobs","value":"3","source":"_config (`)
	r := testutil.Do(t, "GET", base+"/_node/_local/_config/replicator/max_jobs", adm, nil)
	require.Equal(t, "\"3\"\n", r.Raw)
}

var passwordLine = regexp.MustCompile(`password: (\S+)`)

// A first start with no admin creates one and prints its password once,
// outside the log; a restart on the same data directory keeps it and
// prints nothing; -in-memory makes a new one at every start.
func TestFirstRunAdmin(t *testing.T) {
	t.Setenv("FDBREP_CHTTPD_AUTH__ITERATIONS", "10")
	dir := t.TempDir()
	serveOnce := func(args ...string) (string, string, func()) {
		t.Helper()
		addr, logs, stop := background(t, "serve", func(ctx context.Context, logs io.Writer, ready chan<- string) error {
			return serve(ctx, append([]string{"-bind", "127.0.0.1:0", "-log-format", "json"}, args...), logs, ready)
		})
		return "http://" + addr, logs.String(), stop
	}

	base, out, stop := serveOnce("-data-dir", dir)
	m := passwordLine.FindStringSubmatch(out)
	require.NotNil(t, m, "the password is printed:\n%s", out)
	password := m[1]
	require.Len(t, password, node.FirstRunPasswordLength)
	require.Equal(t, 1, strings.Count(out, password), "printed once, and in no log line")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "{") {
			require.NotContains(t, line, password)
		}
	}
	require.Contains(t, out, "created one, whose password was printed on stderr once and is not logged")
	admin := &testutil.Creds{Name: node.FirstRunAdminName, Pass: password}
	r := testutil.Do(t, "GET", base+"/_session", admin, nil)
	require.Equal(t, []any{"_admin"}, r.Body["userCtx"].(map[string]any)["roles"])
	r = testutil.Do(t, "GET", base+"/_node/_cluster/_config/admins", admin, nil)
	require.Equal(t, map[string]any{node.FirstRunAdminName: "*****"}, r.Body)
	stop()

	base, out, stop = serveOnce("-data-dir", dir)
	require.NotRegexp(t, passwordLine, out, "a restart prints nothing")
	require.NotContains(t, out, "was created")
	r = testutil.Do(t, "GET", base+"/_session", admin, nil)
	require.Equal(t, []any{"_admin"}, r.Body["userCtx"].(map[string]any)["roles"], "the same admin after a restart")
	stop()

	var seen []string
	for range 2 {
		_, out, stop = serveOnce("-in-memory")
		m := passwordLine.FindStringSubmatch(out)
		require.NotNil(t, m, out)
		seen = append(seen, m[1])
		stop()
	}
	require.NotEqual(t, seen[0], seen[1], "-in-memory keeps nothing: a new admin each start")

	// With an admin configured nothing is created.
	t.Setenv("FDBREP_ADMINS__ADM", "pass")
	_, out, _ = serveOnce("-in-memory")
	require.NotRegexp(t, passwordLine, out)
}

// A first start whose port is taken (a CouchDB on 5984) fails before it
// creates the admin, so it prints no password that would be lost: the next
// start, on a free port, creates the admin and prints its password.
func TestFirstRunAdminPortTaken(t *testing.T) {
	t.Setenv("FDBREP_CHTTPD_AUTH__ITERATIONS", "10")
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	var logs testutil.SyncBuffer
	err = serve(context.Background(), []string{"-bind", taken.Addr().String(), "-data-dir", dir, "-log-format", "json"}, &logs, nil)
	require.ErrorContains(t, err, "HTTP API listener")
	require.NotRegexp(t, passwordLine, logs.String(), "no password printed by a start that fails")
	require.NotContains(t, logs.String(), "no server admin was configured")

	addr, out, _ := background(t, "serve", func(ctx context.Context, logs io.Writer, ready chan<- string) error {
		return serve(ctx, []string{"-bind", "127.0.0.1:0", "-data-dir", dir, "-log-format", "json"}, logs, ready)
	})
	m := passwordLine.FindStringSubmatch(out.String())
	require.NotNil(t, m, "the next start creates the admin and prints its password:\n%s", out.String())
	admin := &testutil.Creds{Name: node.FirstRunAdminName, Pass: m[1]}
	r := testutil.Do(t, "GET", "http://"+addr+"/_session", admin, nil)
	require.Equal(t, []any{"_admin"}, r.Body["userCtx"].(map[string]any)["roles"])
}

// fdbrep cluster: the frontends starting together on an empty store share
// one generated admin, printed once; /_membership lists every node with
// its roles, and a cluster-wide change reaches every node.
func TestClusterMembershipAndFirstRun(t *testing.T) {
	t.Setenv("FDBREP_CHTTPD_AUTH__ITERATIONS", "10")
	addrs, logs, _ := background(t, "cluster", func(ctx context.Context, logs io.Writer, ready chan<- []string) error {
		return cluster(ctx, []string{"-base-bind", "127.0.0.1:0", "-in-memory", "-log-format", "json"}, logs, ready)
	})
	out := logs.String()
	all := passwordLine.FindAllStringSubmatch(out, -1)
	require.Len(t, all, 1, "one admin for the whole cluster:\n%s", out)
	admin := &testutil.Creds{Name: node.FirstRunAdminName, Pass: all[0][1]}
	for _, a := range addrs {
		r := testutil.Do(t, "GET", "http://"+a+"/_membership", admin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		want := []any{"frontend1", "frontend2", "replication1", "replication2"}
		require.Equal(t, want, r.Body["all_nodes"])
		require.Equal(t, want, r.Body["cluster_nodes"])
		nodes := r.Body["nodes"].(map[string]any)
		require.Equal(t, []any{"api_frontend"}, nodes["frontend2"].(map[string]any)["roles"])
		require.Equal(t, []any{"replication"}, nodes["replication1"].(map[string]any)["roles"])
		require.Contains(t, nodes["replication1"], "seen", "the last heartbeat tells a node cut off from a live one")
		require.Contains(t, nodes["replication1"], "expires")
	}
	base := "http://" + addrs[0]
	// A replication node's configuration, read and changed through a
	// frontend.
	r := testutil.Do(t, "GET", base+"/_node/replication1/_config/node/roles", admin, nil)
	require.Equal(t, "\"replication\"\n", r.Raw)
	r = testutil.Do(t, "PUT", base+"/_node/replication1/_config/replicator/max_jobs", admin, `"7"`)
	require.Equal(t, "\"500\"\n", r.Raw)
	r = testutil.Do(t, "PUT", base+"/_node/frontend1/_config/replicator/max_jobs", admin, `"7"`)
	testutil.RequireError(t, r, 400, "bad_request")
	r = testutil.Do(t, "PUT", base+"/_node/_cluster/_config/log/level", admin, `"debug"`)
	require.Equal(t, "\"\"\n", r.Raw)
	for _, node := range []string{"frontend2", "replication2"} {
		r = testutil.Do(t, "GET", base+"/_node/"+node+"/_config/log/level", admin, nil)
		require.Equal(t, "\"debug\"\n", r.Raw, node)
	}
	// Every node applies it: each logs the change.
	testutil.Eventually(t, "every node applied the cluster-wide change", func() bool {
		return strings.Count(logs.String(), `"section":"log","key":"level","value":"debug"`) == 4
	})
}
