package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/api"
)

// checkViews compares _scheduler/jobs, _scheduler/docs and _active_tasks,
// read through frontend f as a client reads them, with the engine's open
// runs and the model: the jobs listed are the jobs alive, the documents
// listed the documents that exist, and a job shows as running on a node
// exactly when it runs there. The one allowance: a killed node's jobs
// show as running on it until its membership record expires.
func (m *Model) checkViews(w *World, f *Node, now time.Time) problems {
	var p problems
	open := w.eng.Open()
	get := func(path string, v any) bool {
		res, err := f.Do(context.Background(), "GET", path, nil)
		if err == nil && res.Status != 200 {
			p.add("views: GET %s: %d %s", path, res.Status, res.Raw)
			return false
		}
		if err == nil {
			err = json.Unmarshal([]byte(res.Raw), v)
		}
		if err != nil {
			p.add("views: GET %s: %v", path, err)
			return false
		}
		return true
	}
	// state checks what a view says of job j: running on node, or not,
	// or parked (shown running, on no node, with info.parked).
	state := func(view string, j *job, st string, node *string, info json.RawMessage) {
		r := open[j.src]
		if parkedInfo(info) {
			runs := w.eng.Runs(j.src)
			switch {
			case st != "running" || node != nil:
				p.add("views: %s shows %s parked as %s on %v; a parked replication shows running on no node", view, j.src, st, deref(node))
			case r != nil:
				p.add("views: %s shows %s parked; it runs on %s since %s", view, j.src, r.Node, r.Start.Format(time.TimeOnly))
			case len(runs) == 0 || w.eng.ParkedSince(j.src, runs[len(runs)-1].End).IsZero():
				p.add("views: %s shows %s parked; it did not park after its last run (%s)", view, j.src, runsOf(w, j.src))
			}
			return
		}
		switch {
		case r != nil && (st != "running" || node == nil || *node != r.Node):
			p.add("views: %s shows %s as %s on %v; it runs on %s since %s", view, j.src, st, deref(node), r.Node,
				r.Start.Format(time.TimeOnly))
		case r == nil && st == "running" && !m.deadNodeShown(node, now):
			p.add("views: %s shows %s running on %v; it runs nowhere", view, j.src, deref(node))
		case r == nil && st != "running" && !j.completed.IsZero() && st != "completed":
			p.add("views: %s shows %s as %s; it completed at %s", view, j.src, st, j.completed.Format(time.TimeOnly))
		}
	}

	var jobs api.JobList
	if get("/_scheduler/jobs?limit=1000", &jobs) {
		listed := map[string]bool{}
		for _, e := range jobs.Jobs {
			src := deref(e.Source)
			listed[src] = true
			j := m.jobs[src]
			if j != nil && j.dbGone && !m.cleanedBy(j.gone, now) {
				continue // its database was deleted: the nodes remove it at their next step
			}
			if j == nil || !j.alive() {
				p.add("views: _scheduler/jobs lists %s (%s), which the model has %s", src, e.State, describe(j))
				continue
			}
			state("_scheduler/jobs", j, e.State, e.Node, e.Info)
			m.checkProgress(w, "_scheduler/jobs", src, open[src], e.Info, now, &p)
		}
		for _, j := range m.jobs {
			if j.alive() && !listed[j.src] {
				p.add("views: _scheduler/jobs misses %s (%s; %s)", j.src, describe(j), runsOf(w, j.src))
			}
		}
	}

	var docs api.DocList
	if get("/_scheduler/docs?limit=1000", &docs) {
		rows := map[string]api.DocInfo{}
		for _, d := range docs.Docs {
			rows[d.Database+"/"+d.DocID] = d
		}
		for key, j := range m.docs {
			d, ok := rows[key]
			switch {
			case !ok:
				p.add("views: _scheduler/docs misses %s (%s)", key, describe(j))
			case deref(d.Source) != j.src:
				p.add("views: _scheduler/docs shows %s with source %s; its document has %s", key, deref(d.Source), j.src)
			default:
				state("_scheduler/docs", j, d.State, d.Node, d.Info)
				m.checkProgress(w, "_scheduler/docs", j.src, open[j.src], d.Info, now, &p)
			}
			delete(rows, key)
		}
		for key, d := range rows {
			p.add("views: _scheduler/docs lists %s (%s, %s), which has no document", key, d.State, deref(d.Source))
		}
	}

	var tasks []api.ActiveTask
	if get("/_active_tasks", &tasks) {
		listed := map[string]bool{}
		for _, t := range tasks {
			listed[t.Source] = true
			r := open[t.Source]
			switch {
			case r == nil && !m.deadNodeShown(&t.Node, now):
				if j := m.jobs[t.Source]; j != nil && j.dbGone && !m.cleanedBy(j.gone, now) {
					continue
				}
				p.add("views: _active_tasks lists %s on %s; it runs nowhere", t.Source, t.Node)
			case r != nil && r.Node != t.Node:
				p.add("views: _active_tasks lists %s on %s; it runs on %s", t.Source, t.Node, r.Node)
			case r != nil:
				m.checkProgressCount(w, "_active_tasks", t.Source, r, t.DocsWritten, now, &p)
			}
		}
		for src, r := range open {
			if j := m.jobs[src]; j != nil && j.alive() && !listed[src] {
				p.add("views: _active_tasks misses %s, which runs on %s since %s", src, r.Node, r.Start.Format(time.TimeOnly))
			}
		}
	}
	return p
}

// progressProblem starts the problems of checkProgress: they count at the
// first look, not only when they last ViewSettle (heartbeats, every
// stats_update_interval_sec, would hide them meanwhile).
const progressProblem = "views: progress: "

// checkProgress checks the counters a view shows of a running job (its
// info) against the last work of its run r (scheduler doc.go, "Live
// progress"): what the run had written progressShown ago is shown, while
// the run goes on on a node with its store.
func (m *Model) checkProgress(w *World, view, src string, r *Record, info json.RawMessage, now time.Time, p *problems) {
	var s struct {
		DocsWritten int64 `json:"docs_written"`
	}
	if len(info) > 0 && string(info) != "null" {
		if err := json.Unmarshal(info, &s); err != nil {
			p.add("views: %s: %s: info %s: %v", view, src, info, err)
			return
		}
	}
	m.checkProgressCount(w, view, src, r, s.DocsWritten, now, p)
}

func (m *Model) checkProgressCount(w *World, view, src string, r *Record, shown int64, now time.Time, p *problems) {
	wk, ok := m.worked[src]
	if !ok || r == nil || r.Node != wk.node || !r.Start.Equal(wk.start) || !r.StopAsked.IsZero() || now.Sub(wk.at) < progressShown {
		return
	}
	for _, n := range w.nodes {
		if n.Name == r.Node && !n.Serving() {
			return // cut off from the store: it writes nothing
		}
	}
	if shown < wk.docs {
		p.add(progressProblem+"%s shows %s with %d documents written; its run on %s had written %d at %s", view, src, shown,
			r.Node, wk.docs, wk.at.Format(time.TimeOnly))
	}
}

// deadNodeShown reports whether a view may still show a job running on
// node: a node killed less than a membership expiry ago.
func (m *Model) deadNodeShown(node *string, now time.Time) bool {
	if node == nil {
		return false
	}
	d := m.deaths[*node]
	return len(d) > 0 && now.Sub(d[len(d)-1].done) <= m.tm.nodeExpiry
}

// parkedInfo reports whether a view's info says its job is parked.
func parkedInfo(info json.RawMessage) bool {
	var i struct {
		Parked json.RawMessage `json:"parked"`
	}
	return len(info) > 0 && json.Unmarshal(info, &i) == nil && len(i.Parked) > 0 && string(i.Parked) != "null"
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// runsOf describes the runs of job src, for a problem's message.
func runsOf(w *World, src string) string {
	runs := w.eng.Runs(src)
	if len(runs) == 0 {
		return "never ran"
	}
	r := runs[len(runs)-1]
	end := "open"
	if !r.End.IsZero() {
		end = r.End.Format(time.TimeOnly)
	}
	return fmt.Sprintf("%d runs, the last on %s %s-%s failed=%v completed=%v", len(runs), r.Node, r.Start.Format(time.TimeOnly), end, r.Failed, r.Completed)
}
