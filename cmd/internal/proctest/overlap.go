package proctest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Run is one run of a replication on a node, from its lifecycle lines.
type Run struct {
	Node       string
	RepID      string
	Start, End time.Time
}

// ended are the lifecycle lines that end a run.
var ended = map[string]bool{"replication stopped": true, "replication completed": true,
	"replication crashed": true, "replication failed": true}

// Runs rebuilds every replication's runs from the processes' lifecycle
// lines ("replication started", then "stopped", "completed", "crashed" or
// "failed", by rep_id and node). A run still open when its process
// exited (a SIGKILL) ends at the exit; one still open in a running
// process ends now.
func Runs(procs ...*Proc) map[string][]Run {
	runs := map[string][]Run{}
	for _, p := range procs {
		open := map[string]*Run{} // by rep_id and node
		for _, l := range p.Lines() {
			rep, node := l.Str("rep_id"), l.Str("node")
			if rep == "" {
				continue
			}
			msg, _ := l.M["message"].(string)
			switch {
			case msg == "replication started":
				if r := open[rep+"|"+node]; r != nil { // its end was not logged: the new start ends it
					r.End = l.At
					runs[rep] = append(runs[rep], *r)
				}
				open[rep+"|"+node] = &Run{Node: node, RepID: rep, Start: l.At}
			case ended[msg]:
				if r := open[rep+"|"+node]; r != nil {
					r.End = l.At
					runs[rep] = append(runs[rep], *r)
					delete(open, rep+"|"+node)
				}
			}
		}
		end := p.end()
		for _, r := range open {
			r.End = end
			runs[r.RepID] = append(runs[r.RepID], *r)
		}
	}
	return runs
}

// Overlaps describes every time a replication ran on two nodes at once,
// as the processes' lifecycle lines tell (Runs).
func Overlaps(procs ...*Proc) []string {
	var out []string
	for rep, rs := range Runs(procs...) {
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if a.Node != b.Node && a.Start.Before(b.End) && b.Start.Before(a.End) {
					out = append(out, fmt.Sprintf("replication %s ran on %s (%s to %s) and on %s (%s to %s) at once", rep,
						a.Node, a.Start.Format(time.StampMilli), a.End.Format(time.StampMilli),
						b.Node, b.Start.Format(time.StampMilli), b.End.Format(time.StampMilli)))
				}
			}
		}
	}
	return out
}

// RequireNoOverlap requires that no replication ran on two nodes at the
// same time.
func RequireNoOverlap(t testing.TB, when string, procs ...*Proc) {
	t.Helper()
	require.Empty(t, Overlaps(procs...), "%s: a job ran on two nodes at once", when)
}
