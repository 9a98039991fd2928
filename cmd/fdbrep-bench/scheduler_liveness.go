package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// livenessBench is the scheduler benchmark's liveness phase: a node wired
// as fdbrep serve wires it (with its membership, so that it balances)
// living a little while documents arrive one at a time, as users add
// them, or all at once; after the burst, max_jobs lowered and raised at
// run time, and a one-shot POST /_replicate while every slot is taken. It
// reports how long each job waited for its first start against the
// bounds replicator/scheduler's doc.go states.
type livenessBench struct {
	docs     int           // continuous documents added
	gap      time.Duration // between two documents (0: all at once, in one transaction)
	maxJobs  int
	maxChurn int
	interval time.Duration
	minRun   time.Duration
}

// step is the longest interval step: the interval and its third of
// jitter.
func (b livenessBench) step() time.Duration { return b.interval + b.interval/3 }

// rotationBound is the number of steps within which every waiting
// continuous job runs once over capacity (replicator/scheduler's doc.go,
// "Liveness").
func (b livenessBench) rotationBound(waiting int) int {
	return int(math.Ceil(float64(b.minRun)/float64(b.step()))) + int(math.Ceil(float64(waiting)/float64(b.maxChurn))) + 2
}

func (b livenessBench) run(ctx context.Context, env *benchEnv, inMemory bool) error {
	db, closeDB, err := env.openFreshStore("liveness", inMemory)
	if err != nil {
		return err
	}
	defer closeDB()
	cfg := scheduler.Config{
		Config:  replicator.Config{StartupJitter: 200 * time.Millisecond},
		MaxJobs: b.maxJobs, MaxChurn: b.maxChurn, Interval: b.interval, MinRunTime: b.minRun,
		TransientJobMaxAge: time.Hour, ParkAfter: -1, // rotation measured; bench-dormant measures parking
	}
	feJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	if err := feJobs.Start(ctx); err != nil { // POST /_replicate waits on its subscriptions
		return err
	}
	defer feJobs.Stop()
	plane, err := control.New(replicator.NewStore(db, feJobs, nil), cfg.Config)
	if err != nil {
		return err
	}
	if err := plane.Init(ctx); err != nil {
		return err
	}
	sim := simengine.New()
	cl := &scaleCluster{db: db, sim: sim, cfg: cfg}
	defer cl.stop()
	if err := cl.add(ctx); err != nil {
		return err
	}
	node := cl.nodes[0]
	how := fmt.Sprintf("added one every %v", b.gap)
	if b.gap == 0 {
		how = "added at once"
	}
	fmt.Printf("liveness: one node as fdbrep serve runs it (balancing through its membership), max_jobs %d, max_churn %d, interval %v, min_run_time %v; %d continuous documents %s\n",
		b.maxJobs, b.maxChurn, b.interval, b.minRun, b.docs, how)

	src := func(i int) string { return fmt.Sprintf("http://peer.invalid/src%08d/", i) }
	// firstStart polls the engine for the first start of each job.
	started := make([]time.Time, b.docs)
	added := make([]time.Time, b.docs)
	poll := func(n int) {
		for i := range n {
			if started[i].IsZero() && sim.Starts(src(i)) > 0 {
				started[i] = time.Now()
			}
		}
	}
	for i := 0; i < b.docs; {
		n := 1
		if b.gap == 0 {
			n = b.docs
		}
		if err := writeRepDocs(ctx, db, plane, i, i+n, func(int) string { return "_replicator" }); err != nil {
			return err
		}
		for range n {
			added[i] = time.Now()
			i++
		}
		for end := time.Now().Add(b.gap); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			poll(i)
		}
	}
	allAdded := time.Now()
	deadline := allAdded.Add(time.Duration(b.rotationBound(b.docs)+10) * b.step())
	for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		poll(b.docs)
		if !slices.ContainsFunc(started, time.Time.IsZero) {
			break
		}
	}

	// With room: one at a time, the first max_jobs documents each start
	// within 2 steps; all at once, the node fills its max_jobs slots
	// within 2 steps.
	if b.gap == 0 {
		var starts []time.Time
		for _, st := range started {
			if !st.IsZero() {
				starts = append(starts, st)
			}
		}
		slices.SortFunc(starts, time.Time.Compare)
		if len(starts) >= b.maxJobs {
			fmt.Printf("  with room: the node's %d slots filled %v after the documents were written (bound 2 steps = %v)\n",
				b.maxJobs, starts[b.maxJobs-1].Sub(added[0]).Round(time.Millisecond), 2*b.step())
		}
	} else {
		var roomWaits []time.Duration
		for i := range min(b.docs, b.maxJobs) {
			if !started[i].IsZero() {
				roomWaits = append(roomWaits, started[i].Sub(added[i]))
			}
		}
		slices.Sort(roomWaits)
		if len(roomWaits) > 0 {
			fmt.Printf("  with room (the first %d documents): %d started; wait from write to start p50 %v, max %v (bound 2 steps = %v)\n",
				min(b.docs, b.maxJobs), len(roomWaits), roomWaits[len(roomWaits)/2].Round(time.Millisecond),
				roomWaits[len(roomWaits)-1].Round(time.Millisecond), 2*b.step())
		}
	}
	ran := 0
	var last time.Time
	for _, s := range started {
		if !s.IsZero() {
			ran++
			last = later(last, s)
		}
	}
	waiting := max(0, b.docs-b.maxJobs)
	bound := time.Duration(b.rotationBound(waiting)) * b.step()
	if ran < b.docs {
		fmt.Printf("  over capacity: only %d of %d jobs ran within %v of the last document (bound %v)\n", ran, b.docs, time.Since(allAdded).Round(time.Millisecond), bound)
	} else {
		took := max(0, last.Sub(allAdded))
		fmt.Printf("  over capacity: every job ran once %v after the last document was added (%.1f intervals; bound ceil(min_run_time/step) + ceil(%d/%d) + 2 = %d steps = %v; ratio %.2f)\n",
			took.Round(time.Millisecond), took.Seconds()/b.interval.Seconds(), waiting, b.maxChurn, b.rotationBound(waiting), bound, took.Seconds()/bound.Seconds())
	}

	if b.gap != 0 {
		return nil
	}

	// max_jobs lowered, then raised, at run time.
	setMaxJobs := func(n int) error {
		c := node.Config()
		c.MaxJobs = n
		return node.SetConfig(c)
	}
	runningFor := func(want func(int) bool, within time.Duration) (time.Duration, bool) {
		t0 := time.Now()
		for time.Since(t0) < within {
			_, _, running, _ := sim.Stats()
			if want(running) {
				return time.Since(t0), true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(t0), false
	}
	low := max(1, b.maxJobs/4)
	if err := setMaxJobs(low); err != nil {
		return err
	}
	d, ok := runningFor(func(r int) bool { return r <= low }, 10*b.step())
	fmt.Printf("  max_jobs lowered to %d: %d running after %v (%v)\n", low, low, d.Round(time.Millisecond), okWord(ok))
	if err := setMaxJobs(b.maxJobs); err != nil {
		return err
	}
	d, ok = runningFor(func(r int) bool { return r >= b.maxJobs }, 10*b.step())
	fmt.Printf("  max_jobs raised back to %d: %d running after %v (%v; bound 2 steps = %v)\n", b.maxJobs, b.maxJobs, d.Round(time.Millisecond), okWord(ok), 2*b.step())

	// A one-shot POST /_replicate while every slot is taken and continuous
	// jobs wait: it waits its turn in the queue, then runs to its end.
	body, _ := json.Marshal(map[string]any{"source": "http://peer.invalid/one-shot/", "target": "http://peer.invalid/tgt/"})
	wctx, cancel := context.WithTimeout(ctx, time.Duration(b.rotationBound(waiting)+10)*b.step()+sim.OneShot)
	defer cancel()
	t0 := time.Now()
	o, err := plane.Replicate(wctx, body, replicator.UserCtx{Name: "adm", Roles: []string{"_admin"}})
	switch {
	case err != nil:
		fmt.Printf("  one-shot POST /_replicate: no answer after %v: %v\n", time.Since(t0).Round(time.Millisecond), err)
	default:
		fmt.Printf("  one-shot POST /_replicate (its run lasts %v): answered %s after %v (bound: the rotation's %v and its run)\n",
			sim.OneShot, outcomeWord(o.Outcome), time.Since(t0).Round(time.Millisecond), bound)
	}
	return nil
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "NOT REACHED"
}

func outcomeWord(k api.Outcome) string {
	switch k {
	case api.Running:
		return "running"
	case api.Completed:
		return "completed"
	case api.Failed:
		return "failed"
	default:
		return "cancelled"
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
