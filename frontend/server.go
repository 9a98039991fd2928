package frontend

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/internal/health"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/repdb"
)

// Defaults of Options.
const (
	// MaxRequestSizeDefault caps request bodies (bytes).
	MaxRequestSizeDefault = 1 << 20
	// MaxDocumentSizeDefault caps a document's JSON (bytes); documents are
	// stored in one FoundationDB value (at most kv.MaxValueSize).
	MaxDocumentSizeDefault = 64 << 10
	// MaxJSONDepthDefault caps JSON nesting in request bodies.
	MaxJSONDepthDefault = 32
	// SessionTimeoutDefault is how long an AuthSession cookie is valid.
	SessionTimeoutDefault = 10 * time.Minute
	// AuthCacheSizeDefault is how many verified credentials are remembered.
	AuthCacheSizeDefault = 1000
	// MaxUUIDCount is the most uuids GET /_uuids returns at once.
	MaxUUIDCount = 1000
)

// Options configure a Server. Only DB is required.
type Options struct {
	DB       kv.Database
	Subspace subspace.Subspace
	// Accounts are the users who can log in; nil means nobody (every
	// request is anonymous and admin endpoints are closed).
	Accounts *Accounts
	// Secret signs AuthSession cookies; nil means 32 random bytes, so only
	// this process accepts its cookies.
	Secret []byte
	// SessionTimeout: see SessionTimeoutDefault.
	SessionTimeout time.Duration
	// SessionCookies makes AuthSession cookies session cookies (no
	// Max-Age).
	SessionCookies bool
	// SameSite is the SameSite attribute of AuthSession cookies; 0 means
	// SameSiteDefault, http.SameSiteDefaultMode sends none (CouchDB's
	// default).
	SameSite http.SameSite
	// PasswordHashing is the configured cost of password hashes
	// ([chttpd_auth] pbkdf2_prf and iterations; zero fields: HashPRFDefault,
	// HashIterationsDefault). A login of an unknown name checks a dummy
	// hash of this cost, as long as a known name's hashed with it, so that
	// its time does not tell which names exist.
	PasswordHashing AccountsOptions
	// AuthCacheSize: see AuthCacheSizeDefault; negative disables the cache.
	AuthCacheSize int
	// MaxRequestSize, MaxDocumentSize, MaxJSONDepth: see the defaults.
	MaxRequestSize  int64
	MaxDocumentSize int
	MaxJSONDepth    int
	// PublicAllDBs lets every user list databases (CouchDB's
	// admin_only_all_dbs = false).
	PublicAllDBs bool
	// RequireValidUser refuses unauthenticated requests except GET /_up
	// and /_session.
	RequireValidUser bool
	// Logger receives request logs and errors; nil discards them.
	Logger *zerolog.Logger
	// LogRequests logs one line per request.
	LogRequests bool
	// NodeName appears in GET / and _node paths; "" means "fdbrep@local".
	NodeName string
	// Version is reported by GET /.
	Version string
	// UUID is the installation's server UUID (the replicator's), reported
	// by GET / as CouchDB's "uuid"; "" leaves it out. Clients such as
	// fdbrep replicate use it to find the job of their POST /_replicate.
	UUID string
	// Replicator validates replicator documents and creates their jobs in
	// the write transaction; nil means documents are stored without
	// validation or jobs (a frontend without a scheduler).
	Replicator Replicator
	// Scheduler serves _replicate, _scheduler and _active_tasks; nil
	// answers them with 503.
	Scheduler Scheduler
	// Metrics adds the replicator's metrics to _stats and _prometheus.
	Metrics MetricsSource
	// Cluster is the node's membership and runtime configuration (package
	// cluster), behind /_membership and /_node/{node}/_config; nil
	// answers them with 503. NodeName should be its name.
	Cluster *cluster.Node
	// Jobs, when set, serves the job layer's kinds under /_jobs/ to
	// server admins (jobshttp: their counts and event feeds); nil answers
	// 404 there.
	Jobs http.Handler
	// UpMore, when set, gives more members of GET /_up's body from the
	// node's other services (health.Self.More: a replication node's
	// watches, on a node with both roles).
	UpMore func() map[string]any
	// Clock times sessions and login backoffs; the real clock when nil.
	Clock clockwork.Clock
	// Lockout locks a user name out from a client address after failed
	// logins ([chttpd_auth_lockout]; zero fields: the defaults).
	Lockout Lockout
	// AuthHandlers are the authentication handlers each request goes
	// through, in order, until one finds its user ([chttpd]
	// authentication_handlers, ParseAuthHandlers): AuthCookie,
	// AuthDefault, AuthJWT, AuthProxy; nil means AuthHandlersDefault's.
	AuthHandlers []string
	// JWT configures AuthJWT ([jwt_auth], [jwt_keys]); it needs a key.
	JWT JWTAuth
	// Proxy configures AuthProxy ([chttpd_auth] proxy_use_secret,
	// x_auth_username, x_auth_roles, x_auth_token).
	Proxy ProxyAuth
	// TrustedProxies are the addresses of the proxies whose
	// X-Forwarded-For names the client ([chttpd] trusted_proxies; see
	// clientAddr); none: the remote address is the client.
	TrustedProxies []netip.Prefix
	// Limits protect the server from slow and greedy clients (zero fields:
	// the defaults). Serve the Server with NewHTTPServer and the same
	// Limits for the connection-level ones.
	Limits Limits
	// UtilsDir is the directory of Fauxton's prebuilt files (the npm
	// package fauxton's dist/release, holding index.html), served at
	// /_utils/; "" means none, and /_utils answers 404 with how to install
	// it. See UtilsDirDefault.
	UtilsDir string
}

// Server is the HTTP API of an api_frontend node. It is an http.Handler;
// the caller runs the listener.
type Server struct {
	opts    Options
	store   *repdb.Store
	auth    *authenticator
	log     zerolog.Logger
	router  *mux.Router
	stats   *httpStats
	clients *clientRequests
	utils   fs.FS // UtilsDir; nil without one
}

// New validates opts and builds a Server. Call Init before serving.
func New(opts Options) (*Server, error) {
	if opts.DB == nil {
		return nil, fmt.Errorf("%w: DB is required", ErrInvalidOptions)
	}
	opts.SessionTimeout = cmp.Or(opts.SessionTimeout, SessionTimeoutDefault)
	opts.AuthCacheSize = cmp.Or(opts.AuthCacheSize, AuthCacheSizeDefault)
	opts.MaxRequestSize = cmp.Or(opts.MaxRequestSize, MaxRequestSizeDefault)
	opts.MaxDocumentSize = cmp.Or(opts.MaxDocumentSize, MaxDocumentSizeDefault)
	opts.MaxJSONDepth = cmp.Or(opts.MaxJSONDepth, MaxJSONDepthDefault)
	opts.NodeName = cmp.Or(opts.NodeName, "fdbrep@local")
	opts.Version = cmp.Or(opts.Version, "dev")
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	opts.Limits = opts.Limits.withDefaults()
	if err := opts.Limits.validate(); err != nil {
		return nil, err
	}
	switch {
	case opts.SessionTimeout < time.Second:
		return nil, fmt.Errorf("%w: SessionTimeout %v is under a second", ErrInvalidOptions, opts.SessionTimeout)
	case opts.MaxRequestSize < 1024:
		return nil, fmt.Errorf("%w: MaxRequestSize %d is under 1024", ErrInvalidOptions, opts.MaxRequestSize)
	case opts.MaxDocumentSize < 256 || opts.MaxDocumentSize > kv.MaxValueSize-1000:
		return nil, fmt.Errorf("%w: MaxDocumentSize %d not in [256, %d]", ErrInvalidOptions, opts.MaxDocumentSize, kv.MaxValueSize-1000)
	case opts.MaxJSONDepth < 2:
		return nil, fmt.Errorf("%w: MaxJSONDepth %d is under 2", ErrInvalidOptions, opts.MaxJSONDepth)
	case !opts.Lockout.withDefaults().valid():
		return nil, fmt.Errorf("%w: Lockout %+v: Mode must be off, warn or enforce, the others positive", ErrInvalidOptions, opts.Lockout)
	}
	if opts.UtilsDir != "" {
		if err := checkUtilsDir(opts.UtilsDir); err != nil {
			return nil, err
		}
	}
	// Proxy tokens need the configured secret, not a random one.
	proxySecret := opts.Secret
	if opts.Secret == nil {
		opts.Secret = make([]byte, 32)
		_, _ = rand.Read(opts.Secret)
	}
	logger := zerolog.Nop()
	if opts.Logger != nil {
		logger = *opts.Logger
	}
	if opts.SameSite == 0 {
		opts.SameSite = sameSites[SameSiteDefault]
	}
	opts.PasswordHashing.PRF = cmp.Or(opts.PasswordHashing.PRF, HashPRFDefault)
	opts.PasswordHashing.Iterations = cmp.Or(opts.PasswordHashing.Iterations, HashIterationsDefault)
	decoy, err := HashPassword("decoy", opts.PasswordHashing.PRF, opts.PasswordHashing.Iterations)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:  opts,
		store: repdb.New(opts.DB, repdb.Options{Subspace: opts.Subspace}),
		auth: &authenticator{
			secret: opts.Secret, timeout: opts.SessionTimeout,
			persistent: !opts.SessionCookies, clock: opts.Clock, decoy: decoy, sameSite: opts.SameSite,
			cache: map[[32]byte]struct{}{}, cacheSize: max(opts.AuthCacheSize, 0), guard: newLoginGuard(opts.Lockout, opts.Clock, logger),
			proxies: opts.TrustedProxies,
		},
		log:     logger,
		stats:   newHTTPStats(),
		clients: &clientRequests{max: opts.Limits.MaxClientRequests, n: map[string]int{}},
	}
	if opts.UtilsDir != "" {
		s.utils = os.DirFS(opts.UtilsDir)
	}
	if err := s.auth.setHandlers(opts.AuthHandlers, opts.JWT, opts.Proxy, proxySecret); err != nil {
		return nil, err
	}
	if slices.Contains(opts.AuthHandlers, AuthProxy) && !opts.Proxy.UseSecret {
		logger.Warn().Msg("proxy authentication without [chttpd_auth] proxy_use_secret: whoever reaches this node can be any user, server admins included, with the proxy's headers; only the proxy may reach it")
	}
	s.auth.accounts.Store(opts.Accounts)
	s.router = s.routes()
	return s, nil
}

// Init creates the _replicator database if it does not exist (CouchDB
// creates it at startup). It is safe to run on every node at every start.
func (s *Server) Init(ctx context.Context) error {
	err := s.createDB(ctx, repdb.ReplicatorDB)
	if err != nil && err != repdb.ErrDBExists {
		return err
	}
	return nil
}

func (s *Server) createDB(ctx context.Context, name string) error {
	return s.store.CreateDB(ctx, name, uuid.NewString(), func(tr kv.Transaction) error {
		if s.opts.Replicator != nil {
			return s.opts.Replicator.DBCreated(ctx, tr, name)
		}
		return nil
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

type ctxKey struct{}

// reqState travels with a request through the middleware.
type reqState struct {
	user *User
}

func userFrom(r *http.Request) *User {
	if st, ok := r.Context().Value(ctxKey{}).(*reqState); ok {
		return st.user
	}
	return nil
}

func (s *Server) routes() *mux.Router {
	// SkipClean: a path such as /../_replicator is refused by the name
	// rules with a CouchDB error, not redirected with an empty 301.
	r := mux.NewRouter().UseEncodedPath().SkipClean(true)
	r.Use(s.middleware)
	h := func(path string, fn http.HandlerFunc, methods ...string) {
		r.Handle(path, s.methods(fn, methods...))
	}
	h("/", s.handleRoot, "GET", "HEAD")
	h("/_up", s.handleUp, "GET", "HEAD")
	h("/_uuids", s.handleUUIDs, "GET")
	h("/_all_dbs", s.handleAllDBs, "GET", "HEAD")
	h("/_session", s.handleSession, "GET", "POST", "DELETE")
	h("/_node/{node}/_stats", s.handleStats, "GET")
	h("/_node/{node}/_stats/{path:.+}", s.handleStats, "GET")
	h("/_node/{node}/_prometheus", s.handlePrometheus, "GET")
	h("/_utils", s.handleUtilsRedirect, "GET", "HEAD")
	r.PathPrefix("/_utils/").Handler(s.methods(s.handleUtils, "GET", "HEAD"))
	h("/_node/{node}/_config", s.handleConfig, "GET")
	h("/_node/{node}/_config/{section}", s.handleConfig, "GET")
	h("/_node/{node}/_config/{section}/{key}", s.handleConfig, "GET", "PUT", "DELETE")
	r.PathPrefix("/_node/{node}/_config/{section}/{key}/").Handler(s.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("missing"))
	})))
	h("/_node/{node}", s.handleNode, "GET")
	r.PathPrefix("/_node/").Handler(s.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("missing"))
	})))
	h("/_membership", s.handleMembership, "GET")
	h("/_replicate", s.handleReplicate, "POST")
	h("/_active_tasks", s.handleActiveTasks, "GET", "HEAD")
	h("/_scheduler/jobs", s.handleSchedulerJobs, "GET", "HEAD")
	h("/_scheduler/jobs/{id}", s.handleSchedulerJob, "GET", "HEAD")
	h("/_scheduler/jobs/{id}/_retry", s.handleRetryJob, "POST")
	h("/_scheduler/jobs/{id}/_pause", s.handlePauseJob(true), "POST")
	h("/_scheduler/jobs/{id}/_resume", s.handlePauseJob(false), "POST")
	h("/_scheduler/_changes", s.handleSchedulerChanges, "GET")
	h("/_scheduler/webhooks", s.handleWebhooks, "GET", "HEAD")
	h("/_scheduler/webhooks/{id}", s.handleWebhook, "GET", "HEAD", "PUT", "DELETE")
	h("/_scheduler/docs", s.handleSchedulerDocs, "GET", "HEAD")
	r.PathPrefix("/_scheduler/docs/").Handler(s.methods(s.handleSchedulerDocsPath, "GET", "HEAD"))
	r.PathPrefix("/_scheduler/").Handler(s.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("missing"))
	})))
	r.PathPrefix("/_jobs/").Handler(s.middleware(http.HandlerFunc(s.handleJobs)))
	h("/{db}", s.handleDB, "GET", "HEAD", "PUT", "DELETE", "POST")
	h("/{db}/", s.handleDB, "GET", "HEAD", "PUT", "DELETE", "POST")
	h("/{db}/_all_docs", s.handleAllDocs, "GET", "HEAD", "POST")
	h("/{db}/_changes", s.handleChanges, "GET", "POST")
	h("/{db}/_bulk_docs", s.handleBulkDocs, "POST")
	h("/{db}/_bulk_get", s.handleBulkGet, "POST")
	h("/{db}/_revs_diff", s.handleRevsDiff, "POST")
	h("/{db}/_ensure_full_commit", s.handleEnsureFullCommit, "POST")
	h("/{db}/_security", s.handleSecurity, "GET", "PUT")
	h("/{db}/_design/{ddoc}", s.docHandler(repdb.DesignPrefix, "ddoc"), "GET", "HEAD", "PUT", "DELETE")
	h("/{db}/_local/{id}", s.docHandler(repdb.LocalPrefix, "id"), "GET", "HEAD", "PUT", "DELETE")
	r.Handle("/{db}/{endpoint:"+strings.Join(slices.Sorted(maps.Keys(unsupportedDBEndpoints)), "|")+"}",
		http.HandlerFunc(s.handleUnsupportedDBEndpoint))
	h("/{db}/{docid}", s.docHandler("", "docid"), "GET", "HEAD", "PUT", "DELETE")
	r.Handle("/{db}/_design/{ddoc}/{rest:.+}", s.handleDocSubpath(repdb.DesignPrefix, "ddoc"))
	r.Handle("/{db}/{docid}/{rest:.+}", s.handleDocSubpath("", "docid"))
	r.NotFoundHandler = s.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("missing"))
	}))
	return r
}

// methods wraps fn so other methods get CouchDB's 405. HEAD is served
// wherever GET is, as CouchDB serves it: fn answers it as a GET, whose
// body net/http drops.
func (s *Server) methods(fn http.HandlerFunc, allowed ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range allowed {
			if r.Method == m {
				fn(w, r)
				return
			}
		}
		if r.Method == http.MethodHead && slices.Contains(allowed, http.MethodGet) {
			get := r.WithContext(r.Context())
			get.Method = http.MethodGet
			fn(w, get)
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ","))
		writeError(w, newError(http.StatusMethodNotAllowed, "method_not_allowed", "Only "+strings.Join(allowed, ",")+" allowed"))
	})
}

// statusWriter records the status and size of a response. A reply
// written before the request's body was read to its end closes the
// connection instead of draining the body first (which a client
// trickling its body could stretch for ever; limitedBody.end).
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
	// unread reports a request body not read to its end; bodyTime the
	// time spent reading it. Both are nil for a request without a body.
	unread   func() bool
	bodyTime func() time.Duration
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.unread != nil && w.unread() {
			w.Header().Set("Connection", "close")
		}
		if w.bodyTime != nil {
			w.Header().Set(headerBodyTime, strconv.FormatInt(w.bodyTime().Milliseconds(), 10))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// The headers CouchDB's chttpd adds to every response: the request's id
// and the milliseconds spent reading its body.
const (
	headerRequestID = "X-Couch-Request-ID"
	headerBodyTime  = "X-CouchDB-Body-Time"
)

// requestID is a request's X-Couch-Request-ID, as chttpd chooses it: the
// client's own, when it is at most 36 letters, digits, - and _, else 10
// random hex digits.
func requestID(r *http.Request) string {
	if id := r.Header.Get(headerRequestID); id != "" && len(id) <= 36 && strings.TrimLeft(id,
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == "" {
		return id
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// middleware authenticates, recovers from panics, counts and logs, and
// sets CouchDB's X-Couch-Request-ID and X-CouchDB-Body-Time on every
// response. The log line holds the method, the escaped path (never the
// query, headers or body, where credentials travel), status, user,
// duration and request id.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if _, done := r.Context().Value(ctxKey{}).(*reqState); done {
			next.ServeHTTP(rw, r)
			return
		}
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		st := &reqState{}
		reqID := requestID(r)
		w.Header().Set(headerRequestID, reqID)
		w.Header().Set(headerBodyTime, "0")
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			tc, _ := r.Context().Value(connKey{}).(*trackedConn)
			lb := &limitedBody{body: r.Body, rc: http.NewResponseController(rw), conn: tc, deadline: s.opts.Limits.BodyTimeout, size: r.ContentLength}
			r.Body, w.unread, w.bodyTime = lb, func() bool { return !lb.drained() }, lb.readTime
			defer lb.end()
		}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error().Str("method", r.Method).Str("path", r.URL.EscapedPath()).Interface("panic", fmt.Sprint(p)).Msg("request handler panicked")
				if w.status == 0 {
					writeError(w, newError(http.StatusInternalServerError, "unknown_error", "internal error"))
				}
			}
			s.stats.record(r.Method, w.status)
			if s.opts.LogRequests {
				name := ""
				if st.user != nil {
					name = st.user.Name
				}
				s.log.Info().Str("method", r.Method).Str("path", r.URL.EscapedPath()).Int("status", w.status).
					Str("user", name).Str("remote", r.RemoteAddr).Int("bytes", w.bytes).Str("request_id", reqID).
					Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).Msg("request")
			}
		}()
		u, refresh, he := s.auth.authenticate(r)
		if he != nil {
			writeError(w, he)
			return
		}
		st.user = u
		if refresh != nil {
			http.SetCookie(w, refresh)
		}
		if !u.IsAdmin() && r.URL.Path != "/_up" {
			client := clientKey(clientAddr(r, s.opts.TrustedProxies), u)
			if !s.clients.acquire(client) {
				writeError(w, newError(http.StatusTooManyRequests, "too_many_requests",
					fmt.Sprintf("more than %d requests in flight from this client", s.opts.Limits.MaxClientRequests)))
				return
			}
			defer s.clients.release(client)
		}
		if s.opts.RequireValidUser && u.Anonymous() && r.URL.Path != "/_session" && r.URL.Path != "/_up" {
			w.Header().Set("WWW-Authenticate", `Basic realm="server"`)
			writeError(w, errAuthRequired)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, st)))
	})
}

// handleJobs serves /_jobs/… to server admins with Options.Jobs.
func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Jobs == nil {
		writeError(w, notFound("missing"))
		return
	}
	http.StripPrefix("/_jobs", s.opts.Jobs).ServeHTTP(w, r)
}

// requireAdmin answers 401 unless the user is a server admin.
func requireAdmin(w http.ResponseWriter, r *http.Request) bool {
	if userFrom(r).IsAdmin() {
		return true
	}
	writeError(w, errNotServerAdmin)
	return false
}

// requireUser answers 401 unless a user is logged in.
func requireUser(w http.ResponseWriter, r *http.Request) bool {
	if !userFrom(r).Anonymous() {
		return true
	}
	writeError(w, errAuthRequired)
	return false
}

// fail writes err as a CouchDB error; unknown errors are logged and
// answered with 500 without their text (it may come from storage).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if he := toHTTPError(err); he != nil {
		writeError(w, he)
		return
	}
	if r.Context().Err() != nil {
		writeError(w, newError(http.StatusServiceUnavailable, "service_unavailable", "request cancelled"))
		return
	}
	s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.EscapedPath()).Msg("request failed")
	writeError(w, newError(http.StatusInternalServerError, "unknown_error", "internal error; see the node's log"))
}

// pathVar returns a decoded path variable.
func pathVar(r *http.Request, name string) (string, *httpError) {
	v, err := url.PathUnescape(mux.Vars(r)[name])
	if err != nil {
		return "", badRequest("Invalid path")
	}
	return v, nil
}

func (s *Server) handleRoot(w http.ResponseWriter, r *http.Request) {
	welcome := map[string]any{
		"couchdb":  "Welcome",
		"version":  s.opts.Version,
		"vendor":   map[string]string{"name": "fdbrep", "version": s.opts.Version},
		"features": []string{"scheduler"},
	}
	if s.opts.UUID != "" {
		welcome["uuid"] = s.opts.UUID
	}
	writeJSON(w, http.StatusOK, welcome)
}

func (s *Server) handleUp(w http.ResponseWriter, r *http.Request) {
	self := health.Self{Node: s.opts.NodeName, More: s.opts.UpMore}
	if c := s.opts.Cluster; c != nil {
		self.Roles, self.HeartbeatAge = c.Roles(), c.HeartbeatAge
	}
	status, body := health.Up(r.Context(), s.opts.DB, self)
	writeJSON(w, status, body)
}

func (s *Server) handleUUIDs(w http.ResponseWriter, r *http.Request) {
	n := 1
	if c := r.URL.Query().Get("count"); c != "" {
		var err error
		n, err = parseNonNeg(c)
		if err != nil {
			writeError(w, badRequest("count must be a positive integer"))
			return
		}
		if n > MaxUUIDCount {
			writeError(w, badRequest("count parameter too large"))
			return
		}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = newDocID()
	}
	w.Header().Set("Cache-Control", "must-revalidate, no-cache")
	writeJSON(w, http.StatusOK, map[string]any{"uuids": ids})
}

func newDocID() string {
	u := uuid.New()
	return strings.ReplaceAll(u.String(), "-", "")
}

func (s *Server) handleAllDBs(w http.ResponseWriter, r *http.Request) {
	if !s.opts.PublicAllDBs && !requireAdmin(w, r) {
		return
	}
	p := params{q: r.URL.Query()}
	start, end := p.jsonString("startkey", "start_key"), p.jsonString("endkey", "end_key")
	desc, limit, skip := p.bool("descending"), p.int("limit", -1), p.int("skip", 0)
	if p.err != nil {
		writeError(w, p.err)
		return
	}
	names, err := s.store.ListDBs(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, nameRange(names, start, end, desc, limit, skip))
}

// nameRange is CouchDB's _all_dbs paging of sorted names: from start to
// end (both included; in descending order start is the high end), then
// skip and limit (negative: no limit).
func nameRange(names []string, start, end *string, desc bool, limit, skip int) []string {
	if desc {
		names = slices.Clone(names)
		slices.Reverse(names)
	}
	before := func(a, b string) bool { // a comes before b in the order
		if desc {
			return a > b
		}
		return a < b
	}
	out := []string{}
	for _, n := range names {
		if (start != nil && before(n, *start)) || (end != nil && before(*end, n)) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if limit >= 0 && len(out) >= limit {
			break
		}
		out = append(out, n)
	}
	return out
}
