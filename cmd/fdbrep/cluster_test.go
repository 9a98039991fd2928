package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestClusterRunsTheTopologyOnOneStore(t *testing.T) {
	t.Setenv("FDBREP_ADMINS__ADM", "pass")
	t.Setenv("FDBREP_REPLICATOR__STARTUP_JITTER", "100")
	addrs, logs, stop := background(t, "cluster", func(ctx context.Context, logs io.Writer, ready chan<- []string) error {
		return cluster(ctx, []string{"-base-bind", "127.0.0.1:0", "-in-memory", "-log-format", "json"}, logs, ready)
	})
	require.Len(t, addrs, ClusterFrontendsDefault)
	require.NotEqual(t, addrs[0], addrs[1])

	adm := &testutil.Creds{Name: "adm", Pass: "pass"}
	// A document written on one frontend is a job every frontend shows, and
	// a replication node runs it: here it crashes, its source refusing
	// connections (at its first retry, not after five).
	r := testutil.Do(t, "PUT", "http://"+addrs[0]+"/_replicator/r1", adm, `{"source":"http://127.0.0.1:9/a","target":"http://127.0.0.1:9/b","retries_per_request":1}`)
	require.Equal(t, http.StatusCreated, r.Status)
	r = testutil.Do(t, "GET", "http://"+addrs[1]+"/_replicator/r1", adm, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "r1", r.Body["_id"])
	// cluster builds its nodes out of the test's reach: no signal reports
	// the job's state, which the test reads through the API.
	testutil.Eventually(t, "job r1 crashing", func() bool {
		r := testutil.Do(t, "GET", "http://"+addrs[1]+"/_scheduler/docs/_replicator/r1", adm, nil)
		require.Equal(t, http.StatusOK, r.Status)
		return r.Body["state"] == "crashing"
	})

	stop()
	require.Contains(t, logs.String(), `"node":"replication2"`)
}

func TestClusterRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-frontends", "0"},
		{"-replication-nodes", "101"},
		{"-base-bind", "nonsense"},
		{"-base-bind", "127.0.0.1:x"},
		{"-backend", "fdb"},
	} {
		var out bytes.Buffer
		require.Error(t, cluster(context.Background(), append(args, "-in-memory"), &out, nil), "args %q", args)
	}
}
