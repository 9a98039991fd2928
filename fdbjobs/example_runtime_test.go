package fdbjobs_test

import (
	"context"
	"fmt"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// EmailArgs are a job's arguments: its kind names its worker.
type EmailArgs struct {
	To string `json:"to"`
}

func (EmailArgs) Kind() string { return "email" }

// A typed worker on the Runtime: insert a job, and the Runtime works it,
// renews its hold, retries it when Work fails, and finishes it.
func ExampleRuntime() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	client, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil { // activity monitors: the jobs of dead nodes come back
		panic(err)
	}
	defer client.Stop()

	sent := make(chan string)
	workers := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(workers, fdbjobs.WorkFunc[EmailArgs](func(ctx context.Context, w *fdbjobs.Work[EmailArgs]) error {
		sent <- w.Args.To // an error here would retry the job later (RetryPolicyDefault)
		return nil
	}), fdbjobs.WorkerOptions{Concurrency: 4})
	if err != nil {
		panic(err)
	}
	rt, err := fdbjobs.NewRuntime(client, workers, fdbjobs.RuntimeOptions{})
	if err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer rt.Stop(ctx) // lets running jobs finish

	// Insert takes a transaction (nil: its own), so that a job can commit
	// with the write that asks for it.
	if _, err := client.Insert(ctx, nil, EmailArgs{To: "ada@example.com"}, fdbjobs.InsertOptions{}); err != nil {
		panic(err)
	}
	fmt.Println("sent to", <-sent)
	// Output: sent to ada@example.com
}
