package replicator

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w; test with errors.Is.
var (
	// ErrInvalidConfig reports a configuration that fails validation
	// (control.New, scheduler.New, Node.SetConfig).
	ErrInvalidConfig = errors.New("replicator: invalid config")

	// ErrBadRequest wraps a replication document or POST /_replicate body
	// that fails parsing or validation. The error text after the prefix is
	// the user-facing reason (see Reason).
	ErrBadRequest = errors.New("bad_request")

	// ErrTooLarge wraps a replication whose stored form would exceed
	// SpecMaxBytes (CouchDB's document_too_large).
	ErrTooLarge = errors.New("document_too_large")

	// ErrForbidden refuses a document write: an invalid replication
	// document (the HTTP API answers 403 with Reason(err)).
	ErrForbidden = errors.New("forbidden")

	// ErrInvalidReplication refuses a POST /_replicate whose endpoint or
	// proxy uses a scheme [replicator] valid_endpoint_protocols or
	// valid_proxy_protocols does not allow (400, as CouchDB answers it).
	ErrInvalidReplication = errors.New("invalid_replication")

	// ErrUnauthorized is returned when a user may not cancel a transient
	// replication (only its creator or a server admin may).
	ErrUnauthorized = errors.New("unauthorized")

	// ErrNotFound is returned by the scheduler views for a job or document
	// that does not exist.
	ErrNotFound = errors.New("not_found")

	// ErrConflict refuses an operation the job's state does not allow
	// (a retry of a job that is not crashing); the HTTP API answers 409.
	ErrConflict = errors.New("conflict")

	// ErrTimeout is POST /_replicate's answer when it waited
	// Config.ReplicateNoNodeTimeout for its outcome while no replication
	// node was alive (the job stays); the HTTP API answers 500, as
	// CouchDB answers its timeouts.
	ErrTimeout = errors.New("timeout")

	// ErrBadQuery reports a bad scheduler view argument (limit, skip,
	// states, start key); the frontend answers 400 query_parse_error.
	ErrBadQuery = errors.New("query_parse_error")

	// ErrChangesPruned is the tag of a read of _scheduler/_changes from a
	// seq whose following changes were pruned: the reader missed some.
	ErrChangesPruned = errors.New("feed_pruned")

	// ErrDBDeleted is returned by Store.UpdateJob, wrapped with
	// fdbjobs.ErrHalt, for a job whose _replicator database was deleted:
	// its worker stops, and the nodes remove the job.
	ErrDBDeleted = errors.New("replicator: the job's _replicator database was deleted")

	// ErrServerUUID is Store.EnsureServerUUID's refusal of a [couchdb]
	// uuid other than the one the store holds (which would change every
	// replication id).
	ErrServerUUID = errors.New("replicator: the store holds another server UUID")
)

// reasonError is a sentinel with a user-facing reason. Its Tag is the
// sentinel's text, which for the user-facing sentinels is CouchDB's error
// tag ("bad_request", "not_found", ...): the HTTP API maps tags to statuses.
type reasonError struct {
	kind   error
	reason string
}

func (e *reasonError) Error() string  { return e.kind.Error() + ": " + e.reason }
func (e *reasonError) Unwrap() error  { return e.kind }
func (e *reasonError) Tag() string    { return e.kind.Error() }
func (e *reasonError) Reason() string { return e.reason }

// NewReason returns an error wrapping kind with a user-facing reason.
func NewReason(kind error, format string, a ...any) error {
	r := format
	if len(a) > 0 {
		r = fmt.Sprintf(format, a...)
	}
	return &reasonError{kind: kind, reason: r}
}

func newReason(kind error, format string, a ...any) error { return NewReason(kind, format, a...) }

// Reason returns the user-facing reason of an error from this package (the
// text CouchDB puts in the "reason" member of an error reply), or the
// error's text.
func Reason(err error) string {
	var re *reasonError
	if errors.As(err, &re) {
		return re.reason
	}
	if err == nil {
		return ""
	}
	return err.Error()
}
