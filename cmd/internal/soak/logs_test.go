package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type soakLine struct {
	at time.Time
	m  map[string]any
}

// soakProc is one incarnation of the fdbrep process; every line of its
// stderr is kept (JSON lines decoded) until the test takes it.
type soakProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	notify chan struct{}
	mu     sync.Mutex
	lines  []soakLine
	other  []string // lines that are not JSON (a panic, the runtime's errors)
}

func startSoakProc(t *testing.T, bin string, env, args []string) *soakProc {
	t.Helper()
	p := &soakProc{cmd: exec.Command(bin, args...), exited: make(chan struct{}), notify: make(chan struct{}, 1)}
	p.cmd.Env = env
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.exited)
		rd := bufio.NewReaderSize(stderr, 64<<10)
		for {
			b, err := rd.ReadBytes('\n')
			if len(bytes.TrimSpace(b)) > 0 {
				var m map[string]any
				p.mu.Lock()
				if json.Unmarshal(b, &m) == nil {
					p.lines = append(p.lines, soakLine{at: time.Now(), m: m})
				} else if len(p.other) < 200 {
					p.other = append(p.other, strings.TrimSpace(string(b)))
				}
				p.mu.Unlock()
				select {
				case p.notify <- struct{}{}:
				default:
				}
			}
			if err != nil {
				break
			}
		}
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *soakProc) take() []soakLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.lines
	p.lines = nil
	return out
}

func (p *soakProc) otherLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.other...)
}

// pump applies the log lines that arrived.
func (s *soak) pump() {
	for _, l := range s.proc.take() {
		s.apply(l)
	}
}

// apply applies one log line to the runs.
func (s *soak) apply(l soakLine) {
	msg := soakStr(l.m, "message")
	level := soakStr(l.m, "level")
	keep := strings.HasPrefix(msg, "replication") || strings.HasPrefix(msg, "fdbjobs") || strings.HasPrefix(msg, "replicator") ||
		strings.HasPrefix(msg, "config") || strings.HasPrefix(msg, "fdbrep") || level == "warn" || level == "error"
	if keep {
		s.keepLine(l)
	}
	switch msg {
	case s.topo.ready:
		s.ready = true
	case "replication started":
		s.started(l)
	case "replication stopped", "replication completed", "replication crashed", "replication failed", "replication parked":
		s.ended(l, strings.TrimPrefix(msg, "replication "))
	case "replication added by POST /_replicate":
		if v := s.versions[soakTargetKey(soakStr(l.m, "target"))]; v != nil {
			s.jobVer[soakStr(l.m, "job_id")] = v
			if v.created.IsZero() {
				v.created = l.at
			}
		}
	case "replication node started":
		if n, _ := l.m["max_jobs"].(float64); int(n) != s.maxJobs {
			s.problem("config: node %s started with max_jobs %v; the cluster's max_jobs is %d", soakStr(l.m, "node"), n, s.maxJobs)
		}
	case "fdbjobs: activity monitor re-enqueued running jobs whose worker sent no update for a type timeout":
		s.stats["monitor re-enqueues"]++
	}
}

func (s *soak) keepLine(l soakLine) {
	var b strings.Builder
	fmt.Fprintf(&b, "+%v %s %s %q", s.since(l.at), soakStr(l.m, "node"), soakStr(l.m, "level"), soakStr(l.m, "message"))
	keys := make([]string, 0, len(l.m))
	for k := range l.m {
		switch k {
		case "message", "level", "node", "time", "source", "worker_processes", "worker_batch_size", "http_connections", "rep_id":
		default:
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := l.m[k]
		if k == "target" {
			v = soakTargetKey(soakStr(l.m, k))
		}
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	s.tail = append(s.tail, s.scrub(b.String()))
	if len(s.tail) > 2000 {
		s.tail = append([]string(nil), s.tail[len(s.tail)-500:]...)
	}
}

// started applies a "replication started" line.
func (s *soak) started(l soakLine) {
	job, node := soakStr(l.m, "job_id"), soakStr(l.m, "node")
	v := s.versions[soakTargetKey(soakStr(l.m, "target"))]
	if v == nil {
		s.problem("safety: job %s started on %s with target %s, which no operation asked for", job, node,
			soakTargetKey(soakStr(l.m, "target")))
		return
	}
	s.jobVer[job] = v
	if v.created.IsZero() {
		v.created = l.at // a POST whose "added" line a kill cut off
	}
	if b, ok := l.m["continuous"].(bool); ok && b != v.cont {
		s.problem("safety: %s started on %s with continuous=%v", v, node, b)
	}
	var keep []*soakRun
	for _, r := range s.open[job] {
		switch {
		case r.v != v && !r.v.retired.IsZero():
			// The retired version's worker stops at its next heartbeat
			// (its line, with its rep_id, may come after this one); the
			// stop check at the end sees whether it did.
			s.closeRun(r)
		case r.v != v:
			s.problem("safety: %s started on %s while %s, not retired, runs on %s since +%v", v, node, r.v, r.node, s.since(r.start))
			keep = append(keep, r)
		case r.node == node:
			s.problem("safety: %s started again on %s, where it runs since +%v", v, node, s.since(r.start))
			keep = append(keep, r)
		default:
			s.overlaps = append(s.overlaps, &soakOverlap{older: r, node: node, at: l.at})
			keep = append(keep, r)
		}
	}
	if !v.retired.IsZero() && l.at.Sub(v.retired) > soakLag() {
		s.problem("safety: %s started on %s %v after %s", v, node, l.at.Sub(v.retired).Round(time.Millisecond), v.why)
	}
	if !v.completed.IsZero() {
		s.problem("safety: one-shot %s completed at +%v and started again on %s", v, s.since(v.completed), node)
	}
	keep = append(keep, &soakRun{v: v, job: job, node: node, repID: soakStr(l.m, "rep_id"), start: l.at})
	s.open[job] = keep
	v.open++
	v.everRan = true
	v.runs++
	s.stats["runs"]++
}

func (s *soak) closeRun(r *soakRun) {
	runs := s.open[r.job]
	for i, o := range runs {
		if o == r {
			s.open[r.job] = append(runs[:i:i], runs[i+1:]...)
			r.v.open--
			break
		}
	}
	if len(s.open[r.job]) == 0 {
		delete(s.open, r.job)
	}
}

// ended applies a line ending a run: stopped, completed, crashed, failed.
func (s *soak) ended(l soakLine, how string) {
	job, node, repID := soakStr(l.m, "job_id"), soakStr(l.m, "node"), soakStr(l.m, "rep_id")
	var run *soakRun
	for _, r := range s.open[job] {
		// A line with a rep_id ends the run of that version only: a
		// retired version's worker may stop after the next one started.
		if r.node == node && (repID == "" || r.repID == "" || r.repID == repID) {
			run = r
		}
	}
	v := s.jobVer[job]
	if run != nil {
		v = run.v
		s.closeRun(run)
		for _, o := range s.overlaps {
			if o.older == run && o.ended.IsZero() {
				o.ended = l.at
			}
		}
	} else if db, doc := soakStr(l.m, "db"), soakStr(l.m, "doc_id"); db != "" {
		// Ended before it started (a crash in its first steps, a deleted
		// database's job removed), or a retired version's end after the
		// next version started: the document's version as far as the test
		// knows, for what only delays its bounds.
		v = nil
		if how == "crashed" || how == "failed" {
			v = s.docs[db+"/"+doc]
		}
	} else if how == "completed" || how == "stopped" {
		v = nil // a transient job (its job id is its version's) ends before it starts only by failing
	}
	switch how {
	case "stopped":
		s.stats["stopped: "+soakStr(l.m, "why")]++
	default:
		s.stats[how]++
	}
	if v == nil {
		return
	}
	v.lastEnd, v.endWhy = l.at, how
	switch how {
	case "stopped":
		v.endWhy = "stopped: " + soakStr(l.m, "why")
	case "completed":
		if v.cont {
			s.problem("safety: continuous %s completed on %s", v, node)
		}
		v.completed = l.at
	case "crashed":
		wait, _ := time.ParseDuration(soakStr(l.m, "retry_in"))
		v.retryAt = l.at.Add(wait)
		v.crashes++
		v.crashInfo = fmt.Sprintf("%s: %s (+%v)", soakStr(l.m, "error"), soakStr(l.m, "reason"), s.since(l.at))
	case "failed":
		v.failed = l.at
		if v.post == nil {
			s.problem("safety: %s failed on %s: %s: %s (a document's replication crashes and retries; it fails only for a bad document or a duplicate)",
				v, node, soakStr(l.m, "error"), soakStr(l.m, "reason"))
		}
	}
}

func (s *soak) openRuns() []*soakRun {
	var out []*soakRun
	for _, runs := range s.open {
		out = append(out, runs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}
