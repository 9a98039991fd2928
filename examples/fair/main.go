// Fair shares: a tenant's burst of 2,000 reports does not hold back the
// reports of the others, and a tenant with weight 2 gets twice the starts
// of one with weight 1.
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

// ReportArgs are the arguments of a "report" job of a tenant.
type ReportArgs struct {
	Tenant string `json:"tenant"`
}

// Kind names the job type.
func (ReportArgs) Kind() string { return "report" }

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

	// Fair shares between the kind's partitions, one per tenant: "gold"
	// weighs 2, the others 1 (the default).
	if err := c.SetTypeTimeout(ctx, nil, "report", fdbjobs.TimeoutDefault); err != nil {
		log.Fatal(err)
	}
	if err := c.SetFairShare(ctx, nil, "report", true); err != nil {
		log.Fatal(err)
	}
	if err := c.SetPartitionWeight(ctx, nil, "report", "gold", 2); err != nil {
		log.Fatal(err)
	}
	// One queue shard: the starts follow the fair order exactly (with
	// more, over many fetches).
	if err := c.SetTypeShards(ctx, nil, "report", 1); err != nil {
		log.Fatal(err)
	}
	// "big" inserts 2,000 reports first, then "small" 20 and "gold" 2,000.
	insert := func(tenant string, n int) {
		jobs := make([]fdbjobs.InsertJob, n)
		for i := range jobs {
			jobs[i] = fdbjobs.InsertJob{Args: ReportArgs{Tenant: tenant}, Opts: fdbjobs.InsertOptions{Partition: tenant}}
		}
		if _, err := c.InsertMany(ctx, nil, jobs); err != nil {
			log.Fatal(err)
		}
	}
	insert("big", 2000)
	insert("small", 20)
	insert("gold", 2000)

	var mu sync.Mutex
	started := map[string]int{}
	smallDone := -1 // the starts before small's last report started
	total := 0
	ws := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[ReportArgs](func(ctx context.Context, w *fdbjobs.Work[ReportArgs]) error {
		mu.Lock()
		started[w.Args.Tenant]++
		total++
		if w.Args.Tenant == "small" && started["small"] == 20 {
			smallDone = total
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // the report
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 10})
	if err != nil {
		log.Fatal(err)
	}
	rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer rt.StopAndCancel()
	for {
		mu.Lock()
		n := total
		snapshot := fmt.Sprintf("big %d, gold %d", started["big"], started["gold"])
		mu.Unlock()
		if n >= 1000 {
			fmt.Println("small's 20 reports had all started after", smallDone, "starts of", n)
			fmt.Println("of the first", n, "starts:", snapshot)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
