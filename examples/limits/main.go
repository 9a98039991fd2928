// Limits and priorities: two nodes share a kind's cluster-wide limit of
// running jobs and of starts per second, and urgent jobs go first.
package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// SendArgs are the arguments of a "send" job: a message to a rate-limited
// provider.
type SendArgs struct {
	To string `json:"to"`
}

// Kind names the job type.
func (SendArgs) Kind() string { return "send" }

func main() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var running, peak atomic.Int64
	var mu sync.Mutex
	var order []string
	ws := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[SendArgs](func(ctx context.Context, w *fdbjobs.Work[SendArgs]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		order = append(order, w.Args.To)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the provider's answer
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 10, OldestFirst: true}) // in priority order across the queue's shards
	if err != nil {
		log.Fatal(err)
	}

	// Two nodes: a Client and a Runtime each, on the same store.
	var clients []*fdbjobs.Client
	for range 2 {
		c, err := fdbjobs.New(db, fdbjobs.Config{TimeUnit: time.Millisecond})
		if err != nil {
			log.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			log.Fatal(err)
		}
		defer c.Stop()
		clients = append(clients, c)
	}
	// The provider takes 3 requests at once and 50 a second, from all
	// nodes together.
	if err := clients[0].SetLimit(ctx, nil, "send", fdbjobs.Limit{Running: 3, PerSecond: 50}); err != nil {
		log.Fatal(err)
	}
	// Insert before the Runtimes start, so that the order shows: 20
	// newsletters, then 5 password resets at priority 1 (the highest).
	if err := clients[0].SetTypeTimeout(ctx, nil, "send", fdbjobs.TimeoutDefault); err != nil {
		log.Fatal(err)
	}
	var jobs []fdbjobs.InsertJob
	for i := range 20 {
		jobs = append(jobs, fdbjobs.InsertJob{Args: SendArgs{To: fmt.Sprintf("newsletter-%02d", i)},
			Opts: fdbjobs.InsertOptions{Priority: 4}})
	}
	for i := range 5 {
		jobs = append(jobs, fdbjobs.InsertJob{Args: SendArgs{To: fmt.Sprintf("reset-%d", i)}})
	}
	if _, err := clients[0].InsertMany(ctx, nil, jobs); err != nil {
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
	for {
		counts, err := clients[0].Counts(ctx, nil, "send")
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
	fmt.Println("first five sent:", order[:5])
	fmt.Println("most running at once:", peak.Load())
}
