package scheduler

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// Scheduled replications (replicator/schedule.go): every replication node
// runs a Runtime of the Trigger jobs, which fires the replications'
// schedules (no leader: the job layer's schedule loop) and works each
// period's Trigger by starting the document's job again if its last run
// ended.

// Bounds of the Trigger Runtime.
const (
	// triggerConcurrency is how many Triggers a node works at once: each
	// is one short transaction.
	triggerConcurrency = 4
	// triggerRetain is how long a worked Trigger is kept: a schedule of a
	// second would otherwise keep 86,400 a day.
	triggerRetain = 10 * time.Minute
)

// startTriggers starts the node's Trigger Runtime, until ctx ends or
// stopTriggers.
func (n *Node) startTriggers(ctx context.Context, cfg Config) error {
	rt, err := n.store.NewTriggerRuntime(fdbjobs.WorkFunc[replicator.Trigger](n.workTrigger),
		fdbjobs.WorkerOptions{Concurrency: triggerConcurrency, Timeout: cfg.JobTimeout,
			RetainCompleted: triggerRetain, RetainCancelled: triggerRetain, RetainDiscarded: triggerRetain},
		fdbjobs.RuntimeOptions{FetchPoll: cfg.acceptWaitMax(), SweepPeriod: cfg.Interval})
	if err != nil {
		return err
	}
	if err := rt.Start(ctx); err != nil {
		return err
	}
	n.triggers.Store(rt)
	return nil
}

// stopTriggers stops the Trigger Runtime: a Trigger it worked goes back,
// for another node.
func (n *Node) stopTriggers() {
	if rt := n.triggers.Swap(nil); rt != nil {
		rt.StopAndCancel()
	}
}

// workTrigger starts the scheduled replication's next run
// (Store.Rerun).
func (n *Node) workTrigger(ctx context.Context, w *fdbjobs.Work[replicator.Trigger]) error {
	cfg := n.Config()
	started, err := n.store.Rerun(ctx, w.Args.JobID, cfg.Config, cfg.Clock.Now())
	if err != nil {
		return err
	}
	e := cfg.Logger.Debug().Str("job_id", w.Args.JobID).Time("period", w.Period)
	if started {
		e.Msg("scheduled replication: run started")
	} else {
		e.Msg("scheduled replication: its last run has not ended; period skipped")
	}
	return nil
}
