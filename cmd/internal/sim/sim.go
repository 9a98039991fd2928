package sim

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Config is one simulation.
type Config struct {
	// Seed chooses the Setup and the operations.
	Seed uint64
	// Intervals is how many checks to run, one per interval (as set at
	// the time).
	Intervals int
	// Ops, when not nil, replace the generated operations (replay of a
	// shrunk sequence).
	Ops []Op
	// Until, when not zero, ends the run at that simulated time (a
	// replay of a failure needs no more).
	Until time.Duration
	// Views checks _scheduler/docs, _scheduler/jobs and _active_tasks
	// against the model after every interval.
	Views bool
}

// Result is what a simulation did.
type Result struct {
	Setup     Setup
	Ops       []Op // the operations of the run
	Applied   int  // operations applied before the end or the failure
	Intervals int  // checks passed
	SimTime   time.Duration
	Runs      int // runs the engine started
	// Failure is the first failed check, or nil.
	Failure *Failure
}

// Failure is a failed check.
type Failure struct {
	At       time.Duration // since the start
	Problems string
	Log      []string // the nodes' last log lines
}

// Run runs a simulation in a testing/synctest bubble of t (the whole
// cluster on its fake clock) and returns what happened. It fails t only
// for errors of the harness itself; a failed check is in Result.Failure.
func Run(t *testing.T, cfg Config) Result {
	var res Result
	synctest.Test(t, func(t *testing.T) { res = run(t, cfg) })
	return res
}

func run(t *testing.T, cfg Config) (res Result) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	setup := genSetup(rng)
	ops := cfg.Ops
	if ops == nil {
		ops = genOps(rng, setup, cfg.Intervals)
	} else if cfg.Until != 0 {
		cfg.Intervals = int(^uint(0) >> 1) // a replay ends at Until
	}
	res.Setup, res.Ops = setup, ops

	db := kvtest.NewDB(t)
	eng := newEngine(setup.OneShot, 5*time.Second)
	if setup.NoFeedHost >= 0 {
		eng.inner.SetDBUpdates(fmt.Sprintf("http://h%d.sim/", setup.NoFeedHost),
			fmt.Errorf("%w: answered 401: the credentials are not a server admin's", engine.ErrUnauthorized))
	}
	w, err := newWorld(db, eng, baseConfig(setup))
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	for i := range setup.Frontends {
		w.AddNode(fmt.Sprintf("f%d", i), "api_frontend")
	}
	if setup.Both {
		w.AddNode("both", "api_frontend,replication")
	}
	for i := range setup.Replicas {
		w.AddNode(fmt.Sprintf("r%d", i), "replication")
	}
	for _, n := range w.nodes {
		if !n.Frontend() && w.replicaIndex(n) >= setup.Started {
			continue
		}
		if err := n.Start(); err != nil {
			t.Fatalf("sim: %v", err)
		}
	}
	interval := time.Duration(setup.IntervalSec) * time.Second
	m := newModel(timing{
		interval: interval, minRunTime: time.Duration(setup.MinRunTime) * time.Second,
		minBackoff: time.Duration(setup.MinBackoff) * time.Second, maxBackoff: time.Duration(setup.MaxBackoff) * time.Second,
		health: 2 * time.Minute, jobTimeout: 61 * time.Second, monitor: 10 * time.Second,
		nodeExpiry: 40 * time.Second, oneShot: setup.OneShot, fairShare: setup.FairShare,
		parkAfter: time.Duration(setup.ParkAfter) * time.Second, parkSweep: parkSweep, pollInterval: pollInterval,
	})
	// A removed job's run stops as soon as its node hears of it through
	// the store's watches; where faults make watches fail, at its
	// heartbeat at the latest (scheduler doc.go, "Removed while running").
	if _, faults, _ := faultkv.FromEnv(); faults {
		m.tm.removal = m.tm.step()
	}
	if setup.NoFeedHost >= 0 {
		m.noFeedHost = fmt.Sprintf("h%d.sim", setup.NoFeedHost)
	}
	r := &runner{w: w, m: m, waits: map[int]context.CancelFunc{}, results: make(chan repResult, 1024)}
	start := time.Now()
	m.shapeChanged = start
	m.maxJobs = setup.MaxJobs
	m.nodesChanged(w, start)

	defer func() {
		// Every waiting client goes, every node stops: the bubble must end
		// with no goroutine left.
		for _, cancel := range r.waits {
			cancel()
		}
		for _, n := range w.nodes {
			if err := n.Stop(); err != nil && res.Failure == nil {
				res.Failure = &Failure{At: time.Since(start), Problems: fmt.Sprintf("stopping %s: %v", n.Name, err)}
			}
		}
		for range len(r.waits) - countDone(m) {
			<-r.results
		}
		res.SimTime = time.Since(start)
		res.Runs = eng.Started()
	}()

	next := 0
	nextCheck := start.Add(m.checkEvery())
	for res.Intervals < cfg.Intervals && (cfg.Until == 0 || time.Since(start) < cfg.Until) {
		at := nextCheck
		if next < len(ops) && start.Add(ops[next].At).Before(at) {
			at = start.Add(ops[next].At)
		}
		time.Sleep(time.Until(at))
		synctest.Wait()
		if p := r.collect(time.Now()); len(p) > 0 {
			res.Failure = r.fail(start, p.report())
			return res
		}
		if next < len(ops) && !start.Add(ops[next].At).After(time.Now()) {
			if err := r.apply(ops[next], time.Now(), next); err != nil {
				res.Failure = r.fail(start, err.Error())
				return res
			}
			next++
			res.Applied = next
			synctest.Wait()
			continue
		}
		m.observe(w, time.Now())
		if p := m.check(w, time.Now()); len(p) > 0 {
			res.Failure = r.fail(start, p.report())
			return res
		}
		if cfg.Views {
			if p := r.settledViews(res.Intervals); len(p) > 0 {
				res.Failure = r.fail(start, p.report())
				return res
			}
		}
		res.Intervals++
		nextCheck = time.Now().Add(m.checkEvery())
	}
	return res
}

// settledViews checks the views; a disagreement must last ViewSettle to
// count. The views read the store, and a node's transaction that a fault
// made retry (after a backoff of up to a second, more for a loaded
// cluster's errors) leaves the store a moment behind what the node does:
// a run that ended shows running until its node's final write commits.
// Only the problems found at every look over ViewSettle are returned.
func (r *runner) settledViews(i int) problems {
	p := r.m.checkViews(r.w, r.frontend(i), time.Now())
	var progress problems // they count at once: see progressProblem
	for _, x := range p {
		if strings.HasPrefix(x, progressProblem) {
			progress = append(progress, x)
		}
	}
	for end := time.Now().Add(ViewSettle); len(p) > 0 && time.Now().Before(end); {
		time.Sleep(time.Second)
		synctest.Wait()
		r.m.observe(r.w, time.Now())
		p = p.intersect(r.m.checkViews(r.w, r.frontend(i), time.Now()))
	}
	return append(p, progress...)
}

// countDone counts the POST /_replicate that answered.
func countDone(m *Model) int {
	n := 0
	for _, r := range m.reps {
		if r.done {
			n++
		}
	}
	return n
}

func (r *runner) fail(start time.Time, problems string) *Failure {
	f := &Failure{At: time.Since(start), Problems: problems, Log: r.w.log.Lines()}
	if os.Getenv("FDBREP_SIM_STACKS") != "" {
		// Every goroutine's stack at the failure, to see where a loop
		// that should have acted waits.
		buf := make([]byte, 64<<20)
		f.Log = append(f.Log, string(buf[:runtime.Stack(buf, true)]))
	}
	return f
}

// collect takes the answers of the POST /_replicate that returned and
// checks each against the engine's runs: a one-shot replication answers
// 200 once it completed, a continuous one 202 once it runs, a failure or
// a cancel an error, and 500 timeout only if no replication node was up
// at some moment while it waited.
func (r *runner) collect(now time.Time) problems {
	var p problems
	for _, n := range slices.Sorted(maps.Keys(r.m.reps)) {
		rp := r.m.reps[n]
		if rp.answered.IsZero() {
			continue
		}
		switch {
		case len(r.w.eng.Runs(rp.src)) > 0 || r.m.diedSince(rp.sent):
			rp.answered = time.Time{}
		case now.Sub(rp.answered) > answeredRun:
			p.add("replicate: POST /_replicate #%d answered running at %s; it has not run since (bound %v)",
				rp.n, rp.answered.Format(time.TimeOnly), answeredRun)
			rp.answered = time.Time{}
		}
	}
	for {
		var res repResult
		select {
		case res = <-r.results:
		default:
			return p
		}
		rp := r.m.reps[res.n]
		rp.done, rp.status, rp.body = true, res.status, res.body
		if rp.gaveUp {
			continue
		}
		j := r.m.jobs[rp.src]
		runs := r.w.eng.Runs(rp.src)
		var last Record
		if len(runs) > 0 {
			last = runs[len(runs)-1]
		}
		ok, _ := res.body["ok"].(bool)
		switch {
		case res.err != nil:
			p.add("replicate: POST /_replicate #%d: %v", res.n, res.err)
		case res.status == 200 && ok && !rp.cont:
			if !last.Completed {
				p.add("replicate: POST /_replicate #%d answered completed; its last run did not complete (%d runs)", res.n, len(runs))
			} else if j.completed.IsZero() {
				j.completed = last.End
			}
		case res.status == 202 && ok && rp.cont:
			// A node that died or was cut off since the request may have
			// marked the job running and gone before its run started
			// (the liveness bounds then have it run once taken back).
			if len(runs) == 0 && !r.m.diedSince(rp.sent) {
				rp.answered = now // checked above from now on
			}
		case res.status >= 400 && !j.gone.IsZero():
			// cancelled while the client waited
		case res.status == 500 && res.body["error"] == "timeout" && r.m.replicasGoneSince(rp.sent):
			// no replication node was alive: the POST stopped waiting
			// (replicate_no_node_timeout_msec); its job stays
		case res.status >= 400 && last.Failed:
			if j.failed.IsZero() {
				j.failed = last.End
			}
		default:
			p.add("replicate: POST /_replicate #%d (continuous %v) answered %d %v; the model has %s, %d runs",
				res.n, rp.cont, res.status, res.body, describe(j), len(runs))
		}
	}
}

// baseConfig is every node's start-up configuration for s.
func baseConfig(s Setup) map[string]map[string]string {
	itoa := strconv.Itoa
	return map[string]map[string]string{
		"admins":      {adminName: adminPass},
		"chttpd_auth": {"iterations": "1"},
		"log":         {"format": "json", "level": "info"},
		"replicator": {
			"interval_sec": itoa(s.IntervalSec), "max_jobs": itoa(s.MaxJobs), "max_churn": itoa(s.MaxChurn),
			"min_run_time_sec": itoa(s.MinRunTime), "min_backoff_penalty_sec": itoa(s.MinBackoff),
			"max_backoff_penalty_sec": itoa(s.MaxBackoff), "fair_share_window_sec": map[bool]string{true: "86400", false: "0"}[s.FairShare],
			"park_after_sec": itoa(s.ParkAfter), "park_sweep_sec": itoa(int(parkSweep / time.Second)),
			"watch_poll_interval_sec": itoa(int(pollInterval / time.Second)),
		},
	}
}

// replica returns replication-only node slot i.
func (w *World) replica(i int) *Node {
	for _, n := range w.nodes {
		if !n.Frontend() && w.replicaIndex(n) == i {
			return n
		}
	}
	return nil
}

func (w *World) replicaIndex(n *Node) int {
	i, _ := strconv.Atoi(n.Name[1:])
	return i
}

// Defaults of the test's knobs.
const (
	// IntervalsDefault is how many intervals a simulation of make test
	// runs: hours of simulated time, in about a minute (a tenth of it
	// under the race detector).
	IntervalsDefault = 10_000
	// ShrinkDefault is the real time given to shrinking a failure.
	ShrinkDefault = 2 * time.Minute
	// ViewSettle is how long a view may disagree with what runs before
	// the check fails (see settledViews).
	ViewSettle = 10 * time.Second
	// parkSweep and pollInterval are the nodes' park_sweep_sec and
	// watch_poll_interval_sec.
	parkSweep    = time.Hour
	pollInterval = 10 * time.Second
)
