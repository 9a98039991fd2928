package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

func init() { register("jobs", runJobsBench) }

// runJobsBench measures the job layer on an on-disk embedded store with
// durable commits:
//
//  1. burn-down, as River's bench does: insert -jobs jobs, then -workers
//     workers accept and finish them with the batch forms;
//  2. wake-up latency from Add to a blocked Accept;
//  3. the cost of one Accept (plus its Finish) with 10,000 and with
//     1,000,000 pending jobs, to show that it does not grow with the queue.
func runJobsBench(args []string) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	jobs := fs.Int("jobs", 200_000, "jobs in the burn-down")
	workers := fs.Int("workers", 8, "burn-down workers")
	batch := fs.Int("batch", 50, "jobs per AcceptBatch / FinishBatch in the burn-down")
	insertBatch := fs.Int("insert-batch", 500, "jobs added per transaction")
	inserters := fs.Int("inserters", 4, "concurrent inserting goroutines")
	wakeups := fs.Int("wakeups", 300, "wake-up latency samples")
	accepts := fs.Int("accepts", 2000, "Accept samples per queue size")
	pendingList := fs.String("pending", "10000,1000000", "queue sizes for the Accept cost")
	skip1M := fs.Bool("skip-1m", false, "skip queue sizes of a million and more")
	dir := fs.String("dir", "", "directory for the store (default: a new temporary directory, removed afterwards)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the burn-down's work phase to this file")
	inMemory := fs.Bool("in-memory", false, "use an in-memory store instead (to see what the disk costs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobs < 1 || *workers < 1 || *batch < 1 || *batch > fdbjobs.MaxBatch || *insertBatch < 1 || *inserters < 1 {
		return errors.New("-jobs, -workers, -batch, -insert-batch and -inserters must be positive (-batch at most 10000)")
	}
	pending, err := parseInts("pending", *pendingList)
	if err != nil {
		return err
	}
	if *skip1M {
		pending = slices.DeleteFunc(pending, func(n int) bool { return n >= 1_000_000 })
	}
	env := newBenchEnv("jobs", *dir)
	defer env.close()
	db, err := env.openStore("store", *inMemory)
	if err != nil {
		return err
	}
	cdb := &countingDB{Database: db}
	c, err := fdbjobs.New(cdb, fdbjobs.Config{})
	if err != nil {
		return err
	}
	ctx := context.Background()
	where := "on disk (durable commits)"
	if *inMemory {
		where = "in memory"
	}
	fmt.Printf("jobs benchmark: embedded store %s, GOMAXPROCS=%d\n", where, runtime.GOMAXPROCS(0))

	if err := burnDown(ctx, c, cdb, *jobs, *workers, *batch, *insertBatch, *inserters, *cpuProfile); err != nil {
		return err
	}
	if err := wakeLatency(ctx, c, *wakeups); err != nil {
		return err
	}
	for _, n := range pending {
		if err := acceptCost(ctx, c, db, n, *accepts, *insertBatch, *inserters); err != nil {
			return err
		}
	}
	return nil
}

// insertJobs adds n jobs of typ named prefix-%09d, insertBatch per
// transaction from several goroutines.
func insertJobs(ctx context.Context, c *fdbjobs.Client, db kv.Database, typ, prefix string, n, insertBatch, inserters int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, inserters)
	for range inserters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(int64(insertBatch))) - insertBatch
				if start >= n {
					return
				}
				end := min(n, start+insertBatch)
				_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
					for i := start; i < end; i++ {
						id := fmt.Sprintf("%s-%09d", prefix, i)
						// Idempotent under a retry: add only what is missing.
						if _, err := c.JobState(ctx, tr, typ, id); !errors.Is(err, fdbjobs.ErrNotFound) {
							if err != nil {
								return nil, err
							}
							continue
						}
						if err := c.Add(ctx, tr, typ, id, []byte(`{"n":`+strconv.Itoa(i)+`}`), 0); err != nil {
							return nil, err
						}
					}
					return nil, nil
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

func burnDown(ctx context.Context, c *fdbjobs.Client, db kv.Database, n, workers, batch, insertBatch, inserters int, cpuProfile string) error {
	const typ = "burn"
	if err := c.SetTypeTimeout(ctx, nil, typ, time.Minute); err != nil {
		return err
	}
	fmt.Printf("\nburn-down: %d jobs, %d workers, batches of %d (River's bench method: insert all, then work them off)\n", n, workers, batch)
	t0, cpu0 := time.Now(), cpuTime()
	if err := insertJobs(ctx, c, db, typ, "job", n, insertBatch, inserters); err != nil {
		return err
	}
	ins, insCPU := time.Since(t0), cpuTime()-cpu0
	fmt.Printf("  inserted  %9d jobs in %7.2fs = %8.0f jobs/s (%d per transaction, %d inserters); CPU %.0f µs/job\n",
		n, ins.Seconds(), float64(n)/ins.Seconds(), insertBatch, inserters, float64(insCPU.Microseconds())/float64(n))

	var done, txns atomic.Int64
	cdb := db.(*countingDB)
	runs0 := cdb.runs.Load()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	stopTicker := make(chan struct{})
	tickerDone := make(chan struct{})
	stopProfile, err := startCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	t0, cpu0 = time.Now(), cpuTime()
	go func() { // River-style progress lines
		defer close(tickerDone)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		last, lastT := int64(0), t0
		for {
			select {
			case <-stopTicker:
				return
			case now := <-tick.C:
				d := done.Load()
				fmt.Printf("  ... %9d worked, last 2s %8.0f jobs/s\n", d, float64(d-last)/now.Sub(lastT).Seconds())
				last, lastT = d, now
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := c.AcceptBatch(ctx, typ, batch, fdbjobs.AcceptOptions{})
				if errors.Is(err, fdbjobs.ErrNotFound) {
					return
				}
				if err != nil {
					errc <- err
					return
				}
				items := make([]fdbjobs.Completion, len(jobs))
				for i, j := range jobs {
					items[i] = fdbjobs.Completion{Job: j}
				}
				errs, err := c.FinishBatch(ctx, nil, items)
				if err != nil {
					errc <- err
					return
				}
				for _, e := range errs {
					if e != nil {
						errc <- e
						return
					}
				}
				done.Add(int64(len(jobs)))
				txns.Add(2)
			}
		}()
	}
	wg.Wait()
	close(stopTicker)
	<-tickerDone
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	work, workCPU := time.Since(t0), cpuTime()-cpu0
	if got := done.Load(); got != int64(n) {
		return fmt.Errorf("burn-down worked %d jobs, want %d", got, n)
	}
	fmt.Printf("  worked    %9d jobs in %7.2fs = %8.0f jobs/s (accept + finish: %d transactions, %d attempts)\n",
		n, work.Seconds(), float64(n)/work.Seconds(), txns.Load(), cdb.runs.Load()-runs0)
	fmt.Printf("  CPU %.0f µs/job worked (process user+system time; the ceiling on %d idle cores is about %.0f jobs/s)\n",
		float64(workCPU.Microseconds())/float64(n), runtime.NumCPU(), float64(runtime.NumCPU())*1e6/(float64(workCPU.Microseconds())/float64(n)))
	fmt.Printf("  anchor: River works ~15,000-21,000 jobs/s on this machine with durable commits\n")
	return nil
}

// wakeLatency measures how long a blocked Accept takes to return after an
// Add: from the start of Add, and from its commit.
func wakeLatency(ctx context.Context, c *fdbjobs.Client, samples int) error {
	const typ = "wake"
	if err := c.SetTypeTimeout(ctx, nil, typ, time.Minute); err != nil {
		return err
	}
	fromStart := make([]time.Duration, 0, samples)
	fromCommit := make([]time.Duration, 0, samples)
	for i := range samples {
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			job, err := c.Accept(ctx, typ, fdbjobs.AcceptOptions{Timeout: fdbjobs.WaitForever})
			if err != nil {
				errc <- err
				return
			}
			got <- time.Now()
			errc <- c.Finish(ctx, nil, job, nil)
		}()
		time.Sleep(5 * time.Millisecond) // let the acceptor block on its watch
		t0 := time.Now()
		if err := c.Add(ctx, nil, typ, fmt.Sprintf("w-%06d", i), nil, 0); err != nil {
			return err
		}
		t1 := time.Now()
		var woke time.Time
		select {
		case woke = <-got:
		case err := <-errc:
			return err
		}
		if err := <-errc; err != nil {
			return err
		}
		fromStart = append(fromStart, woke.Sub(t0))
		fromCommit = append(fromCommit, max(0, woke.Sub(t1)))
	}
	fmt.Printf("\nwake-up latency, Add -> blocked Accept returns (%d samples, one acceptor):\n", samples)
	fmt.Printf("  from Add call:   p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", ms(pct(fromStart, 50)), ms(pct(fromStart, 99)), ms(pct(fromStart, 100)))
	fmt.Printf("  from Add commit: p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", ms(pct(fromCommit, 50)), ms(pct(fromCommit, 99)), ms(pct(fromCommit, 100)))
	fmt.Printf("  goal: p99 < 10 ms\n")
	return nil
}

// acceptCost measures single Accept (and Finish) calls with n jobs pending.
func acceptCost(ctx context.Context, c *fdbjobs.Client, db kv.Database, n, samples, insertBatch, inserters int) error {
	typ := fmt.Sprintf("flat-%d", n)
	if err := c.SetTypeTimeout(ctx, nil, typ, time.Minute); err != nil {
		return err
	}
	t0 := time.Now()
	if err := insertJobs(ctx, c, db, typ, "p", n, insertBatch, inserters); err != nil {
		return err
	}
	ins := time.Since(t0)
	acc := make([]time.Duration, 0, samples)
	fin := make([]time.Duration, 0, samples)
	for range samples {
		a := time.Now()
		job, err := c.Accept(ctx, typ, fdbjobs.AcceptOptions{})
		if err != nil {
			return err
		}
		f := time.Now()
		if err := c.Finish(ctx, nil, job, nil); err != nil {
			return err
		}
		acc = append(acc, f.Sub(a))
		fin = append(fin, time.Since(f))
	}
	fmt.Printf("\nAccept cost with %d jobs pending (inserted in %.1fs, %.0f jobs/s); %d sequential Accept + Finish:\n",
		n, ins.Seconds(), float64(n)/ins.Seconds(), samples)
	fmt.Printf("  Accept: p50 %7.3f ms  p99 %7.3f ms  mean %7.3f ms\n", ms(pct(acc, 50)), ms(pct(acc, 99)), ms(mean(acc)))
	fmt.Printf("  Finish: p50 %7.3f ms  p99 %7.3f ms  mean %7.3f ms\n", ms(pct(fin, 50)), ms(pct(fin, 99)), ms(mean(fin)))
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(len(s)-1, max(0, i-1))]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(max(1, len(d)))
}

// countingDB counts transaction function runs (attempts, retries included).
type countingDB struct {
	kv.Database
	runs atomic.Int64
}

func (d *countingDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) {
		d.runs.Add(1)
		return f(tr)
	})
}
