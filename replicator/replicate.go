package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Replicate serves POST /_replicate for user: it returns the HTTP status
// and the reply body CouchDB would send, or an error for an internal
// failure (storage, ctx) only.
//
//   - An invalid body: 400 {"error":"bad_request","reason":...}; 413
//     document_too_large for a replication over SpecMaxBytes.
//   - "cancel": true with the replication's specification or its id
//     ("replication_id", "id" or "_local_id"; a replication id or a job
//     id): 200 {"ok":true,"_local_id":id}; 404 for an unknown job; 401 for
//     another user's job (unless user is an admin) or a job defined by a
//     _replicator document.
//   - A continuous replication: 202 {"ok":true,"_local_id":id} once it is
//     running (on some replication node).
//   - A one-shot replication: blocks until it ends; 200 with {"ok":true}
//     merged into the final checkpoint (session_id, source_last_seq,
//     history...), or the failure's error reply.
//
// Posting a replication identical to a pending or running one does not
// restart it. The job survives the caller going away (and node restarts);
// ctx only bounds the wait.
func (f *Frontend) Replicate(ctx context.Context, body json.RawMessage, user UserCtx) (int, json.RawMessage, error) {
	req, err := ParseRequest(body)
	if errors.Is(err, ErrTooLarge) {
		return errReply(http.StatusRequestEntityTooLarge, "document_too_large", Reason(err))
	}
	if err != nil {
		return errReply(http.StatusBadRequest, "bad_request", Reason(err))
	}
	uuid, err := f.setup(ctx)
	if err != nil {
		return 0, nil, err
	}
	if req.Cancel {
		return f.cancel(ctx, req, user, uuid)
	}
	spec := req.Spec
	jobID := transientJobID(uuid, spec, user.Name)
	now := f.cfg.Clock.Now()
	// added survives the retry loop: a body that runs again after its
	// earlier attempt committed finds its own job pending and reports the
	// same outcome (the job added once).
	added := false
	_, err = kv.Transact(ctx, f.db, func(tr kv.Transaction) (any, error) {
		old, st, err := readJob(ctx, f.jobs, tr, jobID)
		if err != nil {
			return nil, err
		}
		switch {
		case old != nil && st != fdbjobs.Finished && sameReplication(old.Rep, spec):
			return nil, nil // already pending or running (maybe since our earlier attempt)
		case old != nil && added && old.StartTime == ms(now) && sameReplication(old.Rep, spec):
			return nil, nil // our earlier attempt's job, which already finished
		}
		d := &jobData{Rep: spec, RepUser: user.Name, State: StatePending, StartTime: ms(now), LastUpdated: ms(now)}
		d.addHistory(f.cfg.MaxHistory, historyEvent{Type: EventAdded, Timestamp: ms(now)})
		if err := f.addJob(ctx, tr, jobID, old, d); err != nil {
			return nil, err
		}
		added = true
		return nil, nil
	})
	if err != nil {
		return 0, nil, err
	}
	if added {
		f.m.inc(MetricJobsAdds)
	}
	return f.wait(ctx, jobID, spec.Continuous)
}

// wait follows the job until it runs (continuous) or finishes (one-shot).
func (f *Frontend) wait(ctx context.Context, jobID string, continuous bool) (int, json.RawMessage, error) {
	sub, st, raw, err := f.jobs.Subscribe(ctx, nil, JobType, jobID)
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return errReply(http.StatusNotFound, "not_found", "the replication was cancelled")
	}
	if err != nil {
		return 0, nil, err
	}
	defer sub.Unsubscribe()
	for {
		if raw != nil {
			d, err := decodeJobData(raw)
			if err != nil {
				return 0, nil, err
			}
			if status, body, done := replicateOutcome(st, d, jobID, continuous); done {
				return status, body, nil
			}
		}
		if sub == nil {
			return 0, nil, errors.New("replicator: finished job without a terminal state")
		}
		ev, err := sub.Wait(ctx)
		if err != nil {
			return 0, nil, err
		}
		if ev.State == fdbjobs.NotFound {
			return errReply(http.StatusNotFound, "not_found", "the replication was cancelled")
		}
		st, raw = ev.State, ev.Data
	}
}

// replicateOutcome decides whether a job state answers the POST.
func replicateOutcome(st fdbjobs.State, d *jobData, jobID string, continuous bool) (int, json.RawMessage, bool) {
	localID := d.RepID
	if localID == "" {
		localID = jobID
	}
	switch {
	case d.State == StateFailed && st == fdbjobs.Finished:
		status, body := failureReply(d)
		return status, body, true
	case d.State == StateCompleted && st == fdbjobs.Finished:
		return http.StatusOK, completedBody(d), true
	case continuous && d.State == StateRunning && st == fdbjobs.Running:
		_, b, _ := reply(http.StatusAccepted, map[string]any{"ok": true, "_local_id": localID})
		return http.StatusAccepted, b, true
	}
	return 0, nil, false
}

func completedBody(d *jobData) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(d.CheckpointHistory) > 0 {
		_ = json.Unmarshal(d.CheckpointHistory, &m)
	}
	m["ok"] = json.RawMessage("true")
	b, _ := json.Marshal(m)
	return b
}

// failureReply renders a failed job's state_info as CouchDB does.
func failureReply(d *jobData) (int, json.RawMessage) {
	var ei errorInfo
	if json.Unmarshal(d.StateInfo, &ei) != nil || ei.Error == "" {
		ei = errorInfo{Error: "error", Reason: d.LastError}
	}
	status := http.StatusInternalServerError
	switch ei.Error {
	case "bad_request", "bad_rep_doc":
		status = http.StatusBadRequest
	case "unauthorized":
		status = http.StatusUnauthorized
	case "forbidden":
		status = http.StatusForbidden
	case "filter_fetch_error":
		status, ei.Error = http.StatusNotFound, "not_found"
	}
	b, _ := json.Marshal(ei)
	return status, b
}

func (f *Frontend) cancel(ctx context.Context, req *Request, user UserCtx, uuid string) (int, json.RawMessage, error) {
	jobID := req.ID
	if req.Spec != nil && jobID == "" {
		jobID = transientJobID(uuid, req.Spec, user.Name)
	}
	jobID, err := f.resolveID(ctx, jobID)
	if errors.Is(err, ErrNotFound) {
		return errReply(http.StatusNotFound, "not_found", "missing")
	}
	if err != nil {
		return 0, nil, err
	}
	type outcome struct {
		status int
		tag    string
		reason string
		local  string
	}
	// done survives the retry loop: when an attempt removed the job and
	// committed although the commit reported commit_unknown_result, the
	// retry finds the job gone and gives the same answer (200, not 404).
	var done *outcome
	o, err := kv.Transact(ctx, f.db, func(tr kv.Transaction) (outcome, error) {
		d, _, err := readJob(ctx, f.jobs, tr, jobID)
		if err != nil {
			return outcome{}, err
		}
		switch {
		case d == nil && done != nil:
			return *done, nil
		case d == nil:
			return outcome{status: http.StatusNotFound, tag: "not_found", reason: "missing"}, nil
		case !d.transient():
			return outcome{status: http.StatusUnauthorized, tag: "unauthorized",
				reason: "Persistent replication collision: this replication is defined by document `" + d.DocID +
					"` in `" + d.DBName + "`; delete the document to stop it"}, nil
		case d.RepUser != user.Name && !user.IsAdmin():
			return outcome{status: http.StatusUnauthorized, tag: "unauthorized",
				reason: "only the user who started the replication or a server admin may cancel it"}, nil
		}
		if err := removeJob(ctx, f.jobs, f.k, tr, jobID, d); err != nil {
			return outcome{}, err
		}
		local := d.RepID
		if local == "" {
			local = jobID
		}
		done = &outcome{status: http.StatusOK, local: local}
		return *done, nil
	})
	if err != nil {
		return 0, nil, err
	}
	if o.status != http.StatusOK {
		return errReply(o.status, o.tag, o.reason)
	}
	f.m.inc(MetricJobsRemoves)
	return reply(http.StatusOK, map[string]any{"ok": true, "_local_id": o.local})
}
