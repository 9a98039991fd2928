package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// findPageSize is how many jobs one GET /_scheduler/jobs asks for while
// the client looks for its one-shot replication's job.
const findPageSize = 500

// jobInfo decodes the "info" of a _scheduler entry: the stats of a
// pending, running or completed job, the error of a crashing or failed
// one.
type jobInfo struct {
	engine.Stats
	Error  string `json:"error"`
	Reason string `json:"reason"`
	// fdbrep's additions (api.SyncInfo, failed_docs).
	CaughtUp   *bool               `json:"caught_up"`
	ETASec     *int64              `json:"eta_sec"`
	Stall      *api.StallInfo      `json:"stall"`
	FailedDocs []api.FailedDocInfo `json:"failed_docs"`
	Parked     *api.ParkInfo       `json:"parked"`
}

func decodeInfo(raw json.RawMessage) jobInfo {
	var i jobInfo
	_ = json.Unmarshal(raw, &i) // null or another shape: no stats
	return i
}

// follower follows one replication's job on the cluster.
type follower struct {
	cl       *client
	src, tgt string // redacted endpoints, as _scheduler shows them
	user     string
	id       string // job id or replication id, once known
	last     sample
	repID    string
	lastErr  jobInfo // the last crash, for a failed job
	notFound bool    // the last poll found no job with id (not added yet, or removed)
}

// poll samples the job; ok is false while it has not been found (or the
// cluster did not answer).
func (f *follower) poll(ctx context.Context) (sample, bool) {
	var ji api.JobInfo
	f.notFound = false
	if f.id == "" {
		found, err := f.find(ctx)
		if err != nil || found == nil {
			return sample{}, false
		}
		ji = *found
		f.id = ji.JobID
	} else {
		err := f.cl.get(ctx, "/_scheduler/jobs/"+url.PathEscape(f.id), nil, &ji)
		f.notFound = notFound(err)
		if err != nil {
			return sample{}, false
		}
	}
	if ji.ID != nil {
		f.repID = *ji.ID
	}
	s := sample{state: ji.State, stats: f.last.stats}
	info := decodeInfo(ji.Info)
	if info.Error != "" {
		f.lastErr = info
	} else if ji.Info != nil && string(ji.Info) != "null" {
		s.stats = info.Stats
	}
	if info.Stall != nil {
		s.stall = info.Stall.Reason + ": " + info.Stall.Detail
	}
	f.last = s
	return s, true
}

// find looks for the transient job of this replication among the
// cluster's jobs, for a cluster that does not report its server UUID (from
// which the job id is computed): no document, the same user and the same
// endpoints. Replications of the same endpoints that differ in other
// options cannot be told apart by the view: the newest one is taken.
func (f *follower) find(ctx context.Context) (*api.JobInfo, error) {
	var best *api.JobInfo
	err := eachJob(ctx, f.cl, func(j *api.JobInfo) {
		if j.DocID != nil || j.Source == nil || j.Target == nil || *j.Source != f.src || *j.Target != f.tgt {
			return
		}
		if (j.User == nil && f.user != "") || (j.User != nil && *j.User != f.user) {
			return
		}
		if best == nil || j.StartTime > best.StartTime {
			best = j
		}
	})
	return best, err
}

// eachJob calls f with each of the cluster's jobs, findPageSize a GET
// /_scheduler/jobs.
func eachJob(ctx context.Context, cl *client, f func(*api.JobInfo)) error {
	for skip := 0; ; skip += findPageSize {
		var list api.JobList
		q := url.Values{"limit": {strconv.Itoa(findPageSize)}, "skip": {strconv.Itoa(skip)}}
		if err := cl.get(ctx, "/_scheduler/jobs", q, &list); err != nil {
			return err
		}
		for i := range list.Jobs {
			f(&list.Jobs[i])
		}
		if len(list.Jobs) < findPageSize || skip+len(list.Jobs) >= list.TotalRows {
			return nil
		}
	}
}

// prefixCandidatesMax is how many jobs the error of an ambiguous id
// prefix lists.
const prefixCandidatesMax = 10

// jobByPrefix resolves prefix, which no job has as its id, to the one job
// whose replication id or job id begins with it (its replication id when
// that is what matched); "" when none does. A prefix that several jobs'
// ids begin with is an ExitFailure listing them (prefixCandidatesMax).
func jobByPrefix(ctx context.Context, cl *client, prefix string) (string, error) {
	var ids, names []string
	err := eachJob(ctx, cl, func(j *api.JobInfo) {
		id := j.JobID
		switch {
		case j.ID != nil && strings.HasPrefix(*j.ID, prefix):
			id = *j.ID
		case !strings.HasPrefix(j.JobID, prefix):
			return
		}
		ids = append(ids, id)
		name := id
		if j.DocID != nil {
			name += "  (" + orDash(j.Database) + "/" + *j.DocID + ")"
		}
		names = append(names, name)
	})
	switch {
	case err != nil:
		return "", cl.explain(err)
	case len(ids) == 1:
		return ids[0], nil
	case len(ids) == 0:
		return "", nil
	}
	list := names[:min(len(names), prefixCandidatesMax)]
	more := ""
	if len(names) > len(list) {
		more = fmt.Sprintf("\n  … and %d more", len(names)-len(list))
	}
	return "", &ExitError{Code: ExitFailure, Err: fmt.Errorf("job id %q is ambiguous: the ids of %s begin with it:\n  %s%s",
		prefix, plural(len(ids), "job", "jobs"), strings.Join(list, "\n  "), more)}
}

// runCluster runs the replication through the cluster's POST /_replicate
// and follows it until it ends, or until Ctrl-C cancels it.
func (c *replicateCmd) runCluster(ctx context.Context) error {
	cl, err := newClient(c.cluster, c.creds)
	if err != nil {
		return usageError("%v", err)
	}
	user, err := cl.session(ctx)
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: errors.New(c.r.String(cl.explain(err).Error()))}
	}
	if c.cancel {
		if err := c.fullCancelID(ctx, cl); err != nil {
			return err
		}
		return c.cancelOnCluster(cl, "", false, engine.Stats{})
	}
	c.r.Printf(c.env.Stdout, "Replicating %s on the cluster at %s\n", c.what(), cl)

	type reply struct {
		body json.RawMessage
		err  error
	}
	postCtx, stopPost := context.WithCancel(context.Background())
	defer stopPost()
	replies := make(chan reply, 1)
	go func() {
		var raw json.RawMessage
		_, err := cl.do(postCtx, http.MethodPost, "/_replicate", nil, c.body, &raw, 0)
		replies <- reply{raw, err}
	}()

	f := &follower{cl: cl, src: c.spec.Source.Redacted(), tgt: c.spec.Target.Redacted(), user: user}
	if uuid := cl.serverUUID(ctx); uuid != "" {
		// The job's id, as the cluster computes it from the same body.
		f.id = replicator.TransientJobID(uuid, c.spec, user)
	}
	d := newDisplay(c.progress, c.env.Stdout, c.r)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	poll := func() {
		if s, ok := f.poll(ctx); ok {
			d.update(s)
		}
	}
	poll()
	for {
		select {
		case rp := <-replies:
			var ae *apiError
			if errors.As(rp.err, &ae) && ae.Tag == timeoutTag {
				return c.notAnswered(ctx, f, d, ae)
			}
			if rp.err != nil {
				d.done(false)
				return c.fail(rp.err)
			}
			if c.spec.Continuous {
				return c.followContinuous(ctx, f, d, rp.body)
			}
			return c.completed(ctx, f, d, rp.body)
		case <-tick.C:
			poll()
		case <-ctx.Done():
			d.done(false)
			stopPost()
			return c.cancelOnCluster(cl, "", true, f.last.stats)
		}
	}
}

// timeoutTag is the error of a POST /_replicate the cluster stopped
// waiting on (500): no replication node is alive, and the job stays.
const timeoutTag = "timeout"

// notAnswered ends a replication whose POST /_replicate the cluster
// stopped waiting on: the job's last state, with its stall (why no node
// runs it), then the cluster's reason; the replication did not fail, its
// job stays on the cluster (ExitFailure).
func (c *replicateCmd) notAnswered(ctx context.Context, f *follower, d display, ae *apiError) error {
	if s, ok := f.poll(ctx); ok {
		d.update(s)
	}
	d.done(false)
	msg := "no outcome: " + ae.Error()
	if f.id != "" {
		msg += "; fdbrep replicate -cancel " + f.id + " cancels it"
	}
	return &ExitError{Code: ExitFailure, Err: errors.New(c.r.String(msg))}
}

// completed shows the end of a one-shot replication: the cluster's final
// counters of the job (its _scheduler/jobs entry), or, for a job that ended
// before the client saw it, those of the reply's last history entry.
func (c *replicateCmd) completed(ctx context.Context, f *follower, d display, body json.RawMessage) error {
	var reply struct {
		NoChanges bool                  `json:"no_changes"`
		SessionID string                `json:"session_id"`
		History   []engine.HistoryEntry `json:"history"`
	}
	_ = json.Unmarshal(body, &reply)
	o := outcome{verb: "completed"}
	var h *engine.HistoryEntry
	for i := range reply.History {
		if reply.History[i].SessionID == reply.SessionID {
			h = &reply.History[i]
		}
	}
	if h != nil {
		o.startSeq = seqText(h.StartLastSeq)
	}
	if s, ok := f.poll(ctx); ok && f.id != "" {
		o.stats, o.repID = s.stats, f.repID
	} else if h != nil {
		o.stats = engine.Stats{RevisionsChecked: h.MissingChecked, MissingRevisionsFound: h.MissingFound,
			DocsRead: h.DocsRead, DocsWritten: h.DocsWritten, DocWriteFailures: h.DocWriteFailures,
			BulkGetDocs: h.BulkGetDocs, BulkGetAttempts: h.BulkGetAttempts}
	}
	if reply.NoChanges {
		o.note = "Nothing to replicate: the target was up to date."
	}
	shown := o.stats
	if shown.ChangesPending == nil { // the job ended unseen: show processed/processed
		shown.ChangesPending = new(int64)
	}
	d.update(sample{state: "completed", stats: shown})
	d.done(true)
	c.summary(o)
	return nil
}

// followContinuous follows a continuous replication that runs on the
// cluster until it fails, is removed, or Ctrl-C cancels it; with -detach
// it returns at once.
func (c *replicateCmd) followContinuous(ctx context.Context, f *follower, d display, body json.RawMessage) error {
	var reply struct {
		LocalID     string        `json:"_local_id"`
		Stats       *engine.Stats `json:"stats"`
		Unconfirmed string        `json:"stop_unconfirmed"`
	}
	_ = json.Unmarshal(body, &reply)
	f.id, f.repID = reply.LocalID, reply.LocalID
	if c.detach {
		d.done(true)
		c.r.Printf(c.env.Stdout, "Continuous replication %s started; follow it with fdbrep jobs, cancel it with fdbrep replicate -cancel %s\n",
			reply.LocalID, reply.LocalID)
		return nil
	}
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		if s, ok := f.poll(ctx); ok {
			d.update(s)
			if s.state == "failed" {
				d.done(false)
				c.summary(outcome{verb: "failed", repID: f.repID, stats: s.stats})
				return c.fail(fmt.Errorf("%s: %s", f.lastErr.Error, f.lastErr.Reason))
			}
		} else if f.notFound {
			d.done(false)
			c.summary(outcome{verb: "removed", repID: f.repID, stats: f.last.stats})
			return c.fail(errors.New("the replication was cancelled on the cluster"))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			d.done(false)
			return c.cancelOnCluster(f.cl, f.repID, true, f.last.stats)
		}
	}
}

// fullCancelID replaces the id of a -cancel ID that no job has by that of
// the one job whose id begins with it (jobByPrefix); without one, the
// cancel answers the cluster's 404.
func (c *replicateCmd) fullCancelID(ctx context.Context, cl *client) error {
	id, ok := c.body["replication_id"].(string)
	if !ok || !notFound(cl.get(ctx, "/_scheduler/jobs/"+url.PathEscape(id), nil, nil)) {
		return nil
	}
	full, err := jobByPrefix(ctx, cl, id)
	if full != "" {
		c.body["replication_id"] = full
	}
	return err
}

// cancelOnCluster cancels the replication with POST /_replicate "cancel":
// true, by replication id when given, else by its specification (the
// cluster finds the job from it, and the user). Interrupted (Ctrl-C), it
// prints the summary with the last stats seen and reports ExitInterrupted;
// otherwise (-cancel) it reports the cancel alone.
func (c *replicateCmd) cancelOnCluster(cl *client, repID string, interrupted bool, stats engine.Stats) error {
	body := c.body
	if repID != "" {
		body = map[string]any{"replication_id": repID, "cancel": true}
	} else if _, ok := body["cancel"]; !ok {
		body = map[string]any{}
		for k, v := range c.body {
			body[k] = v
		}
		body["cancel"] = true
	}
	var reply struct {
		LocalID     string        `json:"_local_id"`
		Stats       *engine.Stats `json:"stats"`
		Unconfirmed string        `json:"stop_unconfirmed"`
	}
	_, err := cl.do(context.Background(), http.MethodPost, "/_replicate", nil, body, &reply, RequestTimeoutDefault)
	if !interrupted {
		if err != nil {
			return &ExitError{Code: ExitFailure, Err: errors.New(c.r.String("cancel: " + err.Error()))}
		}
		c.r.Printf(c.env.Stdout, "Replication %s cancelled\n", reply.LocalID)
		return nil
	}
	// The cluster's answer carries the run's final counters once its node
	// stopped it (every write it sent answered): those, not the last ones
	// seen, are what the target took.
	if reply.Stats != nil {
		stats = *reply.Stats
	}
	o := outcome{verb: "cancelled", repID: cmp.Or(reply.LocalID, repID), stats: stats}
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		o.note = "Interrupted; the cluster had no such replication left to cancel (it had just ended)."
	case err != nil:
		o.note = c.r.String("Interrupted, but the cancel failed: " + err.Error() + "; the replication may still run on the cluster.")
	case reply.Unconfirmed != "":
		o.note = c.r.String("Interrupted: the replication was cancelled on the cluster, but " + reply.Unconfirmed +
			"; the counts below are the last ones seen.")
	default:
		o.note = "Interrupted: the replication was cancelled on the cluster and its run stopped."
	}
	c.summary(o)
	return &ExitError{Code: ExitInterrupted}
}

// seqText is a sequence as _scheduler shows it: a JSON string's contents,
// any other JSON value as its text.
func seqText(seq json.RawMessage) string {
	var s string
	if json.Unmarshal(seq, &s) == nil {
		return s
	}
	return string(seq)
}
