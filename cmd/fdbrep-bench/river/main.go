// Command river is the River peer of `fdbrep-bench jobs`: it runs River
// (github.com/riverqueue/river, driver pgx v5) against the PostgreSQL
// database its -dsn names, in one of three modes, and prints its figures
// as one line of JSON on standard output (progress goes to standard
// error). It lives in a module of its own so that neither River nor pgx
// enter fdbrep's module; fdbrep-bench starts it as a separate process.
//
// The settings are River's own benchmark's (`river bench`): FetchCooldown
// 2 ms, FetchPollInterval 20 ms, one queue of 2,000 workers (-max-workers), jobs inserted
// with InsertMany in batches of 5,000, a job counted as worked when its
// completed event arrives (after the completer has stored its state), and
// the jobs table truncated and vacuumed before each run.
//
//   - burn: insert -jobs jobs, then start the client and work them off;
//   - continuous: keep at least -backlog jobs (75,000) available (checked every 250
//     ms, topped up in batches of 5,000) while the client works them, for
//     -duration, counting the jobs completed within it;
//   - wake: with the client started and idle, insert one job at a time and
//     time until its worker runs, -samples times.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River's benchmark settings (the workers: -max-workers).
const (
	fetchCooldown     = 2 * time.Millisecond
	fetchPollInterval = 20 * time.Millisecond
	maxWorkersDefault = 2_000
	insertBatch       = 5_000
	// backlogDefault is the backlog the continuous mode keeps available
	// (-backlog), and continuousCheck how often it tops it up.
	backlogDefault  = 75_000
	continuousCheck = 250 * time.Millisecond
	// progressEvery is the period of the progress lines.
	progressEvery = 2 * time.Second
)

// Result is the line of JSON the peer prints; fdbrep-bench decodes it
// with a copy of this type.
type Result struct {
	Mode          string  `json:"mode"`
	Inserted      int64   `json:"inserted"`
	InsertSeconds float64 `json:"insert_seconds,omitempty"` // burn: the insert phase
	// InsertCPUSeconds is the CPU time of the insert phase (burn), this
	// process's and PostgreSQL's.
	InsertCPUSeconds float64 `json:"insert_cpu_seconds,omitempty"`
	Worked           int64   `json:"worked"`
	Seconds          float64 `json:"seconds"`                  // the work phase
	CPUSeconds       float64 `json:"cpu_seconds"`              // this process, work phase
	PGCPUSeconds     float64 `json:"pg_cpu_seconds,omitempty"` // PostgreSQL's processes, work phase (with -pg-pid)
	// Wake mode: from the Insert call, and from its return, to the
	// worker's start, in nanoseconds.
	WakeFromCall   []int64 `json:"wake_from_call,omitempty"`
	WakeFromCommit []int64 `json:"wake_from_commit,omitempty"`
	// MemBase and MemPeak are this process's Go heap objects and
	// goroutine stacks at the work phase's start and at its peak, and
	// Concurrency the most jobs it works at once (MaxWorkers).
	MemBase     int64 `json:"mem_base_bytes,omitempty"`
	MemPeak     int64 `json:"mem_peak_bytes,omitempty"`
	Concurrency int   `json:"concurrency,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "river peer:", err)
		os.Exit(1)
	}
}

func run() error {
	dsn := flag.String("dsn", "", "PostgreSQL connection string (required)")
	mode := flag.String("mode", "burn", "burn, continuous or wake")
	jobs := flag.Int("jobs", 200_000, "burn: jobs to insert and work off")
	duration := flag.Duration("duration", 30*time.Second, "continuous: how long to measure")
	samples := flag.Int("samples", 300, "wake: samples")
	backlog := flag.Int("backlog", backlogDefault, "continuous: jobs kept available")
	flag.DurationVar(&workSleep, "work-sleep", 0, "how long each job's work takes (0: none)")
	flag.IntVar(&maxWorkers, "max-workers", maxWorkersDefault, "the queue's MaxWorkers: jobs worked at once")
	flag.IntVar(&pgPID, "pg-pid", 0, "the postmaster's pid, to measure PostgreSQL's CPU time too (Linux)")
	flag.Parse()
	switch {
	case *dsn == "":
		return errors.New("-dsn is required")
	case *jobs < 1 || *duration <= 0 || *samples < 1 || *backlog < 1:
		return errors.New("-jobs, -duration, -samples and -backlog must be positive")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := prepare(ctx, pool); err != nil {
		return err
	}
	var res *Result
	switch *mode {
	case "burn":
		res, err = burn(ctx, pool, *jobs)
	case "continuous":
		res, err = continuous(ctx, pool, *duration, *backlog)
	case "wake":
		res, err = wake(ctx, pool, *samples)
	default:
		return fmt.Errorf("unknown -mode %q", *mode)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// prepare migrates River's schema up and empties its tables, so that every
// run starts from the same state, then checkpoints so that the previous
// run's writes are not flushed during this one.
func prepare(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	for _, q := range []string{
		"TRUNCATE river_job, river_leader, river_queue",
		"VACUUM FULL river_job",
		"CHECKPOINT",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// benchArgs is the job: a number, as in River's benchmark.
type benchArgs struct {
	Num int `json:"num"`
}

func (benchArgs) Kind() string { return "fdbrep_bench" }

// benchWorker does nothing, or signals started when it is set (wake mode).
type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	started chan time.Time
}

func (w *benchWorker) Work(ctx context.Context, j *river.Job[benchArgs]) error {
	if w.started != nil {
		w.started <- time.Now()
	}
	if workSleep > 0 {
		t := time.NewTimer(workSleep)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// workSleep is how long each job's work takes (-work-sleep), and
// maxWorkers how many jobs the client works at once (-max-workers).
var (
	workSleep  time.Duration
	maxWorkers int
)

// newClient returns a client with River's benchmark settings and a
// subscription to job completions (and to the failures that should never
// happen) with room for chanSize events (none when 0), and the
// subscription's cancel.
func newClient(pool *pgxpool.Pool, w *benchWorker, chanSize int) (*river.Client[pgx.Tx], <-chan *river.Event, func(), error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: fetchPollInterval,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if chanSize == 0 {
		return client, nil, func() {}, nil
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: chanSize,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	return client, events, unsubscribe, nil
}

// inserter inserts jobs with consecutive numbers in batches of insertBatch.
type inserter struct {
	client *river.Client[pgx.Tx]
	params []river.InsertManyParams
	next   int
}

func (in *inserter) insert(ctx context.Context, n int) error {
	if in.params == nil {
		in.params = make([]river.InsertManyParams, insertBatch)
	}
	p := in.params[:n]
	for i := range p {
		in.next++
		p[i].Args = benchArgs{Num: in.next}
	}
	_, err := in.client.InsertMany(ctx, p)
	return err
}

// counter follows the completion events: worked counts them, and last is
// the time of the latest. When target is positive, done is closed once
// that many events came.
type counter struct {
	worked atomic.Int64
	last   atomic.Int64 // unix nanoseconds
	failed atomic.Int64
	target int64
	done   chan struct{}
}

func (c *counter) follow(ctx context.Context, events <-chan *river.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				return
			}
			if e.Kind != river.EventKindJobCompleted {
				c.failed.Add(1)
			} else {
				c.last.Store(time.Now().UnixNano())
				c.worked.Add(1)
			}
			if c.target > 0 && c.worked.Load()+c.failed.Load() == c.target {
				close(c.done)
			}
		}
	}
}

// progress prints the worked rate every progressEvery until ctx ends.
func (c *counter) progress(ctx context.Context, inserted *atomic.Int64) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	last, lastT := int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w := c.worked.Load()
			fmt.Fprintf(os.Stderr, "  ... %9d worked, last 2s %8.0f jobs/s (river; %d inserted)\n",
				w, float64(w-last)/now.Sub(lastT).Seconds(), inserted.Load())
			last, lastT = w, now
		}
	}
}

func burn(ctx context.Context, pool *pgxpool.Pool, n int) (*Result, error) {
	client, events, _, err := newClient(pool, &benchWorker{}, n)
	if err != nil {
		return nil, err
	}
	in := &inserter{client: client}
	t0, cpu0 := time.Now(), cpuTime()+pgCPUTime()
	for done := 0; done < n; done += insertBatch {
		if err := in.insert(ctx, min(insertBatch, n-done)); err != nil {
			return nil, fmt.Errorf("inserting: %w", err)
		}
	}
	res := &Result{Mode: "burn", Inserted: int64(n), InsertSeconds: time.Since(t0).Seconds(),
		InsertCPUSeconds: (cpuTime() + pgCPUTime() - cpu0).Seconds()}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &counter{target: int64(n), done: make(chan struct{})}
	var inserted atomic.Int64
	inserted.Store(int64(n))
	p, err := startWork(ctx, client, c, events, &inserted)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Minute):
		return nil, fmt.Errorf("burn-down: %d of %d jobs worked after 10 minutes", c.worked.Load(), n)
	}
	p.cpu(res)
	res.Worked = c.worked.Load()
	res.Seconds = time.Unix(0, c.last.Load()).Sub(p.start).Seconds()
	return res, finish(client, c)
}

func continuous(ctx context.Context, pool *pgxpool.Pool, d time.Duration, backlog int) (*Result, error) {
	client, events, unsubscribe, err := newClient(pool, &benchWorker{}, 2*backlog+insertBatch)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &counter{}
	var inserted atomic.Int64
	in := &inserter{client: client}
	ready := make(chan struct{})
	insertErr := make(chan error, 1)
	go func() {
		ready := ready // closed, then nil, after the first top-up
		// Top the backlog up to backlog every continuousCheck.
		t := time.NewTicker(continuousCheck)
		defer t.Stop()
		for {
			for inserted.Load()-c.worked.Load() < int64(backlog) {
				if err := in.insert(ctx, insertBatch); err != nil {
					if ctx.Err() == nil {
						insertErr <- err
					}
					return
				}
				inserted.Add(insertBatch)
			}
			if ready != nil {
				close(ready)
				ready = nil
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	select {
	case <-ready:
	case err := <-insertErr:
		return nil, fmt.Errorf("inserting: %w", err)
	}
	p, err := startWork(ctx, client, c, events, &inserted)
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(d):
	case err := <-insertErr:
		return nil, fmt.Errorf("inserting: %w", err)
	}
	res := &Result{Mode: "continuous", Worked: c.worked.Load(), Inserted: inserted.Load(), Seconds: time.Since(p.start).Seconds()}
	p.cpu(res)
	unsubscribe()
	cancel()
	return res, finish(client, c)
}

// workPhase is the work phase of a run, from the client's start.
type workPhase struct {
	start     time.Time
	cpu0, pg0 time.Duration // CPU times at the start: ours, PostgreSQL's
	mem       *memSampler
}

// startWork follows the completion events into c and prints progress
// until ctx ends, and starts the client.
func startWork(ctx context.Context, client *river.Client[pgx.Tx], c *counter, events <-chan *river.Event, inserted *atomic.Int64) (workPhase, error) {
	go c.follow(ctx, events)
	go c.progress(ctx, inserted)
	p := workPhase{cpu0: cpuTime(), pg0: pgCPUTime(), start: time.Now(), mem: startMem()}
	return p, client.Start(ctx)
}

// cpu sets res's CPU times to those of the phase so far.
func (p workPhase) cpu(res *Result) {
	res.CPUSeconds, res.PGCPUSeconds = (cpuTime() - p.cpu0).Seconds(), (pgCPUTime() - p.pg0).Seconds()
	res.MemBase, res.MemPeak = p.mem.end()
	res.Concurrency = maxWorkers
}

// finish stops the client and fails the run if a job failed.
func finish(client *river.Client[pgx.Tx], c *counter) error {
	if err := stop(client); err != nil {
		return err
	}
	if f := c.failed.Load(); f > 0 {
		return fmt.Errorf("%d jobs failed or were cancelled", f)
	}
	return nil
}

func wake(ctx context.Context, pool *pgxpool.Pool, samples int) (*Result, error) {
	w := &benchWorker{started: make(chan time.Time, 1)}
	client, _, _, err := newClient(pool, w, 0)
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	res := &Result{Mode: "wake"}
	for i := range samples {
		time.Sleep(5 * time.Millisecond) // let the producer go idle, as fdbrep-bench does
		t0 := time.Now()
		if _, err := client.Insert(ctx, benchArgs{Num: i}, nil); err != nil {
			return nil, err
		}
		t1 := time.Now()
		var woke time.Time
		select {
		case woke = <-w.started:
		case <-time.After(time.Minute):
			return nil, errors.New("wake: no worker ran the job within a minute")
		}
		res.WakeFromCall = append(res.WakeFromCall, int64(woke.Sub(t0)))
		res.WakeFromCommit = append(res.WakeFromCommit, int64(max(0, woke.Sub(t1))))
	}
	res.Inserted, res.Worked = int64(samples), int64(samples)
	return res, stop(client)
}

// stop stops the client, giving it a minute to finish.
func stop(client *river.Client[pgx.Tx]) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return client.Stop(ctx)
}

// pgPID is the postmaster's pid (-pg-pid), 0 when not given.
var pgPID int

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// pgCPUTime returns the CPU time used so far by the postmaster, its live
// children (backends, background processes) and its exited children
// (zero without -pg-pid or /proc).
func pgCPUTime() time.Duration {
	if pgPID == 0 {
		return 0
	}
	ticks := func(pid string, children bool) int64 {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return 0
		}
		// Fields after the command name (in parentheses, which may hold
		// spaces): state ppid ... utime(14) stime(15) cutime(16) cstime(17).
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 15 {
			return 0
		}
		n := int64(0)
		last := 13
		if children {
			last = 15
		}
		for i := 11; i < last; i++ {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
		return n
	}
	parent := strconv.Itoa(pgPID)
	total := ticks(parent, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == parent {
			total += ticks(pid, false)
		}
	}
	return time.Duration(total) * time.Second / clockTicks
}

// cpuTime returns this process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
