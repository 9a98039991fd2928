package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

func init() { register("scheduler", runSchedulerBench) }

// runSchedulerBench measures the replication scheduler: -jobs continuous
// replication jobs (documents of the -shares _replicator databases) on
// -nodes replication nodes sharing one embedded store, each with -max-jobs. Runs
// use the simulated engine (replicator/simengine): with real peers the
// figures would measure pouchdb-server, not the scheduler. It reports the
// time until every job has run at least once, CPU and memory (of the
// whole process: the nodes share it), rotations per interval, and each
// database's part of the run time against its shares (fair share).
func runSchedulerBench(args []string) error {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	jobs := fs.Int("jobs", 10_000, "continuous replication jobs")
	nodes := fs.Int("nodes", 3, "replication nodes")
	maxJobs := fs.Int("max-jobs", 500, "max_jobs per node")
	maxChurn := fs.Int("max-churn", scheduler.MaxChurnDefault, "max_churn per node")
	interval := fs.Duration("interval", time.Second, "rescheduling interval (CouchDB: 15s)")
	minRun := fs.Duration("min-run-time", time.Second, "min_run_time (CouchDB: 60s)")
	ckEvery := fs.Duration("checkpoint", 5*time.Second, "simulated checkpoint interval (each is a job heartbeat)")
	steady := fs.Int("steady-intervals", 10, "intervals measured after every job ran once")
	inMemory := fs.Bool("in-memory", false, "in-memory store instead of a durable one in a temporary directory")
	sharesFlag := fs.String("shares", "100,200,400", "fair share: comma-separated shares of as many _replicator databases (db0/_replicator, …) among which the jobs are divided; prints each database's part of the run time (\"\": one _replicator database)")
	shareIntervals := fs.Int("share-intervals", 60, "intervals over which the fair-share split is measured (with -shares)")
	couchdb := fs.Bool("couchdb", true, "then CouchDB 3.5's scheduler against one fdbrep node with the real engine, the same -couch-jobs continuous replications between two databases of one CouchDB, with -max-jobs, -max-churn and -interval (skipped, said so, where ../shared/couchdb is absent)")
	couchJobs := fs.Int("couch-jobs", 2000, "jobs of the CouchDB comparison")
	liveness := fs.Bool("liveness", true, "then the liveness phase: one node, documents added one at a time, then all at once, max_jobs lowered and raised, a one-shot POST /_replicate")
	lv := livenessBench{}
	fs.IntVar(&lv.docs, "liveness-docs", 30, "liveness phase: continuous documents added one at a time")
	fs.DurationVar(&lv.gap, "liveness-gap", 1500*time.Millisecond, "liveness phase: time between two documents")
	fs.IntVar(&lv.maxJobs, "liveness-max-jobs", 12, "liveness phase: max_jobs")
	fs.IntVar(&lv.maxChurn, "liveness-max-churn", 4, "liveness phase: max_churn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	shares, err := parseShares(*sharesFlag)
	if err != nil {
		return err
	}
	if *jobs < 1 || *nodes < 1 || *maxJobs < 1 {
		return errors.New("-jobs, -nodes and -max-jobs must be positive")
	}
	env := newBenchEnv("scheduler", "")
	defer env.close()
	db, err := env.openStore("store", *inMemory)
	if err != nil {
		return err
	}
	ctx := context.Background()

	cfg := scheduler.Config{
		Config:  replicator.Config{StartupJitter: 200 * time.Millisecond},
		MaxJobs: *maxJobs, MaxChurn: *maxChurn, Interval: *interval, MinRunTime: *minRun,
		TransientJobMaxAge: time.Hour, ParkAfter: -1, // rotation measured; bench-dormant measures parking
	}
	dbOf := func(i int) string { return "_replicator" }
	if len(shares) > 0 {
		cfg.Shares = map[string]int{}
		for i, s := range shares {
			cfg.Shares[fmt.Sprintf("db%d/_replicator", i)] = s
		}
		dbOf = func(i int) string { return fmt.Sprintf("db%d/_replicator", i%len(shares)) }
	}
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg.Logger = &logger
	feJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	plane, err := control.New(replicator.NewStore(db, feJobs, nil), cfg.Config)
	if err != nil {
		return err
	}

	// Create the jobs as a frontend does, 200 documents per transaction.
	t0 := time.Now()
	if err := writeRepDocs(ctx, db, plane, 0, *jobs, dbOf); err != nil {
		return fmt.Errorf("creating jobs: %w", err)
	}
	created := time.Since(t0)
	fmt.Printf("scheduler: %d continuous jobs on %d nodes, max_jobs %d, max_churn %d, interval %v, min_run_time %v, simulated checkpoint every %v (simengine; store: %s)\n",
		*jobs, *nodes, *maxJobs, *maxChurn, *interval, *minRun, *ckEvery, storeKind(*inMemory))
	fmt.Printf("  created %d jobs in %v (%.0f jobs/s, through the control plane's DocWritten)\n", *jobs, created.Round(time.Millisecond), float64(*jobs)/created.Seconds())

	sim := simengine.New()
	sim.CheckpointEvery = *ckEvery
	// The nodes as fdbrep serve runs them: each with its membership, so
	// that they balance.
	cl := &scaleCluster{db: db, sim: sim, cfg: cfg}
	defer cl.stop()
	ru0 := schedRusage()
	start := time.Now()
	for i := 0; i < *nodes; i++ {
		if err := cl.add(ctx); err != nil {
			return err
		}
	}
	ns := cl.nodes
	var peakHeap, peakSys uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakHeap, peakSys = max(peakHeap, ms.HeapAlloc), max(peakSys, ms.Sys)
	}
	var allRan time.Duration
	lastSample := time.Now()
	for {
		distinct, _, _, _ := sim.Stats()
		if distinct >= *jobs {
			allRan = time.Since(start)
			break
		}
		if time.Since(lastSample) > time.Second {
			sample()
			lastSample = time.Now()
			fmt.Printf("  %5.1fs: %d of %d jobs have run\n", time.Since(start).Seconds(), distinct, *jobs)
		}
		if time.Since(start) > 30*time.Minute {
			return fmt.Errorf("only %d of %d jobs ran in 30 minutes", distinct, *jobs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ru1 := schedRusage()
	sample()
	rotBefore := make([]int, len(ns))
	for i, n := range ns {
		rotBefore[i] = len(n.Stats().Rotations)
	}
	steadyStart := time.Now()
	time.Sleep(time.Duration(*steady) * (*interval + *interval/6))
	steadyDur := time.Since(steadyStart)
	ru2 := schedRusage()
	sample()
	_, total, running, maxRunning := sim.Stats()

	step := *interval + *interval/3
	waiting := max(0, *jobs-*nodes**maxJobs)
	boundSteps := int(math.Ceil(float64(*minRun)/float64(step))) + int(math.Ceil(float64(waiting)/float64(*nodes**maxChurn))) + 2
	fmt.Printf("  every job ran at least once after %v (%.1f intervals; churn bound ceil(min_run_time/step) + ceil(%d/(%d × %d)) + 2 = %d steps = %v, ratio %.2f; with -shares the queue follows fair share, not arrival)\n",
		allRan.Round(time.Millisecond), allRan.Seconds()/interval.Seconds(), waiting, *nodes, *maxChurn, boundSteps,
		time.Duration(boundSteps)*step, allRan.Seconds()/(time.Duration(boundSteps)*step).Seconds())
	cpu := ru1.Sub(ru0)
	fmt.Printf("  CPU until then: %v user + %v system for the process = %.2f cores (about %.2f cores per node, the %d nodes share one process and store)\n",
		cpu.user.Round(time.Millisecond), cpu.sys.Round(time.Millisecond), (cpu.user+cpu.sys).Seconds()/allRan.Seconds(),
		(cpu.user+cpu.sys).Seconds()/allRan.Seconds()/float64(*nodes), *nodes)
	cpu2 := ru2.Sub(ru1)
	fmt.Printf("  steady state (%v): %.2f cores for the process (%.2f per node)\n", steadyDur.Round(time.Millisecond),
		(cpu2.user+cpu2.sys).Seconds()/steadyDur.Seconds(), (cpu2.user+cpu2.sys).Seconds()/steadyDur.Seconds()/float64(*nodes))
	fmt.Printf("  memory: peak heap %.1f MiB, peak Go runtime total %.1f MiB (process; about %.1f MiB heap per node)\n",
		float64(peakHeap)/(1<<20), float64(peakSys)/(1<<20), float64(peakHeap)/(1<<20)/float64(*nodes))
	fmt.Printf("  runs started %d, running now %d, most at once %d (cap %d = nodes × max_jobs)\n",
		total, running, maxRunning, *nodes**maxJobs)
	for i, n := range ns {
		st := n.Stats()
		all, steadyRot := st.Rotations, st.Rotations[min(rotBefore[i], len(st.Rotations)):]
		fmt.Printf("  node%d: %d intervals, rotations per interval: mean %.1f overall (max %d), mean %.1f in steady state; running %d\n",
			i, st.Intervals, schedMean(all), schedMaxInt(all), schedMean(steadyRot), st.Running)
	}
	if len(shares) > 0 {
		// Run time per database over shareIntervals.
		split := func() []time.Duration {
			out := make([]time.Duration, len(shares))
			for i := 0; i < *jobs; i++ {
				out[i%len(shares)] += sim.RunTime(fmt.Sprintf("http://peer.invalid/src%08d/", i))
			}
			return out
		}
		before := split()
		intervals0 := ns[0].Stats().Intervals
		time.Sleep(time.Duration(*shareIntervals) * (*interval + *interval/6))
		after := split()
		var total time.Duration
		sum := 0
		for i := range shares {
			total += after[i] - before[i]
			sum += shares[i]
		}
		fmt.Printf("  fair share over %d intervals of node0 (run time, runs in progress included):\n", ns[0].Stats().Intervals-intervals0)
		for i, s := range shares {
			got, ideal := float64(after[i]-before[i])/float64(max(1, total)), float64(s)/float64(sum)
			fmt.Printf("    db%d/_replicator: shares %d, %.1f%% of the run time (ideal %.1f%%, ratio %.3f)\n", i, s, 100*got, 100*ideal, got/ideal)
		}
	}
	t1 := time.Now()
	cl.stop()
	fmt.Printf("  stopping the nodes (each job checkpoints and re-enqueues itself): %v\n", time.Since(t1).Round(time.Millisecond))
	if *liveness {
		lv.interval, lv.minRun = *interval, *minRun
		if err := lv.run(ctx, env, *inMemory); err != nil {
			return err
		}
		lv.gap = 0
		if err := lv.run(ctx, env, *inMemory); err != nil {
			return err
		}
	}
	if *couchdb {
		return couchSchedulerBench(ctx, env, *couchJobs, *maxJobs, *maxChurn, *interval, *inMemory)
	}
	return nil
}

// parseShares parses -shares: comma-separated share counts in
// [replicator.SharesMin, replicator.SharesMax]; "" is none.
func parseShares(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < replicator.SharesMin || n > replicator.SharesMax {
			return nil, fmt.Errorf("-shares: %q is not a share count from %d to %d", f, replicator.SharesMin, replicator.SharesMax)
		}
		out = append(out, n)
	}
	return out, nil
}

func schedMean(v []int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0
	for _, x := range v {
		s += x
	}
	return float64(s) / float64(len(v))
}

func schedMaxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

type schedCPU struct{ user, sys time.Duration }

func (a schedCPU) Sub(b schedCPU) schedCPU { return schedCPU{a.user - b.user, a.sys - b.sys} }

func schedRusage() schedCPU {
	user, sys := rusage()
	return schedCPU{user, sys}
}
