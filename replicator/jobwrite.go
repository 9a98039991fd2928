package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Every write of a rep_jobs job goes through the methods of this file,
// which write the job and its view index entries in one transaction (see
// index.go). They take the caller's transaction and follow the kv rules.

// AddJob replaces job jobID (old is its current data, nil when absent) by
// a pending job with data d scheduled at stime (Unix ms), in tr.
func (s *Store) AddJob(ctx context.Context, tr kv.Transaction, jobID string, old, d *JobData, stime int64, jobTimeout time.Duration) error {
	if old != nil {
		// Its index entry goes from the old job's to the new one's below,
		// in one change (a state change, not a removal and a creation).
		if err := s.removeJob(ctx, tr, jobID, old, false); err != nil {
			return err
		}
	}
	if _, err := s.jobs.TypeTimeout(ctx, tr, JobType); errors.Is(err, fdbjobs.ErrNotFound) {
		// The caller's snapshot predates the type's registration.
		if err := s.jobs.SetTypeTimeout(ctx, tr, JobType, jobTimeout); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := s.jobs.Add(ctx, tr, JobType, jobID, d.Encode(), stime); err != nil {
		return err
	}
	// The job was absent (or removed above): Add made it pending with d.
	return s.index(tr, []indexedJob{{id: jobID, st: fdbjobs.Pending, d: d}})
}

// EnqueueJob replaces job jobID (old is its current data, nil when
// absent) by a pending job with data d at its fair-share place, in tr: a
// new job starts as if it had run one interval (CouchDB's job_added), so
// d.Priority and its scheduled time come from c's coefficients at now. A
// job resumed from a pause whose run stopped on a node (old.Node) is
// scheduled no sooner than that run's hold lapses, so that two runs of it
// never overlap.
func (s *Store) EnqueueJob(ctx context.Context, tr kv.Transaction, c *Config, now time.Time, jobID string, old, d *JobData) error {
	table, err := s.Shares().Table(tr)
	if err != nil {
		return err
	}
	d.Priority = c.Increment(d.ShareKey(), table)
	stime := c.EnqueueTime(now, d.Priority, table.Interval)
	if old != nil && old.State == StatePaused && old.Node != "" {
		stime = max(stime, old.LastUpdated+c.JobTimeout.Milliseconds())
	}
	return s.AddJob(ctx, tr, jobID, old, d, stime, c.JobTimeout)
}

// AddFinishedJob creates job jobID, which must not exist, finished with
// data d (its State completed or failed), in tr: the record of a
// replication another server ran, which no node takes (a _replicator
// document that arrived marked completed or failed). The views show it
// as they show a job that ended here.
func (s *Store) AddFinishedJob(ctx context.Context, tr kv.Transaction, jobID string, d *JobData) error {
	if err := s.jobs.AddFinished(ctx, tr, JobType, jobID, d.Encode()); err != nil {
		return err
	}
	return s.index(tr, []indexedJob{{id: jobID, st: fdbjobs.Finished, d: d}})
}

// PauseJob replaces job jobID (old is its current data, nil when absent)
// by a finished job with data d, whose State is StatePaused, in tr: no
// node takes it, and a running one is halted at its next heartbeat. The
// view index moves the job's entry from old to d in one change; the
// replication id it held stays its own.
func (s *Store) PauseJob(ctx context.Context, tr kv.Transaction, jobID string, old, d *JobData) error {
	if old != nil {
		owner := ""
		if old.RepID != "" {
			var err error
			if owner, err = s.RepIDOwner(tr, old.RepID); err != nil {
				return err
			}
		}
		if err := s.removeJob(ctx, tr, jobID, old, false); err != nil {
			return err
		}
		if owner == jobID {
			// Its replication id still names it: _pause, _resume and
			// the views find it by that id.
			s.ClaimRepID(tr, old.RepID, jobID)
		}
	}
	if err := s.jobs.AddFinished(ctx, tr, JobType, jobID, d.Encode()); err != nil {
		return err
	}
	return s.index(tr, []indexedJob{{id: jobID, st: fdbjobs.Finished, d: d}})
}

// RemoveJob removes a job with its replication id mapping (if it still
// points to the job) and its index entries, in tr; d is its data (nil
// when unknown). A missing job is no error.
func (s *Store) RemoveJob(ctx context.Context, tr kv.Transaction, jobID string, d *JobData) error {
	return s.removeJob(ctx, tr, jobID, d, true)
}

// removeJob is RemoveJob; without unindex, it leaves the job's index
// entry and its database's key of the document to its caller, which
// indexes the job that replaces it (the same document's).
func (s *Store) removeJob(ctx context.Context, tr kv.Transaction, jobID string, d *JobData, unindex bool) error {
	if err := s.jobs.Remove(ctx, tr, JobType, jobID); err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
		return err
	}
	if d != nil && d.RepID != "" {
		if err := s.ClearRepID(tr, d.RepID, jobID); err != nil {
			return err
		}
	}
	if d != nil && d.DBUUID != "" && unindex {
		tr.Clear(s.k.dbJobKey(d.DBUUID, d.DocID)) // also for a job the index never saw
	}
	s.progress.clear(tr, jobID)
	s.failed.clear(tr, jobID)
	if !unindex {
		return nil
	}
	return s.index(tr, []indexedJob{{id: jobID, st: fdbjobs.NotFound}})
}

// removeJobs removes those of the jobs ids that exist (RemoveJob for
// each, their rows and replication id owners read in chunks) and returns
// them, in tr, with how many of ids it examined: a prefix, when the
// transaction's read budget ran out (readRows). keep, when not nil, spares
// the jobs it returns true for.
func (s *Store) removeJobs(ctx context.Context, tr kv.Transaction, ids []string, keep func(fdbjobs.State, *JobData) bool) (removed []string, examined int, err error) {
	rows, err := s.readRows(ctx, tr, ids)
	if err != nil {
		return nil, 0, err
	}
	var datas []*JobData
	for _, r := range rows {
		if r.State == fdbjobs.NotFound {
			continue
		}
		d, _ := DecodeJobData(r.Data) // undecodable data: removed all the same
		if keep != nil && keep(r.State, d) {
			continue
		}
		removed, datas = append(removed, r.ID), append(datas, d)
	}
	for _, id := range removed {
		if err := s.jobs.Remove(ctx, tr, JobType, id); err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
			return nil, 0, err
		}
	}
	return removed, len(rows), s.clearJobKeys(tr, removed, datas)
}

// clearJobKeys clears, in tr, what the store keeps beside the rows of jobs
// ids being removed, whose data are datas (nil when they do not decode):
// their replication ids' owners (when still theirs), document keys,
// progress, failures and index entries.
func (s *Store) clearJobKeys(tr kv.Transaction, ids []string, datas []*JobData) error {
	owners := make([]kv.FutureByteSlice, len(ids))
	for i, d := range datas {
		if d != nil && d.RepID != "" {
			owners[i] = tr.Get(s.k.repIDKey(d.RepID))
		}
	}
	gone := make([]indexedJob, len(ids))
	for i, id := range ids {
		if d := datas[i]; d != nil && owners[i] != nil {
			v, err := owners[i].Get()
			if err != nil {
				return err
			}
			if string(v) == id {
				tr.Clear(s.k.repIDKey(d.RepID))
			}
		}
		s.progress.clear(tr, id)
		s.failed.clear(tr, id)
		if d := datas[i]; d != nil && d.DBUUID != "" {
			tr.Clear(s.k.dbJobKey(d.DBUUID, d.DocID))
		}
		gone[i] = indexedJob{id: id, st: fdbjobs.NotFound}
	}
	return s.index(tr, gone)
}

// finishedAt is the replication jobs' fdbjobs.WorkerOptions.FinishedAt:
// a finished transient job's mark (RetainTx) is at its last update, as
// its index entry's (entryOf); another job has none.
func finishedAt(data json.RawMessage) (time.Time, bool) {
	d, err := DecodeJobData(data)
	if err != nil || !d.Transient() || d.State == StatePaused {
		return time.Time{}, false // a paused one stays until resumed or cancelled
	}
	return time.UnixMilli(max(d.LastUpdated, 1)), true
}

// onRemove is the replication jobs' fdbjobs.WorkerOptions.OnRemove: the
// job layer's sweeper removes the finished transient jobs past
// transient_job_max_age (their index marks them with RetainTx), and the
// store clears what it keeps beside them in the same transaction.
func (s *Store) onRemove(_ context.Context, tr kv.Transaction, jobs []fdbjobs.RemovedJob) error {
	ids := make([]string, len(jobs))
	datas := make([]*JobData, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
		datas[i], _ = DecodeJobData(j.Data) // undecodable data: removed all the same
	}
	return s.clearJobKeys(tr, ids, datas)
}

// UpdateJob stores d as the data of the running job job holds, with
// fdbjobs' Update (the heartbeat and the fence: ErrHalt when the worker
// lost the job), and its index entries, in tr. A document's job whose
// database was deleted is halted instead (ErrHalt wrapping ErrDBDeleted,
// nothing written): a deleted database's running jobs stop at their next
// heartbeat, before the nodes remove them, and no longer write rows the
// removal reads.
func (s *Store) UpdateJob(ctx context.Context, tr kv.Transaction, job *fdbjobs.Job, d *JobData) error {
	if !d.Transient() {
		owns, err := s.OwnsDoc(tr, d)
		if err != nil {
			return err
		}
		if !owns {
			return fmt.Errorf("job %q: %w: %w", job.ID, fdbjobs.ErrHalt, ErrDBDeleted)
		}
	}
	if err := s.jobs.Update(ctx, tr, job, d.Encode()); err != nil {
		return err
	}
	// Update wrote d (or recognised its own earlier commit of it: only the
	// lock holder writes a running job's data).
	return s.index(tr, []indexedJob{{id: job.ID, st: fdbjobs.Running, d: d}})
}

// WatchRun reads, in tr, whether the worker of the running job job (whose
// data is d) may still run it: it holds the job (fdbjobs WatchHold) and,
// for a document's job, the job's database is still the one it belongs
// to (OwnsDoc). If so it sets watches that fire, once tr has committed,
// when either changes: the job's row (removed, replaced, re-enqueued,
// taken over, or written by the worker itself) or the database's
// registration (deleted, re-created). A worker waits on them to stop
// within the watches' latency when its replication is deleted or
// cancelled, rather than at its next heartbeat (UpdateJob would halt it
// then, ErrHalt).
func (s *Store) WatchRun(tr kv.Transaction, job *fdbjobs.Job, d *JobData) (watches []kv.FutureNil, ok bool, err error) {
	w, held, err := s.jobs.WatchHold(tr, job)
	if err != nil || !held {
		return nil, false, err
	}
	watches = append(watches, w)
	if !d.Transient() {
		owns, err := s.OwnsDoc(tr, d)
		if err != nil || !owns {
			w.Cancel()
			return nil, false, err
		}
		watches = append(watches, tr.Watch(s.k.dbKey(d.DBName)))
	}
	return watches, true, nil
}

// FinishJob ends the worker's hold on job with data d (fdbjobs Finish:
// finished, or pending again if it was resubmitted while running) and
// indexes the job as it then stands, in tr.
func (s *Store) FinishJob(ctx context.Context, tr kv.Transaction, job *fdbjobs.Job, d *JobData) error {
	if err := s.jobs.Finish(ctx, tr, job, d.Encode()); err != nil {
		return err
	}
	return s.reindex(ctx, tr, job.ID)
}

// ResubmitJob stops the running job job holds and makes it pending at
// stime (Unix ms) with data d, in tr (fdbjobs.Client.FinishAt: a retry
// of one that committed leaves the job as it is by then). A job no longer
// held is ErrHalt.
func (s *Store) ResubmitJob(ctx context.Context, tr kv.Transaction, job *fdbjobs.Job, d *JobData, stime int64) error {
	if err := s.jobs.FinishAt(ctx, tr, job, stime, d.Encode()); err != nil {
		return err
	}
	return s.reindex(ctx, tr, job.ID)
}

// setData replaces the data of job jobID, which is not running, by data,
// in tr (fdbjobs.Client.SetData: its state and scheduled time stay): a
// change of its credentials alone (Reseal), which no index entry shows.
func (s *Store) setData(ctx context.Context, tr kv.Transaction, jobID string, data []byte) error {
	return s.jobs.SetData(ctx, tr, JobType, jobID, data)
}

// reenqueued is the Store's fdbjobs re-enqueue hook: a job the activity
// monitor or Reenqueue takes back from a node is pending again, so its
// data says so (state pending; node kept, as the node it last ran on, for
// the "taken_over_from" log line of its next start), and its index
// entries follow.
func (s *Store) reenqueued(tr kv.Transaction, jobs []fdbjobs.ReenqueuedJob) error {
	idx := make([]indexedJob, 0, len(jobs))
	for i := range jobs {
		d, err := DecodeJobData(jobs[i].Data)
		if err != nil {
			continue // not ours to judge: re-enqueued as it is
		}
		if d.State == StateRunning {
			Lifecycle{}.Transform(d, Change{Kind: TakenBack})
			jobs[i].Data = d.Encode()
		}
		idx = append(idx, indexedJob{id: jobs[i].ID, st: fdbjobs.Pending, d: d})
	}
	return s.index(tr, idx)
}

// OwnsDoc reports whether d's document still belongs to d's job, in tr:
// the job's database instance is the one registered under its name. A job
// of a deleted database (removed by the nodes shortly) must not write its
// state into a document of a database re-created under the same name.
// Transient jobs own no document.
func (s *Store) OwnsDoc(tr kv.ReadTransaction, d *JobData) (bool, error) {
	if d.Transient() {
		return false, nil
	}
	u, err := s.RegisteredDB(tr, d.DBName)
	return u == d.DBUUID, err
}
