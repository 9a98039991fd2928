package api

import "encoding/json"

// The rows of the _scheduler views and of _active_tasks, in CouchDB's
// shapes with fdbrep's additions (docs/COMPAT.md).

// HistoryEntry is a job history event as the scheduler views show it.
type HistoryEntry struct {
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
	Reason    string `json:"reason,omitempty"`
}

// JobInfo is one entry of GET /_scheduler/jobs (and /_scheduler/jobs/{id}).
type JobInfo struct {
	ID        *string         `json:"id"`
	Database  *string         `json:"database"`
	DocID     *string         `json:"doc_id"`
	Source    *string         `json:"source"`
	Target    *string         `json:"target"`
	State     string          `json:"state"`
	Info      json.RawMessage `json:"info"`
	User      *string         `json:"user"`
	History   []HistoryEntry  `json:"history"`
	StartTime string          `json:"start_time"`
	Node      *string         `json:"node"`
	PID       *string         `json:"pid"`
	// JobID is fdbrep's job id (not in CouchDB's reply).
	JobID string `json:"job_id"`
}

// JobList is GET /_scheduler/jobs.
type JobList struct {
	TotalRows int       `json:"total_rows"`
	Offset    int       `json:"offset"`
	Jobs      []JobInfo `json:"jobs"`
}

// DocInfo is one entry of GET /_scheduler/docs.
type DocInfo struct {
	ID          *string         `json:"id"`
	Database    string          `json:"database"`
	DocID       string          `json:"doc_id"`
	Source      *string         `json:"source"`
	Target      *string         `json:"target"`
	SourceProxy *string         `json:"source_proxy"`
	TargetProxy *string         `json:"target_proxy"`
	State       string          `json:"state"`
	Info        json.RawMessage `json:"info"`
	ErrorCount  int             `json:"error_count"`
	LastUpdated string          `json:"last_updated"`
	StartTime   string          `json:"start_time"`
	Node        *string         `json:"node"`
	PID         *string         `json:"pid"`
	// Owner is the job's owner (its document's "owner"), never shown:
	// other members of the database see the row as they see the
	// document (the frontend's rule).
	Owner string `json:"-"`
	// Schedule is a scheduled replication's schedule (fdbrep's), absent
	// for others.
	Schedule *ScheduleView `json:"schedule,omitempty"`
	// Template is, for a template's replication, the database it
	// replicates; for a template document (GET
	// /_scheduler/docs/{db}/{docid}), how it follows its server
	// (fdbrep's); absent for others.
	Template *TemplateView `json:"template,omitempty"`
}

// TemplateView is a template as _scheduler/docs shows it: on the rows of
// its replications, the database each replicates; on the template
// document's own, its pattern, the side whose server it matches, how many
// replications it has (and how many matching databases have none, and
// why), how
// it follows the server ("db_updates", or "poll" with the reason), when it
// last listed the server and what stops it, if anything.
type TemplateView struct {
	Database     string  `json:"database,omitempty"`
	Databases    string  `json:"databases,omitempty"`
	Of           string  `json:"of,omitempty"`
	Replications *int    `json:"replications,omitempty"`
	Unmade       int     `json:"unmade,omitempty"`
	UnmadeReason string  `json:"unmade_reason,omitempty"`
	Mode         string  `json:"mode,omitempty"`
	Reason       string  `json:"reason,omitempty"`
	Listed       *string `json:"listed,omitempty"`
	Node         string  `json:"node,omitempty"`
	Error        string  `json:"error,omitempty"`
	Ending       bool    `json:"ending,omitempty"`
}

// ScheduleView is a scheduled replication's schedule as _scheduler/docs
// shows it: its period (cron in tz, or every seconds), its next period
// (null while none is due: never for a valid schedule) and when its last
// run was asked for, by the document's write or by a period (a period
// skipped because the run before it was still going is not one).
type ScheduleView struct {
	Cron  string  `json:"cron,omitempty"`
	TZ    string  `json:"tz,omitempty"`
	Every int64   `json:"every,omitempty"`
	Next  *string `json:"next"`
	Last  *string `json:"last"`
}

// DocList is GET /_scheduler/docs[/{db}].
type DocList struct {
	TotalRows int       `json:"total_rows"`
	Offset    int       `json:"offset"`
	Docs      []DocInfo `json:"docs"`
}

// ActiveTask is a replication entry of GET /_active_tasks: the job and
// its counters (Stats, under CouchDB's names). PID, CouchDB's
// Erlang process id, is the job's id here: what names the running job
// across the cluster (clients such as Fauxton expect a string).
type ActiveTask struct {
	Type               string  `json:"type"`
	Node               string  `json:"node"`
	PID                *string `json:"pid"`
	ProcessStatus      string  `json:"process_status"`
	User               *string `json:"user"`
	ReplicationID      string  `json:"replication_id"`
	Database           *string `json:"database"`
	DocID              *string `json:"doc_id"`
	Source             string  `json:"source"`
	Target             string  `json:"target"`
	Continuous         bool    `json:"continuous"`
	CheckpointInterval int64   `json:"checkpoint_interval"`
	StartedOn          int64   `json:"started_on"`
	UpdatedOn          int64   `json:"updated_on"`
	Stats
	SyncInfo
}

// FailedDocInfo is a document the target refused, as the views show it.
type FailedDocInfo struct {
	ID     string `json:"id"`
	Rev    string `json:"rev,omitempty"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Time   string `json:"time"`
}

// SyncInfo is what fdbrep adds to every job's info and _active_tasks
// entry (docs/COMPAT.md, "Is it in sync?"): whether the job has caught up
// with its source, how fast it goes, and if it does not move, why.
type SyncInfo struct {
	// CaughtUp: the job has processed its source's changes up to the
	// source's update sequence when it last asked (a completed one-shot
	// job: true; a job that is not running: false).
	CaughtUp      bool    `json:"caught_up"`
	CaughtUpSince *string `json:"caught_up_since"`
	// LastProgress is when the job last finished a batch of changes.
	LastProgress *string `json:"last_progress"`
	// Throughput is revisions checked per second over the last minute
	// (0 when not running).
	Throughput float64 `json:"throughput"`
	// ETASec is the seconds until caught up at that rate: 0 when caught
	// up, null when unknown (no rate, or no pending count: the count of
	// the last checkpoint is spent while new changes are copied).
	ETASec *int64 `json:"eta_sec"`
	// Stall is null while the job progresses, or is idle and caught up.
	Stall *StallInfo `json:"stall"`
}

// CheckpointInfo is where a replication's latest run started, which
// fdbrep adds to a job's info as "checkpoint" once a run has started
// (docs/COMPAT.md): from the checkpoint both endpoints hold, or, finding
// none, from since_seq or the first change.
type CheckpointInfo struct {
	// Found reports a checkpoint both endpoints hold, with a common
	// history.
	Found bool `json:"found"`
	// Since is the source sequence the run started from.
	Since string `json:"since"`
	// MigratedFrom is the replication id whose checkpoint the run took
	// over, when it was not its own: CouchDB's (a replication moved in
	// from CouchDB whose id fdbrep computes otherwise), or an earlier
	// fdbrep's; the run's next checkpoint is written under its own.
	MigratedFrom string `json:"migrated_from,omitempty"`
}

// ParkInfo is what fdbrep adds to the info of a parked replication (a
// continuous replication that caught up and gave its slot back until its
// source changes; docs/COMPAT.md, "Parked replications"), which the views
// show running.
type ParkInfo struct {
	// Since is when it parked.
	Since string `json:"since"`
	// SweepAt is when it runs again if no change wakes it first.
	SweepAt string `json:"sweep_at"`
	// Through is the source sequence its last checkpoint covered.
	Through string `json:"through"`
	// Watch is how its source is watched, in the views of one job.
	Watch *WatchInfo `json:"watch,omitempty"`
}

// WatchInfo is how a parked replication's source server is watched: its
// _db_updates feed ("db_updates"), or each parked replication's check in
// turn ("poll", with the reason), by which node; mode "" until a node
// took the watch.
type WatchInfo struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason,omitempty"`
	Node   string `json:"node,omitempty"`
}

// WakeInfo is when a replication last woke from parking, and why.
type WakeInfo struct {
	At    string `json:"at"`
	Cause string `json:"cause"`
}

// StallInfo is why a job does not move: the engine's Stall with its
// times formatted.
type StallInfo struct {
	Reason string  `json:"reason"`
	Detail string  `json:"detail"`
	Since  string  `json:"since"`
	Until  *string `json:"until,omitempty"`
	// Host is the host whose budget holds the job back (reason budget).
	Host string `json:"host,omitempty"`
}

// PauseResult answers POST /_scheduler/jobs/{id}/_pause and _resume.
type PauseResult struct {
	OK bool `json:"ok"`
	// ID is the replication id (the job id while it has none).
	ID string `json:"id"`
	// State is the job's state now: paused, or pending once resumed (a
	// resume of a job that was not paused gives its state as it is).
	State string `json:"state"`
}

// RetryResult is the reply of POST /_scheduler/jobs/{id}/_retry.
type RetryResult struct {
	OK bool `json:"ok"`
	// ID is the replication id (the job id while it has none).
	ID string `json:"id"`
	// RetryAt is now: the job starts when a slot is free for it, as when
	// its backoff runs out.
	RetryAt string `json:"retry_at"`
}

// Stats are a replication's counters under CouchDB's names (as shown by
// _scheduler/jobs and _active_tasks). Counters are cumulative over the runs
// of one replication: a run starts from the element-wise maximum of
// Options.Stats and the counters of the checkpoint history it resumes from.
// The sequence fields follow CouchDB's encoding: a string sequence as is,
// any other JSON value JSON-encoded into a string (integer 5 is "5").
type Stats struct {
	RevisionsChecked      int64 `json:"revisions_checked"`
	MissingRevisionsFound int64 `json:"missing_revisions_found"`
	DocsRead              int64 `json:"docs_read"`
	DocsWritten           int64 `json:"docs_written"`
	DocWriteFailures      int64 `json:"doc_write_failures"`
	BulkGetDocs           int64 `json:"bulk_get_docs"`
	BulkGetAttempts       int64 `json:"bulk_get_attempts"`
	// ChangesPending is the number of source changes the run has yet to
	// process: those after through_seq, less those of the batches already
	// done past it (which RevisionsChecked counts), so that the two never
	// count a change twice; nil when unknown. It is known from the end of
	// a run's setup on; with
	// integer sequences (PouchDB, CouchDB 1.x) it counts down live as
	// through_seq advances, the source's update_seq being read again at
	// every checkpoint; with opaque sequences (CouchDB 2.x and later) it is
	// the _changes "pending" count of the last checkpoint (or of the
	// setup), counted down live by the changes processed since.
	ChangesPending        *int64 `json:"changes_pending"`
	CheckpointedSourceSeq string `json:"checkpointed_source_seq,omitempty"`
	SourceSeq             string `json:"source_seq,omitempty"`
	ThroughSeq            string `json:"through_seq,omitempty"`
}

// WebhookSpec is the body of PUT /_scheduler/webhooks/{id}.
type WebhookSpec struct {
	URL      string   `json:"url"`
	Events   []string `json:"events,omitempty"`
	Database string   `json:"database,omitempty"`
	DocID    string   `json:"doc_id,omitempty"`
	Secret   string   `json:"secret"`
}

// Webhook is a webhook as GET /_scheduler/webhooks shows it; its secret
// is shown as "*****".
type Webhook struct {
	ID       string   `json:"id"`
	URL      string   `json:"url"`
	Events   []string `json:"events"`
	Database string   `json:"database,omitempty"`
	DocID    string   `json:"doc_id,omitempty"`
	Secret   string   `json:"secret"`
	// AllReplications: a server admin's webhook, which hears every
	// replication's changes (another user's hears their own).
	AllReplications bool   `json:"all_replications"`
	Created         string `json:"created"`
	// Failures counts its receiver's failures in a row (GET of one
	// webhook only): after each, every delivery to it rests until
	// RestingUntil; LastError is the last one's.
	Failures     int    `json:"failures,omitempty"`
	LastError    string `json:"last_error,omitempty"`
	RestingUntil string `json:"resting_until,omitempty"`
	// Deliveries are its deliveries, one per replication that had changes
	// for it, kept a day after they end (GET of one webhook only).
	Deliveries []WebhookDelivery `json:"deliveries,omitempty"`
}

// WebhookDelivery is the delivery of one replication's changes to a
// webhook: a job of the job layer, with its attempts.
type WebhookDelivery struct {
	// JobID is the replication's job id.
	JobID string `json:"job_id"`
	// State is pending, running, retrying (an attempt failed; NextAttempt
	// says when), completed, or discarded (its attempts ran out; the
	// replication's next change starts a new delivery of what is queued).
	State       string `json:"state"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	// Queued are the changes not yet delivered; Dropped those dropped
	// because 100 were queued already.
	Queued      int            `json:"queued"`
	Dropped     int64          `json:"dropped,omitempty"`
	NextAttempt string         `json:"next_attempt,omitempty"`
	Errors      []WebhookError `json:"errors,omitempty"`
}

// WebhookError is a failed attempt of a delivery.
type WebhookError struct {
	Attempt int    `json:"attempt"`
	At      string `json:"at"`
	Error   string `json:"error"`
}

// WebhookResult answers PUT and DELETE /_scheduler/webhooks/{id}.
type WebhookResult struct {
	OK bool   `json:"ok"`
	ID string `json:"id"`
}

// WebhookList answers GET /_scheduler/webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}
