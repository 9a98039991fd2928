package control

import (
	"context"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
)

// The views of users who are not server admins. CouchDB answers them
// 401 (its _scheduler and _active_tasks are for server admins); fdbrep
// shows such a user the jobs they own (JobData.Owner: their documents'
// jobs, whatever the database, and the replications they posted), and
// hides the others. The rows come from the view index's keys by owner,
// so limit, skip, offset and total_rows count the user's jobs only, and a
// page costs what it lists, not every job. A user's own job shows a
// refused address's error without its detail (hideAddressDetail).

// ownerOf is the owner whose jobs viewer sees: "" (every job) for a
// server admin, the viewer's name for any other user; the anonymous user
// sees none (ErrUnauthorized, as CouchDB answers).
func ownerOf(viewer api.User) (string, error) {
	switch {
	case viewer.IsAdmin():
		return "", nil
	case viewer.Name == "":
		return "", replicator.NewReason(replicator.ErrUnauthorized, "You are not a server admin.")
	}
	return viewer.Name, nil
}

// userJobs is SchedulerJobs for user: the unfinished jobs user owns, in
// the same order, with the same start key, a page read from the index by
// owner (Views.OwnerJobsPage).
func (p *Plane) userJobs(ctx context.Context, user string, q api.PageQuery) (api.JobList, error) {
	q, err := checkPage(q, 2)
	if err != nil {
		return api.JobList{}, err
	}
	pg, err := p.store.Views().OwnerJobsPage(ctx, user, startKey(q, 0), startKey(q, 1), q.Limit, q.Skip)
	if err != nil {
		return api.JobList{}, err
	}
	out := api.JobList{TotalRows: pg.Total, Offset: pg.Offset, Jobs: make([]api.JobInfo, 0, len(pg.Jobs))}
	seen := p.seer(ctx)
	for _, j := range pg.Jobs {
		if j.Data.Owner() != user {
			continue // read in the index's transaction, so never; but never another user's row
		}
		out.Jobs = append(out.Jobs, hideAddressDetail(jobInfo(seen(j.State, j.Data), j.ID)))
	}
	return out, nil
}

// hideAddressDetail is a job as a viewer who is not a server admin sees
// it: the error of an address the node refused (in its info, its stall's
// detail and its history) is couch.AddressDeniedReason alone. Which
// address a name resolved to, and which rule refused it, are the
// operator's: shown to the document's writer, they would tell what lies
// behind names and ports the writer cannot reach.
func hideAddressDetail(j api.JobInfo) api.JobInfo {
	j.Info = couch.HideAddressDetailJSON(j.Info)
	for i := range j.History { // jobInfo's own slice
		j.History[i].Reason = couch.HideAddressDetail(j.History[i].Reason)
	}
	return j
}

// userActiveTasks is ActiveTasks for user: the running replications user
// owns, read from the index of running jobs by owner
// (Views.OwnerRunningJobs), so it costs the user's running jobs.
func (p *Plane) userActiveTasks(ctx context.Context, user string) ([]api.ActiveTask, error) {
	jobs, err := p.store.Views().OwnerRunningJobs(ctx, user)
	if err != nil {
		return nil, err
	}
	tasks := p.activeTaskList(ctx, jobs, func(d *replicator.JobData) bool { return d.Owner() == user })
	for i, t := range tasks {
		if t.Stall != nil {
			stall := *t.Stall
			stall.Detail = couch.HideAddressDetail(stall.Detail)
			tasks[i].Stall = &stall
		}
	}
	return tasks, nil
}
