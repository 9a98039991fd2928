// Cancel: a long job cancelled from elsewhere (any node, in any
// transaction) hears of it within milliseconds; its context's cause says
// why.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// ReportArgs are the arguments of a "report" job.
type ReportArgs struct {
	Month string `json:"month"`
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
	client, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop()

	started, stopped := make(chan struct{}), make(chan error)
	workers := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(workers, fdbjobs.WorkFunc[ReportArgs](func(ctx context.Context, w *fdbjobs.Work[ReportArgs]) error {
		close(started)
		<-ctx.Done() // a long computation that watches its context
		stopped <- context.Cause(ctx)
		return ctx.Err()
	}), fdbjobs.WorkerOptions{})
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
	defer rt.Stop(ctx)

	r, err := client.Insert(ctx, nil, ReportArgs{Month: "2026-11"}, fdbjobs.InsertOptions{})
	if err != nil {
		log.Fatal(err)
	}
	<-started
	outcome, err := client.Cancel(ctx, nil, "report", r.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job", outcome+";", "its worker stopped:", <-stopped)
}
