// Fair shares of run time: a tenant whose exports take ten times longer
// gets the same share of the workers' time as the other, not ten times
// it (as it would by starts), with the queue's default shards.
package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// ExportArgs are the arguments of an "export" job of a tenant, which
// takes Took.
type ExportArgs struct {
	Tenant string        `json:"tenant"`
	Took   time.Duration `json:"took"`
}

// Kind names the job type.
func (ExportArgs) Kind() string { return "export" }

func main() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop()
	if err := c.SetTypeTimeout(ctx, nil, "export", fdbjobs.TimeoutDefault); err != nil {
		log.Fatal(err)
	}
	if err := c.SetFairShareMode(ctx, nil, "export", fdbjobs.FairShareRunTime); err != nil {
		log.Fatal(err)
	}

	// The workers' time each tenant's exports took since the mark, and
	// each tenant's exports inserted and started.
	var mu sync.Mutex
	busy := map[string]time.Duration{}
	inserted, started := map[string]int{}, map[string]int{}
	ws := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[ExportArgs](func(ctx context.Context, w *fdbjobs.Work[ExportArgs]) error {
		mu.Lock()
		started[w.Args.Tenant]++
		mu.Unlock()
		time.Sleep(w.Args.Took) // the export
		mu.Lock()
		busy[w.Args.Tenant] += w.Args.Took
		mu.Unlock()
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	// Runtimes charge run time every 10 s by default: every half second
	// here, so that the example shows it within seconds.
	rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{ChargeInterval: 500 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer rt.StopAndCancel()

	// Both tenants keep 20 exports waiting: "big"'s take 40 ms, "small"'s 4.
	took := map[string]time.Duration{"big": 40 * time.Millisecond, "small": 4 * time.Millisecond}
	topUp := func() {
		var jobs []fdbjobs.InsertJob
		mu.Lock()
		for tenant, d := range took {
			for ; inserted[tenant]-started[tenant] < 20; inserted[tenant]++ {
				jobs = append(jobs, fdbjobs.InsertJob{Args: ExportArgs{Tenant: tenant, Took: d}, Opts: fdbjobs.InsertOptions{Partition: tenant}})
			}
		}
		mu.Unlock()
		if len(jobs) > 0 {
			if _, err := c.InsertMany(ctx, nil, jobs); err != nil {
				log.Fatal(err)
			}
		}
	}
	for i := 0; i < 600; i++ { // 6 s
		if i == 300 { // the means are known by now: measure the last 3 s
			mu.Lock()
			busy = map[string]time.Duration{}
			mu.Unlock()
		}
		topUp()
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	total := busy["big"] + busy["small"]
	fmt.Printf("workers' time over the last 3 s: big %.0f%%, small %.0f%%\n",
		100*float64(busy["big"])/float64(total), 100*float64(busy["small"])/float64(total))
}
