package couch

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors. HTTP statuses surface as *HTTPError, which matches the
// status sentinels with errors.Is; failures to get any answer surface as
// *RequestError, which matches ErrRequestFailed (and ErrTimeout when the
// peer went silent).
var (
	// ErrInvalidEndpoint: an endpoint that cannot be parsed or is not an
	// http(s) URL.
	ErrInvalidEndpoint = errors.New("couch: invalid endpoint")
	// ErrInvalidOptions: an Options or RateLimiterConfig value out of range.
	ErrInvalidOptions = errors.New("couch: invalid options")

	ErrBadRequest         = errors.New("couch: bad request")            // 400
	ErrUnauthorized       = errors.New("couch: unauthorized")           // 401
	ErrForbidden          = errors.New("couch: forbidden")              // 403
	ErrNotFound           = errors.New("couch: not found")              // 404
	ErrMethodNotAllowed   = errors.New("couch: method not allowed")     // 405
	ErrConflict           = errors.New("couch: conflict")               // 409
	ErrPreconditionFailed = errors.New("couch: precondition failed")    // 412 (e.g. file_exists)
	ErrTooLarge           = errors.New("couch: request too large")      // 413
	ErrURITooLong         = errors.New("couch: request URI too long")   // 414
	ErrUnsupportedMedia   = errors.New("couch: unsupported media type") // 415
	ErrExpectationFailed  = errors.New("couch: expectation failed")     // 417
	ErrServerError        = errors.New("couch: server error")           // 5xx, after retries

	// ErrMaxBackoff: the peer kept answering 429 until the rate limiter's
	// interval reached its maximum (CouchDB's max_backoff).
	ErrMaxBackoff = errors.New("couch: max_backoff")
	// ErrRequestFailed: no HTTP answer (connection refused or dropped,
	// timeout), after the retries.
	ErrRequestFailed = errors.New("couch: request failed")
	// ErrTimeout: the peer sent nothing for ConnectionTimeout, or the request
	// exceeded RequestTimeout.
	ErrTimeout = errors.New("couch: timeout")
	// ErrBadResponse: a 2xx reply whose body is not the expected JSON.
	ErrBadResponse = errors.New("couch: bad response")
	// ErrTLS: the TLS handshake with the endpoint failed (its certificate
	// was refused, it refused ours, or it does not speak TLS). It is not
	// retried: the error names the setting to change.
	ErrTLS = errors.New("couch: TLS")
	// ErrLoginBudget: a login not tried, as the peer refused its user's
	// logins too often lately (Logins; *LoginBudgetError says when).
	ErrLoginBudget = errors.New("couch: login budget spent")
	// ErrBodyTooLarge: a 2xx answer longer than the request's MaxBody
	// (*BodyTooLargeError). It is not retried: the peer would send it
	// again.
	ErrBodyTooLarge = errors.New("couch: answer too large")
	// ErrAddressDenied: the endpoint or proxy is at an address the
	// Options.Addresses policy refuses (an *AddressError names the
	// address and the rule). No connection was made, and it is not
	// retried.
	ErrAddressDenied = errors.New("couch: " + AddressDeniedReason)
)

// invalidOptions is the error for an Options or RateLimiterConfig value
// out of range: it wraps ErrInvalidOptions, followed by format applied to
// args.
func invalidOptions(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
}

// statusErrors maps HTTP statuses to their sentinels (5xx handled apart).
var statusErrors = map[int]error{
	http.StatusBadRequest:            ErrBadRequest,
	http.StatusUnauthorized:          ErrUnauthorized,
	http.StatusForbidden:             ErrForbidden,
	http.StatusNotFound:              ErrNotFound,
	http.StatusMethodNotAllowed:      ErrMethodNotAllowed,
	http.StatusConflict:              ErrConflict,
	http.StatusPreconditionFailed:    ErrPreconditionFailed,
	http.StatusRequestEntityTooLarge: ErrTooLarge,
	http.StatusRequestURITooLong:     ErrURITooLong,
	http.StatusUnsupportedMediaType:  ErrUnsupportedMedia,
	http.StatusExpectationFailed:     ErrExpectationFailed,
}

// HTTPError is a non-2xx answer (after retries for 408/5xx). Error_ and
// Reason come from CouchDB's {"error","reason"} body when there is one.
type HTTPError struct {
	Status int    `json:"-"`
	Error_ string `json:"error"`
	Reason string `json:"reason"`
	Method string `json:"-"`
	URL    string `json:"-"` // redacted request URL (no password, no query)
	// Header is the reply's header.
	Header http.Header `json:"-"`
	// Body is the start of the reply body (at most ErrorBodyMax bytes), e.g.
	// the per-document results of a 417 _bulk_docs reply. Not printed.
	Body []byte `json:"-"`
	// Login reports the answer to a session's login (POST /_session,
	// Method and URL) that refused it: the request that needed the login
	// was not sent.
	Login bool `json:"-"`
}

// ErrorBodyMax bounds HTTPError.Body.
const ErrorBodyMax = 1 << 20

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("couch: %s %s: %d", e.Method, e.URL, e.Status)
	if e.Error_ != "" {
		msg += " " + e.Error_
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is matches the sentinel of the status (ErrNotFound for 404 and so on,
// ErrServerError for any 5xx).
func (e *HTTPError) Is(target error) bool {
	if e.Status >= 500 && e.Status <= 599 {
		return target == ErrServerError
	}
	s, ok := statusErrors[e.Status]
	return ok && s == target
}

// BodyTooLargeError is a 2xx answer to Method on URL (redacted) longer
// than Limit bytes, the request's MaxBody, whose name is Name (the
// request's MaxBodyName; "LoginAnswerMax" for a session's login): DoJSON
// and DoBytes return it having read Limit bytes and one more, and the
// body Do returns fails its Read with it once Limit bytes have been read.
// It matches ErrBodyTooLarge.
type BodyTooLargeError struct {
	Method string
	URL    string
	Limit  int64
	Name   string
}

func (e *BodyTooLargeError) Error() string {
	msg := fmt.Sprintf("couch: %s %s: the answer is longer than %d bytes", e.Method, e.URL, e.Limit)
	if e.Name != "" {
		msg += " (" + e.Name + ")"
	}
	return msg
}

// Unwrap returns ErrBodyTooLarge.
func (e *BodyTooLargeError) Unwrap() error { return ErrBodyTooLarge }

// RequestError is a request that got no usable HTTP answer after Attempts
// attempts. Err is the last cause, with any URL stripped from it.
type RequestError struct {
	Method   string
	URL      string // redacted
	Attempts int
	Err      error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("couch: %s %s failed after %d attempt(s): %v", e.Method, e.URL, e.Attempts, e.Err)
}

// Unwrap returns ErrRequestFailed and the cause.
func (e *RequestError) Unwrap() []error { return []error{ErrRequestFailed, e.Err} }
