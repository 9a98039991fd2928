package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

// background runs cmd, serve or cluster, in this process until stop or
// the end of the test, and returns what cmd sends on its ready channel and
// its log. The test fails if cmd exits before it is ready, or is not ready
// within testutil.WaitTimeout (a hang detector). stop, which t.Cleanup
// calls too, ends cmd and requires it to exit without error.
func background[T any](t *testing.T, name string, cmd func(ctx context.Context, logs io.Writer, ready chan<- T) error) (T, *testutil.SyncBuffer, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan T, 1)
	done := make(chan error, 1)
	logs := &testutil.SyncBuffer{}
	go func() { done <- cmd(ctx, logs, ready) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err, "%s exited with an error", name)
			case <-time.After(testutil.WaitTimeout):
				t.Fatalf("%s did not stop within %v", name, testutil.WaitTimeout)
			}
		})
	}
	var v T
	select {
	case v = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s exited early: %v\n%s", name, err, logs.String())
	case <-time.After(testutil.WaitTimeout):
		t.Cleanup(stop)
		t.Fatalf("%s did not start within %v", name, testutil.WaitTimeout)
	}
	t.Cleanup(stop)
	return v, logs, stop
}

// startServe runs serve with args (see background) and returns the
// address it reports ready ("" when it opens no port) and its log.
func startServe(t *testing.T, args ...string) (string, *testutil.SyncBuffer) {
	t.Helper()
	addr, logs, _ := background(t, "serve", func(ctx context.Context, logs io.Writer, ready chan<- string) error {
		return serve(ctx, args, logs, ready)
	})
	return addr, logs
}

// writeIni writes body to a config file in a temporary directory and
// returns its path.
func writeIni(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "local.ini")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// buildBinary builds fdbrep (with go build's flags) and returns its path;
// in -short mode it skips the test instead. A build with the same flags
// is made once per test binary (a build links for seconds) into builtDir,
// which TestMain removes.
func buildBinary(t *testing.T, flags ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	builds.Lock()
	defer builds.Unlock()
	key := strings.Join(flags, "\x00")
	if bin, ok := builds.bins[key]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "fdbrep-test-bin-")
		require.NoError(t, err)
		builds.dir = dir
	}
	bin := filepath.Join(builds.dir, fmt.Sprintf("fdbrep-%d", len(builds.bins)))
	args := append([]string{"build", "-o", bin}, flags...)
	if fdbBuild { // the binary as the tests: with FoundationDB
		args = append(args, "-tags", "fdb")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	if builds.bins == nil {
		builds.bins = map[string]string{}
	}
	builds.bins[key] = bin
	return bin
}

// builds are the binaries buildBinary made, by flags.
var builds struct {
	sync.Mutex // guards dir and bins
	dir        string
	bins       map[string]string
}

// removeBuilds removes what buildBinary made (TestMain, after the tests).
func removeBuilds() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
}

// process is an fdbrep process a test started, logging JSON to stderr.
type process struct {
	cmd    *exec.Cmd
	lines  testsignal.Signal[map[string]any] // its log lines, decoded
	exited chan struct{}                     // closed once its exit status is in err
	err    error
}

// startProcess starts bin with args and env (nil: this process's) and
// reads its log; it kills the process, if still running, at the end of
// the test.
func startProcess(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Env = env
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	p.lines.Init()
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.lines.Signal(m)
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // after a line too long: the process must never block on stderr
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// waitLog returns the process's next log line with message msg.
func (p *process) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	return testutil.WaitUntil(t, &p.lines, fmt.Sprintf("log line %q", msg), func(m map[string]any) bool {
		return m["message"] == msg
	})
}

// wait waits for the process to exit and returns its exit error; the
// test fails if that takes longer than testutil.WaitTimeout.
func (p *process) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(testutil.WaitTimeout):
		t.Fatalf("%s did not exit within %v", p.cmd.Path, testutil.WaitTimeout)
		return nil
	}
}
