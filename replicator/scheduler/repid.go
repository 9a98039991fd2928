package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// tagDuplicate is the error tag (the "error" of a job's info) of a job
// whose replication another job already runs: CouchDB's name for that
// error (CouchDB 3.x shows a duplicate document's info as the reason
// alone, {"error": reason}).
const tagDuplicate = "duplicate_job"

// initJob marks the job running under repID after checking who holds
// repID (the collision rules of doc.go, "Job lifecycle"). It reports
// whether the job should run.
func (w *worker) initJob(d *replicator.JobData, rep engine.Replication, repID, code string) bool {
	type outcome struct {
		run    bool
		orphan bool // the job's database was deleted: removed
		x      *replicator.JobData
		state  string
	}
	now, jitter := w.now(), rand.Float64()
	// A node name in the data of a job about to start is the node it ran
	// on when it was taken back (re-enqueued by the activity monitor, or
	// by its node's restart); a job that stopped properly has none.
	prevNode := d.Node
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
			live := od != nil && ost != fdbjobs.Finished && (od.State == replicator.StatePending || od.State == replicator.StateRunning)
			if live && !od.Transient() {
				// A job of a deleted database, about to be removed by the
				// nodes, holds nothing.
				if live, err = w.n.store.OwnsDoc(tr, od); err != nil {
					return outcome{}, err
				}
			}
			if live {
				switch {
				case od.Owner() != x.Owner():
					// Another user's replication never makes this one
					// fail (it could be squatting on the id with wrong
					// credentials): wait and retry, without naming it.
					what := "replication"
					if od.Transient() {
						what = "transient replication"
					}
					reason := fmt.Sprintf("Replication `%s` is already running as another user's %s; retrying later", repID, what)
					return outcome{x: x, state: replicator.StateCrashing}, w.crashTx(tr, x, tagDuplicate, reason, now, jitter)
				case od.Transient() && !x.Transient():
					reason := fmt.Sprintf("Replication `%s` is already running as a transient replication (job %s); retrying later", repID, other)
					return outcome{x: x, state: replicator.StateCrashing}, w.crashTx(tr, x, tagDuplicate, reason, now, jitter)
				case od.Transient():
					reason := fmt.Sprintf("Replication `%s` is already running as a transient replication (job %s); retrying later", repID, other)
					return outcome{x: x, state: replicator.StateFailed}, w.failTx(tr, x, tagDuplicate, reason, now)
				}
				var reason string
				if x.Transient() {
					reason = fmt.Sprintf("Replication `%s` already started, triggered by document `%s` from db `%s`", repID, od.DocID, od.DBName)
				} else {
					reason = fmt.Sprintf("Replication `%s` specified by document `%s` already started, triggered by document `%s` from db `%s`",
						repID, x.DocID, od.DocID, od.DBName)
				}
				return outcome{x: x, state: replicator.StateFailed}, w.failTx(tr, x, tagDuplicate, reason, now)
			}
			// The holder is finished, crashing, gone or orphaned: take over.
		}
		w.n.store.ClaimRepID(tr, repID, w.job.ID)
		x.State, x.StateInfo, x.LastStart, x.LastUpdated, x.Node = replicator.StateRunning, nil, replicator.Millis(now), replicator.Millis(now), w.cfg.NodeName
		x.AddHistory(w.cfg.MaxHistory, replicator.HistoryEvent{Type: replicator.EventStarted, Timestamp: replicator.Millis(now)})
		if err := w.n.store.UpdateJob(w.ctx, tr, w.job, x); err != nil {
			return outcome{}, err
		}
		return outcome{run: true, x: x, state: replicator.StateRunning}, nil
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
	w.afterFinish(o.state, d)
	switch {
	case o.run:
		w.logStarted(d, rep, prevNode)
	case o.state == replicator.StateCrashing:
		w.logCrashed(d, tagDuplicate, d.LastError, now, jitter)
	case o.state == replicator.StateFailed:
		w.logFailed(d, tagDuplicate, d.LastError)
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
