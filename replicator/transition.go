package replicator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Kind is a transition of a replication job held by a node: what the
// node's worker does to the job. Each kind has one state, one fdbjobs
// operation, its history events and its counters (see doc.go,
// "Transitions"); Lifecycle.Apply is the one place that writes them.
type Kind int

// The transitions of a held job.
const (
	// Started: the job runs on Change.Node (fdbjobs Update).
	Started Kind = iota + 1
	// Heartbeat: the running job's data is stored (fdbjobs Update, the
	// hold's renewal); a job that ran HealthThreshold since its last start
	// forgets its errors.
	Heartbeat
	// Crashed: the job failed and backs off (fdbjobs Resubmit at the
	// backoff's end, kept in its data's RetryAt).
	Crashed
	// Failed: the job ended in error (fdbjobs Finish); its document says so.
	Failed
	// Completed: a one-shot job ended (fdbjobs Finish); its document says so.
	Completed
	// Requeued: the job stopped and is pending again at Change.STime
	// (rotation, shutdown, a move; fdbjobs Resubmit).
	Requeued
	// PutBack: a job accepted but never started goes back to the queue at
	// its scheduled time, its data unchanged (fdbjobs Resubmit).
	PutBack
	// Parked: a continuous job caught up and idle gives its slot back and
	// waits for a change to its source, pending at Change.Park's SweepAt
	// (fdbjobs Resubmit; see doc.go, "Parking").
	Parked
	// HeldBack: a job accepted but not started because its owner runs as
	// many replications as a user may, or a host of its as many as its
	// budget allows (Change.Reason), goes back to the queue, pending at
	// Change.STime, behind the jobs that wait, its data marked held
	// (JobData.HeldSince, HeldUntil, HeldHost; fdbjobs Resubmit; see
	// doc.go, "Per-user limits" and "Budgets per host").
	HeldBack

	// The transitions no node makes with a job it holds: Transform
	// applies them, the Store writes them (Apply refuses them).

	// Added: a new job, pending (Store.AddJob); with a Change.Reason, a
	// document that did not parse, failed from its start with the tag
	// bad_rep_doc.
	Added
	// BackoffEnded: a crashing job is due at Change.At, its error count
	// kept (Store.EndBackoff).
	BackoffEnded
	// TakenBack: the job layer took a running job back from its node
	// (the activity monitor, or the node's restart): pending, its node
	// kept as where it last ran (the Store's re-enqueue hook).
	TakenBack
	// Woken: a parked job is due at Change.STime, for Change.Reason (its
	// source changed; Store.WakeJob).
	Woken
)

// kinds is the transition table: the state each kind leaves the job in
// ("" keeps it), the history events it adds (newest last), the fdbjobs
// operation it calls, and the counters it adds to once it commits.
var kinds = map[Kind]struct {
	name     string
	state    string
	events   []string
	op       string // "update", "finish" or "resubmit"
	counters []string
}{
	Started:   {"started", StateRunning, []string{EventStarted}, "update", nil},
	Heartbeat: {"heartbeat", "", nil, "update", nil},
	Crashed: {"crashed", StateCrashing, []string{EventCrashed, EventPending}, "resubmit",
		[]string{MetricJobsCrashes, MetricJobsStops}},
	Failed: {"failed", StateFailed, []string{EventCrashed}, "finish",
		[]string{MetricJobsFailed, MetricJobsStops}},
	Completed: {"completed", StateCompleted, []string{EventStopped}, "finish",
		[]string{MetricJobsCompleted, MetricJobsStops}},
	Requeued: {"requeued", StatePending, []string{EventStopped, EventPending}, "resubmit", []string{MetricJobsStops}},
	PutBack:  {"put back", "", nil, "resubmit", []string{MetricJobsStops}},
	Parked:   {"parked", StateParked, []string{EventStopped}, "resubmit", []string{MetricJobsParks, MetricJobsStops}},
	HeldBack: {"held back", "", nil, "resubmit", []string{MetricJobsHeldBack, MetricJobsStops}},

	Added:        {"added", StatePending, []string{EventAdded}, "", nil},
	BackoffEnded: {"backoff ended", "", nil, "", nil},
	TakenBack:    {"taken back", StatePending, nil, "", nil},
	Woken:        {"woken", StatePending, []string{EventPending}, "", nil},
}

func (k Kind) String() string { return kinds[k].name }

// Change is one transition with what it carries. A Change is made outside
// the transaction that applies it (its time, its jitter), so that a retry
// after commit_unknown_result writes the same data.
type Change struct {
	Kind Kind
	At   time.Time // when it happens: the job's last update and its history's time
	Node string    // Started: the node that runs the job

	// Crashed and Failed: CouchDB's error tag and the reason; Requeued:
	// the reason of its "stopped" event ("" for none); HeldBack: the host
	// whose budget is full ("" for the per-user limit).
	Tag, Reason string
	// Started: the hosts in whose budgets the job took a place (JobData.BudgetHosts).
	Hosts []string

	Priority float64   // Crashed, Requeued, Parked, HeldBack: the fair-share priority the job keeps
	STime    int64     // Requeued, Woken, HeldBack: when it is due again (Unix ms)
	Jitter   float64   // Crashed: in [0, 1), the backoff's jitter
	Park     *ParkInfo // Parked: what the job keeps while parked (SweepAt: when it is due)
}

// Lifecycle applies Changes to the jobs of one node under the rules of
// its configuration. A Lifecycle is a value, made from the node's current
// configuration for each change.
type Lifecycle struct {
	Store *Store
	// Docs receives the terminal states of documents' jobs; nil leaves
	// documents alone.
	Docs DocUpdater
	// Logger receives a document update that Docs refused (the job's
	// state is written all the same).
	Logger *zerolog.Logger
	// MaxHistory bounds a job's history.
	MaxHistory int
	// HealthThreshold: a job that ran this long since its last start
	// forgets its errors at its next heartbeat or crash (Healed).
	HealthThreshold time.Duration
	// Backoff is how long a job that has crashed errors times waits
	// (jitter in [0, 1)).
	Backoff func(errors int, jitter float64) time.Duration
}

// Healed reports whether a job that started at lastStart (Unix ms; 0 for
// never) has run long enough by now to forget its errors.
func Healed(lastStart int64, now time.Time, threshold time.Duration) bool {
	return lastStart > 0 && now.Sub(time.UnixMilli(lastStart)) > threshold
}

// Transform writes c's effect on the job's data into x: its state, state
// info, node, errors, retry time, priority and history. Data that is the
// worker's own (counters, checkpoints) is the caller's to set. Pure: the
// table test of doc.go's transitions drives it.
func (l Lifecycle) Transform(x *JobData, c Change) {
	k := kinds[c.Kind]
	now := Millis(c.At)
	switch c.Kind {
	case PutBack:
		return
	case BackoffEnded:
		x.RetryAt = now
		return
	case TakenBack:
		if x.State == StateRunning {
			x.State = StatePending
		}
		return
	}
	x.LastUpdated = now
	switch c.Kind {
	case Added:
		x.StartTime = now
		if c.Reason != "" {
			x.Rep = nil
			x.LastError, x.StateInfo = c.Reason, StateInfo("bad_rep_doc", c.Reason)
			k.state = StateFailed
		}
	case Started:
		x.StateInfo, x.LastStart, x.Node, x.Parked = nil, now, c.Node, nil
		x.HeldSince, x.HeldUntil, x.HeldHost, x.BudgetHosts = 0, 0, "", c.Hosts
	case Heartbeat:
		if x.ErrorCount > 0 && Healed(x.LastStart, c.At, l.HealthThreshold) {
			x.ErrorCount, x.LastError = 0, ""
		}
	case Crashed:
		if Healed(x.LastStart, c.At, l.HealthThreshold) {
			x.ErrorCount = 0
		}
		x.ErrorCount++
		x.StateInfo, x.LastError, x.Node, x.Priority = StateInfo(c.Tag, c.Reason), c.Reason, "", c.Priority
		x.RetryAt = now + l.Backoff(x.ErrorCount, c.Jitter).Milliseconds()
	case Failed:
		x.ErrorCount++
		x.StateInfo, x.LastError, x.Node = StateInfo(c.Tag, c.Reason), c.Reason, ""
	case Completed:
		x.Node = ""
		x.StateInfo, _ = json.Marshal(x.Stats)
	case Requeued:
		x.StateInfo, x.Node, x.Priority = nil, "", c.Priority
	case Parked:
		p := *c.Park
		x.StateInfo, x.Node, x.Priority, x.Parked = nil, "", c.Priority, &p
	case Woken:
		x.Parked, x.LastWoken, x.WakeCause = nil, now, c.Reason
	case HeldBack:
		x.HeldSince, x.HeldUntil, x.HeldHost, x.Priority = cmp.Or(x.HeldSince, now), c.STime, c.Reason, c.Priority
	}
	if k.state != "" {
		x.State = k.state
	}
	for _, ev := range k.events {
		e := HistoryEvent{Type: ev, Timestamp: now}
		if ev == EventCrashed || ev == EventStopped || c.Kind == Woken {
			e.Reason = c.Reason
		}
		x.AddHistory(l.MaxHistory, e)
	}
}

// Apply makes the change c to the job that job holds, whose data is x, in
// tr: it transforms x (Transform), writes it with the fdbjobs operation of
// c's kind and the view index, and for a terminal state the job's
// document, if it is still the job's (Store.OwnsDoc). A removed job, or
// one this node no longer holds, is fdbjobs.ErrHalt. The caller counts
// Counters once tr commits.
func (l Lifecycle) Apply(ctx context.Context, tr kv.Transaction, job *fdbjobs.Job, x *JobData, c Change) error {
	op := kinds[c.Kind].op
	if op == "" {
		return fmt.Errorf("replicator: a %s change is not made to a held job", c.Kind)
	}
	l.Transform(x, c)
	s := l.Store
	var err error
	switch op {
	case "update":
		err = s.UpdateJob(ctx, tr, job, x)
	case "finish":
		err = s.FinishJob(ctx, tr, job, x)
	default:
		stime := job.ScheduledTime
		switch c.Kind {
		case Crashed:
			stime = x.RetryAt
		case Requeued, HeldBack:
			stime = c.STime
		case Parked:
			stime = c.Park.SweepAt
		}
		err = s.ResubmitJob(ctx, tr, job, x, stime)
	}
	if err != nil {
		return err
	}
	switch c.Kind {
	case Failed, Completed:
		return l.updateDoc(ctx, tr, x, c)
	case Parked:
		return s.ensureWatch(ctx, tr, c.Park.Group)
	case HeldBack:
		if c.Reason == "" { // the per-user limit's, not a host's budget
			s.countHeldBack(tr, x.Owner())
		} else {
			s.countHostHeld(tr, c.Reason)
		}
	}
	return nil
}

// Counters names the counters the change c to a job whose data is x adds
// one to once it commits.
func (l Lifecycle) Counters(x *JobData, c Change) []string {
	out := kinds[c.Kind].counters
	if l.Docs == nil || x.Transient() || x.TemplateDB != "" {
		return out
	}
	switch c.Kind {
	case Failed:
		out = append(out[:len(out):len(out)], MetricDocsFailedUpdates)
	case Completed:
		out = append(out[:len(out):len(out)], MetricDocsCompletedUpdates)
	}
	return out
}

// updateDoc writes a terminal state into the job's document, in tr, if the
// document is still the job's (a database deleted and re-created under the
// same name never receives an old job's state). A refusal by Docs that is
// not a storage error is logged, and the job's state written all the same.
func (l Lifecycle) updateDoc(ctx context.Context, tr kv.Transaction, x *JobData, c Change) error {
	if x.Transient() || l.Docs == nil || x.TemplateDB != "" {
		return nil // a template's replication has no document of its own
	}
	owns, err := l.Store.OwnsDoc(tr, x)
	if err != nil || !owns {
		return err
	}
	if c.Kind == Completed {
		stats := map[string]any{}
		b, _ := json.Marshal(x.Stats)
		_ = json.Unmarshal(b, &stats)
		stats["start_time"] = FormatMillis(x.StartTime)
		sb, _ := json.Marshal(stats)
		err = l.Docs.DocCompleted(ctx, tr, x.DBName, x.DocID, sb)
	} else {
		err = l.Docs.DocFailed(ctx, tr, x.DBName, x.DocID, c.Reason)
	}
	var ke kv.Error
	if errors.As(err, &ke) {
		return err
	}
	if err != nil && l.Logger != nil {
		l.Logger.Warn().Err(err).Str("db", x.DBName).Str("doc", x.DocID).Msg("replicator: document state update refused")
	}
	return nil
}

// TagDuplicate is the error tag (the "error" of a job's info) of a job
// whose replication another job already runs: CouchDB's name for that
// error (CouchDB 3.x shows a duplicate document's info as the reason
// alone, {"error": reason}).
const TagDuplicate = "duplicate_job"

// Collide is the collision rule (see doc.go, "Transitions"): what job x,
// about to start as replication repID, does when job holderID, whose data
// is holder, is live under that id (pending, running or parked, and its
// document's). It crashes, and retries after its backoff, or fails, with
// the reason it gives. Another user's replication never makes a job fail
// (it could be squatting on the id with wrong credentials), and is not
// named; a document's job waits out a transient one; every other
// collision fails.
func Collide(x, holder *JobData, holderID, repID string) (Kind, string) {
	switch {
	case holder.Owner() != x.Owner():
		what := "replication"
		if holder.Transient() {
			what = "transient replication"
		}
		return Crashed, fmt.Sprintf("Replication `%s` is already running as another user's %s; retrying later", repID, what)
	case holder.Transient() && !x.Transient():
		return Crashed, fmt.Sprintf("Replication `%s` is already running as a transient replication (job %s); retrying later", repID, holderID)
	case holder.Transient():
		return Failed, fmt.Sprintf("Replication `%s` is already running as a transient replication (job %s); retrying later", repID, holderID)
	case x.Transient():
		return Failed, fmt.Sprintf("Replication `%s` already started, triggered by document `%s` from db `%s`", repID, holder.DocID, holder.DBName)
	default:
		return Failed, fmt.Sprintf("Replication `%s` specified by document `%s` already started, triggered by document `%s` from db `%s`",
			repID, x.DocID, holder.DocID, holder.DBName)
	}
}
