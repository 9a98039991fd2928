package couch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// AuthMode is how a DB sends its endpoint's credentials (CouchDB's
// [replicator] auth_plugins).
type AuthMode int

const (
	// AuthSession logs in once through POST /_session and sends the
	// AuthSession cookie (CouchDB's couch_replicator_auth_session, the
	// default), falling back to Basic where the peer has no usable
	// _session.
	AuthSession AuthMode = iota
	// AuthBasic sends a Basic Authorization header on every request
	// (couch_replicator_auth_noop alone).
	AuthBasic
)

// AuthDefault is the default AuthMode.
const AuthDefault = AuthSession

func (m AuthMode) String() string {
	switch m {
	case AuthSession:
		return "session"
	case AuthBasic:
		return "basic"
	}
	return "AuthMode(" + strconv.Itoa(int(m)) + ")"
}

// SessionRefreshIntervalDefault is session_refresh_interval_sec: a cookie
// that came without Max-Age is renewed after this long (CouchDB's cookies
// last 600 s by default).
const SessionRefreshIntervalDefault = 550 * time.Second

// sessionMaxAgeShare is the part of a cookie's Max-Age after which it is
// renewed, leaving room for delays and clock drift.
const sessionMaxAgeShare = 0.9

// authRetriesMax bounds the immediate retries of one request after a 401
// that the session answers (a stale or expired cookie, then Basic).
const authRetriesMax = 2

// credential is what one attempt carries: the session cookie of an epoch,
// Basic, a bearer token, or nothing.
type credential struct {
	cookie string
	epoch  uint64
	basic  bool
	bearer string // an access token (Endpoint.Token)
}

// session is the cookie session of one DB. A cookie comes from a login
// (POST /_session with the credentials as a form) or from a Set-Cookie on
// an authenticated answer (a peer renewing it); each new cookie starts a
// new epoch. The session is renewed when the cookie nears expiry, and when
// a request is refused with 401: at once if the request used an older
// cookie, by a new login if the cookie had worked before. A cookie that is
// refused before it ever worked shows that the peer's sessions do not work
// (a proxy dropping cookies, say): the DB then sends Basic for good, as it
// does when the peer has no _session (404, 405 or 501) or answers a login
// without a cookie. A login the peer refuses (401, 403) is its answer:
// the DB neither sends the same credentials as Basic nor logs in again,
// and every request fails with that answer, so that a wrong password
// costs one failed login per DB (peers lock accounts out after a few:
// CouchDB's [chttpd_auth_lockout]).
type session struct {
	db  *DB
	sem chan struct{} // one login at a time

	mu        sync.Mutex
	cookie    string
	epoch     uint64
	proven    bool // a request with this cookie was answered 2xx
	refreshAt time.Time
	basic     bool // fall back to Basic for good
	// validUser: the peer wants Basic on the login too (it answered a
	// login without it 401 with WWW-Authenticate: a proxy doing Basic
	// auth itself, a peer whose require_valid_user guards _session too).
	validUser bool
	// refused is the peer's refusal of a login (401 or 403), which every
	// later request returns without asking the peer again.
	refused *HTTPError
}

func newSession(db *DB) *session { return &session{db: db, sem: make(chan struct{}, 1)} }

// authorize returns the credential for the next attempt, logging in first
// when there is no cookie yet or it is due for renewal. Concurrent callers
// wait for one login. After a refused login it returns the refusal.
func (s *session) authorize(ctx context.Context) (credential, error) {
	for {
		s.mu.Lock()
		switch {
		case s.refused != nil:
			err := s.refused
			s.mu.Unlock()
			return credential{}, err
		case s.basic:
			s.mu.Unlock()
			return credential{basic: true}, nil
		case s.cookie != "" && s.db.opts.Clock.Now().Before(s.refreshAt):
			c := credential{cookie: s.cookie, epoch: s.epoch}
			s.mu.Unlock()
			return c, nil
		}
		epoch := s.epoch
		s.mu.Unlock()
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return credential{}, ctx.Err()
		}
		s.mu.Lock()
		current := s.epoch == epoch && !s.basic && s.refused == nil && (s.cookie == "" || !s.db.opts.Clock.Now().Before(s.refreshAt))
		s.mu.Unlock()
		if !current { // another caller logged in meanwhile
			<-s.sem
			continue
		}
		err := s.login(ctx)
		s.mu.Lock()
		c := credential{cookie: s.cookie, epoch: s.epoch, basic: s.basic}
		s.mu.Unlock()
		<-s.sem
		if err != nil {
			return credential{}, err
		}
		if c.basic {
			c.cookie = ""
		}
		return c, nil
	}
}

// login logs in with the endpoint's credentials (post), unless Logins
// remembers a refusal of them (returned, and kept as the session's) or
// does not let them be tried (a *LoginBudgetError); with credentials the
// peer has not accepted, it waits for the other logins of the same user
// at the peer with such credentials (Logins.admit).
func (s *session) login(ctx context.Context) error {
	key := loginKey(s.db.keyBase, s.db.ep.Username, s.db.ep.Password)
	if err := s.remembered(key); err != nil {
		return err
	}
	release, err := s.db.opts.Logins.admit(ctx, key, s.db.keyBase, s.db.ep.Username)
	if err != nil {
		if errors.Is(err, ErrLoginBudget) {
			s.db.log().Warn().Str("url", s.where()).Str("user", s.db.ep.Username).Str("reason", err.Error()).
				Msg("couch: not logging in with a password not known to work: the peer refused this user's logins too often lately")
		}
		return err
	}
	defer release()
	if err := s.remembered(key); err != nil { // refused while this login waited
		return err
	}
	return s.post(ctx, key)
}

// remembered returns the refusal Logins remembers of the credentials
// key, kept as the session's; nil when there is none.
func (s *session) remembered(key [sha256.Size]byte) error {
	herr, at, ok := s.db.opts.Logins.lookup(key)
	if !ok {
		return nil
	}
	s.mu.Lock()
	s.refused = &herr
	s.mu.Unlock()
	s.db.log().Debug().Str("url", s.where()).Str("user", s.db.ep.Username).Time("refused_at", at).
		Msg("couch: the peer refused these credentials lately; not logging in with them")
	return &herr
}

// post posts the credentials (key, for Logins) to the server's /_session
// (at the root of the endpoint's host, as CouchDB does) and keeps the
// cookie, or falls back to Basic when the peer shows it has no sessions
// (loginRefusals). A 401 with WWW-Authenticate asks for Basic on the
// login itself: the login is repeated once with it, unless the peer's
// reason says it checked the name and password (CouchDB's "Name or
// password is incorrect."). A login refused with 401 or 403 is returned,
// with HTTPError.Login set, and kept (session.refused, Logins). Other
// failures (no answer, 5xx after the retries) are returned; the request
// that needed the login fails with them.
func (s *session) post(ctx context.Context, key [sha256.Size]byte) error {
	form := url.Values{"name": {s.db.ep.Username}, "password": {s.db.ep.Password}}.Encode()
	hdr := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	s.mu.Lock()
	validUser := s.validUser
	s.mu.Unlock()
	if validUser {
		hdr.Set("Authorization", s.db.auth)
	}
	resp, _, err := s.db.do(ctx, Request{Method: http.MethodPost, Path: "/_session", Header: hdr, Body: []byte(form), login: true,
		MaxBody: LoginAnswerMax, MaxBodyName: "LoginAnswerMax"}, true)
	var herr *HTTPError
	switch {
	case err == nil:
		if c := authCookie(resp.Header); c != nil {
			s.db.opts.Logins.succeeded(key)
			s.update(c, false)
			s.db.log().Debug().Str("url", s.where()).Str("user", s.db.ep.Username).Msg("couch: session started")
			return nil
		}
		s.fallBack("the peer answered the login without an AuthSession cookie")
		return nil
	case errors.As(err, &herr) && herr.Status == http.StatusUnauthorized && herr.Header.Get("WWW-Authenticate") != "" &&
		!validUser && herr.Reason != reasonWrongCredentials:
		s.mu.Lock()
		s.validUser = true
		s.mu.Unlock()
		return s.post(ctx, key)
	case errors.As(err, &herr) && (herr.Status == http.StatusUnauthorized || herr.Status == http.StatusForbidden):
		refused := *herr
		refused.Login = true
		s.mu.Lock()
		s.refused = &refused
		s.mu.Unlock()
		s.db.opts.Logins.remember(key, s.db.keyBase, s.db.ep.Username, refused)
		s.db.log().Warn().Str("url", s.where()).Str("user", s.db.ep.Username).Int("status", herr.Status).
			Str("reason", herr.Reason).Msg("couch: the peer refused the login; not trying these credentials again")
		return &refused
	case errors.As(err, &herr) && loginRefusals[herr.Status]:
		s.fallBack(fmt.Sprintf("the peer answered the login %d %s", herr.Status, herr.Error_))
		return nil
	}
	return err
}

// reasonWrongCredentials is the reason CouchDB and pouchdb-server give a
// login whose name or password they checked and found wrong.
const reasonWrongCredentials = "Name or password is incorrect."

// loginRefusals are the answers to a login that make a DB send Basic
// instead: the peer has no _session (404, 405, 501). A 401 is not one:
// the peers that answer it (CouchDB, pouchdb-server, admin party or not)
// refuse the same credentials as Basic too, and each try counts toward
// CouchDB's [chttpd_auth_lockout]; a proxy that does Basic auth itself
// says so with WWW-Authenticate.
var loginRefusals = map[int]bool{
	http.StatusNotFound: true, http.StatusMethodNotAllowed: true, http.StatusNotImplemented: true,
}

// where is the login URL for logs (user name kept, password hidden).
func (s *session) where() string {
	return s.db.redactedPath(Request{Path: "/_session"})
}

// fallBack switches the DB to Basic for good.
func (s *session) fallBack(why string) {
	s.mu.Lock()
	s.basic = true
	s.mu.Unlock()
	s.db.log().Info().Str("url", s.where()).Str("reason", why).Msg("couch: no session authentication with this peer; sending Basic auth on every request")
}

// update installs a new cookie (a login's, unproven, or one renewed by
// the peer on an authenticated answer, proven).
func (s *session) update(c *http.Cookie, proven bool) {
	life := s.db.opts.SessionRefreshInterval
	if c.MaxAge > 0 {
		life = time.Duration(float64(c.MaxAge) * sessionMaxAgeShare * float64(time.Second))
	}
	refreshAt := s.db.opts.Clock.Now().Add(life)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Value == s.cookie { // the same cookie again (a login within its second)
		s.refreshAt = refreshAt
		return
	}
	s.cookie, s.proven, s.refreshAt = c.Value, proven, refreshAt
	s.epoch++
}

// accepted records a 2xx answer to an attempt made with c: the cookie
// works, and a cookie the peer renewed in the answer replaces it.
func (s *session) accepted(c credential, h http.Header) {
	if c.cookie == "" {
		return
	}
	s.mu.Lock()
	if c.epoch == s.epoch {
		s.proven = true
	}
	basic := s.basic
	s.mu.Unlock()
	if nc := authCookie(h); nc != nil && !basic {
		s.update(nc, true)
	}
}

// rejected handles a 401 answer to an attempt made with c and reports
// whether the request should be sent again at once (with a newer cookie,
// after a new login, or with Basic).
func (s *session) rejected(c credential) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.basic || c.epoch != s.epoch:
		return true // a newer credential exists already
	case !s.proven:
		s.basic = true
		s.db.log().Info().Str("url", s.db.Redacted()).Msg("couch: a new session cookie was refused; sending Basic auth on every request")
		return true
	}
	s.refreshAt = time.Time{} // expired or revoked: log in again
	s.db.log().Debug().Str("url", s.db.Redacted()).Msg("couch: session cookie refused, logging in again")
	return true
}

// authCookie is the AuthSession cookie set by h, if any (an empty or
// expired one, as sent on logout, does not count).
func authCookie(h http.Header) *http.Cookie {
	for _, line := range h.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Name == "AuthSession" && c.Value != "" && c.MaxAge >= 0 {
			return c
		}
	}
	return nil
}
