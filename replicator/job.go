package replicator

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Replication job states (the RFC's set; see doc.go for the fdbjobs
// mapping). A _replicator document's "_replication_state" takes the
// terminal ones.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateCrashing  = "crashing"
	StateCompleted = "completed"
	StateFailed    = "failed"
	// StateParked is fdbrep's own: a continuous replication that caught
	// up and saw no change for a while gave its slot back and waits for a
	// change to its source (see doc.go, "Parking"). The views show it
	// running, as CouchDB shows a replication waiting on its changes feed.
	StateParked = "parked"
	// StatePaused is fdbrep's own too: a replication paused by its
	// document ("paused": true) or by POST /_scheduler/jobs/{id}/_pause.
	// No node runs it (it is finished in the job layer, not in the queue):
	// max_jobs, rotation, parking and fair share count it nowhere; resumed,
	// it runs again from its checkpoint.
	StatePaused = "paused"
)

// PausedInfo is the state info of a job paused at: {"paused_since": …}.
func PausedInfo(at time.Time) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"paused_since": FormatMillis(Millis(at))})
	return b
}

// History event types.
const (
	EventAdded   = "added"
	EventStarted = "started"
	EventStopped = "stopped"
	EventCrashed = "crashed"
	EventPending = "pending"
)

// DocUpdater writes a terminal state into a _replicator document, and
// rewrites its bodies in place (repdb.Store implements it). A replication node calls it inside the
// transaction that finishes the job, so the document and the job change
// together; no inbound connection to the node is needed, both live in the
// same store. The document write it makes goes to the store directly, not
// through the control plane's DocWritten. The writes must be idempotent:
// after commit_unknown_result the transaction runs again.
type DocUpdater interface {
	// DocCompleted records a completed one-shot replication with its final
	// counters (CouchDB's _replication_stats).
	DocCompleted(ctx context.Context, tr kv.Transaction, dbName, docID string, stats json.RawMessage) error
	// DocFailed records a failed replication with its reason.
	DocFailed(ctx context.Context, tr kv.Transaction, dbName, docID, reason string) error
	// DocRewriter: a job's node moves its document's credentials with
	// the job's (reseal.go).
	DocRewriter
}

// HistoryEvent is one job history entry (newest first in JobData).
type HistoryEvent struct {
	Type      string `json:"type"`
	Timestamp int64  `json:"timestamp"` // Unix ms
	Reason    string `json:"reason,omitempty"`
}

// JobData is the JSON data of a rep_jobs job: the replication and its
// state as the control plane and the nodes record it.
type JobData struct {
	Rep *Spec `json:"rep"` // nil when the document did not parse
	// RepUser is the user who posted a transient replication.
	RepUser string `json:"rep_user,omitempty"`
	// DocOwner is the "owner" of a persistent job's document.
	DocOwner string `json:"doc_owner,omitempty"`
	RepID    string `json:"rep_id,omitempty"`
	BaseID   string `json:"base_id,omitempty"`
	// Persistent jobs only.
	DBName string `json:"db_name,omitempty"`
	DBUUID string `json:"db_uuid,omitempty"`
	DocID  string `json:"doc_id,omitempty"`
	// TemplateDB is, for the replication a template document makes of
	// one database of its server, that database (DocID is the
	// template's); "" for any other job.
	TemplateDB string `json:"template_db,omitempty"`

	State      string          `json:"state"`
	StateInfo  json.RawMessage `json:"state_info,omitempty"`
	ErrorCount int             `json:"error_count"`
	LastError  string          `json:"last_error,omitempty"`
	// Times in Unix ms.
	StartTime   int64  `json:"start_time"`
	LastStart   int64  `json:"last_start"`
	LastUpdated int64  `json:"last_updated"`
	Node        string `json:"node,omitempty"`

	Stats engine.Stats `json:"rep_stats"`
	// Sync is the job's engine.Sync as its run last wrote it (at a
	// heartbeat or the run's end; nil before its first run).
	Sync *engine.Sync `json:"sync,omitempty"`
	// FailedDocs are the job's failed documents (key 24) when the view
	// read them (Views.Job), nil otherwise; never stored here.
	FailedDocs *[]FailedDoc `json:"-"`
	// Watch is a parked job's watch as the view read it (Views.Job),
	// nil otherwise; never stored here.
	Watch *WatchData `json:"-"`
	// RetryAt is when a crashing job's backoff ends (Unix ms).
	RetryAt           int64           `json:"retry_at,omitempty"`
	History           []HistoryEvent  `json:"job_history"`
	CheckpointHistory json.RawMessage `json:"checkpoint_history,omitempty"`
	// FilterCode is the filter function source the current rep_id was
	// computed with.
	FilterCode string `json:"filter_code,omitempty"`
	// Priority is the job's fair-share priority (see share.go) when it
	// was last enqueued, at LastUpdated; lower runs sooner.
	Priority float64 `json:"priority,omitempty"`
	// Parked is set while the job is parked (StateParked).
	Parked *ParkInfo `json:"parked,omitempty"`
	// LastWoken is when the job last woke from parking (Unix ms; 0 for
	// never), and WakeCause why.
	LastWoken int64  `json:"last_woken,omitempty"`
	WakeCause string `json:"wake_cause,omitempty"`
	// EndedElsewhere marks the record of a replication another server
	// ran: its document arrived marked completed or failed with no job
	// here (Store.AddFinishedJob). No node runs it.
	EndedElsewhere bool `json:"ended_elsewhere,omitempty"`
	// UserLimited marks a replication that a user who is not a server
	// admin wrote (the write of its document that made this job, or its
	// POST /_replicate): the per-user limits apply to it (see doc.go,
	// "Per-user limits"). A server admin's, and a job written before
	// fdbrep had the limits, has none.
	UserLimited bool `json:"user_limited,omitempty"`
	// HeldSince and HeldUntil are set while the job waits because its
	// owner ran as many replications as a user may, or a host of its ran
	// as many as its budget allows (the HeldBack transition): since when,
	// and when it is due again at the latest (Unix ms; 0 otherwise).
	// HeldHost names the budget's partition (HostOf, HostUserOf), "" for
	// the per-user limit. Its start clears them.
	HeldSince int64  `json:"held_since,omitempty"`
	HeldUntil int64  `json:"held_until,omitempty"`
	HeldHost  string `json:"held_host,omitempty"`
	// BudgetHosts are the budgets' partitions (hosts, HostOf; hosts and
	// users, HostUserOf) in which its run holds a place (see doc.go,
	// "Budgets per host"), set as it starts: the view index gives the
	// places back as the job stops running. Meaningless while it does not
	// run.
	BudgetHosts []string `json:"budget_hosts,omitempty"`
}

// ParkInfo is what a parked job keeps of its last run: what a watch needs to
// tell whether its source changed since (see doc.go, "Parking").
type ParkInfo struct {
	// Since is when it parked (Unix ms).
	Since int64 `json:"since"`
	// Through is the source sequence its final checkpoint covered: a
	// change to the source has a later one (_changes?since=Through).
	Through string `json:"through"`
	// Group is its source's watch group (WatchGroupOf): the server and
	// credentials a watch follows.
	Group string `json:"group"`
	// SourceDB is its source database's name on that server.
	SourceDB string `json:"source_db"`
	// SweepAt is when it runs again if nothing woke it first (Unix ms):
	// its scheduled time in the job layer.
	SweepAt int64 `json:"sweep_at"`
}

// Owner is the user a job belongs to: its document's owner, or the user
// who posted a transient replication. Replication id collisions fail a job
// only for another job of the same owner.
func (d *JobData) Owner() string {
	if d.Transient() {
		return d.RepUser
	}
	return d.DocOwner
}

// Transient reports a POST /_replicate job (no document).
func (d *JobData) Transient() bool { return d.DBName == "" }

// Continuous reports a continuous replication.
func (d *JobData) Continuous() bool { return d.Rep != nil && d.Rep.Continuous }

// ShareKey is the fair-share bucket of the job: its _replicator database,
// or "" for transient jobs.
func (d *JobData) ShareKey() string { return d.DBName }

// AddHistory puts e first in the history, keeping at most max events.
func (d *JobData) AddHistory(max int, e HistoryEvent) {
	d.History = append([]HistoryEvent{e}, d.History...)
	if len(d.History) > max {
		d.History = d.History[:max]
	}
}

// Clone returns a copy that can be changed without changing d.
func (d *JobData) Clone() *JobData {
	x := *d
	x.History = append([]HistoryEvent(nil), d.History...)
	if d.Parked != nil {
		p := *d.Parked
		x.Parked = &p
	}
	return &x
}

// DecodeJobData decodes a job's data.
func DecodeJobData(raw json.RawMessage) (*JobData, error) {
	d := &JobData{}
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, err
	}
	return d, nil
}

// Encode encodes the job's data.
func (d *JobData) Encode() json.RawMessage {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err) // JobData always marshals
	}
	return b
}

// Millis is t in Unix milliseconds, the unit of job times.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// TimeUnit is the unit of job times (Millis), as the job layer's clients
// must be told (fdbjobs.Config.TimeUnit).
const TimeUnit = time.Millisecond

// ErrorInfo is the state_info of a crashing or failed job: CouchDB's
// {"error": tag, "reason": text}.
type ErrorInfo struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// StateInfo encodes an ErrorInfo.
func StateInfo(tag, reason string) json.RawMessage {
	b, _ := json.Marshal(ErrorInfo{Error: tag, Reason: reason})
	return b
}

// FormatMillis formats a job time (Unix ms) as CouchDB's scheduler views
// and documents show times ("2006-01-02T15:04:05Z"); "" for none (<= 0).
func FormatMillis(t int64) string {
	if t <= 0 {
		return ""
	}
	return time.UnixMilli(t).UTC().Format("2006-01-02T15:04:05Z")
}
