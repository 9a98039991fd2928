package proctest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// Line is one JSON line of a process's log: its time is the line's "time"
// field (RFC 3339; fdbrep logs milliseconds), else when it was read.
type Line struct {
	At time.Time
	M  map[string]any
}

// Str is the line's string field key ("" when absent).
func (l Line) Str(key string) string {
	s, _ := l.M[key].(string)
	return s
}

// Proc is a process whose stderr carries JSON log lines (fdbrep serve
// -log-format json). It keeps every line, and the others (a panic, the
// runtime's errors) for failure messages.
type Proc struct {
	// Name names the process in messages.
	Name string
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	lines  []Line
	other  []string
	exitAt time.Time // when it exited, as this process saw it
}

// Start starts cmd (whose Stderr must be unset) and reads its log; the
// process is SIGKILLed, if still running, in t.Cleanup.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			p.mu.Lock()
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				at := time.Now()
				if s, ok := m["time"].(string); ok {
					if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
						at = ts
					}
				}
				p.lines = append(p.lines, Line{At: at, M: m})
			} else {
				p.other = append(p.other, sc.Text())
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		p.mu.Lock()
		p.exitAt = time.Now()
		p.mu.Unlock()
	}()
	t.Cleanup(p.Kill)
	return p
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the process and waits until it has exited.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM (a graceful stop) and waits until the process has
// exited, at most until deadline (then it is SIGKILLed); it reports
// whether it exited by itself.
func (p *Proc) Stop(deadline time.Time) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(time.Until(deadline)):
		p.Kill()
		return false
	}
}

// Lines returns every JSON line so far.
func (p *Proc) Lines() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// Find returns the lines with message msg and, when kv is given (key,
// value), whose string field key contains value.
func (p *Proc) Find(msg string, kv ...string) []Line {
	var out []Line
	for _, l := range p.Lines() {
		if l.M["message"] != msg {
			continue
		}
		if len(kv) == 2 && !strings.Contains(l.Str(kv[0]), kv[1]) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// WaitLog waits until the process logged msg, failing t if it exits
// first or after testutil.WaitTimeout.
func (p *Proc) WaitLog(t testing.TB, msg string) {
	t.Helper()
	WaitUntil(t, time.Now().Add(testutil.WaitTimeout), fmt.Sprintf("%s logs %q", p.Name, msg), func() bool {
		if p.Exited() {
			t.Fatalf("%s exited:\n%s", p.Name, p.Tail())
		}
		return len(p.Find(msg)) > 0
	})
}

// end is when the process's runs ended: its exit, or now while it runs.
func (p *Proc) end() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitAt.IsZero() {
		return time.Now()
	}
	return p.exitAt
}

// Tail is the process's last output, for a failure message.
func (p *Proc) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines[max(0, len(p.lines)-40):] {
		raw, _ := json.Marshal(l.M)
		b.Write(raw)
		b.WriteByte('\n')
	}
	for _, s := range p.other[max(0, len(p.other)-40):] {
		b.WriteString(s + "\n")
	}
	return b.String()
}
