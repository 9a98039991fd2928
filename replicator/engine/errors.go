package engine

import "errors"

// Sentinel errors. Errors returned by the engine wrap one of these with %w
// and read "<tag>: <detail>", the tag being CouchDB's error class, e.g.
// "db_not_found: could not open http://host/db/". URLs in errors never carry
// passwords.
var (
	// ErrInvalidSpec reports a replication specification that fails
	// validation (CouchDB's bad_request).
	ErrInvalidSpec = errors.New("bad_request")

	// ErrDBNotFound reports a source or target database that does not exist
	// (or does not answer like a CouchDB database).
	ErrDBNotFound = errors.New("db_not_found")

	// ErrUnauthorized reports a peer that refused our credentials (401).
	ErrUnauthorized = errors.New("unauthorized")

	// ErrForbidden reports a peer that refused access (403).
	ErrForbidden = errors.New("forbidden")

	// ErrMaxBackoff reports a peer that kept answering 429 until the rate
	// limiter's interval reached its cap; the scheduler should back off.
	ErrMaxBackoff = errors.New("max_backoff")

	// ErrLoginBudget reports a login not tried: the peer refused its
	// user's logins with other passwords too often lately (couch.Logins),
	// and one more might lock the account out; the reason names the
	// account and when a new password may be tried.
	ErrLoginBudget = errors.New("login_budget")
	// ErrAddressDenied reports an endpoint or proxy at an address the
	// node's policy refuses (ClientSettings.Addresses; it wraps
	// couch.ErrAddressDenied): no connection was made. fdbrep's own tag:
	// CouchDB has no such rule (docs/COMPAT.md).
	ErrAddressDenied = errors.New("forbidden_address")

	// ErrHTTP reports an unexpected HTTP status or a request that failed
	// after its retries (CouchDB's http_request_failed / http_error_code).
	ErrHTTP = errors.New("http_request_failed")

	// ErrFilterFetch reports a filter function that could not be read from
	// the source's design document.
	ErrFilterFetch = errors.New("filter_fetch_error")

	// ErrChangesFeed reports a changes feed request the source kept failing.
	ErrChangesFeed = errors.New("changes_req_failed")

	// ErrRevsDiff reports a failed _revs_diff request.
	ErrRevsDiff = errors.New("revs_diff_failed")

	// ErrOpenRevs reports a document revision the source could not deliver.
	ErrOpenRevs = errors.New("open_doc_revs_failed")

	// ErrBulkDocs reports a _bulk_docs write the target rejected as a whole.
	ErrBulkDocs = errors.New("bulk_docs_failed")

	// ErrDocWrite reports a single document write the target rejected for a
	// reason other than 401/403/413/415 (which count as doc_write_failures).
	ErrDocWrite = errors.New("doc_write_failed")

	// ErrCheckpoint reports a checkpoint that could not be written, or a peer
	// that restarted (instance_start_time changed) since the last one.
	ErrCheckpoint = errors.New("checkpoint_commit_failure")

	// ErrPurges reports a replication with follow_purges whose source
	// does not serve _purged_infos, or whose target refused a _purge
	// (fdbrep's own tag: CouchDB has no follow_purges).
	ErrPurges = errors.New("follow_purges_failed")

	// ErrInternal reports a fault inside the engine itself (a panic in one
	// of the run's goroutines): the run fails with it instead of taking
	// its process down.
	ErrInternal = errors.New("internal_error")

	// ErrStopped is the cause given to work cancelled by Run.Stop.
	ErrStopped = errors.New("replication stopped")

	// ErrHalted is the error of a run ended by Run.Halt: its job is no
	// longer the caller's, and the run stopped without a final
	// checkpoint.
	ErrHalted = errors.New("replication halted")
)
