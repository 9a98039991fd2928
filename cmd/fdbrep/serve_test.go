package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/tuple"
	"github.com/fdbrep/fdbrep/replicator"
)

// TestServeUp starts a node in memory and one on disk: each answers / and
// /_up, and neither warns that credentials are stored in the clear (the
// one in memory stores nothing at rest, the one on disk seals with the
// key it made in its data directory).
func TestServeUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"in-memory", []string{"-in-memory"}},
		{"on-disk", []string{"-data-dir", t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, logs := startServe(t, append([]string{"-bind", "127.0.0.1:0"}, tc.args...)...)
			require.NotContains(t, logs.String(), "seal_public_key_file is not set")
			r := testutil.Do(t, http.MethodGet, "http://"+addr+"/_up", nil, nil)
			require.Equal(t, http.StatusOK, r.Status)
			require.Equal(t, "ok", r.Body["status"])
			r = testutil.Do(t, http.MethodGet, "http://"+addr+"/", nil, nil)
			require.Equal(t, http.StatusOK, r.Status)
			require.Equal(t, "Welcome", r.Body["couchdb"])
			require.Regexp(t, "^[0-9a-f]{32}$", r.Body["uuid"], "the server UUID, as CouchDB reports it")
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

[couchdb]
single_node = true
`)
	addr, logs := startServe(t, "-config", ini, "-in-memory", "-bind", "127.0.0.1:0", "-node-name", "n1@test")
	base := "http://" + addr
	adm, joe := &testutil.Creds{Name: "adm", Pass: "secret-pw"}, &testutil.Creds{Name: "joe", Pass: "joe-pw"}
	r := testutil.Do(t, "GET", base+"/_session", adm, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "adm", r.Body["userCtx"].(map[string]any)["name"])
	r = testutil.Do(t, "GET", base+"/_all_dbs", joe, nil)
	require.Equal(t, 401, r.Status)
	r = testutil.Do(t, "PUT", base+"/_replicator/r1", joe, map[string]any{"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b"})
	require.Equal(t, 201, r.Status, r.Raw)
	r = testutil.Do(t, "PUT", base+"/_replicator/bad", joe, map[string]any{"source": "http://127.0.0.1:1/a"})
	require.Equal(t, 403, r.Status, r.Raw)
	r = testutil.Do(t, "GET", base+"/_scheduler/docs/_replicator/r1", adm, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "r1", r.Body["doc_id"])
	// Logs are JSON, warn about plaintext passwords, and hold no password.
	out := logs.String()
	require.Contains(t, out, `plaintext password hashed`)
	require.Contains(t, out, `"node":"n1@test"`)
	require.Contains(t, out, "[couchdb] single_node is a CouchDB setting fdbrep does not use")
	require.NotContains(t, out, "secret-pw")
	require.NotContains(t, out, "joe-pw")
}

func TestServeRefusesUnknownKeys(t *testing.T) {
	ini := writeIni(t, "[replicator]\ncheckpiont_interval = 5000\n")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"serve", "-config", ini, "-in-memory", "-bind", "127.0.0.1:0"}, &out, &errOut)
	require.ErrorIs(t, err, config.ErrUnknownKey)
	require.ErrorContains(t, err, "did you mean [replicator] checkpoint_interval?")
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

	addr, _ := startServe(t, "-in-memory", "-health-bind", "127.0.0.1:0")
	r := testutil.Do(t, "GET", "http://"+addr+"/_up", nil, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "ok", r.Body["status"])
	require.Equal(t, []any{"replication"}, r.Body["roles"], "/_up says which node answers: %s", r.Raw)
	require.NotEmpty(t, r.Body["node"], r.Raw)
	require.Contains(t, r.Body, "heartbeat_age_ms", r.Raw)
	r = testutil.Do(t, "GET", "http://"+addr+"/_node/_local/_prometheus", nil, nil)
	require.Contains(t, r.Raw, "couchdb_couch_replicator_node_heartbeat_age_seconds ", "how the node sees the store, in its metrics")
	r = testutil.Do(t, "GET", "http://"+addr+"/_node/_local/_stats", nil, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, r.Body, "couch_replicator")
	r = testutil.Do(t, "GET", "http://"+addr+"/_node/_local/_stats/couch_replicator/jobs", nil, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, r.Body, "running", "a sub-path answers its subtree")
	r = testutil.Do(t, "GET", "http://"+addr+"/_replicator", nil, nil)
	require.Equal(t, 404, r.Status)
	_, err = net.DialTimeout("tcp", apiAddr, time.Second)
	require.Error(t, err, "a replication-only node must not listen on the API port")
}

func TestServeReplicationOnlyWithoutHealth(t *testing.T) {
	addr, _ := startServe(t, "-in-memory", "-roles", "replication")
	require.Empty(t, addr)
}

func TestServeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-config", "/nonexistent.ini"}, nil, "cannot read file"},
		// A flag's bad value names the flag, not a variable never set.
		{[]string{"-roles", "indexing"}, nil, `-roles "indexing" ([node] roles): "indexing" is not one of`},
		{[]string{"-log-level", "loud"}, nil, `-log-level "loud" ([log] level)`},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_REPLICATOR__INTERVAL": "10"}, "want an integer of at least 1000 (milliseconds)"},
		{[]string{"-health-bind", "0.0.0.0:1"}, nil, "loopback"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_REPLICATOR__MAX_JOBS": "many"}, "max_jobs"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_NOPE__X": "1"}, "FDBREP_NOPE__X"},
		{[]string{"-in-memory", "-backend", "fdb"}, nil, "an option of the embedded store, not of FoundationDB"},
		{[]string{"-backend", "fdb", "-data-dir", "unused"}, nil, "built without FoundationDB support"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_REPLICATOR__SSL_TRUSTED_CERTIFICATES_FILE": "/nonexistent/ca.pem"},
			"[replicator] ssl_trusted_certificates_file: open /nonexistent/ca.pem: no such file or directory"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_REPLICATOR__SOCKET_OPTIONS": "[{tos, 4}]"}, "[replicator] socket_options: tos is not supported"},
		{[]string{"-in-memory"}, map[string]string{"FDBREP_CHTTPD__UTILS_DIR": "/nonexistent/release"}, "[chttpd] utils_dir"},
	} {
		if tc.want == "built without FoundationDB support" && fdbBuild {
			continue
		}
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
	addr, _ := startServe(t, "-config", ini, "-in-memory", "-bind", "127.0.0.1:0", "-roles", "api_frontend")
	adm := &testutil.Creds{Name: "adm", Pass: "pw"}
	for i := 0; i < 3; i++ {
		r := testutil.Do(t, "PUT", "http://"+addr+"/_replicator/r"+strconv.Itoa(i), adm,
			map[string]any{"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b"})
		require.Equal(t, 201, r.Status, r.Raw)
	}
	r := testutil.Do(t, "GET", "http://"+addr+"/_scheduler/docs/_replicator/r0", adm, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "pending", r.Body["state"])
}

// A second node on the data directory of a running one says that another
// process holds it, by pid, and what to do.
func TestDataDirInUse(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	env := append(os.Environ(), "FDBREP_CHTTPD_AUTH__ITERATIONS=10")
	first := startProcess(t, bin, env, "serve", "-data-dir", dir, "-bind", "127.0.0.1:0", "-log-format", "json")
	first.waitLog(t, "HTTP API listening")
	code, out := runCLI(t, bin, env, "serve", "-data-dir", dir, "-bind", "127.0.0.1:0")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, fmt.Sprintf("%s is in use by another process (pid %d): another fdbrep node runs on this data directory; stop it, or give this one another -data-dir", dir, first.cmd.Process.Pid))
	require.NotContains(t, out, "resource temporarily unavailable")
}

// A store whose jobs an earlier fdbrep wrote (job key layout 1) is refused
// with one line that says what to do, and -migrate-jobs rewrites it.
func TestServeOnLayout1Store(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	db, err := embedded.Open(embedded.Options{Dir: dir})
	require.NoError(t, err)
	_, err = db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		// A pending job as layout 1 kept it: a 9-element row.
		row := tuple.Tuple{int64(0), nil, int64(0), int64(0), false, nil, int64(0), []byte(`{}`), nil}
		tr.Set(fdbjobs.SubspaceDefault.Pack(tuple.Tuple{1, "old_type", "job"}), row.Pack())
		tr.Set(fdbjobs.SubspaceDefault.Pack(tuple.Tuple{2, "old_type", int64(0), "job"}), nil)
		return nil, nil
	})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	env := append(os.Environ(), "FDBREP_CHTTPD_AUTH__ITERATIONS=10")

	code, out := runCLI(t, bin, env, "serve", "-data-dir", dir, "-bind", "127.0.0.1:0")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "the store's jobs are in key layout 1")
	require.Contains(t, out, "stop every node of that version, then start this one once with -migrate-jobs")

	p := startProcess(t, bin, env, "serve", "-data-dir", dir, "-bind", "127.0.0.1:0", "-log-format", "json", "-migrate-jobs")
	p.waitLog(t, "HTTP API listening")
}

// TestServeServerUUID: [couchdb] uuid is the server UUID of a new store;
// a store that holds another refuses to start, in one line saying what a
// change does and how to make it, and -replace-uuid makes it; a uuid that
// is not 32 hex digits is refused, naming the key.
func TestServeServerUUID(t *testing.T) {
	dir := t.TempDir()
	const a, b = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	ini := func(uuid string) string {
		return writeIni(t, "[admins]\nadm = pw\n[chttpd_auth]\niterations = 10\n[couchdb]\nuuid = "+uuid+"\n")
	}
	uuidOf := func(args ...string) string {
		t.Helper()
		addr, logs, stop := background(t, "serve", func(ctx context.Context, logs io.Writer, ready chan<- string) error {
			return serve(ctx, append([]string{"-data-dir", dir, "-bind", "127.0.0.1:0"}, args...), logs, ready)
		})
		defer stop()
		r := testutil.Do(t, "GET", "http://"+addr+"/", nil, nil)
		require.Equal(t, 200, r.Status, logs.String())
		return r.Body["uuid"].(string)
	}
	require.Equal(t, a, uuidOf("-config", ini(a)), "a new store takes it")
	require.Equal(t, a, uuidOf("-config", ini(a)))

	err := serve(context.Background(), []string{"-data-dir", dir, "-bind", "127.0.0.1:0", "-config", ini(b)}, io.Discard, nil)
	require.ErrorIs(t, err, replicator.ErrServerUUID)
	require.NotContains(t, err.Error(), "\n")
	for _, want := range []string{"it holds " + a, "[couchdb] uuid is " + b, "changes every replication id", "-replace-uuid"} {
		require.Contains(t, err.Error(), want)
	}

	require.Equal(t, b, uuidOf("-config", ini(b), "-replace-uuid"))
	require.Equal(t, b, uuidOf("-config", writeIni(t, "[admins]\nadm = pw\n[chttpd_auth]\niterations = 10\n")), "without [couchdb] uuid, the store's")

	err = serve(context.Background(), []string{"-in-memory", "-bind", "127.0.0.1:0", "-config", ini("0123-not-hex")}, io.Discard, nil)
	require.ErrorIs(t, err, config.ErrInvalidValue)
	require.ErrorContains(t, err, `[couchdb] uuid = "0123-not-hex"`)
	require.ErrorContains(t, err, "want 32 hex digits")
}
