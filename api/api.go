package api

import (
	"encoding/json"
	"time"
)

// User is who makes a request, as the control plane sees it: CouchDB's
// user context (name and roles; "" is anonymous). Its JSON is CouchDB's
// user_ctx.
type User struct {
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
}

// HasRole reports whether u has role.
func (u User) HasRole(role string) bool {
	for _, r := range u.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// Admin returns a server admin as a viewer, for callers inside the
// server: the views show it every job. Each call returns a fresh User, so
// that no caller can change another's roles.
func Admin() User { return User{Name: "", Roles: []string{"_admin"}} }

// IsAdmin reports whether u is a server admin (role _admin).
func (u User) IsAdmin() bool { return u.HasRole("_admin") }

// PageQuery is a page of a _scheduler listing.
type PageQuery struct {
	// Limit is the page size; < 0 means the control plane's default
	// (control.SchedulerLimitDefault).
	Limit int
	// Skip is how many rows to pass first (CouchDB's skip); it costs
	// keys-only reads of the index, so StartKey is the way to deep pages.
	Skip int
	// StartKey is where the page starts, inclusive (fdbrep's start_key):
	// [id] or [id, job_id] for _scheduler/jobs (id: the row's "id", or
	// its "job_id" when "id" is null); [db] or [db, doc_id] for
	// _scheduler/docs of every database; [doc_id] for one database's
	// (docs/COMPAT.md).
	StartKey []string
}

// Outcome is how a POST /_replicate ended.
type Outcome int

const (
	// Running: a continuous replication runs on some replication node
	// (202).
	Running Outcome = iota
	// Completed: a one-shot replication completed (200, with its final
	// checkpoint).
	Completed
	// Failed: the replication failed (Tag and Reason).
	Failed
	// Cancelled: a cancel removed the replication (200).
	Cancelled
)

// ReplicateResult is the result of a POST /_replicate.
type ReplicateResult struct {
	Outcome Outcome
	// LocalID is the replication id (the job id before one was computed)
	// of a running or cancelled replication.
	LocalID string
	// Checkpoint is a completed replication's final checkpoint, CouchDB's
	// reply without "ok": session_id, source_last_seq, history, ...
	Checkpoint json.RawMessage
	// Tag and Reason describe a failure: CouchDB's error class
	// ("db_not_found", "unauthorized", ...) and its reason.
	Tag, Reason string
	// Stopped, for a cancelled replication that was running, is its
	// run's final counters as its node reported them once the run had
	// stopped, every write it sent answered; nil when it was not running,
	// or when its node did not report in time (Unconfirmed says why).
	Stopped     *Stats
	Unconfirmed string
}

// ParsedDoc is a replication document as the control plane parsed it
// before the transaction that stores it: the HTTP API only carries it from
// ParseDoc to DocWritten, so that each document is parsed once.
type ParsedDoc interface {
	// DocRef is the database and document id the document was parsed
	// for.
	DocRef() (db, docID string)
	// Stored is the document to store in place of the one written (its
	// credentials sealed), or nil to store it as written.
	Stored() json.RawMessage
}

// TaggedError is an error the control plane reports to the client:
// CouchDB's error tag ("not_found", "bad_request", ...) and a reason that
// holds no credentials. The HTTP API answers it with its tag's status;
// any other error is a failure of the service (500).
type TaggedError interface {
	error
	Tag() string
	Reason() string
}

// ChangesQuery is a read of the replications' state changes
// (GET /_scheduler/_changes).
type ChangesQuery struct {
	// Since is the seq to read after: "" for the oldest kept, "now" for
	// what comes next.
	Since string
	// Limit is the most changes returned (1 to 1000; 0 for 100).
	Limit int
	// Wait, when positive, is how long to wait for a first change when
	// none follows Since (longpoll; the heartbeat of a continuous feed).
	Wait time.Duration
	// Database, DocID and States keep only those changes (empty: any).
	Database, DocID string
	States          []string
}

// ChangeRow is one state change of a replication.
type ChangeRow struct {
	Seq string `json:"seq"`
	// ID is the job's id (that of _scheduler/jobs' job_id).
	ID       string `json:"id"`
	Database string `json:"database,omitempty"`
	DocID    string `json:"doc_id,omitempty"`
	// TemplateDB is, for a template's replication, the database it
	// replicates (DocID is the template's).
	TemplateDB string `json:"template_db,omitempty"`
	State      string `json:"state"`
	From       string `json:"from,omitempty"`
	Node       string `json:"node,omitempty"`
	Time       string `json:"time"`
}

// ChangesPage is what a read of the state changes found: the changes, and
// the seq to read on from (past changes the query filtered out too).
type ChangesPage struct {
	Results []ChangeRow `json:"results"`
	LastSeq string      `json:"last_seq"`
}
