package scheduler

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// cleanup removes finished transient jobs older than TransientJobMaxAge
// and jobs of deleted _replicator databases. It folds every job, so it
// runs at most every max(Interval, TransientJobMaxAge/10).
func (n *Node) cleanup(ctx context.Context, cfg Config, now time.Time) error {
	every := max(cfg.Interval, min(cfg.TransientJobMaxAge/10, 10*time.Minute))
	n.mu.Lock()
	due := n.lastCleanup.IsZero() || now.Sub(n.lastCleanup) >= every
	if due {
		n.lastCleanup = now
	}
	n.mu.Unlock()
	if !due {
		return nil
	}
	dbs := map[string]string{}
	var expired, orphans []string
	err := n.store.FoldJobs(ctx, func(id string, st fdbjobs.State, d *replicator.JobData) error {
		if d.Transient() {
			if st == fdbjobs.Finished && replicator.Millis(now)-d.LastUpdated >= cfg.TransientJobMaxAge.Milliseconds() {
				expired = append(expired, id)
			}
			return nil
		}
		u, ok := dbs[d.DBName]
		if !ok {
			var err error
			u, err = n.store.ReadRegisteredDB(ctx, d.DBName)
			if err != nil {
				return err
			}
			dbs[d.DBName] = u
		}
		if u != d.DBUUID {
			orphans = append(orphans, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range expired {
		// removing survives the retry loop: a retry that finds the job
		// gone after an attempt that removed it (and committed despite
		// commit_unknown_result) reports the same outcome.
		removing := false
		removed, err := kv.Transact(ctx, n.store.DB, func(tr kv.Transaction) (bool, error) {
			d, st, err := n.store.Job(ctx, tr, id)
			if err != nil {
				return false, err
			}
			if d == nil {
				return removing, nil
			}
			if st != fdbjobs.Finished || !d.Transient() || replicator.Millis(now)-d.LastUpdated < cfg.TransientJobMaxAge.Milliseconds() {
				removing = false
				return false, nil
			}
			removing = true
			return true, n.store.RemoveJob(ctx, tr, id, d)
		})
		if err != nil {
			return err
		}
		if removed {
			n.m.Inc(replicator.MetricTransientJobsRemoved)
			n.m.Inc(replicator.MetricJobsRemoves)
		}
	}
	for _, id := range orphans {
		_, err := kv.Transact(ctx, n.store.DB, func(tr kv.Transaction) (any, error) {
			d, _, err := n.store.Job(ctx, tr, id)
			if err != nil || d == nil || d.Transient() {
				return nil, err
			}
			u, err := n.store.RegisteredDB(tr, d.DBName)
			if err != nil || u == d.DBUUID {
				return nil, err
			}
			return nil, n.store.RemoveJob(ctx, tr, id, d)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
