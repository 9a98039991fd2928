package control

import (
	"cmp"
	"context"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// PauseJob pauses the replication id (a replication id or a job id) that
// a POST /_replicate started (POST /_scheduler/jobs/{id}/_pause): it is
// kept, paused (replicator.StatePaused), and no node runs it until
// ResumeJob; a running one stops at its next heartbeat with a final
// checkpoint. Pausing a paused one changes nothing. A server admin finds
// every job, another viewer only the jobs they own (ErrNotFound for the
// others, as for a job that does not exist). A document's replication is
// ErrBadRequest (its document's "paused" field pauses it), a finished one
// ErrConflict. One transaction; retried after commit_unknown_result, it
// finds the job paused and changes nothing more.
func (p *Plane) PauseJob(ctx context.Context, viewer api.User, id string) (api.PauseResult, error) {
	return p.setPaused(ctx, viewer, id, true)
}

// ResumeJob resumes the paused replication id (POST
// /_scheduler/jobs/{id}/_resume): it is pending again at its fair-share
// place (or, when its pause stopped a run, not before that run's hold has
// surely lapsed: addJob) and runs from its checkpoint. Resuming one that is not paused
// changes nothing. Errors as PauseJob's; a viewer who is not a server
// admin is held to max_replications_per_user (ErrForbidden).
func (p *Plane) ResumeJob(ctx context.Context, viewer api.User, id string) (api.PauseResult, error) {
	return p.setPaused(ctx, viewer, id, false)
}

func (p *Plane) setPaused(ctx context.Context, viewer api.User, id string, pause bool) (api.PauseResult, error) {
	owner, err := ownerOf(viewer)
	if err != nil {
		return api.PauseResult{}, err
	}
	if _, err := p.setup(ctx); err != nil {
		return api.PauseResult{}, err
	}
	jobID, err := p.resolveID(ctx, id)
	if err != nil {
		return api.PauseResult{}, err
	}
	now := p.cfg.Clock.Now() // outside the transaction: a retry writes the same data
	changed := false
	res, err := kv.Transact(ctx, p.store, func(tr kv.Transaction) (api.PauseResult, error) {
		changed = false
		d, st, err := p.store.Job(ctx, tr, jobID)
		switch {
		case err != nil:
			return api.PauseResult{}, err
		case d == nil || (owner != "" && d.Owner() != owner):
			return api.PauseResult{}, replicator.NewReason(replicator.ErrNotFound, "missing")
		case !d.Transient():
			return api.PauseResult{}, replicator.NewReason(replicator.ErrBadRequest,
				"this replication is defined by document `%s` in `%s`: set \"paused\": true (or false) in it", d.DocID, d.DBName)
		case d.Rep == nil:
			return api.PauseResult{}, replicator.NewReason(replicator.ErrConflict, "the replication has no specification to run")
		}
		out := api.PauseResult{OK: true, ID: cmp.Or(d.RepID, jobID)}
		paused := d.State == replicator.StatePaused
		switch {
		case !paused && st == fdbjobs.Finished:
			return api.PauseResult{}, replicator.NewReason(replicator.ErrConflict, "the replication has ended (%s): there is nothing to pause or resume", d.State)
		case pause && paused, !pause && !paused:
			out.State = d.State
			return out, nil
		case pause:
			x := d.Clone()
			x.State, x.StateInfo, x.LastUpdated = replicator.StatePaused, replicator.PausedInfo(now), replicator.Millis(now)
			if st != fdbjobs.Running {
				x.Node = "" // else it ran there: a resume waits for that run's end (addJob)
			}
			if err := p.store.PauseJob(ctx, tr, jobID, d, x); err != nil {
				return api.PauseResult{}, err
			}
		default:
			if d.UserLimited {
				if err := p.store.CheckUserCount(tr, p.conf(), d.RepUser, replicator.Counted(d, st, d.RepUser)); err != nil {
					return api.PauseResult{}, err
				}
			}
			x := &replicator.JobData{Rep: d.Rep, RepUser: d.RepUser, UserLimited: d.UserLimited}
			replicator.Lifecycle{MaxHistory: p.conf().MaxHistory}.Transform(x, replicator.Change{Kind: replicator.Added, At: now})
			if err := p.addJob(ctx, tr, jobID, d, x); err != nil {
				return api.PauseResult{}, err
			}
		}
		changed = true
		out.State = map[bool]string{true: replicator.StatePaused, false: replicator.StatePending}[pause]
		return out, nil
	})
	if err == nil && changed {
		msg := "replication resumed on request"
		if pause {
			msg = "replication paused on request"
		}
		p.cfg.Logger.Info().Str("job_id", jobID).Str("user", viewer.Name).Msg(msg)
	}
	return res, err
}
