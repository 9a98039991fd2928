package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// TestReadmeWalkthrough types README.md's walk-through as a reader would:
// every ```sh block of README, in order, each command run by one bash (so
// that `export PASS=…` and `ID=$(…)` carry over), against the real binary
// started as `make run` starts it and a pouchdb-server started by README's
// own command. A block is skipped only where the Markdown says so, on the
// line before it: `<!-- walkthrough: skip (why) -->` (a reader sees
// nothing), or `<!-- walkthrough: peer (…) -->` for the block that starts
// the endpoints' server, whose `make` lines this test does itself (it
// installs pouchdb-server from the lockfile as `make pouchdb` does) and
// whose other lines it runs in the background, as in a terminal of their
// own.
//
// Only what must differ on a test machine is substituted: the ports
// (5984, the node's, and 15984, the peer's, become free ones), the
// admin's password (README's sample, in the block that shows what `make
// run` prints, becomes the one this node printed) and the node's name
// (fdbrep@host).
//
// Each command must exit 0, and where README shows its output (comment
// lines right after it, or a comment on its last line) the key parts must
// be there (expectations); a read (curl without -X or -d, fdbrep jobs or
// docs) is typed again until they are, as a reader would once the node
// caught up. A command whose answer is a CouchDB error fails unless README
// shows that error.
func TestReadmeWalkthrough(t *testing.T) {
	for _, env := range []string{"FDBREP_KV_FAULTS", "FDBREP_KV_LATENCY", "FDBREP_KV_BACKEND"} {
		if os.Getenv(env) != "" {
			// The node runs with a clean environment, as a reader's does:
			// this pass would repeat the plain one.
			t.Skipf("%s does not reach the node README starts: the walk-through runs in make test's plain pass", env)
		}
	}
	readme := readRepoFile(t, "README.md")
	blocks := readmeBlocks(t, readme)
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not on PATH: README's walk-through needs it", tool)
			}
			t.Skipf("%s is not on PATH: README's walk-through needs it (CI has it)", tool)
		}
	}
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx is not on PATH: README's walk-through runs pouchdb-server with it (Node.js 18+ with npm)")
	}
	if _, err := couchtest.InstalledPouchDBServer(); err != nil {
		if _, npmErr := exec.LookPath("npm"); npmErr != nil {
			t.Skipf("pouchdb-server is not installed and npm is absent: %v", err)
		}
		require.NoError(t, err)
	}

	// The checkout as the reader has it after make run and make pouchdb:
	// bin/fdbrep, scripts/pouchdb with its node_modules, and ./data.
	work := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(work, "bin"), 0o755))
	require.NoError(t, os.Symlink(buildBinary(t), filepath.Join(work, "bin", "fdbrep")))
	pouchDir := filepath.Join(work, "scripts", "pouchdb")
	require.NoError(t, os.MkdirAll(pouchDir, 0o755))
	for _, name := range []string{"node_modules", "package.json", "package-lock.json"} {
		src, err := filepath.Abs(filepath.Join(repoRoot, "scripts", "pouchdb", name))
		require.NoError(t, err)
		require.NoError(t, os.Symlink(src, filepath.Join(pouchDir, name)))
	}
	// A home of its own: no ~/.netrc, ~/.curlrc or FDBREP_* of the developer's.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8"}
	if p := os.Getenv("LD_LIBRARY_PATH"); p != "" { // libfdb_c, for a binary built with -tags fdb
		env = append(env, "LD_LIBRARY_PATH="+p)
	}

	node := startReadmeNode(t, work, env)
	peerPort := freeTCPPort(t)
	sample := regexp.MustCompile(`(?m)^\s+password: (\S+)$`).FindStringSubmatch(readme)
	require.NotNil(t, sample, "README no longer shows the password make run prints")
	_, nodePort, err := net.SplitHostPort(node.addr)
	require.NoError(t, err)
	ports := regexp.MustCompile(`\b(?:15984|5984)\b`)
	subst := func(s string) string {
		s = ports.ReplaceAllStringFunc(s, func(m string) string {
			if m == "15984" {
				return strconv.Itoa(peerPort)
			}
			return nodePort
		})
		s = strings.ReplaceAll(s, sample[1], node.password)
		return strings.ReplaceAll(s, "fdbrep@host", node.name)
	}

	sh := startShell(t, work, env)
	ran := 0
	for _, b := range blocks {
		switch b.mark {
		case "skip":
			continue
		case "peer":
			startReadmePeer(t, work, env, b, subst, peerPort)
			continue
		}
		for _, c := range b.commands(t) {
			sh.runChecked(t, c, subst)
			ran++
		}
	}
	require.Greater(t, ran, 40, "README's walk-through lost its commands: is the parser still right?")
}

// readmeBlock is a ```sh block of README: its first line's number, the
// walk-through mark on the line before it ("" to run it) and its lines.
type readmeBlock struct {
	line  int
	mark  string
	lines []string
}

var walkMark = regexp.MustCompile(`^<!-- walkthrough: (\w+)\b.*-->$`)

// readmeBlocks returns README's ```sh blocks with their marks; a mark
// this test does not know, or one not followed by a block, fails it.
func readmeBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	lines := strings.Split(readme, "\n")
	mark := ""
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if m := walkMark.FindStringSubmatch(line); m != nil {
			require.Contains(t, []string{"skip", "peer"}, m[1], "README line %d: unknown walk-through mark", i+1)
			require.True(t, i+1 < len(lines) && lines[i+1] == "```sh", "README line %d: the mark must be right before a ```sh block", i+1)
			mark = m[1]
			continue
		}
		if line != "```sh" {
			continue
		}
		b := readmeBlock{line: i + 2, mark: mark}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.lines = append(b.lines, lines[i])
		}
		blocks = append(blocks, b)
		mark = ""
	}
	peers := 0
	for _, b := range blocks {
		if b.mark == "peer" {
			peers++
		}
	}
	require.Equal(t, 1, peers, "README should mark one block as the one that starts the endpoints' server (<!-- walkthrough: peer -->)")
	return blocks
}

// readmeCommand is one command of a block (its continuation lines
// joined) and the output README shows for it: the comment on its last
// line and the comment lines right after it (prose comments come after a
// blank line, before the command they describe).
type readmeCommand struct {
	line   int
	text   string
	expect []string
}

func (b readmeBlock) commands(t *testing.T) []readmeCommand {
	t.Helper()
	var cmds []readmeCommand
	open := false // comment lines belong to the last command
	for i := 0; i < len(b.lines); i++ {
		line := strings.TrimSpace(b.lines[i])
		switch {
		case line == "":
			open = false
		case strings.HasPrefix(line, "#"):
			if open {
				c := &cmds[len(cmds)-1]
				c.expect = append(c.expect, strings.TrimPrefix(line, "#"))
			}
		default:
			c := readmeCommand{line: b.line + i, text: b.lines[i]}
			for strings.HasSuffix(strings.TrimRight(b.lines[i], " "), `\`) {
				i++
				require.Less(t, i, len(b.lines), "README line %d: a command ends in \\ at the end of its block", c.line)
				c.text += "\n" + b.lines[i]
			}
			if comment, ok := trailingComment(c.text); ok {
				c.expect = append(c.expect, comment)
			}
			cmds = append(cmds, c)
			open = true
		}
	}
	return cmds
}

// trailingComment returns the shell comment that ends text: a # after
// a blank, outside quotes.
func trailingComment(text string) (string, bool) {
	var quote byte
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && i > 0 && (text[i-1] == ' ' || text[i-1] == '\t'):
			return text[i+1:], true
		}
	}
	return "", false
}

// readOnly tells the commands a reader may type again until the output
// README shows is there: reads of the node's views.
func (c readmeCommand) readOnly() bool {
	s := strings.TrimSpace(c.text)
	switch {
	case strings.HasPrefix(s, "curl "):
		return !strings.Contains(s, " -X ") && !strings.Contains(s, " -d ")
	case strings.HasPrefix(s, "bin/fdbrep jobs"), strings.HasPrefix(s, "bin/fdbrep docs"):
		return true
	}
	return false
}

// expectation is a key part of the output README shows for a command.
type expectation struct {
	what string
	re   *regexp.Regexp
}

// volatileKeys are the JSON fields whose README values are examples, not
// what the walk-through gives: a revision is a hash of the document, whose
// endpoints hold the peer's port; throughput is of the last minute. Time
// stamps are left out too (timestamp).
var volatileKeys = map[string]bool{"rev": true, "throughput": true}

var (
	jsonScalar = `"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null`
	// jsonPair is "key": value, the value a scalar or an array of them.
	jsonPair    = regexp.MustCompile(`"([\w.-]+)"\s*:\s*(` + jsonScalar + `|\[\s*(?:(?:` + jsonScalar + `)(?:\s*,\s*(?:` + jsonScalar + `))*)?\s*\])`)
	timestamp   = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT`)
	statusError = regexp.MustCompile(`^(\d{3}) ([a-z_]+)\b`) // "403 forbidden: …"
	summaryLine = regexp.MustCompile(`^([a-z][a-z ]*[a-z]):\s+(\S+)$`)
)

// expectations reads the key parts of the output README shows (lines,
// after substitution): its JSON fields of scalars or arrays of scalars,
// except those elided with … or volatile; where it shows none, a JSON
// string or array that starts a line ("500", ["_replicator"]); a status
// and CouchDB error ("403 forbidden" is {"error":"forbidden"}); and the
// client's summary lines ("docs written:   3"). It also says whether
// README shows an error.
func expectations(lines []string) ([]expectation, bool) {
	var out []expectation
	text := strings.TrimSpace(strings.Join(lines, " "))
	for _, m := range jsonPair.FindAllStringSubmatch(text, -1) {
		key, val := m[1], m[2]
		if strings.Contains(val, "…") || volatileKeys[key] || timestamp.MatchString(val) {
			continue
		}
		out = append(out, expectation{what: m[0], re: regexp.MustCompile(`"` + regexp.QuoteMeta(key) + `"\s*:\s*` + jsonRegexp(val) + `\s*[,}\]]`)})
	}
	pairs, showsError := len(out) > 0, strings.Contains(text, `"error"`)
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if m := summaryLine.FindStringSubmatch(line); m != nil && !strings.Contains(m[2], "…") {
			out = append(out, expectation{what: line, re: regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(m[1]) + `:\s+` + regexp.QuoteMeta(m[2]) + `\s*$`)})
		}
		if m := statusError.FindStringSubmatch(line); m != nil {
			out = append(out, expectation{what: m[0], re: regexp.MustCompile(`"error"\s*:\s*"` + m[2] + `"`)})
			showsError = true
		}
		var v any
		if !pairs && (strings.HasPrefix(line, `"`) || strings.HasPrefix(line, "[")) && json.NewDecoder(strings.NewReader(line)).Decode(&v) == nil {
			b, _ := json.Marshal(v)
			out = append(out, expectation{what: string(b), re: regexp.MustCompile(jsonRegexp(string(b)))})
		}
	}
	return out, showsError
}

// jsonRegexp matches the JSON value v (a scalar, or an array of them) with
// any blanks between its tokens, as compact and pretty output have them.
func jsonRegexp(v string) string {
	if !strings.HasPrefix(v, "[") {
		return regexp.QuoteMeta(v)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(v), &elems); err != nil {
		return regexp.QuoteMeta(v)
	}
	parts := make([]string, len(elems))
	for i, e := range elems {
		parts[i] = regexp.QuoteMeta(string(e))
	}
	return `\[\s*` + strings.Join(parts, `\s*,\s*`) + `\s*\]`
}

// readmeNode is the node README's make run starts.
type readmeNode struct {
	addr, password, name string
}

// startReadmeNode runs bin/fdbrep serve -data-dir ./data in work, as make
// run does, on a free port (-bind) and logging JSON so that the test reads
// where it listens; its first start prints the admin's password.
func startReadmeNode(t *testing.T, work string, env []string) readmeNode {
	t.Helper()
	cmd := exec.Command("bin/fdbrep", "serve", "-data-dir", "./data", "-bind", "127.0.0.1:0", "-log-format", "json")
	cmd.Dir, cmd.Env = work, env
	lines := startLines(t, cmd, "fdbrep serve")
	var n readmeNode
	pw := regexp.MustCompile(`^\s+password: (\S+)$`)
	testutil.WaitUntil(t, lines, "the admin's password", func(l string) bool {
		if m := pw.FindStringSubmatch(l); m != nil {
			n.password = m[1]
		}
		return n.password != ""
	})
	testutil.WaitUntil(t, lines, "HTTP API listening", func(l string) bool {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["message"] != "HTTP API listening" {
			return false
		}
		n.addr, _ = m["addr"].(string)
		n.name, _ = m["node"].(string)
		return true
	})
	require.NotEmpty(t, n.addr)
	require.NotEmpty(t, n.name)
	return n
}

// startReadmePeer runs the peer block: its make lines are this test's
// set-up (done), every other line runs in the background in work, until
// the end of the test; then it waits for the peer to answer.
func startReadmePeer(t *testing.T, work string, env []string, b readmeBlock, subst func(string) string, port int) {
	t.Helper()
	targets := regexp.MustCompile(`(?m)^([\w-]+):`).FindAllStringSubmatch(readRepoFile(t, "Makefile"), -1)
	started := 0
	for _, c := range b.commands(t) {
		if target, ok := strings.CutPrefix(strings.TrimSpace(c.text), "make "); ok {
			known := false
			for _, m := range targets {
				known = known || m[1] == target
			}
			require.True(t, known, "README line %d: the Makefile has no target %q", c.line, target)
			continue
		}
		cmd := exec.Command("bash", "-c", subst(c.text))
		cmd.Dir, cmd.Env = work, env
		startLines(t, cmd, fmt.Sprintf("README line %d", c.line))
		started++
	}
	require.Equal(t, 1, started, "README line %d: the peer block should start one server", b.line)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	testutil.Eventually(t, "the peer README starts to answer at "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// startLines starts cmd in a process group of its own, which the end of
// the test kills, and signals each line of its stdout and stderr.
func startLines(t *testing.T, cmd *exec.Cmd, name string) *testsignal.Signal[string] {
	t.Helper()
	lines := &testsignal.Signal[string]{}
	lines.Init()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start(), name)
	w.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			lines.Signal(sc.Text())
		}
		_, _ = io.Copy(io.Discard, r)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		r.Close()
	})
	return lines
}

// freeTCPPort returns a port of 127.0.0.1 that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// readmeShell is one bash the walk-through's commands are typed into.
type readmeShell struct {
	in    io.Writer
	lines *testsignal.Signal[string] // its stdout
	dir   string                     // where each command's stderr goes
	n     int
}

func startShell(t *testing.T, work string, env []string) *readmeShell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = work, env
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	sh := &readmeShell{in: in, dir: t.TempDir()}
	sh.lines = startLines(t, cmd, "bash")
	// pipefail: `curl … | jq` fails where curl does.
	_, err = io.WriteString(in, "set -o pipefail\n")
	require.NoError(t, err)
	return sh
}

// run types command and returns its exit status, its stdout and its
// stderr.
func (sh *readmeShell) run(t *testing.T, command string) (int, string, string) {
	t.Helper()
	sh.n++
	marker := fmt.Sprintf("__walkthrough_done_%d ", sh.n)
	errFile := filepath.Join(sh.dir, strconv.Itoa(sh.n))
	_, err := fmt.Fprintf(sh.in, "{\n%s\n} </dev/null 2>%q\nprintf '\\n%s%%d\\n' \"$?\"\n", command, errFile, marker)
	require.NoError(t, err)
	var out []string
	code := -1
	testutil.WaitUntil(t, sh.lines, "the end of "+strconv.Quote(command), func(l string) bool {
		if rest, ok := strings.CutPrefix(l, marker); ok {
			code, _ = strconv.Atoi(rest)
			return true
		}
		out = append(out, l)
		return false
	})
	if len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1] // the marker's own newline
	}
	stderr, _ := os.ReadFile(errFile)
	return code, strings.Join(out, "\n"), string(stderr)
}

// runChecked runs c (substituted) until it exits 0 with the output README
// shows: once, or, for a read, again until it is there (bounded by
// testutil.WaitTimeout, a hang detector).
func (sh *readmeShell) runChecked(t *testing.T, c readmeCommand, subst func(string) string) {
	t.Helper()
	command := subst(c.text)
	var expect []string
	for _, e := range c.expect {
		expect = append(expect, subst(e))
	}
	want, showsError := expectations(expect)
	deadline := time.Now().Add(testutil.WaitTimeout)
	pause := 10 * time.Millisecond
	for {
		code, out, stderr := sh.run(t, command)
		require.Equal(t, 0, code, "README line %d exits %d:\n%s\nstdout:\n%s\nstderr:\n%s", c.line, code, command, out, stderr)
		missing := ""
		for _, e := range want {
			if !e.re.MatchString(out) {
				missing = e.what
				break
			}
		}
		var answer map[string]any
		if missing == "" && !showsError && json.Unmarshal([]byte(strings.TrimSpace(out)), &answer) == nil && answer["error"] != nil {
			missing = "no CouchDB error"
		}
		if missing == "" {
			return
		}
		if !c.readOnly() || time.Now().After(deadline) {
			t.Fatalf("README line %d:\n%s\nshows %q, which its output lacks:\n%s\nstderr:\n%s", c.line, command, missing, out, stderr)
		}
		time.Sleep(pause)
		pause = min(2*pause, 200*time.Millisecond)
	}
}
