package fdbjobs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// A job's life: create it, accept it, heartbeat, finish.
func Example() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		panic(err)
	}

	// Register the type with its activity timeout, then create a job. Add
	// takes a transaction (nil for its own) so that it can commit together
	// with the write that asks for the job.
	_ = jobs.SetTypeTimeout(ctx, nil, "rep_jobs", time.Minute)
	_ = jobs.Add(ctx, nil, "rep_jobs", "job-1", []byte(`{"source":"a","target":"b"}`), 0)

	// A worker takes it; it would wait up to a second for one to come.
	job, err := jobs.Accept(ctx, "rep_jobs", fdbjobs.AcceptOptions{Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("accepted", job.ID, string(job.Data))

	// Heartbeat with progress; ErrHalt would mean the job is no longer ours.
	if err := jobs.Update(ctx, nil, job, []byte(`{"source":"a","target":"b","seq":42}`)); err != nil {
		panic(err)
	}
	if err := jobs.Finish(ctx, nil, job, nil); err != nil {
		panic(err)
	}
	state, _ := jobs.JobState(ctx, nil, "rep_jobs", "job-1")
	data, _ := jobs.JobData(ctx, nil, "rep_jobs", "job-1")
	fmt.Println(state, string(data))
	// Output:
	// accepted job-1 {"source":"a","target":"b"}
	// finished {"source":"a","target":"b","seq":42}
}

// Follow a job from any node: subscribe, then wait for its events.
func ExampleClient_Subscribe() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	watcher, _ := fdbjobs.New(db, fdbjobs.Config{}) // one node
	worker, _ := fdbjobs.New(db, fdbjobs.Config{})  // another
	_ = watcher.Start(ctx)                          // runs the notifiers
	defer watcher.Stop()

	_ = watcher.SetTypeTimeout(ctx, nil, "views", time.Minute)
	_ = watcher.Add(ctx, nil, "views", "build-1", nil, 0)
	sub, state, _, err := watcher.Subscribe(ctx, nil, "views", "build-1")
	if err != nil {
		panic(err)
	}
	defer sub.Unsubscribe()
	fmt.Println("subscribed:", state)

	job, _ := worker.Accept(ctx, "views", fdbjobs.AcceptOptions{})
	_ = worker.Finish(ctx, nil, job, []byte(`{"rows":10}`))

	ev, err := sub.WaitState(ctx, fdbjobs.Finished)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.ID, ev.State, string(ev.Data))
	// Output:
	// subscribed: pending
	// build-1 finished {"rows":10}
}

// Throughput: take and finish jobs in batches.
func ExampleClient_AcceptBatch() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	jobs, _ := fdbjobs.New(db, fdbjobs.Config{})
	_ = jobs.SetTypeTimeout(ctx, nil, "work", time.Minute)
	for i := range 5 {
		_ = jobs.Add(ctx, nil, "work", fmt.Sprintf("w%d", i), nil, 0)
	}
	batch, _ := jobs.AcceptBatch(ctx, "work", 10, fdbjobs.AcceptOptions{})
	items := make([]fdbjobs.Completion, len(batch))
	for i, j := range batch {
		items[i] = fdbjobs.Completion{Job: j, Data: []byte(`{"ok":true}`)}
	}
	errs, _ := jobs.FinishBatch(ctx, nil, items)
	fmt.Println(len(batch), "accepted;", len(errs), "finished; pending now:")
	n, _ := jobs.PendingCount(ctx, nil, "work", 0, 0)
	fmt.Println(n)
	// Output:
	// 5 accepted; 5 finished; pending now:
	// 0
}
