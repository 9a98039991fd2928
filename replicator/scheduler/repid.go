package scheduler

import (
	"errors"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// initJob marks the job running under repID after checking the per-user
// limit (a job whose owner runs the limit is held back), who holds repID
// (the collision rules of doc.go, "Job lifecycle") and its hosts' budgets
// (a job of a host that runs max_jobs_per_host is held back). It reports
// whether the job should run.
func (w *worker) initJob(d *replicator.JobData, rep engine.Replication, repID, code string) bool {
	type outcome struct {
		run    bool
		orphan bool // the job's database was deleted: removed
		x      *replicator.JobData
		c      replicator.Change
	}
	now := w.now()
	l := w.lifecycle()
	// A collision's change, chosen outside the transaction (its jitter).
	dup := w.crashed(now, replicator.TagDuplicate, "")
	// A node name in the data of a job about to start is the node it ran
	// on when it was taken back (re-enqueued by the activity monitor, or
	// by its node's restart); a job that stopped properly has none.
	prevNode := d.Node
	var res *replicator.Resealer // one for the transaction's attempts: they write the same values
	if d.Rep.Moves(w.cfg.Opener) {
		res = replicator.NewResealer(w.cfg.Opener)
	}
	// The per-user limit: a job whose owner runs the limit is held back
	// (checked again here, exactly: heldAtStart's read was outside).
	owner, lim := limitedOwner(d), w.cfg.userLimit()
	// The hosts' budgets: a job of a host that runs as many as its budget
	// allows is held back too, after the collision checks (a duplicate
	// takes no place).
	budget := w.cfg.budgets()
	var places []fdbjobs.Place
	if budget.On() {
		places = budget.Places(d.Rep)
	}
	prio := w.n.priorityOf(w, now)
	renewed := w.job.Renewing()
	o, err := transactJob(w, func(tr kv.Transaction) (outcome, error) {
		x := d.Clone()
		if !x.Transient() {
			// A deleted database's job, accepted before the nodes removed
			// it (they are the oldest in the queue): removed at once.
			owns, err := w.n.store.OwnsDoc(tr, x)
			if err != nil {
				return outcome{}, err
			}
			if !owns {
				return outcome{orphan: true, x: x}, w.n.store.RemoveJob(w.ctx, tr, w.job.ID, x)
			}
		}
		if owner != "" {
			c, held, err := w.heldChange(tr, owner, lim, now, prio)
			if err != nil {
				return outcome{}, err
			}
			if held {
				return outcome{x: x, c: c}, l.Apply(w.ctx, tr, w.job, x, c)
			}
		}
		if x.RepID != "" && x.RepID != repID {
			if err := w.n.store.ClearRepID(tr, x.RepID, w.job.ID); err != nil {
				return outcome{}, err
			}
			x.Stats = engine.Stats{}
			x.History = nil
		}
		x.RepID, x.FilterCode = repID, code
		other, err := w.n.store.RepIDOwner(tr, repID)
		if err != nil {
			return outcome{}, err
		}
		if other != "" && other != w.job.ID {
			od, ost, err := w.n.store.Job(w.ctx, tr, other)
			if err != nil {
				return outcome{}, err
			}
			live := od != nil && ost != fdbjobs.Finished && (od.State == replicator.StatePending || od.State == replicator.StateRunning || od.State == replicator.StateParked)
			if live && !od.Transient() {
				// A job of a deleted database, about to be removed by the
				// nodes, holds nothing.
				if live, err = w.n.store.OwnsDoc(tr, od); err != nil {
					return outcome{}, err
				}
			}
			if live {
				c := dup
				c.Kind, c.Reason = replicator.Collide(x, od, other, repID)
				return outcome{x: x, c: c}, l.Apply(w.ctx, tr, w.job, x, c)
			}
			// The holder is finished, crashing, gone or orphaned: take over.
		}
		if len(places) > 0 {
			full, err := w.n.store.ClaimHosts(tr, w.job.ID, places)
			if err != nil {
				return outcome{}, err
			}
			if full != "" {
				c := replicator.Change{Kind: replicator.HeldBack, At: now, Priority: prio, Reason: full,
					STime: replicator.Millis(now.Add(HeldByHostRecheck * w.cfg.Interval))}
				return outcome{x: x, c: c}, l.Apply(w.ctx, tr, w.job, x, c)
			}
		}
		w.n.store.ClaimRepID(tr, repID, w.job.ID)
		if err := w.reseal(tr, x, res); err != nil {
			return outcome{}, err
		}
		c := replicator.Change{Kind: replicator.Started, At: now, Node: w.cfg.NodeName, Hosts: replicator.Partitions(places)}
		if err := l.Apply(w.ctx, tr, w.job, x, c); err != nil {
			return outcome{}, err
		}
		return outcome{run: true, x: x, c: c}, nil
	})
	renewed(err == nil && o.run)
	if err != nil {
		if errors.Is(err, fdbjobs.ErrHalt) && w.ctx.Err() == nil {
			// An attempt whose commit was unknown may have marked the job
			// running, and the views shown it so, before the job was
			// taken (its document deleted, say) and the retry halted: the
			// start is said to have stopped, and why.
			w.logHalted(true)
			return false
		}
		if errors.Is(err, errHoldLapsed) && w.ctx.Err() == nil {
			w.logStartLost(d, err)
			return false
		}
		w.txError(err)
		return false
	}
	if o.orphan {
		w.n.m.Inc(replicator.MetricJobsRemoves)
		w.logEvent(w.cfg.Logger.Info(), d).Str("why", "its _replicator database was deleted").Msg("replication stopped")
		w.n.Reschedule() // its cleanup removes the database's other jobs now
		return false
	}
	*d = *o.x
	w.count(d, o.c)
	switch o.c.Kind {
	case replicator.Started:
		w.logStarted(d, rep, prevNode)
	case replicator.Crashed:
		w.logCrashed(d, replicator.TagDuplicate, d.LastError, o.c.At, o.c.Jitter)
	case replicator.Failed:
		w.logFailed(d, replicator.TagDuplicate, d.LastError)
	case replicator.HeldBack:
		if o.c.Reason != "" {
			w.logEvent(w.cfg.Logger.Debug(), d).Str("host", o.c.Reason).Int("budget", budget.LimitOf(o.c.Reason)).
				Time("retry_at", time.UnixMilli(o.c.STime).UTC()).
				Msg("replication held back: a host of its runs as many replications as its budget allows")
		} else {
			w.logHeld(d, owner, lim, o.c)
		}
	}
	return o.run
}

// logStarted logs a job's start with what it runs with, and whose job it
// took over (prevNode: the node it was taken back from, or "").
func (w *worker) logStarted(d *replicator.JobData, rep engine.Replication, prevNode string) {
	rep = rep.WithDefaults()
	e := w.logEvent(w.cfg.Logger.Info(), d).
		Str("source", d.Rep.Source.Redacted()).Str("target", d.Rep.Target.Redacted()).
		Bool("continuous", d.Continuous()).Int("worker_processes", rep.WorkerProcesses).
		Int("worker_batch_size", rep.WorkerBatchSize).Int("http_connections", rep.HTTPConnections)
	switch {
	case prevNode != "" && prevNode != w.cfg.NodeName:
		e = e.Str("taken_over_from", prevNode)
	case prevNode == w.cfg.NodeName:
		e = e.Bool("resumed_after_restart", true)
	}
	e.Msg("replication started")
}

// reseal moves the credentials of the job about to start (x, changed in
// place) and of its document to the node's current key with r (nil:
// nothing moves), in the start's transaction, which the job's lock
// fences. A running job's data is its holder's to write: the reseal pass
// leaves such a job and its document to it (replicator.Reseal.Doc).
func (w *worker) reseal(tr kv.Transaction, x *replicator.JobData, r *replicator.Resealer) error {
	if r == nil {
		return nil
	}
	rep, moved, err := r.Spec(x.Rep, x.SealScope())
	if err != nil || !moved {
		return err
	}
	x.Rep = rep
	if x.Transient() || w.cfg.DocUpdater == nil || x.TemplateDB != "" {
		return nil // a template's replication: its template's document is the reseal pass's
	}
	_, err = r.Doc(tr, w.cfg.DocUpdater, x.DBName, x.DocID)
	return err
}
