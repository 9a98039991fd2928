package replicator

import "errors"

// Sentinel errors. Functions wrap them with %w; test with errors.Is.
var (
	// ErrInvalidConfig is returned by NewFrontend, NewNode and SetConfig
	// for a Config that fails validation.
	ErrInvalidConfig = errors.New("replicator: invalid config")

	// ErrBadRequest wraps a replication document or POST /_replicate body
	// that fails parsing or validation. The error text after the prefix is
	// the user-facing reason (see Reason).
	ErrBadRequest = errors.New("bad_request")

	// ErrTooLarge wraps a replication whose stored form would exceed
	// SpecMaxBytes (CouchDB's document_too_large).
	ErrTooLarge = errors.New("document_too_large")

	// ErrForbidden is returned by ValidateDoc for a document write the user
	// may not make (another user's document, an invalid replication). The
	// frontend answers 403 with Reason(err).
	ErrForbidden = errors.New("forbidden")

	// ErrUnauthorized is returned when a user may not cancel a transient
	// replication (only its creator or a server admin may).
	ErrUnauthorized = errors.New("unauthorized")

	// ErrNotFound is returned by the scheduler views for a job or document
	// that does not exist.
	ErrNotFound = errors.New("not_found")

	// ErrNotReplicatorDB is returned for a database name that is neither
	// "_replicator" nor ends in "/_replicator".
	ErrNotReplicatorDB = errors.New("replicator: not a _replicator database")

	// ErrBadQuery reports a bad scheduler view argument (limit, skip,
	// states); the frontend answers 400 query_parse_error.
	ErrBadQuery = errors.New("query_parse_error")
)

// reasonError is a sentinel with a user-facing reason.
type reasonError struct {
	kind   error
	reason string
}

func (e *reasonError) Error() string { return e.kind.Error() + ": " + e.reason }
func (e *reasonError) Unwrap() error { return e.kind }

func newReason(kind error, format string, a ...any) error {
	r := format
	if len(a) > 0 {
		r = fmtSprintf(format, a...)
	}
	return &reasonError{kind: kind, reason: r}
}

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
