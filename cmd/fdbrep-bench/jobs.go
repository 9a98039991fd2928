package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
)

func init() { register("jobs", runJobsBench) }

// River's benchmark settings that the fdbjobs side follows too (the River
// side's are in its peer, cmd/fdbrep-bench/river).
const (
	// The continuous mode keeps -backlog jobs pending (75,000 by
	// default), topped up every continuousCheck in batches of
	// continuousInsert.
	backlogDefault   = 75_000
	continuousCheck  = 250 * time.Millisecond
	continuousInsert = 5_000
	// concurrencyDefault is how many jobs each side works at once
	// (-concurrency): River's benchmark's MaxWorkers, fdbjobs' Concurrency.
	concurrencyDefault = 2_000
	// progressEvery is the period of the progress lines.
	progressEvery = 2 * time.Second
)

// jobsOpts are the jobs benchmark's flags.
type jobsOpts struct {
	jobs, workers, batch, insertBatch, inserters int
	// concurrency is how many jobs each side works at once with -loop
	// runtime (-concurrency).
	concurrency      int
	rounds, backlog  int
	duration         time.Duration
	wakeups, accepts int
	// schedules is the number of one-minute schedules of the schedules
	// mode (0 skips it).
	schedules int
	pending   []int
	nodes     []int
	scaleJobs int
	inMemory  bool
	// feed turns on the event feed of fdbjobs' kinds (-feed).
	feed bool
	// priorities gives fdbjobs' jobs the four priorities in turn
	// (-priorities).
	priorities bool
	// limit sets a cluster-wide limit on fdbjobs' kinds (-limit; 0: none).
	limit int
	// partitions spreads fdbjobs' jobs over that many partitions
	// (-partitions; 0: none), and partitionLimit is their kinds'
	// partition limit (-partition-limit; 0: none).
	partitions, partitionLimit int
	// fair turns fdbjobs' kinds' fair shares on (-fair), partition i of
	// -partitions weighing i%4+1, and inserts with InsertMany; by run time
	// with fairRunTime (-fair-run-time).
	fair, fairRunTime bool
	// runtime: the burn-down and continuous modes work fdbjobs' jobs on
	// its Runtime (-loop runtime) rather than hand-written loops of the
	// batch calls (-loop batch).
	runtime                          bool
	cpuProfile, cpuProfileContinuous string
	// workSleep is how long each job's work takes (both sides; 0: none).
	workSleep time.Duration
}

// sleep is a job's work: workSleep, or until ctx ends.
func (o jobsOpts) sleep(ctx context.Context) {
	if o.workSleep <= 0 {
		return
	}
	t := time.NewTimer(o.workSleep)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// runJobsBench measures the job layer on on-disk embedded stores with
// durable commits, next to River (PostgreSQL) run by its peer process in
// the same invocation:
//
//  1. burn-down, River's bench method: insert -jobs jobs, then work them
//     off (fdbjobs: its Runtime with a no-op Worker, or with -loop batch
//     -workers loops of the batch forms; River: its Client); -rounds
//     rounds alternating fdbjobs and River, each on a fresh store or
//     table;
//  2. continuous: keep -backlog jobs (75,000) pending (topped up every 250 ms, 5,000
//     at a time) while working them, for -duration; alternating too;
//  3. wake-up latency from an insert to an idle worker;
//  4. schedules (fdbjobs alone, -schedules of one minute, 0 skips it): a
//     period's start to its jobs' insert and start, and the idle cost;
//  5. the cost of one Accept (plus its Finish) with 10,000 and with
//     1,000,000 pending jobs, to show that it does not grow with the queue
//     (fdbjobs only).
func runJobsBench(args []string) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	var o jobsOpts
	fs.IntVar(&o.jobs, "jobs", 200_000, "jobs in the burn-down")
	fs.IntVar(&o.concurrency, "concurrency", concurrencyDefault, "jobs worked at once, on both sides: fdbjobs' Runtime's Concurrency and River's MaxWorkers (River's own benchmark's 2,000)")
	fs.IntVar(&o.workers, "workers", 8, "fdbjobs workers of -loop batch and of the scale-out")
	fs.IntVar(&o.batch, "batch", 50, "jobs per AcceptBatch / FinishBatch of -loop batch and of the scale-out")
	fs.IntVar(&o.insertBatch, "insert-batch", 5_000, "jobs per AddBatch call (River: InsertMany of 5,000); AddBatch pages them into transactions of at most 500")
	fs.IntVar(&o.inserters, "inserters", 4, "concurrent inserting goroutines")
	fs.IntVar(&o.rounds, "rounds", 3, "alternating rounds of fdbjobs and River per mode")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "time per continuous run (0 skips the continuous mode)")
	fs.IntVar(&o.backlog, "backlog", backlogDefault, "jobs the continuous mode keeps pending (both sides)")
	fs.IntVar(&o.wakeups, "wakeups", 300, "wake-up latency samples")
	fs.IntVar(&o.schedules, "schedules", 10_000, "schedules of one minute for the schedules mode (0 skips it)")
	fs.IntVar(&o.accepts, "accepts", 2000, "Accept samples per queue size")
	nodesList := fs.String("nodes", "1,2,4,8", "scale-out: run the burn-down with this many Clients (one per node) on one store, sharing the -concurrency (-loop runtime: a Runtime each) or the -workers (-loop batch); on FoundationDB also with this many processes (where -workers has one for each), each a loop of AcceptBatch and FinishBatch (\"\" skips it)")
	fs.IntVar(&o.scaleJobs, "scale-jobs", 40_000, "scale-out: jobs in each burn-down")
	pendingList := fs.String("pending", "10000,1000000", "queue sizes for the Accept cost (\"\" skips it)")
	skip1M := fs.Bool("skip-1m", false, "skip queue sizes of a million and more")
	dir := fs.String("dir", "", "directory for the stores (default: a new temporary directory, removed afterwards)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the first fdbjobs burn-down's work phase to this file")
	fs.StringVar(&o.cpuProfileContinuous, "cpuprofile-continuous", "", "write a CPU profile of the first fdbjobs continuous run to this file")
	fs.DurationVar(&o.workSleep, "work-sleep", 0, "how long each job's work takes, on both sides (0: a no-op worker; the issue's second worker sleeps 1ms)")
	fs.BoolVar(&o.inMemory, "in-memory", false, "fdbjobs on in-memory stores instead (to see what the disk costs)")
	fs.BoolVar(&o.feed, "feed", false, "turn on the event feed of fdbjobs' kinds (an event per change of a job's state, kept a day), to see what it costs")
	fs.IntVar(&o.limit, "limit", 0, "set a cluster-wide limit of this many running jobs on fdbjobs' kinds (the Runtimes lease it; as high as the workers' Concurrency, it costs without throttling)")
	fs.IntVar(&o.partitions, "partitions", 0, "spread fdbjobs' jobs over this many partitions in turn (InsertOptions.Partition), to see what they cost with -partition-limit")
	fs.IntVar(&o.partitionLimit, "partition-limit", 0, "set this partition limit on fdbjobs' kinds (each start of a partitioned job claims a place; 0: none)")
	fs.BoolVar(&o.fairRunTime, "fair-run-time", false, "with -fair, share the run time (FairShareRunTime) rather than the starts: each start costs its partition's mean run time, which the Runtimes charge (with -work-sleep, or jobs of no time, it measures the mode's cost)")
	fs.BoolVar(&o.fair, "fair", false, "turn fdbjobs' fair shares on with -partitions, partition i weighing i%4+1, its jobs inserted by InsertMany (drawn ids); prints the burn-down's shares of the starts by weight over its first half")
	fs.BoolVar(&o.priorities, "priorities", false, "give fdbjobs' jobs the priorities 1 to 4 in turn (each accept reads four lanes per shard), to see what they cost")
	loop := fs.String("loop", "runtime", "fdbjobs' side of the burn-down and continuous modes: runtime (its Runtime, a no-op Worker, -concurrency of Concurrency: River's side is its river.Client with as many workers) or batch (-workers loops of AcceptBatch and FinishBatch of -batch)")
	riverBin := fs.String("river-bin", "", "the River peer binary (make bench-jobs builds it from cmd/fdbrep-bench/river); \"\" skips River")
	pgBin := fs.String("pg-bin", "", "directory of PostgreSQL's initdb, pg_ctl and postgres (default: initdb on PATH, else the newest /usr/lib/postgresql/*/bin)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.jobs < 1 || o.workers < 1 || o.batch < 1 || o.batch > fdbjobs.MaxBatch || o.insertBatch < 1 || o.insertBatch > fdbjobs.MaxBatch ||
		o.inserters < 1 || o.rounds < 1 || o.backlog < 1 || o.duration < 0 || o.wakeups < 0 || o.schedules < 0 || o.accepts < 1 || o.scaleJobs < 1 ||
		o.concurrency < 1 || o.concurrency > fdbjobs.ConcurrencyMax || o.partitions < 0 || o.partitionLimit < 0 || o.fair && o.partitions == 0 || o.fairRunTime && !o.fair {
		return errors.New("-jobs, -workers, -batch and -insert-batch (at most 10000), -concurrency (at most 10000), -inserters, -rounds, -backlog, -accepts and -scale-jobs must be positive, -duration, -wakeups and -schedules not negative; -fair needs -partitions, -fair-run-time -fair")
	}
	switch *loop {
	case "runtime", "batch":
		o.runtime = *loop == "runtime"
	default:
		return fmt.Errorf("-loop %q: runtime or batch", *loop)
	}
	var err error
	if o.nodes, err = parseInts("nodes", *nodesList); err != nil {
		return err
	}
	most, name := o.workers, "-workers" // shared among the nodes
	if o.runtime {
		most, name = o.concurrency, "-concurrency"
	}
	if slices.ContainsFunc(o.nodes, func(k int) bool { return k < 1 || k > most }) {
		return fmt.Errorf("-nodes %s: each from 1 to %s (%d)", *nodesList, name, most)
	}
	if o.pending, err = parseInts("pending", *pendingList); err != nil {
		return err
	}
	if *skip1M {
		o.pending = slices.DeleteFunc(o.pending, func(n int) bool { return n >= 1_000_000 })
	}
	env := newBenchEnv("jobs", *dir)
	defer env.close()
	fmt.Printf("jobs benchmark: fdbjobs on %s, GOMAXPROCS=%d, %d CPUs\n", storeKind(o.inMemory), runtime.GOMAXPROCS(0), runtime.NumCPU())
	river, err := startRiver(env, *riverBin, *pgBin)
	if err != nil {
		return err
	}
	if river != nil {
		river.workSleep, river.workers = o.workSleep, o.concurrency
	}
	if o.workSleep > 0 {
		fmt.Printf("each job's work sleeps %v, on both sides\n", o.workSleep)
	}
	b := &jobsBench{env: env, o: o, river: river}
	if err := b.burnDowns(); err != nil {
		return err
	}
	if o.duration > 0 {
		if err := b.continuousRuns(); err != nil {
			return err
		}
	}
	if len(o.nodes) > 0 {
		if err := b.scaleOut(); err != nil {
			return err
		}
	}
	if o.wakeups > 0 {
		if err := b.wakeUps(); err != nil {
			return err
		}
	}
	if o.schedules > 0 {
		if err := b.schedules(); err != nil {
			return err
		}
	}
	for _, n := range o.pending {
		if err := b.acceptCost(n); err != nil {
			return err
		}
	}
	return nil
}

// jobsBench runs the modes; river is nil when River is skipped.
type jobsBench struct {
	env   *benchEnv
	o     jobsOpts
	river *riverPeer
	runs  int // fdbjobs runs so far, to name their stores
}

// runResult is one run of either side.
type runResult struct {
	inserted, worked   int64
	insertSec, workSec float64
	insertCPUSec       float64 // the insert phase (burn-down), PostgreSQL's included
	cpuSec             float64 // the process running the jobs, work phase
	pgCPUSec           float64 // River: PostgreSQL's processes, work phase
	serverCPUSec       float64 // fdbjobs on FoundationDB: its fdbserver processes on this machine, work phase
	cost               kvCost  // fdbjobs: what the work phase's transactions cost the store
	// memBase and memPeak are the live Go heap and goroutine stacks of
	// the process running the jobs at the work phase's start and at its
	// peak; concurrency the most jobs it ran at once.
	memBase, memPeak int64
	concurrency      int
}

func (r runResult) rate() float64 { return float64(r.worked) / r.workSec }

// line prints r as one row of a mode's table.
func (r runResult) line(round int, who string) {
	ins := ""
	if r.insertSec > 0 {
		ins = fmt.Sprintf("inserted %8.0f jobs/s (CPU %3.0f µs/job), ", float64(r.inserted)/r.insertSec, r.insertCPUSec*1e6/float64(r.inserted))
	}
	cpu := fmt.Sprintf("CPU %.0f µs/job", r.cpuSec*1e6/float64(r.worked))
	if r.pgCPUSec > 0 {
		cpu = fmt.Sprintf("CPU %.0f µs/job (River %.0f + PostgreSQL %.0f)", (r.cpuSec+r.pgCPUSec)*1e6/float64(r.worked),
			r.cpuSec*1e6/float64(r.worked), r.pgCPUSec*1e6/float64(r.worked))
	}
	if r.serverCPUSec > 0 {
		cpu = fmt.Sprintf("CPU %.0f µs/job (fdbjobs %.0f + fdbserver %.0f)", (r.cpuSec+r.serverCPUSec)*1e6/float64(r.worked),
			r.cpuSec*1e6/float64(r.worked), r.serverCPUSec*1e6/float64(r.worked))
	}
	if r.cost.commits > 0 {
		cpu += fmt.Sprintf("; %.3f transactions/job, %s", float64(r.cost.commits)/float64(r.worked), r.cost.perJob(r.worked))
	}
	if r.memPeak > 0 && r.concurrency > 0 {
		cpu += fmt.Sprintf("; Go live heap+stacks %.0f MiB at peak, +%.1f KiB per running job (%d at once)", float64(r.memPeak)/(1<<20),
			float64(r.memPeak-r.memBase)/1024/float64(r.concurrency), r.concurrency)
	}
	fmt.Printf("  round %d %-8s %s%9d worked in %6.2fs = %8.0f jobs/s; %s\n", round, who, ins, r.worked, r.workSec, r.rate(), cpu)
}

// compare prints the medians of both sides and their ratio.
func compare(mode string, ours, theirs []runResult) {
	rates := func(rs []runResult) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = r.rate()
		}
		return out
	}
	a := median(rates(ours))
	noteFigure(mode+", fdbjobs median", "jobs/s", a)
	if len(theirs) == 0 {
		fmt.Printf("  %s: fdbjobs median %.0f jobs/s (River skipped)\n", mode, a)
		return
	}
	b := median(rates(theirs))
	per := make([]string, len(ours))
	for i := range ours {
		per[i] = strconv.FormatFloat(ours[i].rate()/theirs[i].rate(), 'f', 2, 64)
	}
	// Issue 44's goals: twice River on the embedded store, River's figure
	// on FoundationDB (one process: the fair peer of one PostgreSQL).
	goal := "at least 2x"
	if benchStore != storeEmbedded {
		goal = "at least 1x with one FoundationDB process"
	}
	fmt.Printf("  %s: fdbjobs median %.0f jobs/s, River median %.0f jobs/s: fdbjobs/River = %.2fx (rounds: %s; goal: %s)\n",
		mode, a, b, a/b, strings.Join(per, ", "), goal)
	fmt.Printf("RATIO %s %s %.2f\n", benchStore, strings.ReplaceAll(mode, " ", "-"), a/b)
}

// loopName says how fdbjobs' side works its jobs (-loop).
func (o jobsOpts) loopName() string {
	if o.runtime {
		worker := "a no-op Worker"
		if o.workSleep > 0 {
			worker = "a Worker that sleeps " + o.workSleep.String()
		}
		return fmt.Sprintf("its Runtime, %s, Concurrency %d (River: MaxWorkers %d)", worker, o.concurrency, o.concurrency)
	}
	return fmt.Sprintf("%d loops of AcceptBatch and FinishBatch of %d", o.workers, o.batch)
}

func (b *jobsBench) burnDowns() error {
	o := b.o
	fmt.Printf("\nburn-down: %d jobs inserted, then worked off (River's method); %d rounds alternating fdbjobs (%s, AddBatch of %d) and River\n",
		o.jobs, o.rounds, o.loopName(), o.insertBatch)
	return b.alternate("burn-down", o.cpuProfile,
		func(s *fdbjobsRun, profile string) (runResult, error) { return s.burnDown(o.jobs, profile) },
		"burn", "-jobs", strconv.Itoa(o.jobs))
}

func (b *jobsBench) continuousRuns() error {
	o := b.o
	fmt.Printf("\ncontinuous: %v of inserting and working at once, %d jobs kept pending (topped up every %v, %d at a time); %d rounds alternating fdbjobs and River\n",
		o.duration, o.backlog, continuousCheck, continuousInsert, o.rounds)
	return b.alternate("continuous", o.cpuProfileContinuous,
		func(s *fdbjobsRun, profile string) (runResult, error) { return s.continuous(o.duration, profile) },
		"continuous", "-duration", o.duration.String(), "-backlog", strconv.Itoa(o.backlog))
}

// alternate runs -rounds rounds of one mode, fdbjobs (ours, on a fresh
// store; its first round writes the CPU profile to profile) then River
// (its peer in riverMode with riverArgs), prints each run and then
// compares them.
func (b *jobsBench) alternate(mode, profile string, ours func(s *fdbjobsRun, profile string) (runResult, error),
	riverMode string, riverArgs ...string) error {
	var mine, theirs []runResult
	for round := 1; round <= b.o.rounds; round++ {
		r, err := b.fdbjobsRun(func(s *fdbjobsRun) (runResult, error) { return ours(s, profile) })
		if err != nil {
			return err
		}
		profile = ""
		r.line(round, "fdbjobs")
		mine = append(mine, r)
		if b.river == nil {
			continue
		}
		rr, err := b.river.run(riverMode, riverArgs...)
		if err != nil {
			return err
		}
		r = rr.result()
		r.line(round, "River")
		theirs = append(theirs, r)
	}
	compare(mode, mine, theirs)
	return nil
}

// scaleOut runs the burn-down of -scale-jobs jobs with K Clients on one
// store for each K of -nodes, as K nodes would: with -loop runtime a
// Runtime on each Client, the -concurrency shared among them (so that
// partitions, limits and priorities are claimed as in production); with
// -loop batch the -workers workers in all, worker i on Client i mod K,
// each AcceptBatch then FinishBatch. On FoundationDB it runs each K a
// second time with K processes, one Client each, in loops of AcceptBatch
// and FinishBatch (burnDownProcesses). It prints each run's rate, its ratio to the
// first K's run of its kind, and what the work phase cost the store
// (attempts per committed transaction, mutations and conflict ranges per
// job), then River's burn-down of as many jobs.
func (b *jobsBench) scaleOut() error {
	o := b.o
	procs := ""
	if onFDB() {
		procs = "; then by K processes of this binary, one Client each"
	}
	how := fmt.Sprintf("%d loops of AcceptBatch and FinishBatch of %d in all", o.workers, o.batch)
	if o.runtime {
		how = fmt.Sprintf("a Runtime per Client, Concurrency %d in all", o.concurrency)
	}
	fmt.Printf("\nscale-out: %d jobs inserted, then worked off by K Clients (one per node) on one store%s; %s\n",
		o.scaleJobs, procs, how)
	var base, baseProcs float64
	for _, k := range o.nodes {
		if err := b.scaleRun(k, "", &base, (*fdbjobsRun).burnDownClients); err != nil {
			return err
		}
		if procs == "" {
			continue
		}
		if k > o.workers {
			// Each process is a node with one worker or more.
			fmt.Printf("  %-17s skipped: fewer -workers (%d) than processes\n", fmt.Sprintf("K = %d processes:", k), o.workers)
			continue
		}
		if err := b.scaleRun(k, " processes", &baseProcs, (*fdbjobsRun).burnDownProcesses); err != nil {
			return err
		}
	}
	if b.river != nil {
		rr, err := b.river.run("burn", "-jobs", strconv.Itoa(o.scaleJobs))
		if err != nil {
			return err
		}
		fmt.Printf("  River (one PostgreSQL, its own workers): %7.0f jobs/s\n", rr.result().rate())
	}
	return nil
}

// scaleRun runs the scale-out's burn-down with K = k on a fresh store and
// prints its line, "K = k" then label, with its ratio to *base, which the
// first run of its kind sets.
func (b *jobsBench) scaleRun(k int, label string, base *float64, run func(s *fdbjobsRun, k int) (runResult, kvCost, error)) error {
	var cost kvCost
	r, err := b.fdbjobsRun(func(s *fdbjobsRun) (runResult, error) {
		var res runResult
		var err error
		res, cost, err = run(s, k)
		return res, err
	})
	if err != nil {
		return err
	}
	if *base == 0 {
		*base = r.rate()
	}
	noteFigure(fmt.Sprintf("scale-out, K = %d%s", k, label), "jobs/s", r.rate())
	fmt.Printf("  %-17s %7.0f jobs/s (%.2fx K = %d); %s\n", fmt.Sprintf("K = %d%s:", k, label), r.rate(), r.rate()/(*base), b.o.nodes[0], cost.perJob(r.worked))
	return nil
}

// Settling: on FoundationDB the wake-ups are measured again once the
// cluster's servers on this machine have used less than settleCPU of a
// core over settleWindow (at most settleMax after the first measure): the
// phases before leave a storage server catching up with their writes for
// a while, and a wake-up's reads wait for it.
const (
	settleCPU    = 0.2
	settleWindow = time.Second
	settleMax    = 2 * time.Minute
)

// settle waits as above and returns how long it waited and the servers'
// CPU share over the last window.
func settle() (time.Duration, float64) {
	t0 := time.Now()
	for {
		c0 := storeServerCPU()
		time.Sleep(settleWindow)
		share := (storeServerCPU() - c0).Seconds() / settleWindow.Seconds()
		if share < settleCPU || time.Since(t0) >= settleMax {
			return time.Since(t0), share
		}
	}
}

func (b *jobsBench) wakeUps() error {
	measure := func() (fromCall, fromCommit []time.Duration, err error) {
		_, err = b.fdbjobsRun(func(s *fdbjobsRun) (runResult, error) {
			var err error
			fromCall, fromCommit, err = s.wakeLatency(b.o.wakeups)
			return runResult{}, err
		})
		return fromCall, fromCommit, err
	}
	fromCall, fromCommit, err := measure()
	if err != nil {
		return err
	}
	fmt.Printf("\nwake-up latency, insert -> an idle worker gets the job (%d samples, one worker):\n", b.o.wakeups)
	printWake := func(who string, call, commit []time.Duration) {
		fmt.Printf("  %-8s from the insert call:   p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", who, ms(pct(call, 50)), ms(pct(call, 99)), ms(pct(call, 100)))
		fmt.Printf("  %-8s from its commit:        p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", who, ms(pct(commit, 50)), ms(pct(commit, 99)), ms(pct(commit, 100)))
	}
	if onFDB() {
		printWake("fdbjobs", fromCall, fromCommit)
		fmt.Printf("  (right after the phases before)\n")
		waited, share := settle()
		if fromCall, fromCommit, err = measure(); err != nil {
			return err
		}
		printWake("fdbjobs", fromCall, fromCommit)
		fmt.Printf("  (settled: measured again after %.0fs, once fdbserver used %.0f%% of a core over %v)\n",
			waited.Seconds(), 100*share, settleWindow)
	} else {
		printWake("fdbjobs", fromCall, fromCommit)
	}
	noteFigure("wake-up from the insert call, p50", "ms", ms(pct(fromCall, 50)))
	noteFigure("wake-up from the insert call, p99", "ms", ms(pct(fromCall, 99)))
	if b.river != nil {
		rr, err := b.river.run("wake", "-samples", strconv.Itoa(b.o.wakeups))
		if err != nil {
			return err
		}
		durs := func(ns []int64) []time.Duration {
			out := make([]time.Duration, len(ns))
			for i, n := range ns {
				out[i] = time.Duration(n)
			}
			return out
		}
		printWake("River", durs(rr.WakeFromCall), durs(rr.WakeFromCommit))
	}
	fmt.Printf("  goal: fdbjobs p99 under 5 ms\n")
	return nil
}

func (b *jobsBench) acceptCost(n int) error {
	_, err := b.fdbjobsRun(func(s *fdbjobsRun) (runResult, error) { return runResult{}, s.acceptCost(n) })
	return err
}

// fdbjobsRun runs f on a fresh store, removed afterwards.
func (b *jobsBench) fdbjobsRun(f func(*fdbjobsRun) (runResult, error)) (runResult, error) {
	b.runs++
	db, closeDB, err := b.env.openFreshStore(fmt.Sprintf("fdbjobs-%d", b.runs), b.o.inMemory)
	if err != nil {
		return runResult{}, err
	}
	defer closeDB()
	cdb := &countingDB{Database: db}
	c, err := fdbjobs.New(cdb, fdbjobs.Config{})
	if err != nil {
		return runResult{}, err
	}
	// Started, as a Runtime's Client must be (and a node's is): its
	// activity monitors, and its copy of the types that accepts and
	// claims read.
	if err := c.Start(context.Background()); err != nil {
		return runResult{}, err
	}
	defer c.Stop()
	for _, kind := range []string{burnType, continuousType} {
		if b.o.feed {
			if err := c.SetFeed(context.Background(), nil, kind, 24*time.Hour); err != nil {
				return runResult{}, err
			}
		}
		if b.o.limit > 0 {
			if err := c.SetLimit(context.Background(), nil, kind, fdbjobs.Limit{Running: b.o.limit}); err != nil {
				return runResult{}, err
			}
		}
		if b.o.partitionLimit > 0 {
			if err := c.SetPartitionLimit(context.Background(), nil, kind, fdbjobs.Limit{Running: b.o.partitionLimit}); err != nil {
				return runResult{}, err
			}
		}
		if b.o.fair {
			mode := fdbjobs.FairShareStarts
			if b.o.fairRunTime {
				mode = fdbjobs.FairShareRunTime
			}
			if err := c.SetFairShareMode(context.Background(), nil, kind, mode); err != nil {
				return runResult{}, err
			}
			for i := range b.o.partitions {
				if err := c.SetPartitionWeight(context.Background(), nil, kind, "p"+strconv.Itoa(i), fairWeight(i)); err != nil {
					return runResult{}, err
				}
			}
		}
	}
	run := &fdbjobsRun{ctx: context.Background(), c: c, db: cdb, o: b.o, tenant: b.env.tenant(db)}
	defer func() {
		for _, n := range run.nodes {
			n.c.Stop()
		}
	}()
	return f(run)
}

func (r *riverResult) result() runResult {
	return runResult{inserted: r.Inserted, worked: r.Worked, insertSec: r.InsertSeconds, insertCPUSec: r.InsertCPU, workSec: r.Seconds,
		cpuSec: r.CPUSeconds, pgCPUSec: r.PGCPUSeconds, memBase: r.MemBase, memPeak: r.MemPeak, concurrency: r.Concurrency}
}
