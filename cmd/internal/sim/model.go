package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// The model: what the simulated cluster should be doing, from the
// operations applied and the engine's record of the runs, independently
// of how the nodes decide. Each job is keyed by its source URL (one per
// document version and per POST /_replicate).

// job is the model's view of one job.
type job struct {
	src  string
	doc  string // "db/doc" for a document's job; "" for a POST /_replicate
	rep  int    // the POST /_replicate's number, for a transient job
	cont bool
	host string

	created time.Time // when the write that made it was acknowledged
	gone    time.Time // when its document, database or replication was removed (zero: alive)
	dbGone  bool      // removed with its database: the nodes remove its job at their next interval step
	// completed is when the one-shot job was seen completed (zero: not).
	completed time.Time
	// failed: a transient one-shot job whose endpoint was down fails
	// (zero: not).
	failed time.Time
	// deadline is when the job must run by while it waits (zero: no
	// deadline now); reason says which rule set it.
	deadline time.Time
	reason   string
	everRan  bool
}

// alive reports whether the job should exist and may run.
func (j *job) alive() bool { return j.gone.IsZero() && j.completed.IsZero() && j.failed.IsZero() }

// replicate is a POST /_replicate the model waits on.
type replicate struct {
	n        int
	src      string
	cont     bool
	sent     time.Time
	done     bool
	status   int
	body     map[string]any
	gaveUp   bool // the client cancelled its wait
	deadline time.Time
	// answered is when a continuous one answered running before its run
	// started (zero otherwise): the run must start within answeredRun.
	answered time.Time
}

// answeredRun bounds the time from a POST /_replicate answering that its
// continuous replication runs to its run starting. The answer comes once
// a node's start committed; when that commit's result came back unknown
// (an injected fault), the node starts the run only once a retry, a
// backoff later, has found the start made.
const answeredRun = 5 * time.Second

// timing is what the model's bounds are computed from.
type timing struct {
	interval   time.Duration // the largest interval in effect or about to be
	minRunTime time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	health     time.Duration // health threshold
	jobTimeout time.Duration
	monitor    time.Duration // the activity monitor's largest jitter
	nodeExpiry time.Duration // membership: node timeout plus a heartbeat
	oneShot    time.Duration
	fairShare  bool // on: the queue orders jobs by fair-share priority, not first come first served
	// parkAfter is park_after_sec (0: never), parkSweep park_sweep_sec and
	// pollInterval watch_poll_interval_sec.
	parkAfter, parkSweep, pollInterval time.Duration
	// removal is the longest a removed job's run may go on while its node
	// reaches the store (stopReaction unless set).
	removal time.Duration
}

// watch is the longest from a change to a parked job's source to its wake:
// its group's watch may have to be taken over from a dead node first (the
// activity monitor), then polls (a cycle), then the wake's transaction
// and an acceptor's step (scheduler doc.go, "Parking" and "Watches").
func (tm timing) watch() time.Duration { return tm.takeBack() + tm.pollInterval + 2*tm.step() }

// step is the largest interval step: the interval and its third of jitter.
func (tm timing) step() time.Duration { return tm.interval + tm.interval/3 }

// backoff is the longest wait after the k-th consecutive crash.
func (tm timing) backoff(k int) time.Duration {
	wait := tm.minBackoff
	for i := 1; i < k && wait < tm.maxBackoff; i++ {
		wait *= 2
	}
	return min(wait, tm.maxBackoff)
}

// upThroughout reports whether node has run, reaching the store, without
// a break since t.
func (m *Model) upThroughout(w *World, node string, t time.Time) bool {
	for _, n := range w.nodes {
		if n.Name == node {
			return n.Up && !n.Partitioned && !n.Since.After(t)
		}
	}
	return false
}

// cutOff reports whether node runs cut off from the store and may still
// run its jobs (its hold on them has not expired): it cannot know that a
// job was removed meanwhile.
func (m *Model) cutOff(w *World, node string, now time.Time) bool {
	for _, n := range w.nodes {
		if n.Name == node && n.Partitioned {
			return now.Sub(n.Since) <= m.tm.hold()
		}
	}
	return false
}

// hold is the longest a node cut off from the store keeps running a job:
// its hold on the job expires half a job timeout after its last heartbeat,
// then the run stops.
func (tm timing) hold() time.Duration { return tm.jobTimeout/2 + stopReaction }

// takeBack is the longest a dead node's job stays running in the store:
// the activity monitor re-enqueues it between one and two job timeouts
// (plus its jitter) after its last heartbeat.
func (tm timing) takeBack() time.Duration { return 2*tm.jobTimeout + tm.monitor + tm.step() }

// runnableFrom returns when j became runnable, from its runs, or zero
// when it is not runnable at now (its endpoint down since it failed),
// with why.
func (m *Model) runnableFrom(w *World, j *job, runs []Record, now time.Time) (time.Time, string) {
	from, why := j.created, "added"
	var last Record
	if len(runs) > 0 {
		last = runs[len(runs)-1]
	}
	switch {
	case len(runs) == 0:
	case last.End.IsZero() && now.Sub(last.Start) < m.tm.step():
		// A run that started as the check read the open runs (after it
		// read them): it runs, it does not wait.
		return time.Time{}, ""
	case !last.End.IsZero() && m.endedUnrecorded(last):
		// A run that ended as its node died or while it was cut off from
		// the store: the job stays running in the store until the node
		// restarts or the activity monitor takes it back.
		for _, death := range m.deaths[last.Node] {
			if death.covers(last) {
				from, why = death.done.Add(m.tm.takeBack()), "its node died or was cut off (activity monitor)"
				if !death.restart.IsZero() && death.restart.Before(from) {
					from, why = death.restart, "its node died and restarted"
				}
			}
		}
	case !last.End.IsZero() && last.Failed:
		if m.hostDown[j.host] {
			return time.Time{}, ""
		}
		k := 0 // consecutive errors, as the scheduler counts them
		for i := len(runs) - 1; i >= 0; i-- {
			r := runs[i]
			if !r.Failed && !r.End.IsZero() && r.End.Sub(r.Start) > m.tm.health {
				break
			}
			if r.Failed {
				k++
			}
		}
		from, why = last.Start.Add(m.tm.backoff(k)), fmt.Sprintf("backoff after %d errors", k)
		up := m.hostUp[j.host]
		if up.After(from) {
			from, why = up, "its endpoint answered again"
		}
		// The node that crashed it probes the host at its next interval
		// and ends the backoff when it answers, if that node has run
		// without a break since (scheduler doc.go, "Hosts that answer
		// again").
		if probed := up.Add(m.tm.step()); up.After(last.End) && probed.Before(from) && m.upThroughout(w, last.Node, last.End) {
			from, why = probed, "its host answered again (probed by "+last.Node+")"
		}
	case !last.End.IsZero() && j.cont && m.tm.parkAfter > 0 && !w.eng.ParkedSince(j.src, last.End).IsZero():
		// It parked: runnable once a change to its source after its run
		// woke it (from when its host answers: a watch does not see a
		// server that is down), else at its sweep. A change whose feed row
		// was lost wakes it only where its server is polled.
		parked := w.eng.ParkedSince(j.src, last.End)
		from, why = parked.Add(m.tm.parkSweep), "parked: its sweep"
		seen := m.changes[j.src]
		if j.host == m.noFeedHost {
			seen = append(slices.Clone(seen), m.lost[j.src]...)
			slices.SortFunc(seen, time.Time.Compare)
		}
		for _, c := range seen {
			if !c.Before(last.End) {
				if m.hostDown[j.host] {
					return time.Time{}, ""
				}
				from, why = later(later(c, parked), m.hostUp[j.host]).Add(m.tm.watch()), "parked: its source changed at "+c.Format(time.TimeOnly)
				break
			}
		}
	case !last.End.IsZero():
		from, why = last.End, "stopped"
	}
	// A job waiting when a node died may have been accepted by it just
	// before: it then stays running in the store, with no run and no node
	// in its data (a restarting node cannot take it back), until the
	// activity monitor re-enqueues it.
	if len(runs) == 0 || !last.End.IsZero() {
		for _, ds := range m.deaths {
			for _, d := range ds {
				if !from.After(d.done) && (len(runs) == 0 || !last.Start.After(d.done)) {
					if t := d.done.Add(m.tm.takeBack()); t.After(from) {
						from, why = t, "a node died as it may have taken it (activity monitor)"
					}
				}
			}
		}
	}
	return from, why
}

// death is a node killed from at to done (the kill takes simulated time
// when the store's latency is simulated: runs end within it) and
// restarted at restart (zero: not yet). ended is the engine's count of
// run ends as the death began (Engine.Ended): a run that ended at the
// same instant but before it was stored as it ended.
type death struct {
	at, done, restart time.Time
	ended             uint64
}

// covers reports whether run r ended within the death (after it began,
// and by done) and began before the node's restart: a run of the
// restarted process is not cut off by the death of the one before it (a
// partitioned node killed and started again reaches the store).
func (d death) covers(r Record) bool {
	return r.EndSeq > d.ended && !r.End.After(d.done) && (d.restart.IsZero() || r.Start.Before(d.restart))
}

// Model tracks the expected state and checks the world against it.
type Model struct {
	tm       timing
	jobs     map[string]*job
	docs     map[string]*job // current job of each document ("db/doc")
	reps     map[int]*replicate
	hostDown map[string]bool
	hostUp   map[string]time.Time // when each host last came back
	deaths   map[string][]death   // by node
	dbs      map[string]bool      // replicator databases that exist
	// shapeChanged is when nodes or the configuration last changed: the
	// bounds count from there.
	shapeChanged time.Time
	// replicas is how many replication nodes are up, and replicasBack
	// when the last of them came up while none was.
	replicas     int
	replicasBack time.Time
	// every is the interval set now, the time between checks; a new one
	// takes the place of tm.interval once the nodes use it (settles).
	every, newInterval time.Duration
	settles            time.Time
	// maxJobs is the cluster's max_jobs, and lowered when it was last
	// lowered: a node stops its excess at its next interval step, each
	// stopping job within a stop grace.
	maxJobs int
	lowered time.Time
	// fitSince is the first check since which the runnable jobs have fit
	// on the live nodes (zero while they do not).
	fitSince time.Time
	// worked is the last Work operation on each job's run.
	worked map[string]work
	// changes are the Change operations on each job's source, and lost
	// the ChangeLost ones (their server's feed lost them).
	changes, lost map[string][]time.Time
	// noFeedHost is the host whose server refuses _db_updates (its
	// sources are polled, so a lost feed row loses nothing); "" for none.
	noFeedHost string
}

// work is a Work operation: the run of node started at start had written
// docs documents at.
type work struct {
	node      string
	start, at time.Time
	docs      int64
}

// progressShown bounds the time from a run's work to the views showing
// its counters: the node's progress interval (1 s, the default), and one
// more for a write that failed.
const progressShown = 2 * time.Second

// stopReaction bounds the time from a node asking a job to stop to the
// job's run being asked to stop: the worker may be in the middle of a
// heartbeat's transaction (scheduler's stop grace, 2 s at most).
const stopReaction = 2 * time.Second

// setInterval notes a new interval_sec set at now: nodes apply it at
// their next interval step and use it from the one after.
func (m *Model) setInterval(now time.Time, d time.Duration) {
	m.every = d
	m.tm.interval = max(m.tm.interval, d)
	m.newInterval, m.settles = d, now.Add(3*m.tm.step()) // applied at the next step, used from the one after, running jobs' heartbeats after their next beat
}

// cleanedBy reports whether the nodes have had an interval step since at
// to remove the jobs of a database deleted then.
func (m *Model) cleanedBy(at, now time.Time) bool {
	return m.replicas > 0 && now.Sub(later(at, m.replicasBack)) > m.tm.step()
}

// nodesChanged notes the replication nodes up at now.
func (m *Model) nodesChanged(w *World, now time.Time) {
	up := 0
	for _, n := range w.nodes {
		if n.Serving() && n.Replication() {
			up++
		}
	}
	if m.replicas == 0 && up > 0 {
		m.replicasBack = now
	}
	m.replicas = up
}

// replicasGoneSince reports whether no replication node was up at some
// moment since t.
func (m *Model) replicasGoneSince(t time.Time) bool {
	return m.replicas == 0 || m.replicasBack.After(t)
}

// checkEvery is the time between checks: the interval set now.
func (m *Model) checkEvery() time.Duration { return m.every }

// observe brings the model up to date at now: jobs that ended by
// themselves (a one-shot run completed; a transient job whose run failed
// fails), and an interval change that settled.
func (m *Model) observe(w *World, now time.Time) {
	if m.newInterval != 0 && now.After(m.settles) {
		m.tm.interval, m.newInterval = m.newInterval, 0
	}
	for _, j := range m.jobs {
		if !j.alive() {
			continue
		}
		runs := w.eng.Runs(j.src)
		if len(runs) == 0 || runs[len(runs)-1].End.IsZero() {
			continue
		}
		last := runs[len(runs)-1]
		switch {
		case m.endedUnrecorded(last):
			// Its node was dead or cut off: nothing it did was stored,
			// and the job runs again once taken back.
		case last.Completed:
			j.completed = last.End
		case last.Failed && j.doc == "":
			j.failed = last.End
		}
	}
}

// diedSince reports whether a replication node died or was cut off from
// the store at t or later (or was still dying then).
func (m *Model) diedSince(t time.Time) bool {
	for _, ds := range m.deaths {
		for _, d := range ds {
			if !d.done.Before(t) {
				return true
			}
		}
	}
	return false
}

// endedUnrecorded reports whether run r ended while its node was dying or
// cut off from the store, so that its end was not stored.
func (m *Model) endedUnrecorded(r Record) bool {
	for _, d := range m.deaths[r.Node] {
		if d.covers(r) {
			return true
		}
	}
	return false
}

func newModel(tm timing) *Model {
	return &Model{tm: tm, every: tm.interval, jobs: map[string]*job{}, docs: map[string]*job{}, reps: map[int]*replicate{},
		hostDown: map[string]bool{}, hostUp: map[string]time.Time{}, deaths: map[string][]death{},
		dbs: map[string]bool{"_replicator": true}, worked: map[string]work{}, changes: map[string][]time.Time{},
		lost: map[string][]time.Time{}}
}

// problems collects the violations of one check.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// check compares the world at now with the model: safety, liveness and
// views. It returns the violations found.
func (m *Model) check(w *World, now time.Time) problems {
	var p problems
	for _, v := range w.eng.Violations() {
		p.add("safety: %s", v)
	}
	open := w.eng.Open()

	// Safety: no node runs more than its max_jobs; jobs that are gone or
	// done stop.
	perNode := map[string]int{}
	for _, r := range open {
		if r.StopAsked.IsZero() {
			perNode[r.Node]++
		}
	}
	capacity := 0
	for _, n := range w.nodes {
		if n.Serving() && n.Replication() {
			mj := n.MaxJobs()
			capacity += mj
			if perNode[n.Name] > mj && now.Sub(m.lowered) > m.tm.step()+stopReaction {
				p.add("safety: node %s runs %d jobs, max_jobs %d", n.Name, perNode[n.Name], mj)
			}
		}
		switch {
		case !n.Up && perNode[n.Name] > 0:
			p.add("safety: node %s is down but %d of its runs are open", n.Name, perNode[n.Name])
		case n.Partitioned && perNode[n.Name] > 0 && now.Sub(n.Since) > m.tm.hold():
			p.add("safety: node %s is cut off from the store since %s but %d of its runs are still open: its hold on their jobs expired",
				n.Name, n.Since.Format(time.TimeOnly), perNode[n.Name])
		}
	}
	for src, r := range open {
		j := m.jobs[src]
		if j == nil {
			p.add("safety: %s runs on %s but the model has no such job", src, r.Node)
			continue
		}
		switch {
		case !j.gone.IsZero() && now.Sub(j.gone) > cmp.Or(m.tm.removal, stopReaction) && !m.cutOff(w, r.Node, now):
			p.add("safety: %s still runs on %s %v after its removal", src, r.Node, now.Sub(j.gone))
		case !j.completed.IsZero() && r.Start.After(j.completed):
			p.add("safety: %s completed at %s and runs again on %s", src, j.completed.Format(time.TimeOnly), r.Node)
		}
	}

	// Safety: every parked job's group has a watch (a park adds it, a
	// watch ends only with its group empty).
	if groups, err := w.store.Unwatched(context.Background()); err != nil {
		p.add("safety: reading the watches: %v", err)
	} else if len(groups) > 0 {
		p.add("safety: parked replications without a watch: groups %q", groups)
	}

	// Liveness: runnable jobs run. With room on the live nodes each
	// within two interval steps of becoming runnable; over capacity, a
	// job that never ran within the rotation bound.
	type waiting struct {
		j    *job
		from time.Time
		why  string
	}
	var wait []waiting
	// Every open run holds a slot, also a removed job's until its next
	// heartbeat finds it gone.
	demand := len(open)
	for _, j := range m.jobs {
		if !j.alive() {
			continue
		}
		if _, ok := open[j.src]; ok {
			j.everRan = true
			continue
		}
		from, why := m.runnableFrom(w, j, w.eng.Runs(j.src), now)
		if from.IsZero() || from.After(now) {
			continue
		}
		demand++
		wait = append(wait, waiting{j, from, why})
	}
	step := m.tm.step()
	over := demand > capacity
	switch {
	case over:
		m.fitSince = time.Time{}
	case m.fitSince.IsZero():
		m.fitSince = now
	}
	var oneShotStarts []time.Time // read once per check, when needed
	for _, wt := range wait {
		if capacity == 0 {
			// No replication node is up: nothing can run. The bounds
			// count again from the next node's start (shapeChanged).
			break
		}
		var bound time.Duration
		rule := "room"
		if !over {
			bound = 2 * step
		} else {
			if wt.j.everRan || m.tm.fairShare {
				// Over capacity only a first run is bounded, and only
				// first come first served: fair share lets a lighter
				// database's jobs go first, by design (up to
				// fair_share_window_sec).
				continue
			}
			rule = "rotation"
			if oneShotStarts == nil {
				oneShotStarts = m.oneShotStarts(w)
			}
			started := len(oneShotStarts) - sort.Search(len(oneShotStarts), func(i int) bool { return oneShotStarts[i].After(wt.from) })
			bound = m.rotationBound(w, demand, capacity, started)
		}
		// The bounds hold for a cluster that keeps its shape (nodes,
		// configuration): a change restarts them. The room bound counts
		// from when the jobs began to fit (as seen at a check): a job that
		// waited while they did not, behind fair share, has its two steps
		// from then.
		since := later(wt.from, m.shapeChanged)
		if !over {
			since = later(since, m.fitSince)
		}
		if d := now.Sub(since); d > bound {
			p.add("liveness (%s): %s runnable since %s (%s) has not run for %v (bound %v; demand %d, capacity %d)\n%s",
				rule, wt.j.src, wt.from.Format(time.TimeOnly), wt.why, d.Round(time.Millisecond), bound, demand, capacity,
				m.dump(w, open, wt.j.src))
		}
	}

	// POST /_replicate answers: a one-shot once it completed or failed, a
	// continuous one once it runs, a cancelled one at once.
	for _, r := range m.reps {
		if r.done || r.gaveUp {
			continue
		}
		j := m.jobs[r.src]
		var since time.Time
		switch {
		case !j.completed.IsZero():
			since = j.completed
		case !j.failed.IsZero():
			since = j.failed
		case !j.gone.IsZero():
			since = j.gone
		case r.cont:
			if o := open[r.src]; o != nil {
				since = o.Start
			}
		}
		if !since.IsZero() && now.Sub(since) > step {
			p.add("liveness: POST /_replicate #%d (continuous %v, %s) has not answered for %v",
				r.n, r.cont, describe(j), now.Sub(since).Round(time.Millisecond))
		}
	}
	// A one-shot run ends by itself.
	for src, r := range open {
		if j := m.jobs[src]; j != nil && !j.cont && now.Sub(r.Start) > m.tm.oneShot+step {
			p.add("liveness: one-shot %s runs on %s since %s and has not completed", src, r.Node, r.Start.Format(time.TimeOnly))
		}
	}
	return p
}

// rotationBound is how long a job that never ran may wait over capacity,
// first come first served: until the running jobs ran MinRunTime, then
// until the waiting jobs ahead of it rotated in at the rate the nodes
// rotate (each at most MaxChurn per interval, and each running job once
// per MinRunTime), then two steps, and the length of a one-shot run for
// the runs open when it came and for each slot's worth of the oneShots
// one-shot runs that started while it waited: one-shot jobs are not
// rotated, so the slot one takes frees only when its run ends (with one
// slot, three one-shot jobs that go first hold it for three whole runs).
// A one-shot run that makes no progress would give its slot up after
// one_shot_stall_preempt_sec (scheduler doc.go, "Stalled one-shot runs"),
// which caps its term; the simulated runs always progress (a checkpoint
// every 5 s, under that minute), so the term is the run's whole length.
// The simulation writes as the server admin, whose replications the
// per-user limit does not hold back: the bounds are the admin's.
func (m *Model) rotationBound(w *World, demand, capacity, oneShots int) time.Duration {
	rate := 0.0 // jobs rotated in per interval, all nodes
	minRun := 0
	for _, n := range w.nodes {
		if n.Serving() && n.Replication() && n.parts.Scheduler != nil {
			c := n.parts.Scheduler.Config()
			per := max(1, int(math.Ceil(float64(c.MinRunTime)/float64(c.Interval)))) // intervals between a job's rotations
			rate += min(float64(c.MaxChurn), float64(c.MaxJobs)/float64(per))
			minRun = max(minRun, per)
		}
	}
	k := float64(minRun) + math.Ceil(float64(demand-capacity)/max(rate, 0.01)) + 2
	runs := 1 + (oneShots+capacity-1)/max(capacity, 1)
	return time.Duration(k*float64(m.tm.step())) + time.Duration(runs)*m.tm.oneShot
}

// oneShotStarts returns the start times of the one-shot jobs' runs, in
// order.
func (m *Model) oneShotStarts(w *World) []time.Time {
	out := []time.Time{}
	for src, j := range m.jobs {
		if j.cont {
			continue
		}
		for _, r := range w.eng.Runs(src) {
			out = append(out, r.Start)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dump describes the runs open now and the runs of job src.
func (m *Model) dump(w *World, open map[string]*Record, src string) string {
	var b strings.Builder
	for _, n := range w.nodes {
		if n.Up && n.parts.Scheduler != nil {
			st, c := n.parts.Scheduler.Stats(), n.parts.Scheduler.Config()
			fmt.Fprintf(&b, "  node %s: running %d, acceptors %d, max_jobs %d, max_churn %d, interval %v\n",
				n.Name, st.Running, st.Acceptors, c.MaxJobs, c.MaxChurn, c.Interval)
		} else if n.Replication() {
			fmt.Fprintf(&b, "  node %s: down since %s (killed %v)\n", n.Name, n.Since.Format(time.TimeOnly), n.Killed)
		}
	}
	for _, r := range open {
		fmt.Fprintf(&b, "  open: %s on %s since %s\n", r.Job, r.Node, r.Start.Format(time.TimeOnly))
	}
	for _, r := range w.eng.Runs(src) {
		fmt.Fprintf(&b, "  run of %s: on %s %s-%s failed=%v completed=%v\n", src, r.Node, r.Start.Format(time.TimeOnly),
			r.End.Format(time.TimeOnly), r.Failed, r.Completed)
	}
	return b.String()
}

// intersect returns the problems of p also in q.
func (p problems) intersect(q problems) problems {
	in := map[string]bool{}
	for _, x := range q {
		in[x] = true
	}
	var out problems
	for _, x := range p {
		if in[x] {
			out = append(out, x)
		}
	}
	return out
}

// report renders problems for a failure message.
func (p problems) report() string {
	s := slices.Clone(p)
	sort.Strings(s)
	if len(s) > 20 {
		s = append(s[:20], fmt.Sprintf("… and %d more", len(p)-20))
	}
	return strings.Join(s, "\n")
}
