package engine

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/rs/zerolog"
)

// transport sends one HTTP request to a database endpoint. path is relative
// to the database URL ("" is the database itself) and already escaped. A 2xx
// answer is returned as an httpResult. Any other status is returned as a
// *statusError, the engine's one HTTP error type, which the transport makes
// once and callers pass on. Other errors mean the request got no answer
// (transport failures after the client's retries, rate-limiter give-up,
// context end), or an answer over its maxBody (*overLimit). With stream set
// the body is returned unread in httpResult.stream and must be closed; its
// Read fails with an *overLimit past maxBody.
type transport interface {
	call(ctx context.Context, r httpRequest) (*httpResult, error)
	// redacted is the endpoint URL without password, for messages.
	redacted() string
	// close releases idle connections once the run is over.
	close()
}

type httpRequest struct {
	method  string
	path    string
	query   url.Values
	header  http.Header
	body    []byte
	stream  bool
	noRetry bool
	// feed marks a stream that may stay open a long time without
	// sending (a changes feed): no trickle guard (couch.Request.Stream).
	feed bool
	// maxBody bounds the 2xx answer (0: AnswerMax; negative: no limit, the
	// reader of a stream bounds its parts), and limit names it in errors
	// ("" for AnswerMax).
	maxBody int64
	limit   string
}

// bodyLimit is r's maxBody with its default filled in, and its name.
func (r httpRequest) bodyLimit() (int64, string) {
	if r.maxBody == 0 {
		return AnswerMax, "AnswerMax"
	}
	return r.maxBody, r.limit
}

// httpResult is a 2xx answer. status is the answer's own for streamed
// requests; the others report any 2xx as 200.
type httpResult struct {
	status int
	header http.Header
	body   []byte
	stream io.ReadCloser
}

// statusError is an HTTP answer other than 2xx. It unwraps to the sentinel
// for 401 / 403 and to ErrHTTP otherwise.
//
// It is kept apart from pkg/couch's *HTTPError, which the transport turns
// into it, for real differences: its message (which becomes a job's
// failure reason) has no "couch:" prefix and no status text standing in
// for a missing "error" member; it unwraps to the engine's sentinels, not
// couch's; the error of a streamed request carries no decoded body; and
// the tests' fake transports make it without a pkg/couch client.
type statusError struct {
	Method, URL string
	Status      int
	Name        string // CouchDB's "error" member
	Reason      string
	// body is the start of the reply, for callers that read an error
	// reply's content (_bulk_docs' 417).
	body []byte
	// login reports the peer's refusal of the session's login (Method and
	// URL are the login's, POST /_session): the request was not sent.
	login bool
}

// newStatusError is the error for a status answer to method on u (the
// redacted URL); Name and Reason come from body when it is CouchDB's
// {"error", "reason"} object.
func newStatusError(method, u string, status int, body []byte) *statusError {
	e := &statusError{Method: method, URL: u, Status: status, body: body}
	var reply struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &reply) == nil {
		e.Name, e.Reason = reply.Error, reply.Reason
	}
	return e
}

// unexpectedStatus is the error for a streamed 2xx answer to r other than
// the 200 expected, from the endpoint at base; it reads the start of the
// stream, which the caller closes.
func unexpectedStatus(r httpRequest, base string, res *httpResult) *statusError {
	body, _ := io.ReadAll(io.LimitReader(res.stream, 64<<10))
	return newStatusError(r.method, base+r.path, res.status, body)
}

func (e *statusError) Error() string {
	msg := fmt.Sprintf("%s %s: HTTP %d", e.Method, e.URL, e.Status)
	if e.Name != "" {
		msg += " " + e.Name
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
	}
	return msg
}

func (e *statusError) Unwrap() error {
	switch e.Status {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	}
	return ErrHTTP
}

// statusOf is the status of a *statusError in err's chain, 0 if none.
func statusOf(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

// couchTransport sends the engine's requests through pkg/couch, which does
// the retries (408, 5xx, transport errors, 250 ms doubling), the 429
// back-off and the inactivity timeouts.
type couchTransport struct {
	db   *couch.DB
	side string // "source" or "target", for messages
}

// ClientSettings are a node's settings of the HTTP clients of every
// replication, CouchDB's [replicator] keys that a replication cannot
// override.
type ClientSettings struct {
	// TLS configures https endpoints (nil: Go's defaults, which verify
	// against the system's roots); see couch.TLSSettings.
	TLS *tls.Config
	// Auth is auth_plugins: session (the default) or Basic on every
	// request.
	Auth couch.AuthMode
	// SessionRefreshInterval is session_refresh_interval_sec (0:
	// couch.SessionRefreshIntervalDefault).
	SessionRefreshInterval time.Duration
	// IdleConnTimeout is connection_close_interval: how long an idle
	// pooled connection stays open (0: couch.IdleConnTimeoutDefault).
	IdleConnTimeout time.Duration
	// Addresses refuses connections to the addresses it denies
	// (denied_endpoint_networks and the rest; see couch.AddressPolicy),
	// checked at each connect: the run fails with ErrAddressDenied. nil:
	// every address.
	Addresses *couch.AddressPolicy
	// Count, if set, is told of the endpoints' requests and connections
	// (couch.Options.Count).
	Count func(host string, c couch.Count)
}

// newPeers builds the source and target clients, which log to log, wait
// on opts.Clock and tell h (nil: nothing) of their attempts. The source gets at least two connections: a streamed
// changes feed holds one for as long as it runs.
func newPeers(rep Replication, opts Options, log *zerolog.Logger, h *health) (*peer, *peer, error) {
	copts := couch.Options{
		HTTPConnections:   rep.HTTPConnections,
		ConnectionTimeout: rep.ConnectionTimeout,
		// The engine's 0 (after its defaults) is no retries, couch's the default.
		RetriesPerRequest:      cmp.Or(rep.RetriesPerRequest, couch.NoRetries),
		RequestTimeout:         rep.RequestTimeout,
		Logger:                 log,
		Clock:                  opts.Clock,
		TLS:                    opts.Client.TLS,
		Auth:                   opts.Client.Auth,
		SessionRefreshInterval: opts.Client.SessionRefreshInterval,
		IdleConnTimeout:        opts.Client.IdleConnTimeout,
		Addresses:              opts.Client.Addresses,
		Logins:                 opts.Logins,
		Pools:                  opts.Pools,
		Count:                  opts.Client.Count,
	}
	if rep.SocketOptions != nil {
		copts.Socket = *rep.SocketOptions
	}
	srcOpts, tgtOpts := copts, copts
	srcOpts.HTTPConnections = max(2, copts.HTTPConnections)
	srcOpts.Proxy, tgtOpts.Proxy = rep.SourceProxy, rep.TargetProxy
	srcOpts.Pace, tgtOpts.Pace = paceAs(opts.Pace, rep.Source), paceAs(opts.Pace, rep.Target)
	srcOpts.Observe, tgtOpts.Observe = h.observer(sourceSide), h.observer(targetSide)
	src, err := couch.NewDB(rep.Source, srcOpts, opts.Limiter)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: source: %w", ErrInvalidSpec, err)
	}
	tgt, err := couch.NewDB(rep.Target, tgtOpts, opts.Limiter)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: target: %w", ErrInvalidSpec, err)
	}
	return &peer{t: couchTransport{src, "source"}}, &peer{t: couchTransport{tgt, "target"}}, nil
}

func (t couchTransport) redacted() string { return t.db.Redacted() }

// close releases idle connections.
func (t couchTransport) close() { t.db.Close() }

// call maps pkg/couch's results: a 2xx answer is a result (its body read
// whole unless streamed), any other answer a *statusError, and a request
// without answer an error wrapping ErrMaxBackoff, or an *unanswered.
func (t couchTransport) call(ctx context.Context, r httpRequest) (*httpResult, error) {
	maxBody, name := r.bodyLimit()
	if maxBody < 0 {
		maxBody = couch.NoBodyMax
	}
	req := couch.Request{Method: r.method, Path: r.path, Query: r.query, Header: r.header, Body: r.body,
		NoRetry: r.noRetry, Stream: r.feed, MaxBody: maxBody, MaxBodyName: name}
	if r.stream {
		resp, err := t.db.Do(ctx, req)
		if err != nil {
			return nil, t.failure(ctx, r, err)
		}
		return &httpResult{status: resp.StatusCode, header: resp.Header, stream: limitedBody{resp.Body, t}}, nil
	}
	body, err := t.db.DoBytes(ctx, req)
	if err != nil {
		return nil, t.failure(ctx, r, err)
	}
	return &httpResult{status: http.StatusOK, body: body}, nil
}

func (t couchTransport) failure(ctx context.Context, r httpRequest, err error) error {
	var he *couch.HTTPError
	switch {
	case errors.Is(err, couch.ErrBodyTooLarge):
		return t.overLimit(err)
	case errors.As(err, &he) && he.Login:
		// The login the request needed was refused: the answer is the
		// login's, with the peer's reason.
		se := newStatusError(he.Method, he.URL, he.Status, he.Body)
		se.login = true
		return se
	case errors.As(err, &he):
		body := he.Body
		if r.stream {
			// The error of a streamed request (changes feed, open_revs)
			// names its status only: its body is not decoded.
			body = nil
		}
		return newStatusError(r.method, t.redacted()+r.path, he.Status, body)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, couch.ErrMaxBackoff):
		return fmt.Errorf("%w: %w", ErrMaxBackoff, err)
	case errors.Is(err, couch.ErrLoginBudget):
		return fmt.Errorf("%w: %s %s: %w", ErrLoginBudget, t.side, t.redacted(), err)
	}
	return &unanswered{side: t.side, url: t.redacted(), err: err, denied: errors.Is(err, couch.ErrAddressDenied)}
}

// overLimit is the engine's error for couch's *BodyTooLargeError in err
// (an answer to a request, or to the session's login it needed), and err
// itself without one.
func (t couchTransport) overLimit(err error) error {
	var tl *couch.BodyTooLargeError
	if !errors.As(err, &tl) {
		return err
	}
	path := tl.URL
	if u, perr := url.Parse(tl.URL); perr == nil {
		path = u.EscapedPath()
	}
	return &overLimit{side: t.side, url: t.redacted(), what: tl.Method + " " + path + " answered", limit: tl.Limit, name: tl.Name}
}

// limitedBody is a streamed answer whose Read reports an answer past its
// maxBody as the engine's *overLimit.
type limitedBody struct {
	io.ReadCloser
	t couchTransport
}

func (b limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, couch.ErrBodyTooLarge) {
		err = b.t.overLimit(err)
	}
	return n, err
}

// requestPath is the path of a request to path (relative to the database
// at dbURL, or from the server's root when it starts with "/"), for
// messages: no query string.
func requestPath(dbURL, path string) string {
	if strings.HasPrefix(path, "/") {
		return path
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return path
	}
	return u.EscapedPath() + path
}

// unanswered is a request that got no answer from a peer, after the
// client's retries. It reads "http_request_failed: " and which peer, its
// redacted URL and what failed, then the request and its attempts:
// "source http://bob:*****@host/db/ refused the connection (POST /_session,
// 6 attempts)". It unwraps to ErrHTTP and the client's error (a
// *couch.RequestError, for UnreachableHost). A connection the node's
// address policy refused (denied) reads "forbidden_address: " instead, and
// unwraps to ErrAddressDenied instead of ErrHTTP.
type unanswered struct {
	side, url string
	err       error
	denied    bool
}

func (e *unanswered) Error() string {
	cause, request, subject := e.err, "", e.side+" "+e.url
	var re *couch.RequestError
	if errors.As(e.err, &re) {
		cause = re.Err
		path := re.URL
		if u, err := url.Parse(re.URL); err == nil {
			path = u.EscapedPath()
			if u.Host != "" && couch.Origin(re.URL) != couch.Origin(e.url) {
				// Another server than the peer's: its token endpoint.
				subject = "the token endpoint " + re.URL + " of " + subject
			}
		}
		request = fmt.Sprintf(" (%s %s, %d attempt", re.Method, path, re.Attempts)
		if re.Attempts != 1 {
			request += "s"
		}
		request += ")"
	}
	what, tag := ": "+cause.Error(), ErrHTTP
	var aerr *couch.AddressError
	switch {
	case errors.As(cause, &aerr):
		what, tag = ": "+strings.TrimPrefix(aerr.Error(), "couch: "), ErrAddressDenied
	case errors.Is(cause, syscall.ECONNREFUSED):
		what = " refused the connection"
	case errors.Is(cause, syscall.ECONNRESET):
		what = " reset the connection"
	}
	return fmt.Sprintf("%v: %s%s%s", tag, subject, what, request)
}

func (e *unanswered) Unwrap() []error {
	if e.denied {
		return []error{ErrAddressDenied, e.err}
	}
	return []error{ErrHTTP, e.err}
}

// paceAs is the couch.Options.Pace of endpoint e: pace (nil: none) with
// the user e logs in as, its user name or its token's client id.
func paceAs(pace func(ctx context.Context, host, user string) error, e couch.Endpoint) func(context.Context, string) error {
	if pace == nil {
		return nil
	}
	user := e.Username
	if user == "" && e.Token != nil {
		user = e.Token.ClientID
	}
	return func(ctx context.Context, host string) error { return pace(ctx, host, user) }
}
