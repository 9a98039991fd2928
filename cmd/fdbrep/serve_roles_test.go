package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

func writeIni(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "local.ini")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// startServeLogs is startServe returning the log buffer too.
func startServeLogs(t *testing.T, args ...string) (string, *testutil.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	logs := &testutil.SyncBuffer{}
	go func() { done <- serve(ctx, args, logs, ready) }()
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
	return addr, logs
}

func doJSON(t *testing.T, method, url, user, pass string, body any) (int, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

func TestServeWithConfigFile(t *testing.T) {
	ini := writeIni(t, `
[admins]
adm = secret-pw

[users]
joe = joe-pw

[chttpd_auth]
iterations = 10

[replicator]
max_jobs = 7

[log]
format = json
`)
	addr, logs := startServeLogs(t, "-config", ini, "-in-memory", "-bind", "127.0.0.1:0", "-node-name", "n1@test")
	base := "http://" + addr
	st, body := doJSON(t, "GET", base+"/_session", "adm", "secret-pw", nil)
	require.Equal(t, 200, st)
	require.Equal(t, "adm", body["userCtx"].(map[string]any)["name"])
	st, _ = doJSON(t, "GET", base+"/_all_dbs", "joe", "joe-pw", nil)
	require.Equal(t, 401, st)
	st, body = doJSON(t, "PUT", base+"/_replicator/r1", "joe", "joe-pw", map[string]any{"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b"})
	require.Equal(t, 201, st, body)
	st, body = doJSON(t, "PUT", base+"/_replicator/bad", "joe", "joe-pw", map[string]any{"source": "http://127.0.0.1:1/a"})
	require.Equal(t, 403, st, body)
	st, body = doJSON(t, "GET", base+"/_scheduler/docs/_replicator/r1", "adm", "secret-pw", nil)
	require.Equal(t, 200, st, body)
	require.Equal(t, "r1", body["doc_id"])
	// Logs are JSON, warn about plaintext passwords, and hold no password.
	out := logs.String()
	require.Contains(t, out, `plaintext password hashed`)
	require.Contains(t, out, `"node":"n1@test"`)
	require.NotContains(t, out, "secret-pw")
	require.NotContains(t, out, "joe-pw")
}

func TestServeReplicationOnly(t *testing.T) {
	// The API port of the config must stay closed on a replication node.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	apiAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, apiPort, _ := net.SplitHostPort(apiAddr)
	t.Setenv("FDBREP_CHTTPD__PORT", apiPort)
	t.Setenv("FDBREP_NODE__ROLES", "replication")

	addr, _ := startServeLogs(t, "-in-memory", "-health-bind", "127.0.0.1:0")
	st, body := doJSON(t, "GET", "http://"+addr+"/_up", "", "", nil)
	require.Equal(t, 200, st)
	require.Equal(t, "ok", body["status"])
	st, body = doJSON(t, "GET", "http://"+addr+"/_node/_local/_stats", "", "", nil)
	require.Equal(t, 200, st)
	require.Contains(t, body, "couch_replicator")
	st, _ = doJSON(t, "GET", "http://"+addr+"/_replicator", "", "", nil)
	require.Equal(t, 404, st)
	_, err = net.DialTimeout("tcp", apiAddr, time.Second)
	require.Error(t, err, "a replication-only node must not listen on the API port")
}

func TestServeReplicationOnlyWithoutHealth(t *testing.T) {
	addr, _ := startServeLogs(t, "-in-memory", "-roles", "replication")
	require.Empty(t, addr)
}

func TestServeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-config", "/nonexistent.ini"}, nil, "cannot read file"},
		{[]string{"-roles", "indexing"}, nil, "not one of"},
		{[]string{"-health-bind", "0.0.0.0:1"}, nil, "loopback"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_REPLICATOR__MAX_JOBS": "many"}, "max_jobs"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_NOPE__X": "1"}, "FDBREP_NOPE__X"},
		{[]string{"-in-memory", "-backend", "fdb"}, nil, "FoundationDB"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var out testutil.SyncBuffer
		err := serve(context.Background(), append(tc.args, "-bind", "127.0.0.1:0"), &out, nil)
		require.Error(t, err, "%q", tc.args)
		require.Contains(t, err.Error(), tc.want)
		for k := range tc.env {
			os.Unsetenv(k)
		}
	}
}

func TestHashPassword(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, hashPassword([]string{"-iterations", "5"}, strings.NewReader("pw\n"), &out, &errOut))
	require.True(t, strings.HasPrefix(out.String(), "-pbkdf2:sha256-"), out.String())
	require.NotContains(t, out.String(), "pw\n-")
	require.Error(t, hashPassword(nil, strings.NewReader("\n"), &out, &errOut))
	require.Error(t, hashPassword([]string{"-prf", "md5"}, strings.NewReader("x\n"), &out, &errOut))
}

// TestServeFrontendOnly: a frontend with no replication node anywhere
// accepts documents from the first write (the job type is registered at
// startup).
func TestServeFrontendOnly(t *testing.T) {
	ini := writeIni(t, "[admins]\nadm = pw\n[chttpd_auth]\niterations = 10\n")
	addr, _ := startServeLogs(t, "-config", ini, "-in-memory", "-bind", "127.0.0.1:0", "-roles", "api_frontend")
	for i := 0; i < 3; i++ {
		st, body := doJSON(t, "PUT", "http://"+addr+"/_replicator/r"+strconv.Itoa(i), "adm", "pw",
			map[string]any{"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b"})
		require.Equal(t, 201, st, body)
	}
	st, body := doJSON(t, "GET", "http://"+addr+"/_scheduler/docs/_replicator/r0", "adm", "pw", nil)
	require.Equal(t, 200, st, body)
	require.Equal(t, "pending", body["state"])
}
