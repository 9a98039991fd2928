package scheduler

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// park parks the job whose run stopped caught up, its final checkpoint
// written: idle for ParkAfter (stopPark; by "") or stopped caught up by
// rotation (by "rotation"): it gives its slot back and waits,
// pending at its sweep time, for a change to its source (see doc.go,
// "Parking"). Right after the park commits, one exact check asks the
// source for changes after the checkpoint (a change that came between the
// run's last read and the park) and wakes the job if there are any.
func (w *worker) park(d *replicator.JobData, rep engine.Replication, by string) {
	group, db, _ := replicator.WatchGroupOf(d.Rep.Source)
	now := w.now()
	cfg := w.n.Config()
	idle := time.Duration(0)
	if d.Sync != nil && d.Sync.CaughtUpSince > 0 {
		idle = now.Sub(time.UnixMilli(d.Sync.CaughtUpSince)).Round(time.Second)
	}
	through := d.Stats.CheckpointedSourceSeq
	p := &replicator.ParkInfo{Since: replicator.Millis(now), Through: through, Group: group, SourceDB: db,
		SweepAt: replicator.Millis(now.Add(cfg.ParkSweep))}
	reason := "parked: caught up, no change to copy for " + idle.String()
	if by != "" {
		reason = "parked: caught up when " + by + " stopped it"
	}
	c := replicator.Change{Kind: replicator.Parked, At: now, Priority: w.n.priorityOf(w, now), Park: p, Reason: reason}
	if !w.change(d, c, nil) {
		return
	}
	e := w.logEvent(w.cfg.Logger.Info(), d).Str("through_seq", through).Str("idle", idle.String())
	if by != "" {
		e = e.Str("stopped_by", by)
	}
	e.Time("sweep_at", time.UnixMilli(p.SweepAt).UTC()).Msg("replication parked")
	ctx, cancel := context.WithTimeout(w.ctx, parkCheckTimeout)
	n, err := w.n.eng.Pending(ctx, rep, through)
	cancel()
	switch {
	case err != nil:
		if w.ctx.Err() == nil {
			w.logEvent(w.cfg.Logger.Warn(), d).Err(err).Msg("replicator: a parked replication's source did not answer the check after its park; its watch looks again")
		}
	case n > 0:
		w.n.wake(w.ctx, w.job.ID, "its source changed as it parked")
	}
}

// wake wakes the parked job jobID for cause (Store.WakeJob at its
// fair-share place) and counts it; a job that is not parked is left alone.
func (n *Node) wake(ctx context.Context, jobID, cause string) bool {
	cfg := n.Config()
	now := cfg.Clock.Now()
	woke, err := n.store.WakeJob(ctx, n.store, jobID, cause, now, func(d *replicator.JobData) int64 {
		return cfg.EnqueueTime(now, d.Priority, cfg.Interval)
	})
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Str("job_id", jobID).Msg("replicator: wake of a parked replication")
		}
		return false
	}
	if woke {
		n.m.Inc(replicator.MetricJobsWakes)
		cfg.Logger.Info().Str("job_id", jobID).Str("cause", cause).Msg("replication woken")
	}
	return woke
}
