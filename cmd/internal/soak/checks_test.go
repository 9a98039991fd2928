package soak

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"time"
)

// --- checks ----------------------------------------------------------

type soakJobRow struct {
	JobID  string  `json:"job_id"`
	Target *string `json:"target"`
	State  string  `json:"state"`
	Node   *string `json:"node"`
}

type soakDocRow struct {
	Database string  `json:"database"`
	DocID    string  `json:"doc_id"`
	Target   *string `json:"target"`
	State    string  `json:"state"`
	Node     *string `json:"node"`
}

type soakTask struct {
	Node   string  `json:"node"`
	PID    *string `json:"pid"`
	Target string  `json:"target"`
}

func soakDeref(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

func soakLater(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// get reads a view as JSON into out.
func (s *soak) get(path string, out any) bool {
	raw, ok := s.must("read a view", "GET", path, nil, http.StatusOK)
	if !ok {
		return false
	}
	if err := json.Unmarshal(raw, out); err != nil {
		s.problem("views: GET %s: %v: %s", path, err, raw)
		return false
	}
	return true
}

// poll reads the views and the log and checks them.
func (s *soak) poll() {
	select {
	case <-s.proc.exited:
		s.pump()
		s.problem("fdbrep exited by itself: %v", s.proc.cmd.ProcessState)
		return
	default:
	}
	var jobs struct {
		Jobs []soakJobRow `json:"jobs"`
	}
	var docs struct {
		Docs []soakDocRow `json:"docs"`
	}
	var tasks []soakTask
	var one struct {
		Docs []soakDocRow `json:"docs"`
	}
	db := s.pickDB(s.pick) // and one replicator database's own list
	okViews := s.get("/_scheduler/jobs?limit=1000", &jobs) && s.get("/_scheduler/docs?limit=1000", &docs) &&
		s.get("/_active_tasks", &tasks) && s.get("/_scheduler/docs/"+url.PathEscape(db)+"?limit=1000", &one)
	s.pump()
	// The answers that came meanwhile first: the run loop's select takes
	// its timer or an answer at random when both are ready, and an answer
	// that waited in the channel is not one that has not come.
	s.drainAnswers()
	now := time.Now()
	s.checkRuns(now)
	s.checkLiveness(now)
	if okViews {
		p := s.checkViews(now, jobs.Jobs, docs.Docs, tasks)
		if d := s.checkDocs(db, one.Docs); d != "" {
			p = append(p, d)
		}
		s.settle(now, p)
	}
}

// checkDocs compares _scheduler/docs/{db} with db's documents; it returns
// the disagreement ("" if none).
func (s *soak) checkDocs(db string, rows []soakDocRow) string {
	got := map[string]string{}
	for _, d := range rows {
		k := d.DocID + ": " + soakTargetKey(soakDeref(d.Target))
		if d.Database != db {
			k += " of " + d.Database
		}
		got[k] = d.State
	}
	want := map[string]string{}
	for _, v := range s.docs {
		if v.db == db {
			want[v.doc+": "+v.key] = ""
		}
	}
	var miss, extra []string
	for k := range want {
		if _, ok := got[k]; !ok {
			miss = append(miss, k)
		}
	}
	for k, st := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k+" ("+st+")")
		}
	}
	if len(miss)+len(extra) == 0 {
		return ""
	}
	sort.Strings(miss)
	sort.Strings(extra)
	return fmt.Sprintf("views: _scheduler/docs/%s misses %v and lists %v (document: target)", db, miss, extra)
}

// limitAt is the largest max_jobs a node may run at now: after a lower
// value was set, the higher one holds for an interval step (applied at the
// next step), the stop grace and the slack.
func (s *soak) limitAt(now time.Time) int {
	from := now.Add(-(soakStep + soakStopGrace + soakSlack()))
	lim := 0
	for i, l := range s.limits {
		if !l.at.Before(from) || i == len(s.limits)-1 || s.limits[i+1].at.After(from) {
			lim = max(lim, l.n)
		}
	}
	return lim
}

// checkRuns checks the runs the logs show: per node, cross-node overlaps,
// one-shot runs that do not end, POSTs that do not answer.
func (s *soak) checkRuns(now time.Time) {
	perNode := map[string]int{}
	for _, r := range s.openRuns() {
		if !r.v.retired.IsZero() {
			// Its worker stops at its next heartbeat, without a line:
			// forgotten after that (the end's stop check sees whether
			// it did stop).
			if now.Sub(r.v.retired) > soakStep+soakStopGrace {
				s.closeRun(r)
			}
			continue
		}
		perNode[r.node]++
		if !r.v.cont && now.Sub(r.start) > soakOneShot+soakStep+soakSlack() {
			s.problem("liveness: one-shot %s runs on %s since +%v and has not completed", r.v, r.node, s.since(r.start))
		}
	}
	lim := s.limitAt(now)
	for node, n := range perNode {
		if n > lim {
			s.problem("safety: the logs have %d runs open on %s; max_jobs %d", n, node, lim)
		}
	}
	var keep []*soakOverlap
	for _, o := range s.overlaps {
		switch {
		case !o.ended.IsZero() && o.ended.Sub(o.at) <= soakLag():
		case !o.ended.IsZero():
			s.problem("safety: %s ran on two nodes at once: it started on %s at +%v, its run on %s (since +%v) ended only at +%v",
				o.older.v, o.node, s.since(o.at), o.older.node, s.since(o.older.start), s.since(o.ended))
		case now.Sub(o.at) > soakLag():
			s.problem("safety: %s runs on two nodes at once: it started on %s at +%v while its run on %s (since +%v) has not ended",
				o.older.v, o.node, s.since(o.at), o.older.node, s.since(o.older.start))
		default:
			keep = append(keep, o)
		}
	}
	s.overlaps = keep

	for _, p := range s.posts {
		v := p.v
		if p.expect != "" {
			switch {
			case p.expect == "completed" && !v.completed.IsZero(), p.expect == "started" && v.runs > 0,
				p.expect == "failed" && !v.failed.IsZero(), s.lastKill.After(p.answered):
				p.expect = ""
			case now.Sub(p.answered) > soakLag():
				s.problem("POST /_replicate #%d (%s) answered %d %s at +%v; the logs have no line of its job %s",
					p.n, v, p.status, p.answer, s.since(p.answered), p.expect)
			}
		}
		if !p.answered.IsZero() {
			continue
		}
		if since, what := s.awaited(p); s.late(since, now) {
			s.problem("liveness: POST /_replicate #%d (%s) has not answered; its job %s at +%v", p.n, v, what, s.since(since))
		}
	}
}

// awaited returns since when p's answer is due, and why (its job was
// cancelled, completed, failed, or runs); zero while it is not.
func (s *soak) awaited(p *soakPost) (time.Time, string) {
	v := p.v
	switch {
	case !p.cancelled.IsZero():
		return p.cancelled, "was cancelled"
	case !v.completed.IsZero():
		return v.completed, "completed"
	case !v.failed.IsZero():
		return v.failed, "failed"
	case v.cont && v.open > 0:
		var since time.Time
		for _, r := range s.open {
			for _, x := range r {
				if x.v == v && (since.IsZero() || x.start.Before(since)) {
					since = x.start
				}
			}
		}
		return since, "runs"
	}
	return time.Time{}, ""
}

// late reports whether an answer due since (awaited) is late at: more
// than an interval step and the slack after its job's end (or start),
// with no kill since then.
func (s *soak) late(since, at time.Time) bool {
	return !since.IsZero() && s.lastKill.Before(since) && at.Sub(since) > soakStep+soakSlack()
}

// drainAnswers takes the answers of POST /_replicate that arrived and were
// not taken yet: those that came while the loop waited on a request (a
// cancel waits up to replicator.RunEndWaitDefault for its run's end), so
// that the checks that follow see them, each at the time it arrived.
func (s *soak) drainAnswers() {
	for {
		select {
		case a := <-s.answers:
			s.answered(a)
		default:
			return
		}
	}
}

// runnableFrom returns when v last became runnable, and why.
func (s *soak) runnableFrom(v *soakVersion) (time.Time, string) {
	from, why := v.created, "added"
	if v.lastEnd.After(from) {
		from, why = v.lastEnd, v.endWhy
	}
	if v.retryAt.After(from) {
		from, why = v.retryAt, "its backoff ended"
	}
	if v.notBefore.After(from) {
		from, why = v.notBefore, "it waited at a kill (the activity monitor takes a claimed job back)"
	}
	return from, why
}

// rotationBound is how long a version that never ran may wait over
// capacity (first come first served): until the running jobs ran
// min_run_time (one interval), the waiting ones ahead of it rotated in at
// max_churn per node and interval, two more steps, and a one-shot run.
func (s *soak) rotationBound(demand, capacity int) time.Duration {
	rate := float64(len(s.topo.nodes) * min(s.maxChurn, s.maxJobs))
	k := 1 + math.Ceil(float64(demand-capacity)/rate) + 2
	return time.Duration(k*float64(soakStep)) + soakOneShot
}

// checkLiveness checks that runnable versions run (see TestSoak).
func (s *soak) checkLiveness(now time.Time) {
	capacity := s.maxJobs * len(s.topo.nodes)
	demand := len(s.openRuns())
	type waiting struct {
		v    *soakVersion
		from time.Time
		why  string
	}
	var wait []waiting
	for _, v := range s.versions {
		if !v.alive() || v.open > 0 {
			continue
		}
		from, why := s.runnableFrom(v)
		if from.After(now) {
			continue
		}
		demand++
		if v.works() {
			wait = append(wait, waiting{v, from, why})
		}
	}
	over := demand >= capacity
	switch {
	case over:
		s.fitSince = time.Time{}
	case s.fitSince.IsZero():
		s.fitSince = now
	}
	for _, w := range wait {
		since := soakLater(w.from, s.shapeChanged)
		rule, bound := "room", 2*soakStep
		if over {
			if w.v.everRan {
				continue // over capacity only a first run is bounded
			}
			rule, bound = "rotation", s.rotationBound(demand, capacity)
		} else {
			since = soakLater(since, s.fitSince)
		}
		d := now.Sub(since)
		if k := rule + " wait - bound"; d-bound > s.worst[k] || s.worst[k] == 0 {
			s.worst[k] = (d - bound).Round(time.Millisecond)
		}
		if d > bound+soakSlack() {
			s.problem("liveness (%s): %s runnable since +%v (%s) has not run for %v (bound %v + slack %v from +%v; demand %d, capacity %d)",
				rule, w.v, s.since(w.from), w.why, d.Round(time.Millisecond), bound.Round(time.Millisecond), soakSlack(),
				s.since(since), demand, capacity)
		}
	}
}

// checkViews compares the views with each other, the documents and the
// logs; it returns the disagreements (settle decides whether they count)
// and records the per-node safety violations at once.
func (s *soak) checkViews(now time.Time, jobs []soakJobRow, docs []soakDocRow, tasks []soakTask) []string {
	var p []string
	running := map[string]*soakVersion{} // "job on node"
	perNode := map[string]int{}
	listed := map[*soakVersion]bool{}
	for _, j := range jobs {
		v := s.versions[soakTargetKey(soakDeref(j.Target))]
		if j.State == "running" {
			perNode[soakDeref(j.Node)]++
			running[j.JobID+" on "+soakDeref(j.Node)] = v
		}
		switch {
		case v == nil:
			p = append(p, fmt.Sprintf("views: _scheduler/jobs lists job %s (target %s, %s), which no operation asked for",
				j.JobID, soakTargetKey(soakDeref(j.Target)), j.State))
		case !v.retired.IsZero():
			p = append(p, fmt.Sprintf("views: _scheduler/jobs lists %s (%s), which is gone: %s", v, j.State, v.why))
		case !v.completed.IsZero() || !v.failed.IsZero():
			p = append(p, fmt.Sprintf("views: _scheduler/jobs lists %s (%s), which ended", v, j.State))
		default:
			listed[v] = true
		}
	}
	lim := s.limitAt(now)
	for node, n := range perNode {
		if now.Before(s.deadline) {
			s.maxSeen[node] = max(s.maxSeen[node], n)
		}
		if n > lim {
			s.problem("safety: _scheduler/jobs shows %d jobs running on %s; max_jobs %d", n, node, lim)
		}
	}
	docRows := map[string]soakDocRow{}
	for _, d := range docs {
		docRows[d.Database+"/"+d.DocID] = d
	}
	for _, v := range s.versions {
		if !v.alive() || listed[v] {
			continue
		}
		d, ok := docRows[v.db+"/"+v.doc]
		ok = ok && v.post == nil && soakTargetKey(soakDeref(d.Target)) == v.key
		if ok && !v.cont && !v.killedOpen.IsZero() && d.State == "completed" {
			// Its run completed as its process was killed: the commit
			// happened, the "completed" line did not.
			v.completed = v.killedOpen
			s.logOp("%s completed as its process was killed (its document says so; no log line)", v)
			continue
		}
		if v.post != nil && !v.cont && !v.killedOpen.IsZero() {
			// Its run ended as its process was killed, before the line:
			// the job itself says so while it is retained.
			switch st := s.postedJobState(v); st {
			case "completed", "failed":
				if st == "completed" {
					v.completed = v.killedOpen
				} else {
					v.failed = v.killedOpen
				}
				s.logOp("%s %s as its process was killed (_scheduler/jobs/{id} says so; no log line)", v, st)
				continue
			}
		}
		state := "no document row"
		if ok {
			state = "its document: " + d.State
		}
		p = append(p, fmt.Sprintf("views: _scheduler/jobs misses %s (%s)", v, state))
	}

	tasked := map[string]bool{}
	for _, tk := range tasks {
		k := soakDeref(tk.PID) + " on " + tk.Node
		tasked[k] = true
		if v := s.versions[soakTargetKey(tk.Target)]; v != nil && !v.retired.IsZero() {
			p = append(p, fmt.Sprintf("views: _active_tasks lists %s, which is gone: %s", v, v.why))
		}
		if _, ok := running[k]; !ok {
			p = append(p, fmt.Sprintf("views: _active_tasks lists job %s (target %s); _scheduler/jobs does not show it running there",
				k, soakTargetKey(tk.Target)))
		}
	}
	logged := map[string]bool{}
	for _, r := range s.openRuns() {
		if r.v.retired.IsZero() {
			logged[r.job+" on "+r.node] = true
		}
	}
	for k, v := range running {
		if !tasked[k] {
			p = append(p, fmt.Sprintf("views: _scheduler/jobs shows job %s running; _active_tasks does not list it", k))
		}
		if v != nil && v.retired.IsZero() && !logged[k] {
			p = append(p, fmt.Sprintf("views: _scheduler/jobs shows %s running (job %s); the logs have no run of it open there", v, k))
		}
	}
	for k := range logged {
		if _, ok := running[k]; !ok {
			p = append(p, fmt.Sprintf("views: the logs have job %s running; _scheduler/jobs does not show it running there", k))
		}
	}

	rows := map[string]soakDocRow{}
	for _, d := range docs {
		rows[d.Database+"/"+d.DocID] = d
	}
	for k, v := range s.docs {
		d, ok := rows[k]
		switch {
		case !ok:
			p = append(p, fmt.Sprintf("views: _scheduler/docs misses %s", v))
		case soakTargetKey(soakDeref(d.Target)) != v.key:
			p = append(p, fmt.Sprintf("views: _scheduler/docs shows %s with target %s; the document has %s", k,
				soakTargetKey(soakDeref(d.Target)), v))
		case !v.completed.IsZero() && d.State != "completed":
			p = append(p, fmt.Sprintf("views: _scheduler/docs shows %s %s; it completed", v, d.State))
		}
		delete(rows, k)
	}
	for k, d := range rows {
		p = append(p, fmt.Sprintf("views: _scheduler/docs lists %s (%s, target %s), which has no document", k, d.State,
			soakTargetKey(soakDeref(d.Target))))
	}
	return p
}

// settle records the disagreements that lasted soakSettle as problems.
func (s *soak) settle(now time.Time, p []string) {
	seen := map[string]bool{}
	for _, x := range p {
		seen[x] = true
		first, ok := s.suspects[x]
		switch {
		case !ok:
			s.suspects[x] = now
		case now.Sub(first) > soakSettle():
			s.problem("%s (for %v)", x, now.Sub(first).Round(time.Millisecond))
		}
	}
	for x := range s.suspects {
		if !seen[x] {
			delete(s.suspects, x)
		}
	}
}

// postedJobState returns the state GET /_scheduler/jobs/{id} gives the job
// of v, a POST /_replicate's version ("" when it has no job id in the
// logs yet or the view does not answer).
func (s *soak) postedJobState(v *soakVersion) string {
	for id, jv := range s.jobVer {
		if jv != v {
			continue
		}
		status, raw, err := s.do("GET", "/_scheduler/jobs/"+url.PathEscape(id), nil)
		var row soakJobRow
		if err != nil || status != http.StatusOK || json.Unmarshal(raw, &row) != nil {
			return ""
		}
		return row.State
	}
	return ""
}
