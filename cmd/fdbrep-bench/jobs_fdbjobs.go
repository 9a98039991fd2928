package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
)

// fdbjobsRun is one fdbjobs run of the jobs benchmark, on a store of its
// own.
type fdbjobsRun struct {
	ctx context.Context
	// concurrency is the Runtime's Concurrency (0 with -loop batch).
	concurrency int
	c           *fdbjobs.Client
	db          *countingDB
	o           jobsOpts
	// tenant is the store's FoundationDB tenant ("" on the embedded
	// store), for the processes of burnDownProcesses.
	tenant string
	// nodes, when set, are the Clients the workers share (worker i uses
	// nodes[i mod len]), each on a countingDB of its own over db's store:
	// several nodes on one store.
	nodes []*node
	// beforeWork, when set, is called at the start of a burn-down's work
	// phase.
	beforeWork func()
	// fairStarts counts the starts of a burn-down's first half by weight
	// (-fair), weight w at w-1.
	fairStarts [4]atomic.Int64
}

// node is one of a run's Clients and its counters.
type node struct {
	c  *fdbjobs.Client
	db *countingDB
}

// newNodes returns k started Clients on the run's store, Client i being
// node i of k to the pending queue's shards (nodeMembers); fdbjobsRun
// stops them.
func (s *fdbjobsRun) newNodes(k int) ([]*node, error) {
	out := make([]*node, k)
	for i := range out {
		db := &countingDB{Database: s.db.Database}
		c, err := fdbjobs.New(db, fdbjobs.Config{Members: nodeMembers(i, k)})
		if err == nil {
			err = c.Start(s.ctx)
		}
		if err != nil {
			for _, n := range out[:i] {
				n.c.Stop()
			}
			return nil, err
		}
		out[i] = &node{c: c, db: db}
	}
	return out, nil
}

// nodesCost is what the nodes' transactions cost the store so far.
func (s *fdbjobsRun) nodesCost() kvCost {
	var c kvCost
	for _, n := range s.nodes {
		c = c.add(n.db.cost())
	}
	return c
}

// burnDownClients is the scale-out's burn-down of o.scaleJobs jobs by k
// Clients in this process (newNodes), with what its work phase cost the
// store.
func (s *fdbjobsRun) burnDownClients(k int) (runResult, kvCost, error) {
	var err error
	if s.nodes, err = s.newNodes(k); err != nil {
		return runResult{}, kvCost{}, err
	}
	if s.o.runtime && k > fdbjobs.ShardsDefault {
		// As many shards as nodes, as the nodes' Runtimes make them at
		// their start: a cluster's Runtimes start before its inserts,
		// this burn-down's after.
		if err := s.c.SetTypeShards(s.ctx, nil, burnType, min(k, fdbjobs.ShardsMax)); err != nil {
			return runResult{}, kvCost{}, err
		}
	}
	return s.burnDownCounted(s.o.scaleJobs)
}

// burnDownCounted is burnDown, with what its work phase cost the store.
func (s *fdbjobsRun) burnDownCounted(n int) (runResult, kvCost, error) {
	var before kvCost
	s.beforeWork = func() { before = s.nodesCost() }
	defer func() { s.beforeWork = nil }()
	res, err := s.burnDown(n, "")
	return res, s.nodesCost().sub(before), err
}

// insertJobs adds the jobs numbered [from, from+n) of typ, named
// prefix-%09d, with AddBatch (River's InsertMany), o.insertBatch per call
// (paged into transactions of at most fdbjobs.AddPageJobs) from
// o.inserters goroutines (their commits share the store's group commits).
func (s *fdbjobsRun) insertJobs(typ, prefix string, from, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, s.o.inserters)
	for range s.o.inserters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]fdbjobs.NewJob, 0, s.o.insertBatch)
			for {
				start := int(next.Add(int64(s.o.insertBatch))) - s.o.insertBatch
				if start >= n {
					return
				}
				end := min(n, start+s.o.insertBatch)
				if s.o.fair {
					if err := s.insertFair(typ, from+start, from+end); err != nil {
						errc <- err
						return
					}
					continue
				}
				batch = batch[:0]
				for i := from + start; i < from+end; i++ {
					// Numbered once per store and type: new by construction,
					// as River's inserted rows are.
					// The data of fdbjobs.Client.Insert (the Runtime's
					// envelope), written by AddBatch for both loops.
					data := `{"args":{"num":` + strconv.Itoa(i) + `}}`
					if s.o.partitions > 0 {
						data = `{"args":{"num":` + strconv.Itoa(i) + `},"partition":"p` + strconv.Itoa(i%s.o.partitions) + `"}`
					}
					j := fdbjobs.NewJob{ID: fmt.Sprintf("%s-%09d", prefix, i), Data: []byte(data), Fresh: true}
					if s.o.partitions > 0 {
						j.Partition = "p" + strconv.Itoa(i%s.o.partitions) // as Insert does
					}
					if s.o.priorities {
						j.Priority = fdbjobs.PriorityHighest + i%(fdbjobs.PriorityLowest-fdbjobs.PriorityHighest+1)
					}
					batch = append(batch, j)
				}
				// Its own retry loop: idempotent under commit_unknown_result.
				err := s.c.AddBatch(s.ctx, nil, typ, batch)
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

// insertFair inserts the jobs numbered [from, to) of typ with InsertMany,
// job i in partition i mod -partitions (-fair: the ids are drawn, so that
// they carry the jobs' places in the fair order).
func (s *fdbjobsRun) insertFair(typ string, from, to int) error {
	jobs := make([]fdbjobs.InsertJob, 0, to-from)
	for i := from; i < to; i++ {
		var args fdbjobs.JobArgs = burnArgs{Num: i}
		if typ == continuousType {
			args = continuousArgs{Num: i}
		}
		jobs = append(jobs, fdbjobs.InsertJob{Args: args, Opts: fdbjobs.InsertOptions{Partition: "p" + strconv.Itoa(i%s.o.partitions)}})
	}
	_, err := s.c.InsertMany(s.ctx, nil, jobs)
	return err
}

// fairWeight is partition i's weight with -fair.
func fairWeight(i int) int { return i%4 + 1 }

// benchArgs are the arguments of the benchmark's jobs on the Runtime, one
// type per kind: a number, as River's side has (its benchArgs).
type (
	burnArgs struct {
		Num int `json:"num"`
	}
	continuousArgs struct {
		Num int `json:"num"`
	}
)

func (burnArgs) Kind() string       { return burnType }
func (continuousArgs) Kind() string { return continuousType }

// workRuntime is work on fdbjobs' Runtime (-loop runtime): one Runtime
// with a no-op Worker of typ's kind and o.concurrency of Concurrency
// (River's side: a river.Client with as many workers), or, with nodes
// (the scale-out), one Runtime per node sharing that Concurrency. A job
// counts in done when its Worker returned; a burn-down ends when all of
// want did and the Runtimes have stopped (their ends committed).
func (s *fdbjobsRun) workRuntime(ctx context.Context, typ string, wait bool, done *atomic.Int64, want int64) error {
	all := make(chan struct{})
	count := func() {
		if done.Add(1) == want && !wait {
			close(all)
		}
	}
	clients := []*fdbjobs.Client{s.c}
	if len(s.nodes) > 0 {
		clients = clients[:0]
		for _, n := range s.nodes {
			clients = append(clients, n.c)
		}
	}
	s.concurrency = s.o.concurrency
	var rts []*fdbjobs.Runtime
	defer func() {
		for _, rt := range rts {
			rt.StopAndCancel()
		}
	}()
	for i, c := range clients {
		// The Concurrency shared out, the first nodes one more each.
		share := s.o.concurrency / len(clients)
		if i < s.o.concurrency%len(clients) {
			share++
		}
		ws := fdbjobs.NewWorkers()
		opts := fdbjobs.WorkerOptions{Concurrency: share, Timeout: time.Minute}
		var err error
		switch typ {
		case burnType:
			err = fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[burnArgs](func(ctx context.Context, w *fdbjobs.Work[burnArgs]) error {
				if s.o.fair && done.Load() < want/2 {
					s.fairStarts[fairWeight(w.Args.Num%s.o.partitions)-1].Add(1)
				}
				s.o.sleep(ctx)
				count()
				return nil
			}), opts)
		case continuousType:
			err = fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[continuousArgs](func(ctx context.Context, _ *fdbjobs.Work[continuousArgs]) error { s.o.sleep(ctx); count(); return nil }), opts)
		default:
			err = fmt.Errorf("no Runtime worker for %q", typ)
		}
		if err != nil {
			return err
		}
		rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
		if err != nil {
			return err
		}
		if err := rt.Start(ctx); err != nil {
			return err
		}
		rts = append(rts, rt)
	}
	select {
	case <-all:
	case <-ctx.Done():
	}
	return nil
}

// work runs o.workers workers that accept and finish jobs of typ in
// batches, counting the finished ones in done, until the queue is empty
// (wait false) or ctx ends (wait true: idle workers wait for jobs).
func (s *fdbjobsRun) work(ctx context.Context, typ string, wait bool, done *atomic.Int64) error {
	var wg sync.WaitGroup
	errc := make(chan error, s.o.workers)
	opts := fdbjobs.AcceptOptions{}
	if wait {
		opts.Timeout = fdbjobs.WaitForever
	}
	for w := range s.o.workers {
		c := s.c
		if len(s.nodes) > 0 {
			c = s.nodes[w%len(s.nodes)].c
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := make([]fdbjobs.Completion, 0, s.o.batch)
			for {
				jobs, err := c.AcceptBatch(ctx, typ, s.o.batch, opts)
				if errors.Is(err, fdbjobs.ErrNotFound) && !wait || ctx.Err() != nil {
					return
				}
				if err != nil {
					errc <- err
					return
				}
				items = items[:0]
				for _, j := range jobs {
					items = append(items, fdbjobs.Completion{Job: j})
				}
				errs, err := c.FinishBatch(ctx, nil, items)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					err = errors.Join(errs...)
				}
				if err != nil {
					errc <- err
					return
				}
				done.Add(int64(len(jobs)))
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// progress prints the worked rate every progressEvery until stop is
// closed; the returned channel is closed when it has returned.
func progress(done, inserted *atomic.Int64, stop <-chan struct{}) <-chan struct{} {
	over := make(chan struct{})
	go func() {
		defer close(over)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		last, lastT := int64(0), time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				d := done.Load()
				fmt.Printf("  ... %9d worked, last 2s %8.0f jobs/s (fdbjobs; %d inserted)\n", d, float64(d-last)/now.Sub(lastT).Seconds(), inserted.Load())
				last, lastT = d, now
			}
		}
	}()
	return over
}

// The types of the burn-down's and the continuous mode's jobs.
const (
	burnType       = "burn"
	continuousType = "continuous"
)

// burnDown inserts n jobs, then works them off.
func (s *fdbjobsRun) burnDown(n int, cpuProfile string) (runResult, error) {
	res, err := s.fillBurn(n)
	if err != nil {
		return runResult{}, err
	}
	var done, inserted atomic.Int64
	inserted.Store(int64(n))
	if s.beforeWork != nil {
		s.beforeWork()
	}
	cost0 := s.db.cost()
	err = measure(cpuProfile, &done, &inserted, &res, func() error {
		if s.o.runtime {
			return s.workRuntime(s.ctx, burnType, false, &done, int64(n))
		}
		return s.work(s.ctx, burnType, false, &done)
	})
	if err != nil {
		return runResult{}, err
	}
	if res.worked != int64(n) {
		return runResult{}, fmt.Errorf("burn-down worked %d jobs, want %d", res.worked, n)
	}
	if s.o.fair {
		s.printFairShares()
	}
	res.cost = s.db.cost().sub(cost0)
	res.concurrency = s.concurrency
	return res, nil
}

// fillBurn inserts the burn-down's n jobs and returns the insert phase's
// figures.
func (s *fdbjobsRun) fillBurn(n int) (runResult, error) {
	if err := s.c.SetTypeTimeout(s.ctx, nil, burnType, time.Minute); err != nil {
		return runResult{}, err
	}
	t0, cpu0 := time.Now(), cpuTime()
	if err := s.insertJobs(burnType, "job", 0, n); err != nil {
		return runResult{}, err
	}
	return runResult{inserted: int64(n), insertSec: time.Since(t0).Seconds(), insertCPUSec: (cpuTime() - cpu0).Seconds()}, nil
}

// continuous keeps o.backlog jobs pending, checked every
// continuousCheck and topped up continuousInsert at a time, while the
// workers work them, and counts the jobs finished within d.
func (s *fdbjobsRun) continuous(d time.Duration, cpuProfile string) (runResult, error) {
	const typ = continuousType
	if err := s.c.SetTypeTimeout(s.ctx, nil, typ, time.Minute); err != nil {
		return runResult{}, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var done, inserted atomic.Int64
	ready := make(chan struct{})
	insertErr := make(chan error, 1)
	go func() {
		ready := ready // closed, then nil, after the first top-up
		t := time.NewTicker(continuousCheck)
		defer t.Stop()
		for {
			for inserted.Load()-done.Load() < int64(s.o.backlog) {
				if err := s.insertJobs(typ, "job", int(inserted.Load()), continuousInsert); err != nil {
					if ctx.Err() == nil {
						insertErr <- err
					}
					return
				}
				inserted.Add(continuousInsert)
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
		return runResult{}, err
	}
	workErr := make(chan error, 1)
	var res runResult
	err := measure(cpuProfile, &done, &inserted, &res, func() error {
		go func() {
			if s.o.runtime {
				workErr <- s.workRuntime(ctx, typ, true, &done, 0)
				return
			}
			workErr <- s.work(ctx, typ, true, &done)
		}()
		select {
		case <-time.After(d):
			return nil
		case err := <-insertErr:
			return err
		case err := <-workErr:
			if err == nil {
				err = errors.New("the workers stopped early")
			}
			return err
		}
	})
	res.inserted = inserted.Load()
	res.concurrency = s.concurrency
	cancel()
	if err != nil {
		return runResult{}, err
	}
	return res, <-workErr
}

// measure runs work, the work phase of a run, with the CPU profile written
// to profile ("": none) and the progress lines, and sets res's worked
// jobs (done when work returns), wall and CPU seconds.
func measure(profile string, done, inserted *atomic.Int64, res *runResult, work func() error) error {
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stop := make(chan struct{})
	over := progress(done, inserted, stop)
	mem := startMem()
	t0, cpu0, srv0 := time.Now(), cpuTime(), storeServerCPU()
	err = work()
	res.worked, res.workSec, res.cpuSec = done.Load(), time.Since(t0).Seconds(), (cpuTime() - cpu0).Seconds()
	res.memBase, res.memPeak = mem.end()
	res.serverCPUSec = (storeServerCPU() - srv0).Seconds()
	stopProfile()
	close(stop)
	<-over
	return err
}

// wakeLatency measures how long a blocked Accept takes to return after an
// Add: from the start of Add, and from its commit.
func (s *fdbjobsRun) wakeLatency(samples int) (fromStart, fromCommit []time.Duration, err error) {
	const typ = "wake"
	ctx, c := s.ctx, s.c
	if err := c.SetTypeTimeout(ctx, nil, typ, time.Minute); err != nil {
		return nil, nil, err
	}
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
			return nil, nil, err
		}
		t1 := time.Now()
		var woke time.Time
		select {
		case woke = <-got:
		case err := <-errc:
			return nil, nil, err
		}
		if err := <-errc; err != nil {
			return nil, nil, err
		}
		fromStart = append(fromStart, woke.Sub(t0))
		fromCommit = append(fromCommit, max(0, woke.Sub(t1)))
	}
	return fromStart, fromCommit, nil
}

// acceptCost measures single Accept (and Finish) calls with n jobs pending.
func (s *fdbjobsRun) acceptCost(n int) error {
	typ := fmt.Sprintf("flat-%d", n)
	ctx, c := s.ctx, s.c
	if err := c.SetTypeTimeout(ctx, nil, typ, time.Minute); err != nil {
		return err
	}
	t0 := time.Now()
	if err := s.insertJobs(typ, "p", 0, n); err != nil {
		return err
	}
	ins := time.Since(t0)
	samples := s.o.accepts
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
	fmt.Printf("\nAccept cost with %d jobs pending (fdbjobs; inserted in %.1fs, %.0f jobs/s); %d sequential Accept + Finish:\n",
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

// printFairShares prints the shares of a burn-down's first half of starts
// by weight (-fair), beside the weights' shares: every partition has jobs
// waiting throughout, its jobs inserted at the same rate as the others'.
func (s *fdbjobsRun) printFairShares() {
	var weights [4]int
	for i := range s.o.partitions {
		weights[fairWeight(i)-1] += fairWeight(i)
	}
	total, sum := int64(0), 0
	for w := range 4 {
		total += s.fairStarts[w].Load()
		sum += weights[w]
	}
	fmt.Printf("  fair shares of the first half's starts by weight:")
	for w := range 4 {
		fmt.Printf(" %d: %.1f%% (weights' %.1f%%);", w+1, 100*float64(s.fairStarts[w].Swap(0))/float64(max(1, total)), 100*float64(weights[w])/float64(max(1, sum)))
	}
	fmt.Println()
}
