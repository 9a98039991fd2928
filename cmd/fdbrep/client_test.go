package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/mattn/go-runewidth"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/cli"
	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// Credentials of the tests' node and peers: no output may show them.
const (
	nodeAdmin, nodePass = "adm", "node-s3cret-pw"
	peerAdmin, peerPass = "padm", "peer-s3cret-pw"
)

// clientNode is a node the client tests run against.
type clientNode struct {
	base string
	adm  *testutil.Creds
}

// startClientNode starts `fdbrep serve -in-memory` with an admin and job
// stats written every second, and returns its API URL.
func startClientNode(t *testing.T, bin string) clientNode {
	t.Helper()
	env := append(os.Environ(), "FDBREP_ADMINS__"+strings.ToUpper(nodeAdmin)+"="+nodePass,
		"FDBREP_CHTTPD_AUTH__ITERATIONS=10", "FDBREP_REPLICATOR__STATS_UPDATE_INTERVAL_SEC=1",
		"FDBREP_REPLICATOR__STARTUP_JITTER=1")
	p := startProcess(t, bin, env, "serve", "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json")
	addr := p.waitLog(t, "HTTP API listening")["addr"].(string)
	return clientNode{base: "http://" + addr, adm: &testutil.Creds{Name: nodeAdmin, Pass: nodePass}}
}

// clientEnv is a clean environment for the client: a home of its own (no
// ~/.netrc, the default data directory inside it), no FDBREP_* of the
// developer's, plus extra.
func clientEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TERM=xterm"}, extra...)
}

// cliProc is a run of the client binary whose output a test reads.
type cliProc struct {
	cmd    *exec.Cmd
	out    testutil.SyncBuffer       // everything written, stdout and stderr
	chunks testsignal.Signal[string] // each read of the output
	exited chan struct{}             // closed once code is set
	code   int
	input  io.Writer // the terminal's input (pty runs only)
}

// startCLI runs bin with args and env, its stdout and stderr going to one
// pipe, or, with tty, to a pseudo-terminal (a real terminal for isatty, and
// Ctrl-C typed on it sends SIGINT). The process is killed at the end of
// the test if still running.
func startCLI(t *testing.T, bin string, env []string, tty bool, args ...string) *cliProc {
	t.Helper()
	cols := 0
	if tty {
		cols = 160
	}
	return startCLIWidth(t, bin, env, cols, args...)
}

// startCLIWidth is startCLI on a terminal cols wide (0: in a pipe).
func startCLIWidth(t *testing.T, bin string, env []string, cols int, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Env = env
	p.chunks.Init()
	var rd io.ReadCloser
	if cols > 0 {
		f, err := pty.StartWithSize(p.cmd, &pty.Winsize{Rows: 40, Cols: uint16(cols)})
		require.NoError(t, err)
		rd, p.input = f, f
	} else {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		p.cmd.Stdout, p.cmd.Stderr = w, w
		require.NoError(t, p.cmd.Start())
		w.Close()
		rd = r
	}
	go func() {
		defer close(p.exited)
		buf := make([]byte, 32<<10)
		for {
			n, err := rd.Read(buf)
			if n > 0 {
				_, _ = p.out.Write(buf[:n])
				p.chunks.Signal(string(buf[:n]))
			}
			if err != nil { // EOF, or EIO on a pty whose process exited
				break
			}
		}
		err := p.cmd.Wait()
		rd.Close()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// wait waits for the exit and returns the exit code and the output.
func (p *cliProc) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case <-p.exited:
		return p.code, p.out.String()
	case <-time.After(testutil.WaitTimeout):
		t.Fatalf("fdbrep %q did not exit within %v; output:\n%s", p.cmd.Args[1:], testutil.WaitTimeout, p.out.String())
		return 0, ""
	}
}

// waitOutput waits until the output so far contains s.
func (p *cliProc) waitOutput(t *testing.T, s string) {
	t.Helper()
	if strings.Contains(p.out.String(), s) {
		return
	}
	testutil.WaitUntil(t, &p.chunks, "output "+strconv.Quote(s), func(string) bool {
		return strings.Contains(p.out.String(), s)
	})
}

// runCLI runs the client to its end in a pipe.
func runCLI(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	return startCLI(t, bin, env, false, args...).wait(t)
}

// requireNoSecrets checks that no password of the tests shows in out.
func requireNoSecrets(t *testing.T, out string) {
	t.Helper()
	for _, s := range []string{nodePass, peerPass} {
		require.NotContains(t, out, s, "a password was printed")
	}
}

// summaryCount returns the number on the summary line "  key: N".
func summaryCount(t *testing.T, out, key string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(key) + `:\s+(\d+)\s*$`).FindStringSubmatch(out)
	require.NotNil(t, m, "summary line %q in:\n%s", key, out)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n
}

// summaryValue returns the text on the summary line "  key: value".
func summaryValue(t *testing.T, out, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(key) + `:\s+(\S+)\s*$`).FindStringSubmatch(out)
	require.NotNil(t, m, "summary line %q in:\n%s", key, out)
	return m[1]
}

// clientFixture is what most client tests need: the binary, a node, and a
// pouchdb-server peer with an admin holding "src" with docs documents.
type clientFixture struct {
	bin  string
	node clientNode
	peer *couchtest.Server
}

func newClientFixture(t *testing.T, docs int) clientFixture {
	t.Helper()
	bin := buildBinary(t)
	f := clientFixture{bin: bin, node: startClientNode(t, bin), peer: couchtest.StartPouchDB(t, couchtest.WithAdmin(peerAdmin, peerPass))}
	f.peer.CreateDB(t, "src")
	if docs > 0 {
		f.peer.AddDocs(t, "src", 0, docs)
	}
	return f
}

// env is the client's environment with the node's password in
// FDBREP_PASSWORD.
func (f clientFixture) env(t *testing.T) []string {
	return clientEnv(t, "FDBREP_PASSWORD="+nodePass)
}

// TestReplicateInAPipe runs a one-shot replication through the cluster
// with the client's output in a pipe: plain progress lines, no escape
// sequences, a summary, no password anywhere (the endpoints carry the
// peer's in their URLs, the node's comes from the environment).
func TestReplicateInAPipe(t *testing.T) {
	f := newClientFixture(t, 300)
	code, out := runCLI(t, f.bin, f.env(t), "replicate", "-cluster", f.node.base, "-user", nodeAdmin,
		f.peer.AuthDBURL("src"), f.peer.AuthDBURL("tgt"), "-create-target")
	require.Equal(t, 0, code, out)
	requireNoSecrets(t, out)
	require.NotContains(t, out, "\x1b[", "no escape sequences in a pipe")
	require.Contains(t, out, "Replicating http://"+peerAdmin+":*****@")
	require.Regexp(t, `(?m)^\[\d+s\] completed: 300/300 changes, 300 docs written, 0 failures`, out)
	require.Contains(t, out, "Replication completed after")
	require.Equal(t, int64(300), summaryCount(t, out, "docs written"))
	require.Equal(t, int64(0), summaryCount(t, out, "doc write failures"))
	require.Equal(t, 300, len(f.peer.AllDocs(t, "tgt", false)))
}

// TestReplicateTenThousandInATerminal is the "done when": fdbrep
// replicate on 10,000 documents shows a live progress bar in a terminal
// and ends with the same counts as the cluster's view of the job.
func TestReplicateTenThousandInATerminal(t *testing.T) {
	f := newClientFixture(t, 10000)
	p := startCLI(t, f.bin, f.env(t), true, "replicate", "-cluster", f.node.base, "-user", nodeAdmin,
		f.peer.AuthDBURL("src"), f.peer.AuthDBURL("tgt"), "-create-target")
	code, out := p.wait(t)
	require.Equal(t, 0, code, out)
	requireNoSecrets(t, out)
	// mpb redraws the bar in place: cursor-up and erase sequences, and the
	// last frame of the completed bar.
	require.Contains(t, out, "\x1b[")
	require.Contains(t, out, "10000/10000 changes")
	require.Contains(t, out, "10000 written")
	require.Contains(t, out, "completed")

	repID := summaryValue(t, out, "replication id")
	r := testutil.Do(t, "GET", f.node.base+"/_scheduler/jobs/"+repID, f.node.adm, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "completed", r.Body["state"])
	info := r.Body["info"].(map[string]any)
	for key, field := range map[string]string{"docs read": "docs_read", "docs written": "docs_written",
		"doc write failures": "doc_write_failures", "revisions checked": "revisions_checked"} {
		require.Equal(t, info[field], float64(summaryCount(t, out, key)), "%s: summary vs _scheduler/jobs", key)
	}
	require.Equal(t, int64(10000), summaryCount(t, out, "docs written"))
	require.Equal(t, 10000, len(f.peer.AllDocs(t, "tgt", false)))
}

// TestReplicateCtrlCCancelsOnTheCluster types Ctrl-C in the terminal of a
// replication on the cluster: a continuous one (cancelled by its id) and a
// one-shot one held up by a source whose changes feed stalls (cancelled by
// its specification). The client cancels it with POST /_replicate
// "cancel": true and exits with ExitInterrupted; the job is gone, and the
// summary counts what the target took (the cancel's answer carries the
// run's final counters).
func TestReplicateCtrlCCancelsOnTheCluster(t *testing.T) {
	f := newClientFixture(t, 20)
	stalled := couchtest.NewFaultProxy(t, f.peer.URL(), couchtest.FaultConfig{RateStall: 1, Stall: 10 * time.Minute,
		Match: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/_changes") }})
	for _, tc := range []struct {
		name, tgt string
		args      []string
	}{
		{"continuous", "tgt", []string{"-continuous", f.peer.AuthDBURL("src"), f.peer.AuthDBURL("tgt")}},
		{"one-shot", "tgt2", []string{stalled.URL() + "/src", f.peer.AuthDBURL("tgt2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startCLI(t, f.bin, f.env(t), true, append([]string{"replicate", "-cluster", f.node.base, "-user", nodeAdmin,
				"-create-target"}, tc.args...)...)
			p.waitOutput(t, "running")
			r := testutil.Do(t, "GET", f.node.base+"/_scheduler/jobs", f.node.adm, nil)
			require.Equal(t, float64(1), r.Body["total_rows"], r.Raw)

			_, err := p.input.Write([]byte{3}) // Ctrl-C
			require.NoError(t, err)
			code, out := p.wait(t)
			require.Equal(t, 130, code, out)
			requireNoSecrets(t, out)
			require.Contains(t, out, "Interrupted: the replication was cancelled on the cluster and its run stopped.")
			require.Contains(t, out, "Replication cancelled after")
			took := 0 // a run cancelled before its setup created the target wrote nothing
			if r := testutil.Do(t, "GET", f.peer.URL()+"/"+tc.tgt, &testutil.Creds{Name: peerAdmin, Pass: peerPass}, nil); r.Status != 404 {
				took = len(f.peer.AllDocs(t, tc.tgt, false))
			}
			require.Equal(t, int64(took), summaryCount(t, out, "docs written"), "the summary counts what the target took")
			r = testutil.Do(t, "GET", f.node.base+"/_scheduler/jobs", f.node.adm, nil)
			require.Equal(t, float64(0), r.Body["total_rows"], "the job is gone: %s", r.Raw)
		})
	}
}

// TestReplicateInProcess runs replications with no cluster, on an embedded
// store: SIGINT stops a continuous one with a checkpoint (exit 130), a
// second process cannot open the same store, and a rerun resumes from the
// checkpoint.
func TestReplicateInProcess(t *testing.T) {
	bin := buildBinary(t)
	peer := couchtest.StartPouchDB(t, couchtest.WithAdmin(peerAdmin, peerPass))
	peer.CreateDB(t, "src")
	peer.AddDocs(t, "src", 0, 50)
	dir := t.TempDir()
	env := clientEnv(t)
	src, tgt := peer.AuthDBURL("src"), peer.AuthDBURL("tgt")

	p := startCLI(t, bin, env, false, "replicate", "-data-dir", dir, "-continuous", "-create-target", src, tgt)
	p.waitOutput(t, "50 docs written")

	code, out := runCLI(t, bin, env, "replicate", "-data-dir", dir, src, tgt)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "another fdbrep process may have it open")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	code, out = p.wait(t)
	require.Equal(t, 130, code, out)
	requireNoSecrets(t, out)
	require.Contains(t, out, "in process (store "+dir+")")
	require.Contains(t, out, "Interrupted: stopped with a final checkpoint")
	require.Equal(t, int64(50), summaryCount(t, out, "docs written"))

	peer.AddDocs(t, "src", 50, 25)
	code, out = runCLI(t, bin, env, "replicate", "-data-dir", dir, src, tgt)
	require.Equal(t, 0, code, out)
	requireNoSecrets(t, out)
	require.NotEqual(t, "0", summaryValue(t, out, "resumed from seq"))
	require.Equal(t, int64(75), summaryCount(t, out, "revisions checked"), "cumulative over the runs: 50 then 25")
	require.Equal(t, 75, len(peer.AllDocs(t, "tgt", false)))
}

// TestJobsAndDocsTables prints the scheduler views as tables, as JSON, and
// watched: redrawn in a terminal, once per interval in a pipe, until
// Ctrl-C (exit 130). A terminal's table fits its width; a CJK or emoji
// id takes two cells a character and the columns after it stay aligned;
// a unique prefix of a job's id names it.
func TestJobsAndDocsTables(t *testing.T) {
	f := newClientFixture(t, 10)
	// Three documents, so that a view of one shows that one alone.
	const r3 = "r3-日本語🚀"
	jobIDs := map[string]string{}
	for _, doc := range []string{"r1", "r2", r3} {
		r := testutil.Do(t, "PUT", f.node.base+"/_replicator/"+doc, f.node.adm, map[string]any{
			"source": f.peer.AuthDBURL("src"), "target": f.peer.AuthDBURL("tgt-" + doc), "create_target": true, "continuous": true})
		require.Equal(t, 201, r.Status, r.Raw)
		waitState(t, f.node.base, f.node.adm, doc, "running")
		r = testutil.Do(t, "GET", f.node.base+"/_scheduler/docs/_replicator/"+doc, f.node.adm, nil)
		jobIDs[doc] = r.Body["id"].(string)
	}
	env := clientEnv(t, "FDBREP_CLUSTER="+f.node.base, "FDBREP_USER="+nodeAdmin, "FDBREP_PASSWORD="+nodePass)

	for _, tc := range []struct {
		args    []string
		want    []string
		notWant []string
	}{
		{[]string{"jobs"}, []string{"ID", "DOC", "STATE", "_replicator/r1", "_replicator/r3", "running", "3 jobs"}, nil},
		{[]string{"jobs", jobIDs["r2"]}, []string{jobIDs["r2"], "_replicator/r2", "running", "\n1 job\n"}, []string{"_replicator/r1", "_replicator/r3"}},
		{[]string{"jobs", jobIDs["r2"][:10]}, []string{jobIDs["r2"], "_replicator/r2", "\n1 job\n"}, []string{"_replicator/r1", "_replicator/r3"}},
		{[]string{"jobs", "-wide"}, []string{"STARTED", "USER", "http://padm:*****@"}, nil},
		{[]string{"docs"}, []string{"DATABASE", "DOC ID", "_replicator", "r1", "r3", "running", "3 documents"}, nil},
		{[]string{"docs", "_replicator", "-states", "running"}, []string{"r1", "r2", "running"}, nil},
		{[]string{"docs", "-json"}, []string{`"doc_id": "r1"`}, nil},
		{[]string{"docs", "_replicator", "r2"}, []string{"r2", "running", "\n1 document\n"}, []string{"r1", "r3"}},
	} {
		code, out := runCLI(t, f.bin, env, tc.args...)
		require.Equal(t, 0, code, out)
		requireNoSecrets(t, out)
		require.Contains(t, out, "padm", "endpoints shown with their user, without the password")
		for _, w := range tc.want {
			require.Contains(t, out, w, "%q", tc.args)
		}
		for _, w := range tc.notWant {
			require.NotContains(t, out, w, "%q shows one entry", tc.args)
		}
	}
	// An unknown job or document: CouchDB's 404, on one line.
	for _, args := range [][]string{{"jobs", "nope"}, {"docs", "_replicator", "nope"}} {
		code, out := runCLI(t, f.bin, env, args...)
		require.Equal(t, 1, code, out)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %q", out)
		require.Contains(t, out, "not_found", "%q", args)
	}
	// A prefix that several jobs' ids begin with (a replicator database's
	// job ids begin with its instance's uuid) names them.
	r := testutil.Do(t, "GET", f.node.base+"/_scheduler/jobs", f.node.adm, nil)
	dbPrefix, _, ok := strings.Cut(r.Body["jobs"].([]any)[0].(map[string]any)["job_id"].(string), "|")
	require.True(t, ok, r.Raw)
	code, out := runCLI(t, f.bin, env, "jobs", dbPrefix)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "fdbrep: job id \""+dbPrefix+"\" is ambiguous: the ids of 3 jobs begin with it:")
	for _, doc := range []string{"r1", "r2", r3} {
		require.Contains(t, out, "(_replicator/"+doc+")")
	}

	// The columns after a CJK or emoji id start at the same cell on every
	// row (text/tabwriter counted runes).
	code, out = runCLI(t, f.bin, env, "docs")
	require.Equal(t, 0, code, out)
	lines := strings.Split(out, "\n")
	at := func(line, sub string) int {
		i := strings.Index(line, sub)
		require.GreaterOrEqual(t, i, 0, "%q in %q", sub, line)
		return runewidth.StringWidth(line[:i])
	}
	for _, l := range lines[1:4] {
		require.Equal(t, at(lines[0], "STATE"), at(l, "running"), "STATE of %q:\n%s", l, out)
	}
	// On a terminal of 80 columns, every line fits.
	for _, args := range [][]string{{"jobs"}, {"docs"}, {"jobs", jobIDs["r2"]}} {
		p := startCLIWidth(t, f.bin, env, 80, args...)
		code, out := p.wait(t)
		require.Equal(t, 0, code, out)
		for l := range strings.Lines(out) {
			l = strings.TrimRight(l, "\r\n")
			require.LessOrEqual(t, runewidth.StringWidth(l), 80, "%q of %q:\n%s", l, args, out)
		}
		require.Contains(t, out, "left out at this width")
	}

	// A watch in a pipe prints one table per interval; in a terminal it
	// clears the screen each time. Ctrl-C ends it with exit code 130.
	for _, tty := range []bool{false, true} {
		p := startCLI(t, f.bin, env, tty, "jobs", "-watch", "-interval", "100ms")
		testutil.WaitUntil(t, &p.chunks, "two refreshes", func(string) bool {
			return strings.Count(p.out.String(), "Every 100ms: /_scheduler/jobs") >= 2
		})
		if tty {
			_, err := p.input.Write([]byte{3})
			require.NoError(t, err)
		} else {
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		}
		code, out := p.wait(t)
		require.Equal(t, 130, code, out)
		require.Equal(t, tty, strings.Contains(out, "\x1b[H\x1b[2J"), "screen cleared only in a terminal")
		requireNoSecrets(t, out)
	}

	// -cancel takes a unique prefix of a replication id too.
	r = testutil.Do(t, "POST", f.node.base+"/_replicate", f.node.adm, map[string]any{
		"source": f.peer.AuthDBURL("src"), "target": f.peer.AuthDBURL("tgt-cancel"), "create_target": true, "continuous": true})
	require.Equal(t, 202, r.Status, r.Raw)
	id := r.Body["_local_id"].(string)
	code, out = runCLI(t, f.bin, env, "replicate", "-cancel", id[:10])
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Replication "+id+" cancelled")
	r = testutil.Do(t, "GET", f.node.base+"/_scheduler/jobs/"+url.PathEscape(id), f.node.adm, nil)
	require.Equal(t, 404, r.Status, r.Raw)
}

// TestClientErrors checks the messages and exit codes of what goes wrong:
// refused credentials, a failing replication, a bad command line, a
// cluster that does not answer; never with a password.
func TestClientErrors(t *testing.T) {
	f := newClientFixture(t, 1)
	src := f.peer.AuthDBURL("src")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"wrong password", []string{"FDBREP_PASSWORD=" + peerPass}, []string{"replicate", "-cluster", f.node.base, "-user", nodeAdmin, src, src + "2"},
			1, "unauthorized: Name or password is incorrect."},
		{"missing source", []string{"FDBREP_PASSWORD=" + nodePass}, []string{"replicate", "-cluster", f.node.base, "-user", nodeAdmin, f.peer.AuthDBURL("nope"), src},
			1, "replication failed: db_not_found: could not open http://padm:*****@"},
		{"one argument", nil, []string{"replicate", src}, 2, "want SOURCE and TARGET"},
		{"bad selector", nil, []string{"replicate", "-selector", "{", src, src}, 2, "-selector: not JSON"},
		{"refused by the parser", nil, []string{"replicate", "-opt", "worker_processes=0", src, src}, 2, "worker_processes"},
		{"bad flag", nil, []string{"jobs", "-nope"}, 2, "fdbrep: jobs: unknown flag -nope; see fdbrep help jobs\n"},
		{"misspelt flag", nil, []string{"jobs", "-wach"}, 2, "fdbrep: jobs: unknown flag -wach (did you mean -watch?); see fdbrep help jobs\n"},
		{"misspelt serve flag", nil, []string{"serve", "-in-memroy"}, 2, "fdbrep: serve: unknown flag -in-memroy (did you mean -in-memory?); see fdbrep help serve\n"},
		{"misspelt cluster flag", nil, []string{"cluster", "-frontend", "3"}, 2, "fdbrep: cluster: unknown flag -frontend (did you mean -frontends?); see fdbrep help cluster\n"},
		{"bad flag value", nil, []string{"docs", "-limit", "x"}, 2, `fdbrep: docs: invalid value "x" for flag -limit: parse error; see fdbrep help docs` + "\n"},
		{"no cluster", nil, []string{"jobs", "-cluster", "http://127.0.0.1:1"}, 1, "cannot reach the cluster at http://127.0.0.1:1"},
		{"detach in process", nil, []string{"replicate", "-detach", "-continuous", src, src}, 2, "-detach needs a cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, f.bin, clientEnv(t, tc.env...), tc.args...)
			require.Equal(t, tc.code, code, out)
			require.Contains(t, out, tc.want)
			if strings.HasPrefix(tc.want, "fdbrep: ") {
				require.Equal(t, tc.want, out, "one line, no usage")
			}
			requireNoSecrets(t, out)
		})
	}
}

// TestHelp: fdbrep help lists the client commands, and help COMMAND prints
// a command's flags.
func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"help"}, &out, &errOut))
	for _, w := range []string{"replicate [flags] SOURCE TARGET", "jobs [flags]", "docs [flags] [DB [DOC]]", "migrate-check [flags] URL", "Exit codes"} {
		require.Contains(t, out.String(), w)
	}
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"help", "replicate"}, &out, &errOut))
	require.Contains(t, out.String(), "-continuous")
	require.Contains(t, out.String(), "-netrc")
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"help", "migrate-check"}, &out, &errOut))
	require.Contains(t, out.String(), "usage: fdbrep migrate-check [flags] URL")
	require.Contains(t, out.String(), "-uuid")
	require.NotContains(t, out.String(), "-cluster", "the server is the URL")
	err := run(t.Context(), []string{"migrate-check"}, &out, &errOut)
	require.Equal(t, 2, exitCode(err, io.Discard), "%v", err)
	require.Error(t, run(t.Context(), []string{"help", "nope"}, &out, &errOut))
	// cluster's own flags, not serve's (which it passes on).
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"help", "cluster"}, &out, &errOut))
	require.Contains(t, out.String(), "usage: fdbrep cluster")
	require.Contains(t, out.String(), "-replication-nodes")
	require.NotContains(t, out.String(), "-cluster-file", "serve's flags are not cluster's")

	for _, tc := range []struct {
		err  error
		code int
	}{
		{flag.ErrHelp, 2},
		{&cli.ExitError{Code: cli.ExitInterrupted}, 130},
		{&cli.ExitError{Code: cli.ExitUsage, Err: errors.New("bad")}, 2},
		{errors.New("other"), 1},
	} {
		require.Equal(t, tc.code, exitCode(tc.err, io.Discard), "%v", tc.err)
	}
}
