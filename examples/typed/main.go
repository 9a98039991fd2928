// Typed: a worker for one kind of job, a job inserted, worked and
// completed (fdbjobs/README.md's program, with its errors checked).
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// EmailArgs are the arguments of an "email" job.
type EmailArgs struct {
	To string `json:"to"`
}

// Kind names the job type and its worker.
func (EmailArgs) Kind() string { return "email" }

func main() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true}) // Dir: on disk; fdbkv: FoundationDB
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	client, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil { // activity monitors: the jobs of dead nodes come back
		log.Fatal(err)
	}
	defer client.Stop()

	done := make(chan struct{})
	workers := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(workers, fdbjobs.WorkFunc[EmailArgs](func(ctx context.Context, w *fdbjobs.Work[EmailArgs]) error {
		fmt.Println("sending to", w.Args.To, "attempt", w.Attempt)
		close(done)
		return nil // an error retries later; fdbjobs.Permanent(err) discards
	}), fdbjobs.WorkerOptions{Concurrency: 10})
	if err != nil {
		log.Fatal(err)
	}
	rt, err := fdbjobs.NewRuntime(client, workers, fdbjobs.RuntimeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer rt.Stop(ctx) // running jobs finish first

	if _, err := client.Insert(ctx, nil, EmailArgs{To: "ada@example.com"}, fdbjobs.InsertOptions{}); err != nil {
		log.Fatal(err)
	}
	<-done
}
