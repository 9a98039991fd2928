package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// schedArgs are the arguments of the schedules' jobs.
type schedArgs struct {
	I int `json:"i"`
}

func (schedArgs) Kind() string { return "sched" }

// schedules measures durable schedules (fdbjobs.Schedule): -schedules
// schedules of one minute on one store and one Runtime with a no-op
// worker of their kind (-concurrency, as the other modes). For the two
// periods after they were made, the time from each period's start to its
// job's start on the worker, which bounds the lag of its insert from
// above (p50, p99, max); then, between two periods, what the idle
// Runtime costs: the store's transactions per second and the process's
// CPU.
func (b *jobsBench) schedules() error {
	n := b.o.schedules
	_, err := b.fdbjobsRun(func(s *fdbjobsRun) (runResult, error) {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
		defer cancel()
		made := time.Now()
		var next atomic.Int64
		errc := make(chan error, 8)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					_, err := s.c.PutSchedule(ctx, nil, fdbjobs.Schedule{Name: fmt.Sprintf("s%06d", i), Args: schedArgs{I: int(i)}, Every: time.Minute})
					if err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return runResult{}, err
		}
		madeIn := time.Since(made)
		// The two periods measured are the first two that begin once
		// every schedule is made (a period that began while they were
		// made has only some of them; its jobs are not counted).
		first := time.Now().Truncate(time.Minute).Add(time.Minute)
		var mu sync.Mutex
		var lags []time.Duration
		// The insert's lag, as the insert hook sees it in the inserting
		// transaction, before its commit (a retried one's last).
		inserted := map[string]time.Duration{}
		s.c.AddInsertHook(func(_ context.Context, _ kv.Transaction, jobs []fdbjobs.JobRow) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, j := range jobs {
				if !j.ScheduledAt.Before(first) {
					inserted[j.ID] = now.Sub(j.ScheduledAt)
				}
			}
			return nil
		})
		all := make(chan struct{})
		ws := fdbjobs.NewWorkers()
		err := fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[schedArgs](func(_ context.Context, w *fdbjobs.Work[schedArgs]) error {
			lag := time.Since(w.Period)
			if w.Period.Before(first) || !w.Period.Before(first.Add(2*time.Minute)) {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if lags = append(lags, lag); len(lags) == 2*n {
				close(all)
			}
			return nil
		}), fdbjobs.WorkerOptions{Concurrency: s.o.concurrency, Timeout: time.Minute})
		if err != nil {
			return runResult{}, err
		}
		rt, err := fdbjobs.NewRuntime(s.c, ws, fdbjobs.RuntimeOptions{})
		if err != nil {
			return runResult{}, err
		}
		if err := rt.Start(ctx); err != nil {
			return runResult{}, err
		}
		defer rt.StopAndCancel()
		select {
		case <-all:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return runResult{}, fmt.Errorf("schedules: %d of %d jobs started in two periods", len(lags), 2*n)
		}
		// Idle: from 5 s after the second period to 5 s before the third.
		idleFrom := first.Add(time.Minute + 5*time.Second)
		time.Sleep(time.Until(idleFrom))
		const idle = 50 * time.Second
		cost, reads, cpu, server := s.db.cost(), s.db.reads.Load(), cpuTime(), storeServerCPU()
		time.Sleep(idle)
		cost, reads, cpu, server = s.db.cost().sub(cost), s.db.reads.Load()-reads, cpuTime()-cpu, storeServerCPU()-server
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("\nschedules: %d of one minute (made in %.1fs), one Runtime; a period's start to its job's start on the worker, two periods (%d jobs):\n",
			n, madeIn.Seconds(), len(lags))
		ins := slices.Collect(maps.Values(inserted))
		fmt.Printf("  fdbjobs  p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms\n", ms(pct(lags, 50)), ms(pct(lags, 99)), ms(pct(lags, 100)))
		fmt.Printf("  a period's start to its job's insert (in the inserting transaction, before its commit):\n")
		fmt.Printf("  fdbjobs  p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms\n", ms(pct(ins, 50)), ms(pct(ins, 99)), ms(pct(ins, 100)))
		fmt.Printf("  idle between periods (%v): %.1f read transactions/s, %.2f read-write/s; CPU %.2f%% of a core (process)",
			idle, float64(reads)/idle.Seconds(), float64(cost.commits)/idle.Seconds(), 100*cpu.Seconds()/idle.Seconds())
		if onFDB() {
			fmt.Printf(", %.2f%% (fdbserver)", 100*server.Seconds()/idle.Seconds())
		}
		fmt.Println()
		noteFigure("schedule period to start, p99", "ms", ms(pct(lags, 99)))
		noteFigure("schedule period to insert, p99", "ms", ms(pct(ins, 99)))
		if len(lags) != 2*n {
			return runResult{}, errors.New("schedules: a period's job started twice")
		}
		return runResult{}, nil
	})
	return err
}
