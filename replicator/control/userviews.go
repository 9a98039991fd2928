package control

import (
	"cmp"
	"context"
	"slices"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// The views of users who are not server admins. CouchDB answers them
// 401 (its _scheduler and _active_tasks are for server admins); fdbrep
// shows such a user the jobs they own (JobData.Owner: their documents'
// jobs, whatever the database, and the replications they posted), and
// hides the others. The rows are chosen before the page is cut, so limit,
// skip, offset and total_rows count the user's jobs only.

// UserJobs is SchedulerJobs for user: the unfinished jobs user owns, in
// the same order, with the same start key. There is no index by owner:
// it folds over every job, keeping only user's rows in memory.
func (p *Plane) UserJobs(ctx context.Context, user string, q PageQuery) (JobList, error) {
	q, err := q.check(2)
	if err != nil {
		return JobList{}, err
	}
	type row struct {
		sortID string
		info   JobInfo // JobID until the page is cut
		st     fdbjobs.State
		d      *replicator.JobData
	}
	var rows []row
	err = p.store.FoldJobs(ctx, func(id string, st fdbjobs.State, d *replicator.JobData) error {
		if d.Owner() == user && replicator.Unfinished(st, d) {
			rows = append(rows, row{cmp.Or(d.RepID, id), JobInfo{JobID: id}, st, d})
		}
		return nil
	})
	if err != nil {
		return JobList{}, err
	}
	order := func(a, b row) int {
		return cmp.Or(cmp.Compare(a.sortID, b.sortID), cmp.Compare(a.info.JobID, b.info.JobID))
	}
	slices.SortFunc(rows, order)
	out := JobList{TotalRows: len(rows), Jobs: []JobInfo{}}
	if len(q.StartKey) > 0 {
		first, _ := slices.BinarySearchFunc(rows, row{sortID: q.key(0), info: JobInfo{JobID: q.key(1)}}, order)
		rows = rows[first:]
	}
	out.Offset = min(q.Skip, out.TotalRows)
	seen := p.seer(ctx) // after the fold: it may read the member records
	for _, r := range rows[min(q.Skip, len(rows)):] {
		if len(out.Jobs) == q.Limit {
			break
		}
		out.Jobs = append(out.Jobs, jobInfo(seen(r.st, r.d), r.info.JobID))
	}
	return out, nil
}

// UserJob is SchedulerJob for user: ErrNotFound for a job user does not
// own, as for one that does not exist.
func (p *Plane) UserJob(ctx context.Context, user, id string) (JobInfo, error) {
	return p.job(ctx, id, func(d *replicator.JobData) bool { return d.Owner() == user })
}

// UserActiveTasks is ActiveTasks for user: the running replications user
// owns (read from the index of running jobs, as ActiveTasks).
func (p *Plane) UserActiveTasks(ctx context.Context, user string) ([]ActiveTask, error) {
	return p.activeTasks(ctx, func(d *replicator.JobData) bool { return d.Owner() == user })
}
