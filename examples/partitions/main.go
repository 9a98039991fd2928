// Limits per partition: three nodes share a limit of 2 running jobs per
// customer. One customer's burst of 60 exports runs 2 at a time across the
// nodes, and the other customers' exports do not wait behind it.
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

// ExportArgs are the arguments of an "export" job: a customer's report.
type ExportArgs struct {
	Customer string `json:"customer"`
	Report   int    `json:"report"`
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

	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	var finished []string // customers, in the order their last export ended
	left := map[string]int{}
	ws := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[ExportArgs](func(ctx context.Context, w *fdbjobs.Work[ExportArgs]) error {
		c := w.Args.Customer
		mu.Lock()
		running[c]++
		peak[c] = max(peak[c], running[c])
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // the export's work
		mu.Lock()
		running[c]--
		if left[c]--; left[c] == 0 {
			finished = append(finished, c)
		}
		mu.Unlock()
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 10})
	if err != nil {
		log.Fatal(err)
	}

	// Three nodes: a Client and a Runtime each, on the same store. Members
	// names each node and the others, so that they share out the queue's
	// shards (in a cluster, from its membership).
	names := []string{"node-a", "node-b", "node-c"}
	var clients []*fdbjobs.Client
	for _, name := range names {
		c, err := fdbjobs.New(db, fdbjobs.Config{
			TimeUnit: time.Millisecond,
			Members:  func() (string, []string) { return name, names },
		})
		if err != nil {
			log.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			log.Fatal(err)
		}
		defer c.Stop()
		clients = append(clients, c)
	}
	// At most 2 exports of one customer at once, across every node.
	if err := clients[0].SetPartitionLimit(ctx, nil, "export", fdbjobs.Limit{Running: 2}); err != nil {
		log.Fatal(err)
	}
	for _, c := range clients {
		rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
		if err != nil {
			log.Fatal(err)
		}
		if err := rt.Start(ctx); err != nil {
			log.Fatal(err)
		}
		defer rt.StopAndCancel()
	}
	// A burst of 60 exports from "acme", then 4 from each of three others.
	var jobs []fdbjobs.InsertJob
	add := func(customer string, n int) {
		for i := range n {
			jobs = append(jobs, fdbjobs.InsertJob{Args: ExportArgs{Customer: customer, Report: i},
				Opts: fdbjobs.InsertOptions{Partition: customer}})
		}
		left[customer] = n
	}
	add("acme", 60)
	for _, c := range []string{"globex", "initech", "umbrella"} {
		add(c, 4)
	}
	if _, err := clients[0].InsertMany(ctx, nil, jobs); err != nil {
		log.Fatal(err)
	}
	for {
		counts, err := clients[0].Counts(ctx, nil, "export")
		if err != nil {
			log.Fatal(err)
		}
		if counts.Completed == int64(len(jobs)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("customers, in the order they were done:", finished)
	fmt.Println("most exports of one customer at once:", peak)
}
