// Package couch is fdbrep's HTTP client for CouchDB-compatible databases
// (CouchDB, pouchdb-server), with the behaviour of CouchDB's replicator
// client (couch_replicator_httpc).
//
// An Endpoint is parsed from a replication's "source" or "target"
// (ParseEndpoint): a URL string or {"url", "headers", "auth"}. Credentials are
// taken out of the URL and headers (precedence auth.basic, URL userinfo,
// Authorization: Basic). Passwords never appear in errors or logs: every URL
// printed is Endpoint.Redacted(), "http://user:*****@host/db/", and request
// errors carry no raw URL.
//
// # Authentication
//
// With Options.Auth = AuthSession (the default, as CouchDB 3.x's
// couch_replicator_auth_session) a DB with credentials logs in once through
// POST /_session at its server's root (a form with name and password;
// concurrent requests wait for the one login) and sends the AuthSession
// cookie. A cookie the peer renews in an answer (Set-Cookie) replaces it; it
// is renewed by a new login at 90% of its Max-Age, or after
// SessionRefreshInterval (550 s) when it has none, and when a request that
// used it is answered 401 (the request is then sent again at once, not
// counting as a retry). The DB sends Basic on every request instead, for
// good, when the peer shows sessions do not work: a login answered 404, 405
// or 501, a login answered without a cookie, or a new cookie refused before
// it ever worked. A login answered 401 with WWW-Authenticate (a proxy doing
// Basic auth itself, a peer whose require_valid_user guards _session too;
// CouchDB 3.5's lets logins through) is repeated once with Basic, unless the
// peer's reason says it found the name or password wrong. A login refused
// otherwise (401, 403) is the peer's answer: the DB sends those credentials
// no more, neither as Basic nor in another login, and every request fails
// with that answer (an *HTTPError with Login set and the peer's reason), so
// a wrong password costs one failed login per DB, not one per request.
// CouchDB 3.x counts them: after 5 failed logins of a user from one address
// within 5 minutes it refuses that user's right password too, from there,
// until the 5 minutes are over ([chttpd_auth_lockout], on by default).
// DBs that share a Logins (Options.Logins; a replication node's runs) do
// not log in again with credentials a peer refused within its memory
// (RefusedLoginMemoryDefault, 5 minutes): they fail with the remembered
// answer, so several documents with one wrong password cost one failed
// login per 5 minutes per process. Several wrong passwords for one user
// are bounded too: once the peer refused the user's logins a budget of
// times (LoginFailureBudgetDefault, 3) within that memory, credentials the
// peer has not accepted are not tried (a *LoginBudgetError, naming when
// they may be), and such logins go one at a time per user and peer.
// AuthBasic sends Basic on every request. The password travels only in the
// login's body and the Basic header.
//
// An endpoint with token credentials (Endpoint.Token: an IBM Cloud IAM
// API key or OAuth 2.0 client credentials, exchanged at a token endpoint
// through golang.org/x/oauth2) sends "Authorization: Bearer" with an
// access token instead, fetched one at a time per DB, renewed before it
// expires (a fifth of its lifetime, at most a minute) and at once after a
// 401. The token endpoint is reached with the DB's dialer, address policy,
// TLS settings and proxy; a 4xx from it is the request's 401, with
// HTTPError.Login set and the endpoint's own words as the reason.
//
// # TLS and sockets
//
// Options.TLS configures https; TLSSettings.Config builds it from CouchDB's
// [replicator] keys (verify_ssl_certificates, which fdbrep turns on by
// default, ssl_trusted_certificates_file, ssl_certificate_max_depth,
// cert_file, key_file and password), reading the files once; the
// system's roots, when no ssl_trusted_certificates_file is given, are read
// again once older than CACertReload (cacert_reload_interval_hours; on
// Linux). A failed
// handshake is not retried: the error wraps ErrTLS and names the setting to
// change ("certificate signed by unknown authority: set [replicator]
// ssl_trusted_certificates_file …"). Options.Socket applies CouchDB's
// socket_options (ParseSocketOptions: keepalive, nodelay, sndbuf, recbuf,
// priority on Linux; anything else is refused by name).
//
// # Addresses
//
// Options.Addresses (an AddressPolicy: denied networks, loopback and
// private ranges on request, exceptions, and the process's own listeners
// on every local address) is checked by the dialer's Control, after DNS
// resolution and before the socket connects, for every connection: to
// the endpoint, or to its proxy; through a proxy, an endpoint written as a
// denied literal address is refused too. A refusal wraps ErrAddressDenied
// (an *AddressError names the address and the [replicator] setting), is
// not retried, and leaves no packet sent. AddressPolicy.CheckHost is the
// same check for a URL being written (best effort for names);
// HideAddressDetail is what users who are not server admins see of the
// error.
//
// # Pools, timeouts and retries
//
// A DB is one remote database with its own connection pool, or with
// Options.Pools the pool it shares with the process's other DBs of the
// same server (scheme, host, proxy, TLS settings, socket options and
// connection timeout; a replication node shares one Pools among its
// runs, so that it holds about as many connections to a server as it has
// requests in flight there, not as many as it runs replications).
// Defaults follow
// CouchDB's [replicator] section:
//
//   - HTTPConnections (http_connections, 20): at most this many requests in
//     flight per DB, and pooled connections without Pools (a shared pool
//     keeps up to PoolIdleMaxDefault idle); more requests wait for a slot
//     (the wait does not count toward any timeout). A 2xx body returned by Do
//     holds its slot until it is closed.
//   - ConnectionTimeout (connection_timeout, 30 s): an inactivity limit. An
//     attempt fails when the peer accepts none of the request body, sends no
//     response headers, or sends nothing during a body Read for this long.
//     Time the caller spends between Reads does not count, so a slow consumer
//     of a continuous feed is not mistaken for a silent peer. A request that
//     is not a Stream also fails when it moves fewer than StallBytes in a
//     whole ConnectionTimeout (a peer trickling a byte at a time); for a
//     body Do returns, in a whole ConnectionTimeout of its Reads' waiting,
//     so that a caller pausing between Reads is not taken for a trickle.
//     Stalls are not retried, so a black hole is reported after one
//     ConnectionTimeout, not after every retry; only a first stall on a
//     pooled connection (one the peer may have dropped unannounced) gets
//     one retry.
//   - RetriesPerRequest (retries_per_request, 5): transport errors, 408 and
//     5xx are retried after 250 ms,
//     doubling (0.25, 0.5, 1, 2, 4 s), and not after RetryTimeLimit (60 s)
//     since the first failure. Bodies are []byte and re-sent as they are, so
//     only send requests that are safe to repeat (replication's are), or set
//     NoRetry.
//   - RequestTimeout (request_timeout, none): an overall limit per attempt,
//     never applied to Stream requests; an attempt over it fails as a stall
//     does.
//   - 429 Too Many Requests goes to a RateLimiter (AIMD, shared by all DBs of
//     a process, keyed by scheme://host and method) and is retried without
//     using up retries; when the back-off interval reaches its maximum
//     (25 s) the request fails with ErrMaxBackoff, which a replication turns
//     into a max_backoff crash.
//
// No answer holds more of the caller's memory than it allows: a 2xx body
// is read up to its Request.MaxBody (BodyMaxDefault, 16 MiB, for requests
// that are not streams), and one longer fails the request with a
// *BodyTooLargeError (ErrBodyTooLarge), which is not retried, or, for a
// body Do returns, its Read past the limit; an error answer's body is cut
// at ErrorBodyMax (1 MiB). So an endless answer fails at its limit.
//
// Non-2xx answers come back as *HTTPError (errors.Is(err, ErrNotFound) and
// friends work); requests without any answer as *RequestError
// (ErrRequestFailed, and ErrTimeout for silences). DoJSON reads the whole body
// inside the retry loop, so a reply cut short is retried too; Do returns the
// body open for streaming and the caller handles read errors.
//
// Retry waits, RetryTimeLimit and the rate limiter's intervals are measured
// on a clockwork.Clock (Options.Clock, RateLimiterConfig.Clock; the real
// clock by default), so that tests can drive them with a fake clock; the
// inactivity and request timeouts bound real network input and output and
// run on real time.
//
// Options.Count is told of every attempt, answer and connection as
// CouchDB's couch_replicator stats count them (Count: requests,
// responses.success, connection.creates, …), with the endpoint's host and
// port; the replicator serves them as CouchDB's metrics.
//
// Responses are requested uncompressed: pouchdb-server compresses when asked
// and then buffers continuous feeds, heartbeats included. Multipart bodies
// are the caller's business.
package couch
