// Schedule: a job every second, stored in the layer: any node with a
// worker of its kind inserts each period's job, once, without a leader.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// DigestArgs are the arguments of a "digest" job.
type DigestArgs struct {
	List string `json:"list"`
}

// Kind names the job type.
func (DigestArgs) Kind() string { return "digest" }

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

	ran := make(chan time.Time, 10)
	workers := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(workers, fdbjobs.WorkFunc[DigestArgs](func(ctx context.Context, w *fdbjobs.Work[DigestArgs]) error {
		ran <- w.Period // the period this job is for
		return nil
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

	// Every second here; a cron expression in a time zone otherwise
	// (Cron: "0 7 * * 1-5", TimeZone: "Europe/Paris"). While a digest
	// runs, the next period is skipped; after downtime, one digest runs
	// for the periods missed (CatchUpOne, the default).
	s := fdbjobs.Schedule{Name: "news-digest", Args: DigestArgs{List: "news"}, Every: time.Second, Overlap: fdbjobs.OverlapSkip}
	if _, err := client.PutSchedule(ctx, nil, s); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		fmt.Println("digest for the period of", (<-ran).UTC().Format(time.TimeOnly))
	}
	if err := client.DeleteSchedule(ctx, nil, "news-digest"); err != nil {
		log.Fatal(err)
	}
}
