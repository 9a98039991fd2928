package scheduler

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// cleanup runs at every interval step: it removes the jobs of deleted
// _replicator databases, all of them however many (RemoveBatchDefault per
// transaction; a running one has halted when its node heard of the
// deletion (watchRun); each database is removed by one node at a time,
// which holds it for DeletionLeaseDefault and renews that, so a big
// deletion lengthens that node's step), found through the store's index,
// and hands an older store's expiry keys to the job layer
// (MoveExpiryKeys), so a step that finds nothing to do costs two range
// reads. The finished transient jobs past TransientJobMaxAge are the job
// layer's to remove: the sweeper of the node's Runtime (retainFinished).
func (n *Node) cleanup(ctx context.Context, cfg Config) error {
	removed, err := n.store.Retention().RemoveDeletedDBJobs(ctx, cfg.NodeName, cfg.Clock.Now, replicator.DeletionLeaseDefault, replicator.RemoveBatchDefault)
	n.m.Add(replicator.MetricJobsRemoves, int64(removed))
	if err != nil {
		return err
	}
	if removed > 0 {
		cfg.Logger.Info().Int("jobs", removed).
			Msg("replicator: removed the jobs of deleted _replicator databases")
	}
	_, err = n.store.Retention().MoveExpiryKeys(ctx, replicator.RemoveBatchDefault)
	return err
}

// retainFinished is the job layer's RetainFinished of the replication
// jobs: how long a finished transient job is kept after its last update.
func retainFinished(cfg Config) time.Duration {
	if cfg.TransientJobMaxAge >= config.Forever {
		return fdbjobs.RetainForever
	}
	return max(cfg.TransientJobMaxAge, time.Millisecond)
}

// removed is the replication jobs' OnRemove beside the Store's: it counts
// the transient jobs the Runtime's sweeper removed, once their
// transaction committed.
func (n *Node) removed(_ context.Context, tr kv.Transaction, jobs []fdbjobs.RemovedJob) error {
	tr.Locals().OnCommit(func() {
		n.m.Add(replicator.MetricTransientJobsRemoved, int64(len(jobs)))
		n.m.Add(replicator.MetricJobsRemoves, int64(len(jobs)))
	})
	return nil
}

// removeOrphan removes the job of a deleted database, which this worker
// found at its start or a heartbeat: its node would remove it at its next
// interval, but the fetchers take such jobs first (they are the oldest), so
// the worker that got one removes it at once.
func (w *worker) removeOrphan() {
	removed, err := kv.Transact(w.ctx, w.n.store, func(tr kv.Transaction) (bool, error) {
		d, _, err := w.n.store.Job(w.ctx, tr, w.job.ID)
		if err != nil || d == nil || d.Transient() {
			return false, err
		}
		if owns, err := w.n.store.OwnsDoc(tr, d); err != nil || owns {
			return false, err
		}
		return true, w.n.store.RemoveJob(w.ctx, tr, w.job.ID, d)
	})
	switch {
	case err != nil && w.ctx.Err() == nil:
		w.cfg.Logger.Warn().Err(err).Str("job_id", w.job.ID).Msg("replicator: removing a deleted database's job")
	case removed:
		w.n.m.Inc(replicator.MetricJobsRemoves)
	}
}
