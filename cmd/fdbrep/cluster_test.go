package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClusterRunsTheTopologyOnOneStore(t *testing.T) {
	t.Setenv("FDBREP_ADMINS__ADM", "pass")
	t.Setenv("FDBREP_REPLICATOR__STARTUP_JITTER", "100")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan []string, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- cluster(ctx, []string{"-base-bind", "127.0.0.1:0", "-in-memory", "-log-format", "json"}, &logs, ready)
	}()
	var addrs []string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("cluster exited early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("cluster did not start within 60s")
	}
	require.Len(t, addrs, ClusterFrontendsDefault)
	require.NotEqual(t, addrs[0], addrs[1])

	do := func(method, addr, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.SetBasicAuth("adm", "pass")
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		return res.StatusCode, out
	}
	// A document written on one frontend is a job every frontend shows, and
	// a replication node runs it: here it crashes, its source refusing
	// connections.
	status, _ := do("PUT", addrs[0], "/_replicator/r1", `{"source":"http://127.0.0.1:9/a","target":"http://127.0.0.1:9/b"}`)
	require.Equal(t, http.StatusCreated, status)
	status, doc := do("GET", addrs[1], "/_replicator/r1", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "r1", doc["_id"])
	var state string
	for i := 0; i < 600 && state != "crashing"; i++ {
		status, sd := do("GET", addrs[1], "/_scheduler/docs/_replicator/r1", "")
		require.Equal(t, http.StatusOK, status)
		state, _ = sd["state"].(string)
		if state != "crashing" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	require.Equal(t, "crashing", state)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("cluster did not stop within 60s")
	}
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
