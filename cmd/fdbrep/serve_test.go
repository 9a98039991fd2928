package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startServe runs serve in the background with args and returns its base
// URL; the node is stopped, and its exit checked, in t.Cleanup.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() { done <- serve(ctx, append([]string{"-bind", "127.0.0.1:0"}, args...), &logs, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve exited early: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start within 30s")
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return "http://" + addr
}

func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

func TestServeUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"in-memory", []string{"-in-memory"}},
		{"on-disk", []string{"-data-dir", t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := startServe(t, tc.args...)
			status, body := getJSON(t, base+"/_up")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "ok", body["status"])
			status, body = getJSON(t, base+"/")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "Welcome", body["couchdb"])
		})
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-bind", "nonsense"},
		{"-log-format", "xml"},
		{"-data-dir", ""},
		{"extra"},
	} {
		var out bytes.Buffer
		err := serve(context.Background(), args, &out, nil)
		require.Error(t, err, "args %q", args)
	}
}

func TestRunCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"version"}, &out, &errOut))
	require.Contains(t, out.String(), "fdbrep")
	require.Error(t, run(context.Background(), nil, &out, &errOut))
	require.Error(t, run(context.Background(), []string{"bogus"}, &out, &errOut))
}
