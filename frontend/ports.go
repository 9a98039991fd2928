package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The frontend reaches the replication control plane through the ports of
// this file; cmd/internal/wire implements them with package
// replicator/control. The frontend imports nothing of the replicator, so
// an api_frontend node's HTTP layer links no replication engine, and it
// maps every error to an HTTP reply in one place (toHTTPError).

// Replicator checks replication documents and changes their jobs. Every
// method but ParseDoc runs inside the frontend's write transaction, so a
// document write and the job change it causes commit atomically; they
// follow the kv rules (no I/O, idempotent, kv errors returned for the
// retry loop) and may run more than once.
type Replicator interface {
	// ParseDoc parses a replication document about to be written. The
	// result, which the frontend only carries, is handed to DocWritten, so
	// each document is parsed once. A non-nil error refuses the write
	// (403 forbidden with Reason as the reason, which holds no
	// credentials), except for writers with the _replicator role, whose
	// documents are stored anyway: the parsed document then records the
	// failure and its job shows it.
	ParseDoc(db, docID string, doc json.RawMessage) (ParsedDoc, error)
	// DocWritten creates or replaces the job of a document whose winning
	// revision is doc. restarted reports that the write gave the document
	// a new job that will run (not one recording an earlier run's end):
	// the frontend then removes the replicator's stale "_replication_*"
	// fields from the document.
	DocWritten(ctx context.Context, tr kv.Transaction, doc ParsedDoc) (restarted bool, err error)
	// DocDeleted removes the job of a deleted document (one whose winning
	// revision is now a deletion).
	DocDeleted(ctx context.Context, tr kv.Transaction, db, docID string) error
	// DBCreated and DBDeleted run when a replicator database is created or
	// deleted (DBDeleted removes the database's jobs).
	DBCreated(ctx context.Context, tr kv.Transaction, db string) error
	DBDeleted(ctx context.Context, tr kv.Transaction, db string) error
}

// ParsedDoc is a replication document as a Replicator parsed it.
type ParsedDoc any

// Scheduler serves POST /_replicate and the monitoring views. The views
// return values the frontend encodes as they are (CouchDB's shapes).
// Errors that implement TaggedError are answered with their tag's status;
// others are failures of the service (500).
type Scheduler interface {
	// Replicate starts, waits for or cancels a replication described by
	// body, a JSON object, for user.
	Replicate(ctx context.Context, body json.RawMessage, user *User) (ReplicateResult, error)
	// SchedulerJobs and SchedulerDocs list a page of jobs or of
	// documents' jobs; db "" means every replicator database, states
	// filters (empty: all).
	SchedulerJobs(ctx context.Context, q PageQuery) (any, error)
	SchedulerJob(ctx context.Context, id string) (any, error)
	// RetryJob ends a crashing job's backoff now; user "" is a server
	// admin, else only the jobs user owns are found.
	RetryJob(ctx context.Context, id, user string) (any, error)
	SchedulerDocs(ctx context.Context, db string, states []string, q PageQuery) (any, error)
	SchedulerDoc(ctx context.Context, db, docID string) (any, error)
	ActiveTasks(ctx context.Context) (any, error)
	// UserJobs, UserJob and UserActiveTasks are the views of a user who
	// is not a server admin: only the jobs user owns (their documents'
	// and the replications they posted); the page counts those. A job of
	// another user is not found.
	UserJobs(ctx context.Context, user string, q PageQuery) (any, error)
	UserJob(ctx context.Context, user, id string) (any, error)
	UserActiveTasks(ctx context.Context, user string) (any, error)
}

// PageQuery is the page a scheduler listing asks for.
type PageQuery struct {
	// Limit is the page size; < 0 means the Scheduler's default.
	Limit int
	// Skip is how many rows to pass first.
	Skip int
	// StartKey is the key of the first row (inclusive; nil: from the
	// first): for _scheduler/jobs [id] or [id, job_id], for
	// _scheduler/docs [db] or [db, doc_id], for _scheduler/docs/{db}
	// [doc_id] (docs/COMPAT.md).
	StartKey []string
}

// ReplicateOutcome is how a POST /_replicate ended.
type ReplicateOutcome int

const (
	// ReplicateRunning: a continuous replication is running (202).
	ReplicateRunning ReplicateOutcome = iota
	// ReplicateCompleted: a one-shot replication completed (200, with its
	// final checkpoint).
	ReplicateCompleted
	// ReplicateFailed: the replication failed (Tag and Reason).
	ReplicateFailed
	// ReplicateCancelled: a cancel removed the replication (200).
	ReplicateCancelled
)

// ReplicateResult is the outcome of a POST /_replicate.
type ReplicateResult struct {
	Outcome ReplicateOutcome
	// LocalID is the replication id of a running or cancelled
	// replication.
	LocalID string
	// Checkpoint is a completed replication's final checkpoint
	// (session_id, source_last_seq, history, ...).
	Checkpoint json.RawMessage
	// Tag and Reason describe a failure, as CouchDB's error and reason.
	Tag, Reason string
}

// MetricsSource provides the replicator's metrics for /_node/_local/_stats
// (a CouchDB-style nested object under "couch_replicator") and
// /_node/_local/_prometheus (text exposition lines).
type MetricsSource interface {
	StatsJSON() map[string]any
	Prometheus() string
}

// TaggedError is an error a port reports to the client: CouchDB's error
// tag ("not_found", "bad_request", ...) and a reason that holds no
// credentials.
type TaggedError interface {
	error
	Tag() string
	Reason() string
}

// tagStatus is the HTTP status of each CouchDB error tag the ports use.
var tagStatus = map[string]int{
	"bad_request":        http.StatusBadRequest,
	"bad_rep_doc":        http.StatusBadRequest,
	"query_parse_error":  http.StatusBadRequest,
	"unauthorized":       http.StatusUnauthorized,
	"forbidden":          http.StatusForbidden,
	"not_found":          http.StatusNotFound,
	"conflict":           http.StatusConflict,
	"document_too_large": http.StatusRequestEntityTooLarge,
}

// taggedHTTPError turns a TaggedError into its reply; nil for other
// errors.
func taggedHTTPError(err error) *httpError {
	var te TaggedError
	if !errors.As(err, &te) {
		return nil
	}
	status, ok := tagStatus[te.Tag()]
	if !ok {
		status = http.StatusInternalServerError
	}
	return newError(status, te.Tag(), te.Reason())
}

// replicateReply renders a ReplicateResult as CouchDB does.
func replicateReply(res ReplicateResult) (int, any) {
	switch res.Outcome {
	case ReplicateRunning:
		return http.StatusAccepted, map[string]any{"ok": true, "_local_id": res.LocalID}
	case ReplicateCancelled:
		return http.StatusOK, map[string]any{"ok": true, "_local_id": res.LocalID}
	case ReplicateCompleted:
		m := map[string]json.RawMessage{}
		if len(res.Checkpoint) > 0 {
			_ = json.Unmarshal(res.Checkpoint, &m)
		}
		m["ok"] = json.RawMessage("true")
		return http.StatusOK, m
	}
	tag := res.Tag
	status, ok := tagStatus[tag]
	switch {
	case tag == "filter_fetch_error":
		status, tag = http.StatusNotFound, "not_found"
	case !ok:
		status = http.StatusInternalServerError
	}
	return status, map[string]string{"error": tag, "reason": res.Reason}
}
