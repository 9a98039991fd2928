// Retries: a worker that fails twice, then succeeds; one whose error is
// permanent; and what the store keeps of their attempts.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// FetchArgs are the arguments of a "fetch" job.
type FetchArgs struct {
	URL string `json:"url"`
}

// Kind names the job type.
func (FetchArgs) Kind() string { return "fetch" }

func main() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	client, err := fdbjobs.New(db, fdbjobs.Config{TimeUnit: time.Millisecond}) // retries due to the millisecond
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop()

	workers := fdbjobs.NewWorkers()
	err = fdbjobs.AddWorker(workers, fdbjobs.WorkFunc[FetchArgs](func(ctx context.Context, w *fdbjobs.Work[FetchArgs]) error {
		switch {
		case w.Args.URL == "":
			return fdbjobs.Permanent(errors.New("no URL")) // no retry can mend it
		case w.Attempt < 3:
			return fmt.Errorf("%s: connection refused", w.Args.URL) // retried
		}
		return nil
	}), fdbjobs.WorkerOptions{
		MaxAttempts: 5,
		// Here 100 ms per attempt so far; the default is attempt⁴ seconds.
		RetryPolicy: fdbjobs.RetryFunc(func(attempt int, _ error) time.Duration { return time.Duration(attempt) * 100 * time.Millisecond }),
	})
	if err != nil {
		log.Fatal(err)
	}
	rt, err := fdbjobs.NewRuntime(client, workers, fdbjobs.RuntimeOptions{FetchPoll: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer rt.Stop(ctx)

	for _, url := range []string{"https://example.com", ""} {
		r, err := client.Insert(ctx, nil, FetchArgs{URL: url}, fdbjobs.InsertOptions{})
		if err != nil {
			log.Fatal(err)
		}
		outcome, attempts, errs := wait(ctx, client, r.ID)
		fmt.Printf("%q: %s, attempts: %d\n", url, outcome, attempts)
		for _, e := range errs {
			fmt.Printf("  attempt %d: %s\n", e.Attempt, e.Error)
		}
	}
}

// wait polls the job until it is finished, and returns its outcome.
func wait(ctx context.Context, client *fdbjobs.Client, id string) (string, int, []fdbjobs.AttemptError) {
	for {
		state, data, err := client.Job(ctx, nil, "fetch", id)
		if err != nil {
			log.Fatal(err)
		}
		if state == fdbjobs.Finished {
			outcome, attempts, errs, err := fdbjobs.JobOutcome(data)
			if err != nil {
				log.Fatal(err)
			}
			return outcome, attempts, errs
		}
		time.Sleep(20 * time.Millisecond)
	}
}
