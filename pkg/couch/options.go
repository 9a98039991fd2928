package couch

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

// Defaults, from CouchDB's [replicator] section where it has the knob.
const (
	// HTTPConnectionsDefault is http_connections: concurrent requests (and
	// pooled connections) per endpoint.
	HTTPConnectionsDefault = 20
	// ConnectionTimeoutDefault is connection_timeout: how long the peer may
	// stay silent (connecting, answering, or in the middle of a body) before
	// the attempt fails.
	ConnectionTimeoutDefault = 30 * time.Second
	// RetriesPerRequestDefault is retries_per_request.
	RetriesPerRequestDefault = 5
	// RequestTimeoutDefault is request_timeout: 0, no overall limit (CouchDB's
	// "infinity"). Never applied to Stream requests.
	RequestTimeoutDefault = 0
	// RetryWaitDefault is the first wait between retries; it doubles.
	RetryWaitDefault = 250 * time.Millisecond
	// RetryWaitMaxDefault caps the doubling wait.
	RetryWaitMaxDefault = 5 * time.Minute
	// RetryTimeLimitDefault stops retrying once this long has passed since
	// the first failure of a request (health_threshold / 2).
	RetryTimeLimitDefault = 60 * time.Second
	// IdleConnTimeoutDefault is connection_close_interval: pooled idle
	// connections are closed after it.
	IdleConnTimeoutDefault = 90 * time.Second
	// UserAgentDefault is sent unless the endpoint headers set User-Agent.
	UserAgentDefault = "fdbrep-replicator/1"
)

// NoRetries, as Options.RetriesPerRequest, disables retries (0 means the
// default, as for every Options field).
const NoRetries = -1

// Options tune one DB. Zero fields take their …Default.
type Options struct {
	HTTPConnections   int           // ≥ 1
	ConnectionTimeout time.Duration // > 0
	RetriesPerRequest int           // ≥ 0, or NoRetries
	RequestTimeout    time.Duration // ≥ 0; 0 = none
	RetryWait         time.Duration // > 0
	RetryWaitMax      time.Duration // ≥ RetryWait
	RetryTimeLimit    time.Duration // > 0
	IdleConnTimeout   time.Duration // > 0
	UserAgent         string

	// Proxy, if set, is an http, https or socks5 proxy URL for every request.
	Proxy *url.URL
	// TLS, if set, configures https (nil: Go's defaults, which verify
	// certificates against the system roots); TLSSettings.Config makes
	// one from CouchDB's settings. Each DB uses its own copy.
	TLS *tls.Config
	// Auth is how the endpoint's credentials are sent: AuthSession (the
	// default) logs in through POST /_session once and sends the cookie,
	// AuthBasic sends Basic on every request. Endpoints without
	// credentials send neither.
	Auth AuthMode
	// SessionRefreshInterval renews a session cookie that came without
	// Max-Age after this long (> 0; SessionRefreshIntervalDefault).
	SessionRefreshInterval time.Duration
	// Logins, if set, is shared by the DBs of a process: a login that one
	// of them saw refused is not tried again by any with the same peer and
	// credentials while it remembers it (see Logins). nil: each DB
	// remembers its own refusal only.
	Logins *Logins
	// Socket are the TCP options of every connection (zero: Go's
	// defaults).
	Socket SocketOptions
	// Addresses, if set, refuses every connection to an address it
	// denies, checked at each connect after DNS resolution: to the
	// endpoint, or to the proxy (whose requests are refused too when the
	// endpoint's host is a denied literal address). The error wraps
	// ErrAddressDenied. nil: every address.
	Addresses *AddressPolicy
	// Pools, if set, is the process's shared connection pools: the DB uses
	// the one of its server (see Pools) instead of a pool of its own, and
	// Close releases it. nil: the DB has its own pool.
	Pools *Pools
	// Logger receives retries and give-ups (URLs redacted). nil: no logging.
	Logger *zerolog.Logger
	// Observe, if set, is told the outcome of every attempt of a request:
	// the peer answered (Attempt.Err nil, whatever the status the request
	// then returns), or the attempt failed and is retried or given up.
	// It is called on the requesting goroutine and must not block.
	Observe func(Attempt)
	// Count, if set, is told of each event of the DB's requests and
	// connections that CouchDB's couch_replicator stats count (see Count),
	// with the endpoint's host and port ("db.example.com:443"). It is
	// called on the requesting goroutine or the transport's, and must be
	// quick and safe for concurrent use. With Pools, a pool's connections
	// are counted through the Count of the DB that made the pool.
	Count func(host string, c Count)
	// Pace, if set, is waited on before each attempt of a request (a
	// retry and a 429's again too), with the endpoint's scheme and host
	// ("https://db.example.com", lower case, its port when the URL names
	// one): a budget of requests per second per host. Its error ends the
	// request.
	Pace func(ctx context.Context, host string) error
	// Clock is the time source of the retry loop (its waits and
	// RetryTimeLimit) and of the private rate limiter NewDB makes when given
	// none; nil is the real clock. Tests pass a fake clock. Timeouts of the
	// requests themselves (ConnectionTimeout, RequestTimeout, dialing) bound
	// real input and output and always run on real time.
	Clock clockwork.Clock
}

// Attempt is one attempt of a request, as Options.Observe sees it.
type Attempt struct {
	Method string
	URL    string // redacted
	// N is the attempt's number (1 for the first; answers of 429, and of
	// 401 renewing a session, do not count) and Max the most a request
	// makes (RetriesPerRequest + 1).
	N, Max int
	// Err is why the attempt failed: a transport error (wrapping
	// ErrTimeout for a peer that stopped sending), or the *HTTPError of a
	// 408, 429 or 5xx answer. nil: the peer answered.
	Err error
	// Final reports that the request gives up with Err (no retry).
	Final bool
}

// WithDefaults returns o with every zero field replaced by its default.
func (o Options) WithDefaults() Options {
	o.HTTPConnections = cmp.Or(o.HTTPConnections, HTTPConnectionsDefault)
	o.ConnectionTimeout = cmp.Or(o.ConnectionTimeout, ConnectionTimeoutDefault)
	switch o.RetriesPerRequest {
	case 0:
		o.RetriesPerRequest = RetriesPerRequestDefault
	case NoRetries:
		o.RetriesPerRequest = 0
	}
	o.RetryWait = cmp.Or(o.RetryWait, RetryWaitDefault)
	o.RetryWaitMax = cmp.Or(o.RetryWaitMax, max(RetryWaitMaxDefault, o.RetryWait))
	o.RetryTimeLimit = cmp.Or(o.RetryTimeLimit, RetryTimeLimitDefault)
	o.IdleConnTimeout = cmp.Or(o.IdleConnTimeout, IdleConnTimeoutDefault)
	o.UserAgent = cmp.Or(o.UserAgent, UserAgentDefault)
	o.SessionRefreshInterval = cmp.Or(o.SessionRefreshInterval, SessionRefreshIntervalDefault)
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	return o
}

// Validate reports the first field out of range (after WithDefaults, so
// zero fields are fine). Errors wrap ErrInvalidOptions.
func (o Options) Validate() error {
	o = o.WithDefaults()
	switch {
	case o.HTTPConnections < 1:
		return invalidOptions("http_connections must be at least 1, got %d", o.HTTPConnections)
	case o.ConnectionTimeout < 0:
		return invalidOptions("connection_timeout must be positive, got %v", o.ConnectionTimeout)
	case o.RetriesPerRequest < 0:
		return invalidOptions("retries_per_request must be at least 0, got %d", o.RetriesPerRequest)
	case o.RequestTimeout < 0:
		return invalidOptions("request_timeout must not be negative, got %v", o.RequestTimeout)
	case o.RetryWait < 0:
		return invalidOptions("retry wait must be positive, got %v", o.RetryWait)
	case o.RetryWaitMax < o.RetryWait:
		return invalidOptions("retry wait max %v is below the retry wait %v", o.RetryWaitMax, o.RetryWait)
	case o.RetryTimeLimit < 0:
		return invalidOptions("retry time limit must be positive, got %v", o.RetryTimeLimit)
	case o.IdleConnTimeout < 0:
		return invalidOptions("idle connection timeout must be positive, got %v", o.IdleConnTimeout)
	case o.Auth != AuthSession && o.Auth != AuthBasic:
		return invalidOptions("auth must be AuthSession or AuthBasic, got %v", o.Auth)
	case o.SessionRefreshInterval < 0:
		return invalidOptions("session_refresh_interval_sec must be positive, got %v", o.SessionRefreshInterval)
	}
	if err := o.Socket.Validate(); err != nil {
		return err
	}
	if o.Proxy != nil {
		switch o.Proxy.Scheme {
		case "http", "https", "socks5":
		default:
			return invalidOptions("proxy %q: scheme must be http, https or socks5", RedactURL(o.Proxy, o.Proxy.User.Username()))
		}
		if o.Proxy.Host == "" {
			return invalidOptions("proxy %q has no host", RedactURL(o.Proxy, o.Proxy.User.Username()))
		}
	}
	return nil
}

// String prints the options with the proxy's password redacted.
func (o Options) String() string {
	proxy := ""
	if o.Proxy != nil {
		proxy = RedactURL(o.Proxy, o.Proxy.User.Username())
	}
	return fmt.Sprintf("{HTTPConnections:%d ConnectionTimeout:%v RetriesPerRequest:%d RequestTimeout:%v RetryWait:%v "+
		"RetryWaitMax:%v RetryTimeLimit:%v IdleConnTimeout:%v UserAgent:%q Proxy:%q TLS:%t Auth:%v "+
		"SessionRefreshInterval:%v Socket:%v}",
		o.HTTPConnections, o.ConnectionTimeout, o.RetriesPerRequest, o.RequestTimeout, o.RetryWait,
		o.RetryWaitMax, o.RetryTimeLimit, o.IdleConnTimeout, o.UserAgent, proxy, o.TLS != nil, o.Auth,
		o.SessionRefreshInterval, o.Socket)
}

// GoString is String (for %#v).
func (o Options) GoString() string { return "couch.Options" + o.String() }
