package frontend

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
)

// ErrInvalidOptions: Options failed validation.
var ErrInvalidOptions = errors.New("frontend: invalid options")

// httpError is an error with a CouchDB response: status, "error" and
// "reason". Reasons must never hold credentials.
type httpError struct {
	status int
	err    string
	reason string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.err, e.reason) }

func newError(status int, err, reason string) *httpError {
	return &httpError{status: status, err: err, reason: reason}
}

func badRequest(reason string) *httpError {
	return newError(http.StatusBadRequest, "bad_request", reason)
}

func forbidden(reason string) *httpError { return newError(http.StatusForbidden, "forbidden", reason) }

func notFound(reason string) *httpError { return newError(http.StatusNotFound, "not_found", reason) }

var (
	errUnauthorizedLogin = newError(http.StatusUnauthorized, "unauthorized", "Name or password is incorrect.")
	errNotServerAdmin    = newError(http.StatusUnauthorized, "unauthorized", "You are not a server admin.")
	errAuthRequired      = newError(http.StatusUnauthorized, "unauthorized", "Authentication required.")
	errConflict          = newError(http.StatusConflict, "conflict", "Document update conflict.")
	errDBMissing         = notFound("Database does not exist.")
	errDBExists          = newError(http.StatusPreconditionFailed, "file_exists", "The database could not be created, the file already exists.")
	errTooLarge          = newError(http.StatusRequestEntityTooLarge, "too_large", "the request entity is too large")
	errJSONContentType   = newError(http.StatusUnsupportedMediaType, "bad_content_type", "Content-Type must be application/json")
	errAttachments       = newError(http.StatusUnsupportedMediaType, "bad_content_type",
		"attachments are not supported: replication documents carry none, and fdbrep stores none")
)

// notDBAdmin is CouchDB's check_is_admin failure: 401 for anonymous users,
// 403 for authenticated ones.
func notDBAdmin(u *User) *httpError {
	if u.Anonymous() {
		return newError(http.StatusUnauthorized, "unauthorized", "You are not a db or server admin.")
	}
	return forbidden("You are not a db or server admin.")
}

// toHTTPError maps errors to CouchDB replies, in one place: the storage
// sentinels of package repdb, the ports' tagged errors (see TaggedError)
// and the handlers' own replies; nil for an internal failure.
// Replies to storage failures; the store's own error text (paths) is
// logged, never sent.
var (
	errStorageFull = newError(http.StatusInsufficientStorage, "insufficient_storage",
		"the node's storage is full; nothing was written (writes resume once space is freed)")
	errStorageFailing = newError(http.StatusServiceUnavailable, "service_unavailable",
		"the node's storage cannot write; nothing was written")
)

func toHTTPError(err error) *httpError {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he
	case taggedHTTPError(err) != nil:
		return taggedHTTPError(err)
	case errors.Is(err, repdb.ErrDBNotFound):
		return errDBMissing
	case errors.Is(err, repdb.ErrDBExists):
		return errDBExists
	case errors.Is(err, repdb.ErrDocDeleted):
		return notFound("deleted")
	case errors.Is(err, repdb.ErrDocNotFound):
		return notFound("missing")
	case errors.Is(err, repdb.ErrConflict):
		return errConflict
	case errors.Is(err, repdb.ErrNotOwner):
		return forbidden("Can't update another user's _local document.")
	case errors.Is(err, repdb.ErrTooLarge):
		return newError(http.StatusRequestEntityTooLarge, "document_too_large", "the document does not fit in one stored value")
	case errors.Is(err, repdb.ErrBadSequence):
		return badRequest("Malformed since sequence")
	case errors.Is(err, kv.ErrStorageFull):
		return errStorageFull
	case kv.HasCode(err, kv.CodeIOError):
		return errStorageFailing
	case errors.Is(err, repdb.ErrBadSecurity):
		return badRequest(strings.TrimPrefix(err.Error(), repdb.ErrBadSecurity.Error()+": "))
	case errors.Is(err, repdb.ErrBadDoc):
		// What follows the sentinel names the problem (never a
		// credential: bodies are not quoted).
		reason := strings.TrimPrefix(strings.TrimPrefix(err.Error(), repdb.ErrBadDoc.Error()), ": ")
		return badRequest(cmp.Or(reason, "invalid document"))
	}
	return nil
}
