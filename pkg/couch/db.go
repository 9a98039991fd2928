package couch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/internal/clockwait"
)

// DB is one remote database: an Endpoint with its own connection pool,
// limited to Options.HTTPConnections concurrent requests. It is safe for
// concurrent use. Close releases its idle connections.
type DB struct {
	ep      Endpoint
	opts    Options
	limiter *RateLimiter
	client  *http.Client
	tr      *http.Transport
	slots   chan struct{} // one token per concurrent request
	release func()        // gives the pool back: Close
	auth    string        // Basic Authorization header value, "" for none
	sess    *session      // cookie session (nil: Basic or no credentials)
	token   *tokenSource  // bearer token (nil: no Endpoint.Token)
	keyBase string        // rate limiter key prefix: scheme://host
	host    string        // host:port, for Options.Count
}

// NewDB returns a client for ep. limiter is shared 429 back-off state; pass
// the process's one limiter, or nil for a private one with default settings
// on opts.Clock.
func NewDB(ep Endpoint, opts Options, limiter *RateLimiter) (*DB, error) {
	if ep.URL == nil || (ep.URL.Scheme != "http" && ep.URL.Scheme != "https") || ep.URL.Host == "" {
		return nil, fmt.Errorf("%w: endpoint %q is not an http(s) URL", ErrInvalidEndpoint, ep.Redacted())
	}
	if ep.URL.User != nil {
		return nil, fmt.Errorf("%w: endpoint URL %q carries credentials; use ParseEndpoint", ErrInvalidEndpoint, ep.Redacted())
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if limiter == nil {
		limiter, _ = NewRateLimiter(RateLimiterConfig{Clock: opts.Clock})
	}
	u := *ep.URL
	ep.URL = &u
	ep.Headers = ep.Headers.Clone()
	if ep.Headers == nil {
		ep.Headers = http.Header{}
	}
	host := hostPort(ep.URL)
	mkFor := func(hostname string) *http.Transport {
		dial := opts.Socket.dialer(opts.ConnectionTimeout, opts.Addresses)
		if count := opts.Count; count != nil {
			dial = countedDial(dial, func(c Count) { count(host, c) })
		}
		tr := &http.Transport{
			DialContext:         dial,
			TLSClientConfig:     serverNamed(opts.TLS, hostname),
			TLSHandshakeTimeout: opts.ConnectionTimeout,
			MaxConnsPerHost:     opts.HTTPConnections,
			MaxIdleConnsPerHost: opts.HTTPConnections,
			MaxIdleConns:        opts.HTTPConnections,
			IdleConnTimeout:     opts.IdleConnTimeout,
			// No transparent gzip: a compressing peer (pouchdb-server's
			// express) buffers streamed feeds, heartbeats included.
			DisableCompression: true,
			ForceAttemptHTTP2:  true,
		}
		if opts.Proxy != nil {
			tr.Proxy = opts.Addresses.proxyFunc(opts.Proxy)
		}
		return tr
	}
	mk := func() *http.Transport { return mkFor(ep.URL.Hostname()) }
	var tr *http.Transport
	release := func() { tr.CloseIdleConnections() }
	if opts.Pools != nil {
		tr, release = opts.Pools.acquire(ep, opts, mk)
	} else {
		tr = mk()
	}
	db := &DB{
		ep:      ep,
		opts:    opts,
		limiter: limiter,
		tr:      tr,
		client:  &http.Client{Transport: tr},
		slots:   make(chan struct{}, opts.HTTPConnections),
		release: release,
		keyBase: ep.URL.Scheme + "://" + strings.ToLower(ep.URL.Host),
		host:    host,
	}
	if t := ep.Token; t != nil {
		u, err := url.Parse(t.URL)
		if err != nil || u.Host == "" {
			release()
			return nil, fmt.Errorf("%w: token endpoint %q is not an http(s) URL", ErrInvalidEndpoint, t.URL)
		}
		// Its own connections, not kept: a token lasts for many requests.
		ttr := mkFor(u.Hostname())
		ttr.DisableKeepAlives = true
		db.token = newTokenSource(db, t, ttr)
		return db, nil
	}
	if ep.Username != "" || ep.Password != "" {
		req := &http.Request{Header: http.Header{}}
		req.SetBasicAuth(ep.Username, ep.Password)
		db.auth = req.Header.Get("Authorization")
		if opts.Auth == AuthSession {
			db.sess = newSession(db)
		}
	}
	return db, nil
}

// Endpoint returns the database's endpoint.
func (db *DB) Endpoint() Endpoint { return db.ep }

// Options returns the options in effect (defaults filled in).
func (db *DB) Options() Options { return db.opts }

// Redacted is the database URL without password, for messages.
func (db *DB) Redacted() string { return db.ep.Redacted() }

// String is the redacted URL, so printing a DB never shows its credentials.
func (db *DB) String() string { return "couch.DB(" + db.ep.Redacted() + ")" }

// GoString is String (for %#v).
func (db *DB) GoString() string { return db.String() }

// Close closes the DB's idle connections, or with Options.Pools releases
// its shared pool (whose idle connections close with its last DB).
// Requests in flight are not interrupted; the DB stays usable.
func (db *DB) Close() { db.release() }

// Request is one HTTP request to a DB.
type Request struct {
	Method string
	// Path is relative to the database URL and already escaped ("" is the
	// database itself, "_changes", "_local/x", EscapeDocID(id)); a leading
	// "/" makes it relative to the server root instead ("/_session").
	Path   string
	Query  url.Values
	Header http.Header // added to the endpoint's headers
	// Body is sent with Content-Length (never chunked) and re-sent on
	// retries; Content-Type defaults to application/json when Body is set.
	Body []byte
	// NoRetry makes a single attempt (429 back-off still applies). net/http
	// may still replay an idempotent request (GET, HEAD) once by itself when
	// a reused pooled connection turns out closed before any answer.
	NoRetry bool
	// Stream exempts the request from Options.RequestTimeout and from the
	// trickle guard (continuous feeds); the ConnectionTimeout inactivity
	// limit still applies to every read of the body.
	Stream bool
	// MaxBody bounds the 2xx body read from the peer: DoJSON and DoBytes
	// fail with a *BodyTooLargeError, at once (no retry), when the answer
	// is longer, and the body Do returns fails its Read with one once
	// MaxBody bytes have been read, so a peer's answer never holds more
	// than MaxBody bytes of the caller's memory. 0 is BodyMaxDefault for a
	// request that is not a Stream, and no limit for a Stream (a
	// continuous feed never ends: its reader bounds what it keeps); a
	// negative value is no limit.
	MaxBody int64
	// MaxBodyName names MaxBody in a *BodyTooLargeError ("BodyMaxDefault"
	// when both are unset).
	MaxBodyName string

	// login marks a session's own POST /_session, which carries no
	// session credential.
	login bool
}

// BodyMaxDefault is Request.MaxBody's default for requests that are not
// streams: the longest 2xx answer DoJSON and DoBytes read.
const BodyMaxDefault = 16 << 20

// NoBodyMax is a Request.MaxBody that sets no limit.
const NoBodyMax = -1

// LoginAnswerMax bounds the answer to a session's login (POST /_session:
// {"ok":true,"name":…,"roles":[…]}).
const LoginAnswerMax = 1 << 20

// maxBody is r's MaxBody with its default filled in, -1 for no limit, and
// its name.
func (r Request) maxBody() (int64, string) {
	switch {
	case r.MaxBody > 0:
		return r.MaxBody, r.MaxBodyName
	case r.MaxBody < 0 || r.Stream:
		return -1, ""
	}
	return BodyMaxDefault, cmp.Or(r.MaxBodyName, "BodyMaxDefault")
}

// EscapeDocID escapes a document id for Request.Path: "_design/" and
// "_local/" prefixes keep their slash, everything else is path-escaped (a
// "/" inside an id becomes %2F).
func EscapeDocID(id string) string {
	for _, p := range []string{"_design/", "_local/"} {
		if rest, ok := strings.CutPrefix(id, p); ok {
			return p + url.PathEscape(rest)
		}
	}
	return url.PathEscape(id)
}

// Do sends r and returns a 2xx response whose body the caller must close.
// Transport errors, 408 and 5xx answers are retried (RetryWait doubling,
// up to RetriesPerRequest retries and within RetryTimeLimit); 429 answers
// back off through the rate limiter without using up retries. A stalled
// peer is not retried: a request fails at once with an error wrapping
// ErrTimeout when the peer stays silent for ConnectionTimeout, or, for a
// request that is not a stream, sends fewer than StallBytes in a whole
// ConnectionTimeout (a trickle); only a first stall on a pooled
// connection, which the peer may have dropped unannounced, is retried,
// once. Redirects are followed. Any other status,
// or the last 408/5xx, is returned as *HTTPError with the body consumed.
// The body returned fails with an error wrapping ErrTimeout if the peer
// stays silent for ConnectionTimeout during a Read, or, for a request that
// is not a Stream, if its Reads get fewer than StallBytes while they wait
// a whole ConnectionTimeout on the peer (time spent between Reads does not
// count); and with a *BodyTooLargeError past r.MaxBody.
func (db *DB) Do(ctx context.Context, r Request) (*http.Response, error) {
	resp, _, err := db.do(ctx, r, false)
	return resp, err
}

// DoJSON sends r with Accept: application/json and decodes the 2xx reply
// body into out (skipped when out is nil). The whole body is read inside the
// retry loop, so a reply cut short is retried like a transport error; a
// reply longer than r.MaxBody (BodyMaxDefault) fails with a
// *BodyTooLargeError.
func (db *DB) DoJSON(ctx context.Context, r Request, out any) error {
	if r.Header.Get("Accept") == "" {
		r.Header = r.Header.Clone()
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header.Set("Accept", "application/json")
	}
	_, body, err := db.do(ctx, r, true)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrBadResponse, r.Method, db.redactedPath(r), err)
	}
	return nil
}

// DoBytes is DoJSON returning the raw 2xx body.
func (db *DB) DoBytes(ctx context.Context, r Request) ([]byte, error) {
	_, body, err := db.do(ctx, r, true)
	return body, err
}

// requestURL builds the absolute URL of r.
func (db *DB) requestURL(r Request) *url.URL {
	u := *db.ep.URL
	u.User = nil
	var escPath string
	if strings.HasPrefix(r.Path, "/") {
		escPath = r.Path
	} else {
		base := db.ep.URL.EscapedPath()
		if r.Path != "" && !strings.HasSuffix(base, "/") {
			base += "/"
		}
		escPath = base + r.Path
	}
	if p, err := url.PathUnescape(escPath); err == nil {
		u.Path, u.RawPath = p, escPath
	} else {
		u.Path, u.RawPath = escPath, ""
	}
	q := db.ep.URL.Query()
	if r.login {
		q = url.Values{} // the endpoint's query is for its database
	}
	for k, vs := range r.Query {
		q[k] = append(q[k], vs...)
	}
	u.RawQuery = q.Encode()
	u.ForceQuery = false
	return &u
}

// redactedPath is the request URL for messages: no query (it may carry
// doc ids or filter values), no password.
func (db *DB) redactedPath(r Request) string {
	u := db.requestURL(r)
	u.RawQuery = ""
	return RedactURL(u, db.ep.Username)
}

// do runs the retry loop. With readAll the 2xx body is read (and a failed
// read retried) and returned as bytes; otherwise the response is returned
// with its body open.
func (db *DB) do(ctx context.Context, r Request, readAll bool) (*http.Response, []byte, error) {
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	target := db.requestURL(r)
	where := db.redactedPath(r)
	key := db.keyBase + " " + r.Method
	retries := db.opts.RetriesPerRequest
	if r.NoRetry {
		retries = 0
	}
	wait := db.opts.RetryWait
	var firstFailure time.Time
	attempts, stalls, authRetries := 0, 0, 0
	for {
		if pace := db.opts.Pace; pace != nil {
			if err := pace(ctx, db.keyBase); err != nil {
				return nil, nil, err
			}
		}
		if err := db.limiter.Wait(ctx, key); err != nil {
			if errors.Is(err, ErrMaxBackoff) {
				return nil, nil, fmt.Errorf("%w: %s %s: the peer kept answering 429 Too Many Requests", ErrMaxBackoff, r.Method, where)
			}
			return nil, nil, err
		}
		cred, err := db.credential(ctx, r)
		if err != nil {
			return nil, nil, err
		}
		attempts++
		db.count(CountRequest)
		resp, body, err := db.attempt(ctx, r, target, readAll, cred)
		db.countAnswer(ctx, resp, err, !readAll)
		var retryable error
		var tooLarge *BodyTooLargeError
		switch {
		case errors.As(err, &tooLarge):
			// The peer would send it again: the answer is the error.
			db.limiter.Success(key)
			db.observe(Attempt{Method: r.Method, URL: where, N: attempts, Max: retries + 1, Err: tooLarge, Final: true})
			db.log().Warn().Str("url", where).Str("method", r.Method).Int64("max_body", tooLarge.Limit).Msg("couch: answer too large")
			return nil, nil, tooLarge
		case err != nil:
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			retryable = err
		case resp.StatusCode == http.StatusTooManyRequests:
			db.observe(Attempt{Method: r.Method, URL: where, N: attempts, Max: retries + 1, Err: newHTTPError(r.Method, where, resp, body)})
			db.limiter.Failure(key)
			db.log().Debug().Str("url", where).Str("method", r.Method).Float64("interval_ms", millis(db.limiter.Interval(key))).Msg("couch: 429, backing off")
			attempts-- // 429s do not use up retries
			continue
		case resp.StatusCode == http.StatusUnauthorized && cred.bearer != "" && authRetries < authRetriesMax && db.token.rejected(ctx, cred.bearer),
			resp.StatusCode == http.StatusUnauthorized && cred.cookie != "" && authRetries < authRetriesMax && db.sess.rejected(cred):
			db.limiter.Success(key)
			authRetries++
			attempts-- // a renewed session is not a retry
			continue
		default:
			db.limiter.Success(key)
			if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
				db.observe(Attempt{Method: r.Method, URL: where, N: attempts, Max: retries + 1})
				if db.sess != nil {
					db.sess.accepted(cred, resp.Header)
				}
				return resp, body, nil
			}
			herr := newHTTPError(r.Method, where, resp, body)
			if resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500 {
				retryable = herr
				break
			}
			db.observe(Attempt{Method: r.Method, URL: where, N: attempts, Max: retries + 1})
			return nil, nil, herr
		}
		now := db.opts.Clock.Now()
		if firstFailure.IsZero() {
			firstFailure = now
		}
		// A stalled peer (silent, or trickling, for ConnectionTimeout)
		// fails the request at once: waiting out every retry would hide
		// the stall for retries × connection_timeout. The one exception is
		// a first stall on a pooled connection, which a peer or a NAT may
		// have dropped without closing it: that is retried once, on a new
		// connection.
		stalled := false
		if errors.Is(retryable, ErrTimeout) {
			stalls++
			stalled = stalls > 1 || !errors.Is(retryable, errPooled)
		}
		// A refused certificate stays refused, and so does a denied
		// address: the error says which setting to change.
		final := stalled || errors.Is(retryable, ErrTLS) || errors.Is(retryable, ErrAddressDenied) ||
			attempts > retries || now.Sub(firstFailure) >= db.opts.RetryTimeLimit
		db.observe(Attempt{Method: r.Method, URL: where, N: attempts, Max: retries + 1, Err: retryable, Final: final})
		if final {
			db.log().Warn().Str("url", where).Str("method", r.Method).Int("attempts", attempts).Str("error", retryable.Error()).Msg("couch: request failed")
			var herr *HTTPError
			if errors.As(retryable, &herr) {
				return nil, nil, herr
			}
			return nil, nil, &RequestError{Method: r.Method, URL: where, Attempts: attempts, Err: retryable}
		}
		db.log().Debug().Str("url", where).Str("method", r.Method).Int("attempt", attempts).Float64("wait_ms", millis(wait)).Str("error", retryable.Error()).Msg("couch: retrying")
		if err := clockwait.Sleep(ctx, db.opts.Clock, wait); err != nil {
			return nil, nil, err
		}
		wait = min(2*wait, db.opts.RetryWaitMax)
	}
}

// millis is d in milliseconds, to the microsecond, for log fields named
// …_ms.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// observe tells Options.Observe about an attempt.
func (db *DB) observe(a Attempt) {
	if db.opts.Observe != nil {
		db.opts.Observe(a)
	}
}

// credential is what the next attempt of r authenticates with: nothing
// when the DB has no credentials or the caller set its own Authorization
// (a login sets it, or nothing), the session's cookie (which may log in
// first), or Basic.
func (db *DB) credential(ctx context.Context, r Request) (credential, error) {
	switch {
	case r.login || r.Header.Get("Authorization") != "":
		return credential{}, nil
	case db.token != nil:
		tok, err := db.token.get(ctx)
		return credential{bearer: tok}, err
	case db.auth == "":
		return credential{}, nil
	case db.sess == nil:
		return credential{basic: true}, nil
	}
	return db.sess.authorize(ctx)
}

// attempt sends one request with cred. It returns either an error (no
// usable answer, retryable) or a response; for non-2xx responses and with
// readAll the body has been read into the returned bytes and closed.
func (db *DB) attempt(ctx context.Context, r Request, target *url.URL, readAll bool, cred credential) (*http.Response, []byte, error) {
	select {
	case db.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release := sync.OnceFunc(func() { <-db.slots })

	actx, cancel := context.WithCancelCause(ctx)
	if db.opts.RequestTimeout > 0 && !r.Stream {
		var stop context.CancelFunc
		actx, stop = context.WithTimeoutCause(actx, db.opts.RequestTimeout, errRequestTimeout)
		inner := cancel
		cancel = func(c error) { stop(); inner(c) }
	}
	wd := newWatchdog(db.opts.ConnectionTimeout, cancel)
	wd.start() // connecting, sending and waiting for headers
	if !r.Stream {
		wd.guardTrickle()
	}

	var body io.Reader
	if len(r.Body) > 0 {
		body = &kickReader{r: bytes.NewReader(r.Body), wd: wd}
	}
	req, err := http.NewRequestWithContext(actx, r.Method, target.String(), body)
	if err != nil {
		wd.end()
		cancel(nil)
		release()
		return nil, nil, err
	}
	switch {
	case len(r.Body) == 0 && r.Body != nil:
		req.Body, req.ContentLength = http.NoBody, 0 // "Content-Length: 0", not chunked
	case r.Body != nil:
		req.ContentLength = int64(len(r.Body))
		req.GetBody = func() (io.ReadCloser, error) {
			return io.NopCloser(&kickReader{r: bytes.NewReader(r.Body), wd: wd}), nil
		}
	}
	for k, vs := range db.ep.Headers {
		req.Header[k] = append([]string(nil), vs...)
	}
	for k, vs := range r.Header {
		req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	if h := req.Header.Get("Host"); h != "" { // net/http ignores Host in Header
		req.Host = h
		req.Header.Del("Host")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", db.opts.UserAgent)
	}
	if r.Body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case cred.bearer != "":
		req.Header.Set("Authorization", "Bearer "+cred.bearer)
	case cred.basic:
		req.Header.Set("Authorization", db.auth)
	case cred.cookie != "":
		cookie := "AuthSession=" + cred.cookie
		if h := req.Header.Get("Cookie"); h != "" { // the endpoint's own cookies
			cookie = h + "; " + cookie
		}
		req.Header.Set("Cookie", cookie)
	}

	var pooled, held atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			pooled.Store(info.Reused)
			held.Store(true)
			if info.Reused {
				db.count(CountConnAcquire)
			}
		},
		PutIdleConn: func(err error) {
			if err == nil {
				db.count(CountConnRelease)
			}
		},
	}))
	resp, err := db.client.Do(req)
	wd.stop()
	if err != nil {
		if held.Load() {
			db.countBroken(actx)
		}
		wd.end()
		err = cleanError(err, actx)
		if terr := tlsFailure(err, db.opts.TLS != nil && len(db.opts.TLS.Certificates) > 0); terr != nil {
			err = terr
		}
		cancel(nil)
		release()
		return nil, nil, markPooled(err, pooled.Load())
	}
	wd.restartTrickle() // the body gets a whole window of its own
	done := func() {
		wd.end()
		cancel(nil)
		release()
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode <= 299
	maxBody, maxName := r.maxBody()
	tooLarge := func() error {
		return &BodyTooLargeError{Method: r.Method, URL: db.redactedPath(r), Limit: maxBody, Name: maxName}
	}
	if !ok || readAll {
		// An error's body is cut at ErrorBodyMax; a 2xx body is read
		// whole, one byte past its limit to tell a longer one.
		limit := int64(ErrorBodyMax)
		if ok {
			limit = maxBody
			if limit >= 0 {
				limit++
			}
		}
		data, rerr := readBody(&watchedBody{rc: resp.Body, wd: wd, ctx: actx, left: -1}, limit)
		if rerr != nil {
			db.countBroken(actx)
		}
		resp.Body.Close()
		done()
		if rerr != nil && ok {
			return nil, nil, markPooled(rerr, pooled.Load())
		}
		if ok && maxBody >= 0 && int64(len(data)) > maxBody {
			return nil, nil, tooLarge()
		}
		resp.Body = http.NoBody
		return resp, data, nil
	}
	open := &watchedBody{rc: resp.Body, wd: wd, ctx: actx, done: sync.OnceFunc(done), left: maxBody,
		broken: sync.OnceFunc(func() { db.countBroken(actx) })}
	if maxBody >= 0 {
		open.tooLarge = tooLarge()
	}
	if !r.Stream {
		// The caller may pause between Reads (to write what it read):
		// from here on only the time its Reads wait counts.
		wd.endTrickle()
		open.trickle = &readTrickle{timeout: db.opts.ConnectionTimeout}
	}
	resp.Body = open
	return resp, nil, nil
}

// readBody reads rc fully (limit < 0) or its first limit bytes.
func readBody(rc io.Reader, limit int64) ([]byte, error) {
	if limit >= 0 {
		rc = io.LimitReader(rc, limit)
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return data, nil
}

func newHTTPError(method, where string, resp *http.Response, body []byte) *HTTPError {
	e := &HTTPError{Status: resp.StatusCode, Method: method, URL: where, Header: resp.Header, Body: body}
	var couchErr struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &couchErr) == nil {
		e.Error_, e.Reason = couchErr.Error, couchErr.Reason
	}
	if e.Error_ == "" {
		e.Error_ = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	}
	return e
}

// nopLogger is used when Options.Logger is nil.
var nopLogger = zerolog.Nop()

func (db *DB) log() *zerolog.Logger {
	if db.opts.Logger != nil {
		return db.opts.Logger
	}
	return &nopLogger
}

// errRequestTimeout is the cancel cause of RequestTimeout.
var errRequestTimeout = fmt.Errorf("%w: request_timeout exceeded", ErrTimeout)

// errPooled marks a timeout on a connection that came from the pool (see
// do).
var errPooled = errors.New("on a pooled connection")

// markPooled adds errPooled to a timeout on a pooled connection.
func markPooled(err error, pooled bool) error {
	if pooled && errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w (%w)", err, errPooled)
	}
	return err
}

// errIdle is the cancel cause of the ConnectionTimeout watchdog.
var errIdle = fmt.Errorf("%w: the peer sent nothing for connection_timeout", ErrTimeout)

// errHandshake is a TLS handshake that got no answer for
// connection_timeout (the transport's TLSHandshakeTimeout): a stall, as
// the watchdog's, most often an https endpoint on a plain HTTP port whose
// server waits for a request line (CouchDB does).
var errHandshake = fmt.Errorf("%w: the peer answered nothing to the TLS handshake for connection_timeout (does it serve https on this port?)", ErrTimeout)

// cleanError turns a client error into one without URLs (a *url.Error
// prints the request URL; ours never carries a password, but query strings
// may be long) and with the timeout cause when the watchdog fired.
func cleanError(err error, ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrTimeout) {
		return cause
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() && strings.Contains(err.Error(), "TLS handshake timeout") {
		return errHandshake
	}
	return err
}
