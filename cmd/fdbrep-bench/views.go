package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
)

func init() { register("views", runViewsBench) }

// runViewsBench measures the scheduler views (make bench-views): at each
// of -sizes jobs (the store grows from one size to the next), -samples
// requests of each kind of page, timed at the control plane (the HTTP
// layer adds a constant), p50 and p99; then the ratio of each p50 at the
// largest size to the smallest. The jobs are _replicator documents in
// -dbs databases, -running of them running on eight nodes and -crashing
// crashing (set through the store as a node would), the rest pending.
// The goal of issue 13: a 50-row page's p50 at 1,000,000 jobs within 1.5x
// of that at 1,000.
func runViewsBench(args []string) error {
	fs := flag.NewFlagSet("views", flag.ContinueOnError)
	sizesFlag := fs.String("sizes", "1000,10000,100000", "job counts to measure at, ascending (1000000 needs a few GB of memory in memory, or -in-memory=false)")
	samples := fs.Int("samples", 200, "requests of each kind per size")
	limit := fs.Int("limit", 50, "page size")
	dbs := fs.Int("dbs", 10, "_replicator databases the documents are spread over")
	running := fs.Int("running", 500, "jobs running (the _active_tasks rows)")
	crashing := fs.Int("crashing", 500, "jobs crashing (a small states= filter)")
	inMemory := fs.Bool("in-memory", true, "in-memory store (false: durable, on disk in a temporary directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sizes, err := parseInts("sizes", *sizesFlag)
	if err != nil {
		return err
	}
	if len(sizes) == 0 || !slices.IsSorted(sizes) || *samples < 1 || *limit < 1 || *dbs < 1 || *running < 0 || *crashing < 0 {
		return errors.New("-sizes must be ascending; -samples, -limit and -dbs positive; -running and -crashing not negative")
	}
	env := newBenchEnv("views", "")
	defer env.close()
	db, err := env.openStore("store", *inMemory)
	if err != nil {
		return err
	}
	ctx := context.Background()
	vb, err := newViewBench(ctx, db, *dbs)
	if err != nil {
		return err
	}
	fmt.Printf("views: _replicator documents in %d databases, %d running, %d crashing, the rest pending; pages of %d, %d samples each, timed at the control plane (store: %s)\n",
		*dbs, *running, *crashing, *limit, *samples, storeKind(*inMemory))
	var all []viewFigures
	for _, n := range sizes {
		t0 := time.Now()
		if err := vb.Grow(ctx, n, *running, *crashing); err != nil {
			return err
		}
		fmt.Printf("  %d jobs (grown in %v)\n", n, time.Since(t0).Round(time.Millisecond))
		f, err := vb.Measure(ctx, *samples, *limit)
		if err != nil {
			return err
		}
		f.print("    ")
		all = append(all, f)
	}
	if len(all) > 1 {
		first, last := all[0], all[len(all)-1]
		fmt.Printf("  p50 at %d jobs / p50 at %d jobs:\n", last.jobs, first.jobs)
		for i, q := range last.queries {
			fmt.Printf("    %-38s %5.2fx\n", q.name, ms(q.p50)/max(ms(first.queries[i].p50), 1e-6))
		}
	}
	return nil
}

// viewBench is a store of _replicator documents' jobs to measure the
// scheduler views on; bench-scale (issue 13) can reuse it.
type viewBench struct {
	db    kv.Database
	jobs  *fdbjobs.Client
	store *replicator.Store
	plane *control.Plane
	dbs   []string
	rng   *rand.Rand

	docs     int // documents written
	running  int
	crashing int
}

// newViewBench sets up a control plane on db with no documents yet.
func newViewBench(ctx context.Context, db kv.Database, dbs int) (*viewBench, error) {
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return nil, err
	}
	plane, err := control.New(replicator.NewStore(db, jobs, nil), replicator.Config{})
	if err != nil {
		return nil, err
	}
	if err := plane.Init(ctx); err != nil {
		return nil, err
	}
	vb := &viewBench{db: db, jobs: jobs, store: replicator.NewStore(db, jobs, nil), plane: plane, rng: rand.New(rand.NewPCG(1, 2))}
	for i := 0; i < dbs; i++ {
		vb.dbs = append(vb.dbs, fmt.Sprintf("db%03d/_replicator", i))
	}
	return vb, nil
}

// Grow writes documents until there are n (document i goes to database
// i mod dbs), as a frontend does, then starts and crashes jobs as nodes
// would until running and crashing are.
func (vb *viewBench) Grow(ctx context.Context, n, running, crashing int) error {
	if vb.docs < n {
		if err := writeRepDocs(ctx, vb.db, vb.plane, vb.docs, n, func(i int) string { return vb.dbs[i%len(vb.dbs)] }); err != nil {
			return fmt.Errorf("writing documents: %w", err)
		}
		vb.docs = n
	}
	for vb.running < running || vb.crashing < crashing {
		start := vb.running < running
		// Jobs are scheduled in Unix ms, at most now.
		job, err := vb.jobs.Accept(ctx, replicator.JobType, fdbjobs.AcceptOptions{MaxScheduledTime: replicator.Millis(time.Now())})
		if errors.Is(err, fdbjobs.ErrNotFound) {
			return nil // every job is running or crashing
		}
		if err != nil {
			return err
		}
		d, err := replicator.DecodeJobData(job.Data)
		if err != nil {
			return err
		}
		now := time.Now()
		d.RepID = strings.ReplaceAll(job.ID, "|", "+")
		// Crashed with an hour's backoff, as a node makes it.
		l := replicator.Lifecycle{Store: vb.store, MaxHistory: 20,
			Backoff: func(int, float64) time.Duration { return time.Hour }}
		c := replicator.Change{Kind: replicator.Crashed, At: now, Tag: "db_not_found", Reason: "could not open http://peer.invalid/"}
		if start {
			c = replicator.Change{Kind: replicator.Started, At: now, Node: fmt.Sprintf("node%d", vb.running%8)}
		}
		_, err = vb.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			return nil, l.Apply(ctx, tr, job, d.Clone(), c)
		})
		if err != nil {
			return err
		}
		if start {
			vb.running++
		} else {
			vb.crashing++
		}
	}
	return nil
}

// viewQuery is one kind of request measured.
type viewQuery struct {
	name     string
	run      func(ctx context.Context) (int, error) // rows listed
	p50, p99 time.Duration
	rows     int // per request, on average
}

// viewFigures are the latencies measured at one size.
type viewFigures struct {
	jobs    int
	queries []viewQuery
}

func (f viewFigures) print(indent string) {
	for _, q := range f.queries {
		fmt.Printf("%s%-38s p50 %8.3f ms  p99 %8.3f ms  (%d rows)\n", indent, q.name, ms(q.p50), ms(q.p99), q.rows)
	}
}

// Measure times samples requests of each kind with pages of limit rows.
func (vb *viewBench) Measure(ctx context.Context, samples, limit int) (viewFigures, error) {
	p := vb.plane
	randomDoc := func() []string {
		i := vb.rng.IntN(vb.docs)
		return []string{vb.dbs[i%len(vb.dbs)], repDocID(i)}
	}
	randomID := func() []string { return []string{fmt.Sprintf("%032x", vb.rng.Uint64())} }
	docs := func(db string, states []string, q api.PageQuery) func(context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			l, err := p.SchedulerDocs(ctx, db, states, q)
			return len(l.Docs), err
		}
	}
	queries := []viewQuery{
		{name: "_scheduler/docs first page", run: docs("", nil, api.PageQuery{Limit: limit})},
		{name: "_scheduler/docs from a start_key", run: func(ctx context.Context) (int, error) {
			return docs("", nil, api.PageQuery{Limit: limit, StartKey: randomDoc()})(ctx)
		}},
		{name: "_scheduler/docs/{db}?states=crashing", run: func(ctx context.Context) (int, error) {
			return docs(vb.dbs[vb.rng.IntN(len(vb.dbs))], []string{replicator.StateCrashing}, api.PageQuery{Limit: limit})(ctx)
		}},
		{name: "_scheduler/docs?states=pending", run: docs("", []string{replicator.StatePending}, api.PageQuery{Limit: limit})},
		{name: "_scheduler/jobs from a start_key", run: func(ctx context.Context) (int, error) {
			l, err := p.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: limit, StartKey: randomID()})
			return len(l.Jobs), err
		}},
		{name: "_scheduler/docs skip=1000", run: docs("", nil, api.PageQuery{Limit: limit, Skip: 1000})},
		{name: "_active_tasks", run: func(ctx context.Context) (int, error) {
			t, err := p.ActiveTasks(ctx, api.Admin())
			return len(t), err
		}},
	}
	for i := range queries {
		q := &queries[i]
		lat := make([]time.Duration, samples)
		rows := 0
		for s := range lat {
			t0 := time.Now()
			n, err := q.run(ctx)
			if err != nil {
				return viewFigures{}, fmt.Errorf("%s: %w", q.name, err)
			}
			lat[s] = time.Since(t0)
			rows += n
		}
		slices.Sort(lat)
		q.p50, q.p99, q.rows = lat[samples/2], lat[samples*99/100], rows/samples
	}
	return viewFigures{jobs: vb.docs, queries: queries}, nil
}
