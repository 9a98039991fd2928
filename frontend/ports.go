package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The frontend reaches the replication control plane through the ports of
// this file, declared in the types of package api, which a
// replicator/control.Plane satisfies as it is (cmd/internal/wire plugs it
// in). The frontend imports nothing of the replicator, so
// an api_frontend node's HTTP layer links no replication engine, and it
// maps every error to an HTTP reply in one place (toHTTPError).

// Replicator checks replication documents and changes their jobs. Every
// method but ParseDoc runs inside the frontend's write transaction, so a
// document write and the job change it causes commit atomically; they
// follow the kv rules (no I/O, idempotent, kv errors returned for the
// retry loop) and may run more than once.
type Replicator interface {
	// ParseDoc parses a replication document about to be written by
	// writer (the per-user limits apply to a writer who is not a server
	// admin: see README, "Users and permissions"). The
	// result, which the frontend only carries, is handed to DocWritten, so
	// each document is parsed once. A non-nil error refuses the write
	// (403 forbidden with Reason as the reason, which holds no
	// credentials), except for writers with the _replicator role, whose
	// documents are stored anyway: the parsed document then records the
	// failure and its job shows it. An error that is not an
	// api.TaggedError is a failure of the service (a credential that
	// could not be sealed): nothing is stored, whoever writes (500). The
	// parsed document's Stored body, when not nil, is what is stored.
	ParseDoc(db, docID string, doc json.RawMessage, writer api.User) (api.ParsedDoc, error)
	// CheckEndpoints checks, before the write and outside any
	// transaction, what ParseDoc does not (it does no I/O): the addresses
	// the host names of a document ParseDoc accepted resolve to
	// ([replicator] denied_endpoint_networks and the rest; best effort:
	// replication nodes check every connection again). An
	// api.TaggedError refuses the write (403 with its reason). Writers
	// with the _replicator role are not checked: their documents are
	// stored anyway, and their jobs meet the check at connect.
	CheckEndpoints(ctx context.Context, doc api.ParsedDoc) error
	// DocWritten creates or replaces the job of a document whose winning
	// revision is doc. restarted reports that the write gave the document
	// a new job that will run (not one recording an earlier run's end):
	// the frontend then removes the replicator's stale "_replication_*"
	// fields from the document.
	DocWritten(ctx context.Context, tr kv.Transaction, doc api.ParsedDoc) (restarted bool, err error)
	// DocDeleted removes the job of a deleted document (one whose winning
	// revision is now a deletion).
	DocDeleted(ctx context.Context, tr kv.Transaction, db, docID string) error
	// DBCreated and DBDeleted run when a replicator database is created or
	// deleted (DBDeleted removes the database's jobs).
	DBCreated(ctx context.Context, tr kv.Transaction, db string) error
	DBDeleted(ctx context.Context, tr kv.Transaction, db string) error
}

// Scheduler serves POST /_replicate and the monitoring views. The views
// return rows the frontend encodes as they are (CouchDB's shapes). Errors
// that implement api.TaggedError are answered with their tag's status;
// others are failures of the service (500).
type Scheduler interface {
	// Replicate starts, waits for or cancels a replication described by
	// body, a JSON object, for user.
	Replicate(ctx context.Context, body json.RawMessage, user api.User) (api.ReplicateResult, error)
	// The views take the user who asks (the viewer): a server admin sees
	// every job; any other user sees only the jobs they own (their
	// documents' and the replications they posted), the page counting
	// those, and a job of another user is not found (CouchDB's views are
	// for server admins only); the anonymous user sees none.
	//
	// SchedulerJobs lists a page of the unfinished jobs; SchedulerJob is
	// one job.
	SchedulerJobs(ctx context.Context, viewer api.User, q api.PageQuery) (api.JobList, error)
	SchedulerJob(ctx context.Context, viewer api.User, id string) (api.JobInfo, error)
	// RetryJob ends a crashing job's backoff now.
	RetryJob(ctx context.Context, viewer api.User, id string) (api.RetryResult, error)
	// PauseJob and ResumeJob pause and resume a POST /_replicate
	// replication.
	PauseJob(ctx context.Context, viewer api.User, id string) (api.PauseResult, error)
	ResumeJob(ctx context.Context, viewer api.User, id string) (api.PauseResult, error)
	// SchedulerDocs lists a page of documents' jobs (server admins only);
	// db "" means every replicator database, states filters (empty:
	// all). SchedulerDoc is one document's job.
	SchedulerDocs(ctx context.Context, db string, states []string, q api.PageQuery) (api.DocList, error)
	SchedulerDoc(ctx context.Context, db, docID string) (api.DocInfo, error)
	// ActiveTasks lists the running replications.
	ActiveTasks(ctx context.Context, viewer api.User) ([]api.ActiveTask, error)
	// SchedulerChanges reads the replications' state changes the viewer
	// may see (a server admin all, another user their own), waiting up
	// to q.Wait for a first one.
	SchedulerChanges(ctx context.Context, viewer api.User, q api.ChangesQuery) (api.ChangesPage, error)
	// PutWebhook writes one of the viewer's webhooks from body and
	// reports whether it is new; Webhook reads one with its deliveries,
	// Webhooks lists them, DeleteWebhook removes one. Every user but the
	// anonymous one keeps their own; user ("" for the viewer's own) names
	// another user's, for server admins.
	PutWebhook(ctx context.Context, viewer api.User, id string, body json.RawMessage) (api.WebhookResult, bool, error)
	Webhook(ctx context.Context, viewer api.User, user, id string) (api.Webhook, error)
	Webhooks(ctx context.Context, viewer api.User, user string) (api.WebhookList, error)
	DeleteWebhook(ctx context.Context, viewer api.User, user, id string) (api.WebhookResult, error)
}

// MetricsSource provides the replicator's metrics for /_node/_local/_stats
// (a CouchDB-style nested object under "couch_replicator") and
// /_node/_local/_prometheus (text exposition lines).
type MetricsSource interface {
	StatsJSON() map[string]any
	Prometheus() string
}

// tagStatus is the HTTP status of each CouchDB error tag the ports use.
var tagStatus = map[string]int{
	"bad_request":         http.StatusBadRequest,
	"bad_rep_doc":         http.StatusBadRequest,
	"invalid_replication": http.StatusBadRequest, // a scheme [replicator] valid_endpoint_protocols forbids
	"query_parse_error":   http.StatusBadRequest,
	"feed_pruned":         http.StatusGone, // _scheduler/_changes from a seq whose changes were pruned
	"unauthorized":        http.StatusUnauthorized,
	"forbidden":           http.StatusForbidden,
	"forbidden_address":   http.StatusForbidden, // an endpoint's address the replicator refuses
	"not_found":           http.StatusNotFound,
	"conflict":            http.StatusConflict,
	"document_too_large":  http.StatusRequestEntityTooLarge,
	"timeout":             http.StatusInternalServerError, // as CouchDB's chttpd answers its timeouts
}

// taggedHTTPError turns an api.TaggedError into its reply; nil for other
// errors.
func taggedHTTPError(err error) *httpError {
	var te api.TaggedError
	if !errors.As(err, &te) {
		return nil
	}
	status, ok := tagStatus[te.Tag()]
	if !ok {
		status = http.StatusInternalServerError
	}
	return newError(status, te.Tag(), te.Reason())
}

// replicateReply renders a api.ReplicateResult as CouchDB does.
func replicateReply(res api.ReplicateResult) (int, any) {
	switch res.Outcome {
	case api.Running:
		return http.StatusAccepted, map[string]any{"ok": true, "_local_id": res.LocalID}
	case api.Cancelled:
		m := map[string]any{"ok": true, "_local_id": res.LocalID}
		if res.Stopped != nil {
			m["stats"] = res.Stopped
		}
		if res.Unconfirmed != "" {
			m["stop_unconfirmed"] = res.Unconfirmed
		}
		return http.StatusOK, m
	case api.Completed:
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
