package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Replicate serves POST /_replicate for user:
//   - a replication: a continuous one returns api.Running once it runs on some
//     replication node; a one-shot one blocks until it ends, Completed or
//     Failed (a refused address's reason without its detail, but to a
//     server admin). Posting a replication identical to one not finished
//     (pending, running or parked) does not restart it. The job survives the caller going away (and
//     node restarts); ctx only bounds the wait. With a membership
//     (SetMembership), the wait ends with ErrTimeout, naming the cause,
//     once Config.ReplicateNoNodeTimeout passed without a change of the
//     job and no replication node is alive; the job stays pending.
//   - "cancel": true with the replication's specification or its id
//     ("replication_id", "id" or "_local_id"; a replication id or a job
//     id): Cancelled.
//
// A user who is not a server admin is held to the per-user limits
// (replicator's doc.go): ErrBadRequest for a connection_timeout over
// MaxUserConnectionTimeout, ErrForbidden for a replication beyond
// MaxReplicationsPerUser.
//
// Errors: ErrBadRequest or ErrTooLarge for a body that does not parse;
// ErrForbidden for an endpoint or proxy at an address Config.Addresses
// denies (literal, or a name resolving only to such addresses now);
// ErrNotFound for an unknown job to cancel (or one cancelled while the
// caller waited), and alike for another user's job unless user is an
// admin: a user learns nothing of the jobs of others; ErrUnauthorized to
// cancel a job defined by a _replicator document (naming it, to an admin
// or its owner); ErrTimeout (above); kv errors.
func (p *Plane) Replicate(ctx context.Context, body json.RawMessage, user api.User) (api.ReplicateResult, error) {
	req, err := replicator.ParseRequest(body)
	if err != nil {
		return api.ReplicateResult{}, err
	}
	uuid, err := p.setup(ctx)
	if err != nil {
		return api.ReplicateResult{}, err
	}
	if req.Spec != nil {
		// As CouchDB's parse, a cancel by the replication's own fields too.
		if err := p.conf().Protocols.Check(req.Spec, replicator.ErrInvalidReplication); err != nil {
			return api.ReplicateResult{}, err
		}
	}
	if req.Cancel {
		return p.cancel(ctx, req, user, uuid)
	}
	if req.Spec.Paused {
		return api.ReplicateResult{}, replicator.NewReason(replicator.ErrBadRequest,
			"`paused` is a _replicator document's field: pause a POST /_replicate replication with POST /_scheduler/jobs/{id}/_pause")
	}
	spec := req.Spec
	if err := spec.CheckAddresses(ctx, p.cfg.Addresses, true); err != nil {
		return api.ReplicateResult{}, err
	}
	limited := !user.IsAdmin() // the per-user limits apply (replicator's doc.go)
	if limited {
		if err := p.conf().CheckUserSpec(spec); err != nil {
			return api.ReplicateResult{}, err
		}
	}
	jobID := replicator.TransientJobID(uuid, spec, user.Name) // of the credentials as given
	if s := p.cfg.Sealer; s != nil {
		sealed, err := replicator.SealJSON(s, body, replicator.UserScope(user.Name))
		if err != nil {
			return api.ReplicateResult{}, err
		}
		if req, err = replicator.ParseRequest(sealed); err != nil {
			return api.ReplicateResult{}, err
		}
		spec = req.Spec
	}
	at := p.cfg.Clock.Now()
	now := replicator.Millis(at)
	// added survives the retry loop: a body that runs again after its
	// earlier attempt committed finds its own job pending and reports the
	// same outcome (the job added once).
	added := false
	_, err = kv.Transact(ctx, p.store, func(tr kv.Transaction) (any, error) {
		old, st, err := p.store.Job(ctx, tr, jobID)
		if err != nil {
			return nil, err
		}
		switch {
		case old != nil && st != fdbjobs.Finished && replicator.SameRequest(old.Rep, spec):
			return nil, nil // already pending or running (maybe since our earlier attempt)
		case old != nil && added && old.StartTime == now && replicator.SameRequest(old.Rep, spec):
			return nil, nil // our earlier attempt's job, which already finished
		}
		if limited {
			if err := p.store.CheckUserCount(tr, p.conf(), user.Name, replicator.Counted(old, st, user.Name)); err != nil {
				return nil, err
			}
		}
		d := &replicator.JobData{Rep: spec, RepUser: user.Name, UserLimited: limited}
		replicator.Lifecycle{MaxHistory: p.conf().MaxHistory}.Transform(d, replicator.Change{Kind: replicator.Added, At: at})
		if err := p.addJob(ctx, tr, jobID, old, d); err != nil {
			return nil, err
		}
		added = true
		return nil, nil
	})
	if err != nil {
		return api.ReplicateResult{}, err
	}
	if added {
		p.m.Inc(replicator.MetricJobsAdds)
		p.cfg.Logger.Info().Str("job_id", jobID).Str("user", user.Name).Str("source", spec.Source.Redacted()).
			Str("target", spec.Target.Redacted()).Bool("continuous", spec.Continuous).Msg("replication added by POST /_replicate")
		p.warnAdded(spec, req.Ignored, func(e *zerolog.Event) *zerolog.Event {
			return e.Str("job_id", jobID).Str("user", user.Name)
		})
	}
	res, err := p.wait(ctx, jobID, spec.Continuous)
	if !user.IsAdmin() {
		res.Reason = couch.HideAddressDetail(res.Reason) // as the views show it
	}
	return res, err
}

var errCancelled = replicator.NewReason(replicator.ErrNotFound, "the replication was cancelled")

// wait follows the job until it runs (continuous) or finishes (one-shot).
// With a membership, each time Config.ReplicateNoNodeTimeout passes
// without a change of the job it reads the member records, and with no
// replication node alive it gives up (noNodeError; the job stays). It
// does not give up at once when none is alive as the POST arrives: a node
// that starts with the frontend, or restarts (it leaves the membership as
// it stops), joins within that time. A node between heartbeats is alive
// until its record expires.
func (p *Plane) wait(ctx context.Context, jobID string, continuous bool) (api.ReplicateResult, error) {
	sub, st, raw, err := p.store.SubscribeJob(ctx, jobID)
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return api.ReplicateResult{}, errCancelled
	}
	if err != nil {
		return api.ReplicateResult{}, err
	}
	defer sub.Unsubscribe()
	for {
		if raw != nil {
			d, err := replicator.DecodeJobData(raw)
			if err != nil {
				return api.ReplicateResult{}, err
			}
			if o, done := outcomeOf(st, d, jobID, continuous); done {
				return o, nil
			}
		}
		if sub == nil {
			return api.ReplicateResult{}, errors.New("replicator: finished job without a terminal state")
		}
		ev, err := p.waitEvent(ctx, sub)
		if errors.Is(err, errSilent) {
			if err := p.noNodeError(ctx, jobID); err != nil {
				return api.ReplicateResult{}, err
			}
			continue
		}
		if err != nil {
			return api.ReplicateResult{}, err
		}
		if ev.State == fdbjobs.NotFound {
			return api.ReplicateResult{}, errCancelled
		}
		if d, err := replicator.DecodeJobData(ev.Data); err == nil && d.State == replicator.StatePaused {
			return api.ReplicateResult{}, replicator.NewReason(replicator.ErrConflict,
				"the replication was paused: POST /_scheduler/jobs/%s/_resume resumes it", jobID)
		}
		st, raw = ev.State, ev.Data
	}
}

// runGone says why the run of a job whose data is d cannot report its
// end, from the membership ("" when it may, or without one): its node's
// record expired (the node died), or the node restarted after the run
// started (the run ended with its previous process, before the node took
// its jobs back). Both times are the node's own clock.
func (p *Plane) runGone(ctx context.Context, d *replicator.JobData) string {
	if p.members == nil || d.Node == "" {
		return ""
	}
	ms, err := p.members.Records(ctx)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		switch {
		case m.Name != d.Node:
		case !m.Alive(p.cfg.Clock.Now()):
			return fmt.Sprintf("node %s is not alive (its last heartbeat at %s): its run stops when its hold on the job lapses",
				d.Node, replicator.FormatMillis(m.Seen))
		case m.Started > d.LastStart:
			return fmt.Sprintf("node %s restarted at %s, after its run started (%s): that run ended with its previous process",
				d.Node, replicator.FormatMillis(m.Started), replicator.FormatMillis(d.LastStart))
		}
	}
	return ""
}

// AuthErrorTag is the error of POST /_replicate when an endpoint refused
// the replication's login (a wrong password, a locked-out account), as
// CouchDB names it; the reason is the job's, naming the endpoint and the
// peer's answer.
const AuthErrorTag = "replication_auth_error"

// errSilent is waitEvent's report that ReplicateNoNodeTimeout passed
// without an event.
var errSilent = errors.New("control: no change of the job")

// waitEvent is sub's next event; with a membership, errSilent once
// Config.ReplicateNoNodeTimeout passed without one.
func (p *Plane) waitEvent(ctx context.Context, sub *fdbjobs.Subscription) (fdbjobs.Event, error) {
	if p.members == nil {
		return sub.Wait(ctx)
	}
	wctx, cancel := clockwork.WithTimeout(ctx, p.cfg.Clock, p.conf().ReplicateNoNodeTimeout)
	defer cancel()
	ev, err := sub.Wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return ev, errSilent
	}
	return ev, err
}

// outcomeOf decides whether a job state answers the POST.
func outcomeOf(st fdbjobs.State, d *replicator.JobData, jobID string, continuous bool) (api.ReplicateResult, bool) {
	localID := d.RepID
	if localID == "" {
		localID = jobID
	}
	switch {
	case d.State == replicator.StateFailed && st == fdbjobs.Finished:
		var ei replicator.ErrorInfo
		if json.Unmarshal(d.StateInfo, &ei) != nil || ei.Error == "" {
			ei = replicator.ErrorInfo{Error: "error", Reason: d.LastError}
		}
		if strings.Contains(ei.Reason, engine.LoginRefused) {
			// An endpoint refused the login: CouchDB's answer (500), not
			// the 401 or 403 a client takes for its own login failing.
			ei.Error = AuthErrorTag
		}
		return api.ReplicateResult{Outcome: api.Failed, Tag: ei.Error, Reason: ei.Reason}, true
	case d.State == replicator.StateCompleted && st == fdbjobs.Finished:
		return api.ReplicateResult{Outcome: api.Completed, Checkpoint: d.CheckpointHistory}, true
	case continuous && d.State == replicator.StateRunning && st == fdbjobs.Running,
		continuous && d.State == replicator.StateParked && st == fdbjobs.Pending: // caught up, shown running
		return api.ReplicateResult{Outcome: api.Running, LocalID: localID}, true
	case continuous && d.State == replicator.StateCrashing && errorTag(d) == replicator.TagDuplicate:
		// The same replication runs as another user's (Collide): it is
		// running, as CouchDB answers a continuous replication posted
		// again; this job takes over when that one ends.
		return api.ReplicateResult{Outcome: api.Running, LocalID: localID}, true
	}
	return api.ReplicateResult{}, false
}

// errorTag is the error tag of d's state info ("" when none).
func errorTag(d *replicator.JobData) string {
	var ei replicator.ErrorInfo
	_ = json.Unmarshal(d.StateInfo, &ei)
	return ei.Error
}

func (p *Plane) cancel(ctx context.Context, req *replicator.Request, user replicator.UserCtx, uuid string) (api.ReplicateResult, error) {
	jobID := req.ID
	if req.Spec != nil && jobID == "" {
		jobID = replicator.TransientJobID(uuid, req.Spec, user.Name)
	}
	jobID, err := p.resolveID(ctx, jobID)
	if err != nil {
		return api.ReplicateResult{}, err
	}
	// done survives the retry loop: when an attempt removed the job and
	// committed although the commit reported commit_unknown_result, the
	// retry finds the job gone and gives the same answer (cancelled, not
	// missing).
	var done *api.ReplicateResult
	var ran *replicator.JobData // the job's data, if it was running
	o, err := kv.Transact(ctx, p.store, func(tr kv.Transaction) (api.ReplicateResult, error) {
		d, st, err := p.store.Job(ctx, tr, jobID)
		if err != nil {
			return api.ReplicateResult{}, err
		}
		switch {
		case d == nil && done != nil:
			return *done, nil
		case d == nil, d.Owner() != user.Name && !user.IsAdmin():
			// Another user's job answers as one that does not exist:
			// not whose it is, nor the document (in a database the
			// caller may not read) that defines it.
			return api.ReplicateResult{}, replicator.NewReason(replicator.ErrNotFound, "missing")
		case !d.Transient():
			return api.ReplicateResult{}, replicator.NewReason(replicator.ErrUnauthorized,
				"Persistent replication collision: this replication is defined by document `%s` in `%s`; delete the document to stop it",
				d.DocID, d.DBName)
		}
		if err := p.store.RemoveJob(ctx, tr, jobID, d); err != nil {
			return api.ReplicateResult{}, err
		}
		local := d.RepID
		if local == "" {
			local = jobID
		}
		ran = nil
		if st == fdbjobs.Running && d.State == replicator.StateRunning {
			ran = d
		}
		done = &api.ReplicateResult{Outcome: api.Cancelled, LocalID: local}
		return *done, nil
	})
	if err != nil {
		return o, err
	}
	p.m.Inc(replicator.MetricJobsRemoves)
	p.cfg.Logger.Info().Str("job_id", jobID).Str("user", user.Name).Msg("replication cancelled by POST /_replicate")
	if ran != nil {
		o.Stopped, o.Unconfirmed = p.runEnd(ctx, jobID, ran)
	}
	return o, nil
}

// runEnd waits, up to replicator.RunEndWaitDefault, for the final counters
// of the run of the cancelled job jobID (whose data was d): its node
// hears of the removal, lets the writes it sent finish and reports them,
// so that the answer says what the replication wrote, and nothing is
// written after it. Without them (the node dead or cut off, or ctx ended)
// it says why not; where the membership shows that no run can report (the
// node died, or restarted since the run started) it says so at once.
func (p *Plane) runEnd(ctx context.Context, jobID string, d *replicator.JobData) (*api.Stats, string) {
	if why := p.runGone(ctx, d); why != "" {
		return nil, why
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := p.cfg.Clock.AfterFunc(replicator.RunEndWaitDefault, cancel)
	defer t.Stop()
	s, err := p.store.Progress().RunEnd(wctx, jobID, d.Node, d.LastStart)
	switch {
	case s != nil:
		return s, ""
	case err != nil:
		return nil, "the stop of its run could not be confirmed: " + err.Error()
	}
	return nil, fmt.Sprintf("node %s did not confirm the stop of its run within %s: if it is cut off from the store, "+
		"the run stops when its hold on the job lapses", d.Node, replicator.RunEndWaitDefault)
}
