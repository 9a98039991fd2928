package couchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// EnvCouchDBScript names the environment variable that, when set, gives
// the path of the script that starts and stops a real Apache CouchDB 3.5
// (couchdb.sh: "start PORT DATADIR", "stop DATADIR", "home") instead of
// ../shared/couchdb/couchdb.sh beside the module root.
const EnvCouchDBScript = "FDBREP_COUCHDB_SH"

// CouchDB's server admin, as couchdb.sh configures it.
const (
	CouchAdmin    = "admin"
	CouchPassword = "pass"
)

// couchScriptTimeout bounds one run of the script (a start waits for
// GET /_up; the first one also unpacks the release).
const couchScriptTimeout = 3 * time.Minute

// CouchDBScript returns the script that runs a real CouchDB 3.5 for tests,
// and whether it exists: $FDBREP_COUCHDB_SH, or ../shared/couchdb/couchdb.sh
// from the module root (where CI has it).
func CouchDBScript() (string, bool) {
	if p := os.Getenv(EnvCouchDBScript); p != "" {
		return p, isFile(p)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", false
	}
	p := filepath.Join(root, "..", "shared", "couchdb", "couchdb.sh")
	return p, isFile(p)
}

// StartCouchDB starts a real Apache CouchDB 3.5 on 127.0.0.1 (a free port,
// a fresh data directory under t.TempDir(), admin CouchAdmin with
// CouchPassword) and stops it in t.Cleanup; the test is skipped, saying
// why, where the script is absent (a user's machine: see CouchDBScript),
// and failed there under CI ($CI set), which must run it.
// The Server's helpers work as on pouchdb-server; they authenticate as
// the admin. A start takes about a second.
func StartCouchDB(t testing.TB) *Server {
	t.Helper()
	return startCouchDB(t, nil)
}

// CouchDBHost is a host of a test's own network (a network namespace)
// that StartCouchDBOn runs CouchDB on.
type CouchDBHost struct {
	// Exec is the command that runs a command on the host (ip netns exec
	// NAME): couchdb.sh start and stop run behind it.
	Exec []string
	// Address is the host's address CouchDB listens on (couchdb.sh's
	// COUCHDB_ADDRESS) and Port its port; the test must reach them.
	Address string
	Port    int
}

// StartCouchDBOn is StartCouchDB on host: CouchDB listens on its address
// and port, and its log (couchdb.log in Dir) shows each request's peer.
func StartCouchDBOn(t testing.TB, host CouchDBHost) *Server {
	t.Helper()
	return startCouchDB(t, &host)
}

func startCouchDB(t testing.TB, host *CouchDBHost) *Server {
	t.Helper()
	script, ok := CouchDBScript()
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("couchtest: a CouchDB test under CI without CouchDB: %s is absent (set %s)", script, EnvCouchDBScript)
		}
		t.Skipf("couchtest: no CouchDB 3.5 here (%s is absent; set %s): this test runs where it is, as in CI", script, EnvCouchDBScript)
	}
	s, err := launchCouchDB(script, t.TempDir, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.reportCouchDB(t)
		}
		s.cleanup(t)
	})
	return s
}

// reportCouchDB logs, for a failed test, whether CouchDB's process is
// still alive and the tails of its output and log: a CouchDB that stopped
// answering shows why.
func (s *Server) reportCouchDB(t testing.TB) {
	state := "not running: it exited during the test"
	if b, err := os.ReadFile(filepath.Join(s.dir, "couchdb.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && syscall.Kill(pid, 0) == nil {
			state = "still running"
		}
	}
	out, _ := os.ReadFile(filepath.Join(s.dir, "stdout.log"))
	t.Logf("couchtest: CouchDB %s is %s; its output, last lines:\n%s\ncouchtest: CouchDB's log, last lines:\n%s",
		s.URL(), state, tail(out, 2000), s.logTail())
}

// couchHome serializes the first unpacking of the release across test
// processes (the script unpacks it on first use, and two at once would
// step on each other); couchRel is the unpacked release's directory.
var (
	couchHome   sync.Once
	couchRel    string
	couchRelErr error
)

// LaunchCouchDB starts CouchDB with script in a directory mkdir returns,
// retrying on another port when a start fails (another process took the
// port); the caller must Stop it (StartCouchDB does in t.Cleanup).
func LaunchCouchDB(script string, mkdir func() string) (*Server, error) {
	return launchCouchDB(script, mkdir, nil)
}

// launchCouchDB is LaunchCouchDB on host (nil: 127.0.0.1 and free ports;
// a host's port is fixed, so it is tried once).
func launchCouchDB(script string, mkdir func() string, host *CouchDBHost) (*Server, error) {
	couchHome.Do(func() {
		unlock, err := lockFile(filepath.Join(os.TempDir(), "fdbrep-couchdb-home.lock"))
		if err != nil {
			couchRelErr = err
			return
		}
		defer unlock()
		out, err := runCouchScript(nil, script, "home")
		couchRel, couchRelErr = strings.TrimSpace(out), err
	})
	if couchRelErr != nil {
		return nil, couchRelErr
	}
	addr, port, attempts := "127.0.0.1", 0, startAttempts
	if host != nil {
		addr, port, attempts = host.Address, host.Port, 1
	}
	var lastErr error
	for range attempts {
		if host == nil {
			var err error
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		dir := mkdir()
		if _, err := runCouchScript(host, script, "start", strconv.Itoa(port), dir); err != nil {
			lastErr = err
			_, _ = runCouchScript(host, script, "stop", dir)
			continue
		}
		s := &Server{
			base:     &url.URL{Scheme: "http", Host: net.JoinHostPort(addr, strconv.Itoa(port))},
			dir:      dir,
			logPath:  filepath.Join(dir, "couchdb.log"),
			admin:    CouchAdmin,
			password: CouchPassword,
			client:   peerClient(),
			exited:   make(chan struct{}),
			name:     "CouchDB",
		}
		s.halt = func() {
			// The data directory is thrown away: CouchDB is killed at
			// once (a graceful stop took about 3 s), then the script
			// finds it gone, and the Erlang port mapper goes when no
			// other server is left on it, as the script's stop does.
			killCouchDB(dir)
			if _, err := runCouchScript(host, script, "stop", dir); err != nil {
				s.waitErr = err
			}
			stopIdleEPMD(host, port)
			close(s.exited)
		}
		return s, nil
	}
	return nil, fmt.Errorf("couchtest: could not start CouchDB with %s: %w", script, lastErr)
}

// killCouchDB kills the CouchDB whose pid couchdb.sh wrote in dir, and
// waits (at most 10 s) for it to be gone.
func killCouchDB(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "couchdb.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	if syscall.Kill(pid, syscall.SIGKILL) != nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// stopIdleEPMD stops the Erlang port mapper on host (nil: here) once the
// node of the CouchDB on port has left it, if no other node is left on it,
// so that no daemon outlives the tests (couchdb.sh's stop does so too,
// after a graceful stop).
func stopIdleEPMD(host *CouchDBHost, port int) {
	epmds, _ := filepath.Glob(filepath.Join(couchRel, "erts-*", "bin", "epmd"))
	if len(epmds) == 0 {
		return
	}
	run := func(arg string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		argv := []string{epmds[0], arg}
		if host != nil {
			argv = append(append([]string{}, host.Exec...), argv...)
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "ERL_EPMD_ADDRESS=127.0.0.1")
		out, err := cmd.Output()
		return string(out), err
	}
	node := fmt.Sprintf("name couchdb_%d ", port)
	for deadline := time.Now().Add(2 * time.Second); ; {
		names, err := run("-names")
		if err != nil {
			return // no port mapper running
		}
		if !strings.Contains(names, node) {
			if !strings.Contains(names, "\nname ") && !strings.HasPrefix(names, "name ") && (host != nil || !otherCouchDBs()) {
				_, _ = run("-kill")
			}
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// otherCouchDBs reports whether a CouchDB of another test runs in this
// network namespace: one restarting in place (POST /_node/_local/_restart,
// Server.Restart) leaves the port mapper for a moment, and registers again
// once its applications are back; a port mapper stopped meanwhile (by
// another package's test, which go test runs at the same time) makes that
// CouchDB exit ("register/listen error: econnrefused").
func otherCouchDBs() bool {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return false
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("beam")) || !bytes.Contains(cmd, []byte("\x00couchdb_")) {
			continue
		}
		if ns, err := os.Readlink(filepath.Join(d, "ns", "net")); err == nil && ns == self {
			return true
		}
	}
	return false
}

// ReportOnFailure logs, if t fails, what CouchDB's replicator shows
// (_scheduler/docs and _scheduler/jobs) before CouchDB stops (StartCouchDB
// logs its log's tail then): for the tests that wait for its own
// replications. Call it after StartCouchDB.
func (s *Server) ReportOnFailure(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, path := range []string{"/_scheduler/docs", "/_scheduler/jobs"} {
			var v json.RawMessage
			st := s.Request(t, http.MethodGet, path, nil, &v)
			t.Logf("couchtest: CouchDB GET %s: %d %s", path, st, tail(v, 4000))
		}
	})
}

// NoReplicatorJitter makes CouchDB's replicator start each job at once:
// by default it waits a random time of up to startup_jitter (5 s) first,
// which a test that waits for CouchDB's own replications to run need not.
func (s *Server) NoReplicatorJitter(t testing.TB) {
	t.Helper()
	s.must(t, http.MethodPut, "/_node/_local/_config/replicator/startup_jitter", "0", nil, http.StatusOK)
}

// runCouchScript runs script with args on host (nil: here).
func runCouchScript(host *CouchDBHost, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), couchScriptTimeout)
	defer cancel()
	argv := append([]string{"sh", script}, args...)
	env := os.Environ()
	if host != nil {
		argv = append(append([]string{}, host.Exec...), argv...)
		env = append(env, "COUCHDB_ADDRESS="+host.Address)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("couchtest: %s %s: %w: %s", script, strings.Join(args, " "), err, tail(out.Bytes(), 2000))
	}
	return out.String(), nil
}

// ensureAttempts bounds EnsureDB's attempts at creating a system database
// while CouchDB creates it too.
const ensureAttempts = 50

// EnsureDB makes sure database name exists: CouchDB creates its system
// databases (_users, _replicator) itself soon after it starts, and a
// request racing it gets a 404 or a 500 until then; EnsureDB creates it,
// or waits for CouchDB to, trying again every 20 ms.
func (s *Server) EnsureDB(t testing.TB, name string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		st := s.Request(t, http.MethodPut, "/"+url.PathEscape(name), nil, nil)
		if st == http.StatusCreated || st == http.StatusPreconditionFailed {
			return
		}
		if attempt == ensureAttempts {
			t.Fatalf("couchtest: creating %s: %d after %d attempts", name, st, attempt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// AddUser creates a CouchDB user (in _users, which it creates if needed:
// see EnsureDB) with no roles.
func (s *Server) AddUser(t testing.TB, name, password string) {
	t.Helper()
	s.EnsureDB(t, "_users")
	s.must(t, http.MethodPut, "/_users/org.couchdb.user:"+url.PathEscape(name),
		map[string]any{"name": name, "password": password, "roles": []string{}, "type": "user"}, nil, http.StatusCreated)
}

// Restart restarts CouchDB's applications in place (POST
// /_node/_local/_restart, as CouchDB's own test suites do) and returns once
// it answers again: settings written through _config persist across it
// (they are in the last ini file), and its replicator starts anew from
// them, which applies at once what it otherwise applies only at its next
// scheduling interval (max_jobs, interval). CouchDB answers before it
// goes down: Restart waits for it to stop answering (at most 5 s), then to
// answer again (at most a minute).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	require.Equal(t, 200, s.Request(t, "POST", "/_node/_local/_restart", []byte("{}"), nil))
	up := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/_up", nil)
		resp, err := s.client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for deadline := time.Now().Add(5 * time.Second); up() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, s.waitReady(time.Minute), "couchtest: CouchDB after a restart")
}
