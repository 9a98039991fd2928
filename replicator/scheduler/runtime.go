package scheduler

// Replication jobs run on the job layer's Runtime (fdbjobs.Runtime), the
// one runner of the node's held jobs, as a Manual kind: its fetchers take
// jobs from the cluster-wide queue, oldest first (fair share orders the
// queue by scheduled time), into the room under the node's target, never
// beyond it, and run each on one of its runners as a worker (worker.go),
// which holds and ends its job through the replicator's Lifecycle. The
// target is the Runtime's Concurrency: MaxChurn bounds only the jobs the
// interval step stops (rotation, balance), not the jobs the Runtime
// starts.

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// acceptBatchMax is the most jobs one of the Runtime's fetches takes in
// one transaction.
const acceptBatchMax = 25

// The node keeps one invariant, in setTargetLocked, which every event
// that changes its terms calls (the node starting, every interval step,
// which sets the node's share and applies a new MaxJobs):
//
//	the Runtime's Concurrency == target
//
// where target is targetLocked. The Runtime counts a job from its accept
// until its worker left (those stopping too), so whenever the node runs
// fewer jobs than its target, a fetcher is waiting for a runnable job,
// and a job that becomes runnable is taken at once (or, scheduled in the
// future, within acceptWaitMax of its time); and since the fetchers take
// no more than the room under the Concurrency, the node never runs more
// than MaxJobs (jobs that a fetch took while the target was lowered go
// back to the queue without running: started).

// targetLocked is how many jobs the node fills itself to: MaxJobs, or its
// share while it balances with other nodes, if that is lower; at most
// fdbjobs.ConcurrencyMax (max_jobs' bound).
func (n *Node) targetLocked() int {
	t := n.cfg.MaxJobs
	if n.share > 0 {
		t = min(n.share, t)
	}
	return min(t, fdbjobs.ConcurrencyMax)
}

// setTargetLocked restores the invariant: it gives the Runtime the node's
// target as its Concurrency, and its TransientJobMaxAge as the
// retention of its finished transient jobs.
func (n *Node) setTargetLocked() {
	if n.rt == nil {
		return
	}
	if r := retainFinished(n.cfg); r != n.retain {
		if err := n.rt.SetRetainFinished(replicator.JobType, r); err != nil {
			n.cfg.Logger.Error().Err(err).Msg("replicator: the retention of finished transient jobs")
		} else {
			n.retain = r
		}
	}
	t := n.targetLocked()
	if t == n.concurrency {
		return
	}
	if err := n.rt.SetConcurrency(replicator.JobType, t); err != nil {
		n.cfg.Logger.Error().Err(err).Msg("replicator: the node's target of running jobs")
		return
	}
	n.concurrency = t
}

// startJobs starts the Runtime of the node's replication jobs, filling
// the node to its target; shutdown stops it. Its sweeper removes the
// finished transient jobs past TransientJobMaxAge about every Interval
// (as it is at start), as the interval step's cleanup did before it.
func (n *Node) startJobs(ctx context.Context, cfg Config) error {
	n.mu.Lock()
	target := n.targetLocked()
	retain := retainFinished(n.cfg)
	n.mu.Unlock()
	rt, err := n.store.NewJobRuntime(fdbjobs.WorkFunc[replicator.JobRun](n.workJob), fdbjobs.WorkerOptions{
		Concurrency: target, Timeout: cfg.JobTimeout, Fetchers: cfg.MaxAcceptors, FetchBatch: acceptBatchMax,
		OldestFirst: true, Manual: true, RetainFinished: retain, OnRemove: n.removed,
	}, fdbjobs.RuntimeOptions{FetchPoll: cfg.acceptWaitMax(), SweepPeriod: cfg.Interval})
	if err != nil {
		return err
	}
	// Its jobs' ctx end when shutdown stops it, past the shutdown
	// timeout, not when the node's ctx does.
	if err := rt.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	n.mu.Lock()
	n.rt, n.concurrency, n.retain = rt, target, retain
	n.setTargetLocked()
	n.mu.Unlock()
	return nil
}

// workJob is the replication worker of the node's Runtime: it runs one
// accepted job, in ctx (which ends when the Runtime stops past the
// shutdown timeout), until the job's run ends.
func (n *Node) workJob(ctx context.Context, wk *fdbjobs.Work[replicator.JobRun]) error {
	n.runWorker(n.started(ctx, wk.Job))
	return nil
}

// started makes job, which the Runtime accepted, a worker of the node. A
// job taken beyond the node's target (it was lowered while the fetch
// waited), or as the node stops, goes back to the queue at once, at its
// place, without running.
func (n *Node) started(ctx context.Context, job *fdbjobs.Job) *worker {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := newWorker(n, job, ctx, n.cfg)
	switch {
	case n.stopping:
		w.requestStop(stopShutdown)
	case len(n.workers) >= n.targetLocked():
		w.requestStop(stopPreempt)
	}
	n.workers[w] = true
	n.m.Inc(replicator.MetricJobsStarts)
	n.m.Set(replicator.MetricJobsRunning, int64(len(n.workers)))
	n.publishSoonLocked()
	return w
}

// runWorker runs one accepted job. A panic in the job's code is contained
// to that job: it is logged with its stack and the job crashes with an
// internal_error reason (retried with backoff, as any crash), while the
// node and its other jobs go on.
func (n *Node) runWorker(w *worker) {
	defer n.workerExit(w)
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		w.cfg.Logger.Error().Str("job_id", w.job.ID).Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
			Msg("replicator: job panicked; it crashes, the node goes on")
		d := w.data
		if d == nil {
			d = &replicator.JobData{State: replicator.StatePending}
		}
		defer func() {
			// The job cannot even be marked crashing: without heartbeats
			// the activity monitor re-enqueues it after the job timeout.
			if p := recover(); p != nil {
				w.cfg.Logger.Error().Str("job_id", w.job.ID).Str("panic", fmt.Sprint(p)).Msg("replicator: marking a panicked job crashing panicked too")
			}
		}()
		w.crash(d, fmt.Errorf("%w: %v", engine.ErrInternal, p))
	}()
	w.run()
}

func (n *Node) workerExit(w *worker) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.workers, w)
	n.addChargeLocked(w, n.cfg.Clock.Now())
	n.m.Set(replicator.MetricJobsRunning, int64(len(n.workers)))
	n.publishSoonLocked()
}

// stopJobs stops the Runtime (its fetchers first: no job starts from
// now), waits until its jobs' workers left or hard closes, then cancels
// their ctx (the runs halt; the activity monitor re-enqueues their jobs
// after the job timeout) and waits for them.
func (n *Node) stopJobs(hard <-chan struct{}) {
	n.mu.Lock()
	rt := n.rt
	n.rt = nil
	n.mu.Unlock()
	if rt == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-hard:
			cancel()
		case <-ctx.Done():
		}
	}()
	_ = rt.Stop(ctx)
	cancel()
}

// runtimeStats are the Runtime's figures of the node's replication jobs
// (zero while the node is stopped).
func (n *Node) runtimeStatsLocked() fdbjobs.KindStats {
	if n.rt == nil {
		return fdbjobs.KindStats{}
	}
	s, _ := n.rt.Stats(replicator.JobType)
	return s
}
