package scheduler

// The acceptor pool: acceptors take jobs from the cluster-wide queue into
// the room under the node's target (MaxJobs, or its share while it
// balances), never beyond it: MaxChurn bounds only the jobs the interval
// step stops (rotation, balance), not the jobs acceptors start. Each
// accepted job runs in a worker until it exits.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// acceptBatchMax is the most jobs one acceptor takes in one transaction.
const acceptBatchMax = 25

// The pool keeps one invariant, in fillLocked, which every event that
// changes its terms calls: the node starting, an acceptor taking jobs or
// ending, a worker leaving, and every interval step (which sets the
// node's share and applies a new MaxJobs):
//
//	running + quota < target  implies  acceptors == MaxAcceptors
//
// where running counts the workers (those stopping too: a slot is free
// once its worker left), quota the jobs the live acceptors may still
// take, and target is targetLocked. So whenever the node runs fewer jobs
// than its target, at least one acceptor is waiting for a runnable job,
// and a job that becomes runnable is taken at once (or, scheduled in the
// future, within acceptWaitMax of its time); and since acceptors take no
// more than the room under the target, the node never runs more than
// MaxJobs (jobs that racing acceptors took beyond it go back to the queue
// without running).

// targetLocked is how many jobs the node fills itself to: MaxJobs, or its
// share while it balances with other nodes, if that is lower.
func (n *Node) targetLocked() int {
	if n.share > 0 {
		return min(n.share, n.cfg.MaxJobs)
	}
	return n.cfg.MaxJobs
}

// fillLocked restores the pool's invariant: it starts acceptors while
// there are fewer than MaxAcceptors and their quotas leave room under the
// target. The room is shared among the acceptors it starts, each taking
// up to acceptBatchMax jobs at once (a node filling up does not accept
// one job at a time).
func (n *Node) fillLocked() {
	for n.acceptors < n.cfg.MaxAcceptors {
		room := n.targetLocked() - len(n.workers) - n.quota
		if room <= 0 {
			return
		}
		q := max(1, min(acceptBatchMax, room/(n.cfg.MaxAcceptors-n.acceptors)))
		if !n.startAcceptorLocked(q) {
			return
		}
	}
}

// startAcceptorLocked starts an acceptor that may take q jobs.
func (n *Node) startAcceptorLocked(q int) bool {
	if n.ctx == nil || n.stopping || n.ctx.Err() != nil {
		return false
	}
	n.acceptors++
	n.quota += q
	n.wg.Add(1)
	go n.acceptor(n.ctx, n.opCtx, q)
	return true
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

// acceptRetryDefault is how long an acceptor first waits after an accept
// that failed with an error FoundationDB would not retry (retryable ones
// back off as its OnError does); the wait doubles with each failure in a
// row, up to acceptRetryMax (kv.Backoff.NextAny at a fixed pace), so that
// a node cut off from its store neither spins nor floods its log.
const (
	acceptRetryDefault = 50 * time.Millisecond
	acceptRetryMax     = 5 * time.Second
)

// acceptLogEvery is how often an acceptor that keeps failing logs it: the
// first failure, then at most once per this.
const acceptLogEvery = time.Minute

// acceptor waits for up to q runnable jobs, then runs the first as its
// worker and starts a goroutine for each other. It takes no more than the
// room left under the node's target, and ends when there is none (the
// target was lowered, or other acceptors filled it).
func (n *Node) acceptor(ctx, opCtx context.Context, q int) {
	defer n.wg.Done()
	var b kv.Backoff                                                                   // FoundationDB's OnError delays between failed accepts
	cut := kv.Backoff{Initial: acceptRetryDefault, Max: acceptRetryMax, Rand: kv.Full} // after other errors
	var failures int                                                                   // in a row
	var logged time.Time
	for {
		n.mu.Lock()
		limit := min(q, n.targetLocked()-len(n.workers))
		n.mu.Unlock()
		var jobs []*fdbjobs.Job
		var err error
		if limit > 0 {
			jobs, err = n.acceptSome(ctx, limit)
		}
		if len(jobs) > 0 {
			ws := n.accepted(jobs, q, opCtx)
			for _, w := range ws[1:] {
				go func() {
					defer n.wg.Done()
					n.runWorker(w)
				}()
			}
			n.runWorker(ws[0])
			return
		}
		if ctx.Err() != nil || limit <= 0 {
			n.mu.Lock()
			n.acceptors--
			n.quota -= q
			n.mu.Unlock()
			return
		}
		cfg := n.Config()
		if err == nil {
			if failures > 0 {
				cfg.Logger.Info().Int("failures", failures).Msg("replicator: accept works again")
			}
			b.Reset()
			cut.Reset()
			failures = 0
			continue
		}
		failures++
		if now := cfg.Clock.Now(); failures == 1 || now.Sub(logged) >= acceptLogEvery {
			cfg.Logger.Warn().Err(err).Int("failures", failures).Msg("replicator: accept")
			logged = now
		}
		delay, ok := b.Next(err)
		if !ok { // not a FoundationDB retryable error
			delay = cut.NextAny(err)
		}
		select {
		case <-ctx.Done():
		case <-cfg.Clock.After(delay):
		}
	}
}

// acceptSome takes up to q runnable jobs among those with the oldest
// scheduled times, or waits for one to be enqueued, up to a random part of
// acceptWaitMax. It returns nil, nil when none came.
func (n *Node) acceptSome(ctx context.Context, q int) ([]*fdbjobs.Job, error) {
	cfg := n.Config()
	now := replicator.Millis(cfg.Clock.Now())
	t, ok, err := n.oldestDue(ctx, now, q)
	if err != nil {
		return nil, err
	}
	n.m.Inc(replicator.MetricJobsAccepts)
	if ok {
		jobs, err := n.store.AcceptBatch(ctx, q, fdbjobs.AcceptOptions{MaxScheduledTime: t})
		if errors.Is(err, fdbjobs.ErrNotFound) {
			return nil, nil
		}
		return jobs, err
	}
	n.TestSignals.Idle.Signal(now)
	wait := time.Millisecond + time.Duration(rand.Int64N(int64(cfg.acceptWaitMax())+1))
	jobs, err := n.store.AcceptBatch(ctx, q, fdbjobs.AcceptOptions{MaxScheduledTime: now, Timeout: wait})
	if errors.Is(err, fdbjobs.ErrNotFound) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	return jobs, err
}

// oldestDue finds the smallest scheduled time T such that at least q jobs
// are runnable at T (fewer when fewer are runnable now), in one snapshot
// read of every shard's head (fdbjobs' DueTime); ok is false when no job
// is runnable now. Concurrent acceptors aiming at the same oldest jobs
// conflict on the ones they both pick; the loser's retry takes what is
// left by T.
func (n *Node) oldestDue(ctx context.Context, now int64, q int) (int64, bool, error) {
	if now < 1 {
		return 0, false, nil
	}
	t, c, err := n.store.DueTime(ctx, now, min(max(1, q), fdbjobs.MaxBatch))
	if err != nil || c == 0 {
		return 0, false, err
	}
	// At least 1 ms, which covers the jobs scheduled at 0: fdbjobs reads a
	// maximum of 0 as now.
	return max(t, 1), true, nil
}

// accepted turns an acceptor with quota q into the workers of jobs (the
// caller runs the first; the others are counted in n.wg). Jobs taken
// beyond the node's target (it was lowered while the acceptor waited) go
// back to the queue at once, at their place, without running.
func (n *Node) accepted(jobs []*fdbjobs.Job, q int, opCtx context.Context) []*worker {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acceptors--
	n.quota -= q
	room := n.targetLocked() - len(n.workers)
	ws := make([]*worker, len(jobs))
	for i, job := range jobs {
		w := newWorker(n, job, opCtx, n.cfg)
		ws[i] = w
		n.workers[w] = true
		n.m.Inc(replicator.MetricJobsStarts)
		if i > 0 {
			n.wg.Add(1)
		}
		switch {
		case n.stopping:
			w.requestStop(stopShutdown)
		case i >= room:
			w.requestStop(stopPreempt)
		}
	}
	n.m.Set(replicator.MetricJobsRunning, int64(len(n.workers)))
	n.fillLocked()
	n.publishSoonLocked()
	return ws
}

func (n *Node) workerExit(w *worker) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.workers, w)
	n.addChargeLocked(w, n.cfg.Clock.Now())
	n.m.Set(replicator.MetricJobsRunning, int64(len(n.workers)))
	n.fillLocked()
	n.publishSoonLocked()
}
