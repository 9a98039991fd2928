package frontend

import (
	"cmp"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
)

// RoleAdmin is the role of server admins, as in CouchDB.
const RoleAdmin = "_admin"

// RoleReplicator is CouchDB's role that exempts a user from the owner rules
// and validation of replicator documents.
const RoleReplicator = "_replicator"

// User is the authenticated user of a request; nil or an empty Name is the
// anonymous user.
type User struct {
	Name  string
	Roles []string
	// Method is the authentication handler that found the user:
	// AuthCookie, AuthDefault (Basic), AuthJWT or AuthProxy.
	Method string
	// dbAdmin: an admin of the database the request is about (its
	// security object's "admins"), set by Server.dbUser.
	dbAdmin bool
}

// Viewer is u as the control plane sees it: name and roles (none for the
// anonymous user).
func (u *User) Viewer() api.User {
	if u == nil {
		return api.User{Roles: []string{}}
	}
	return api.User{Name: u.Name, Roles: append([]string{}, u.Roles...)}
}

// Anonymous tells whether u is the anonymous user.
func (u *User) Anonymous() bool { return u == nil || u.Name == "" }

// HasRole tells whether u has role.
func (u *User) HasRole(role string) bool {
	if u == nil {
		return false
	}
	for _, r := range u.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// IsAdmin tells whether u is a server admin.
func (u *User) IsAdmin() bool { return u.HasRole(RoleAdmin) }

// isDBAdmin tells whether u is an admin of the request's database: a
// server admin or one its security object names (CouchDB's
// check_is_admin).
func (u *User) isDBAdmin() bool { return u.IsAdmin() || (u != nil && u.dbAdmin) }

// Password hash formats, CouchDB's.
const (
	pbkdf2Prefix = "-pbkdf2"
	hashedPrefix = "-hashed-"
)

// Errors of password hashes (never holding the hash or password).
var (
	errBadHash = errors.New("frontend: malformed password hash")
)

// PRFs accepted in "-pbkdf2:<prf>-" hashes and [chttpd_auth] pbkdf2_prf.
func prfFunc(name string) (func() hash.Hash, int, bool) {
	switch name {
	case "sha", "sha1":
		return sha1.New, sha1.Size, true
	case "sha256":
		return sha256.New, sha256.Size, true
	case "sha512":
		return sha512.New, sha512.Size, true
	}
	return nil, 0, false
}

// HashPassword returns password hashed in CouchDB's [admins] format:
// "-pbkdf2-<hex key>,<salt>,<iterations>" for prf "sha" (CouchDB <= 3.3),
// "-pbkdf2:<prf>-<hex key>,<salt>,<iterations>" otherwise (CouchDB 3.4+).
// The salt is 32 random hex characters used as bytes, as CouchDB does.
func HashPassword(password, prf string, iterations int) (string, error) {
	h, size, ok := prfFunc(prf)
	if !ok || iterations < 1 {
		return "", fmt.Errorf("%w: prf %q, iterations %d", ErrInvalidOptions, prf, iterations)
	}
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	saltHex := hex.EncodeToString(salt)
	key, err := pbkdf2.Key(h, password, []byte(saltHex), iterations, size)
	if err != nil {
		return "", err
	}
	prefix := pbkdf2Prefix + "-"
	if prf != "sha" && prf != "sha1" {
		prefix = pbkdf2Prefix + ":" + prf + "-"
	}
	return prefix + hex.EncodeToString(key) + "," + saltHex + "," + strconv.Itoa(iterations), nil
}

// isHashed tells whether a stored password is one of CouchDB's hash
// formats rather than plaintext.
func isHashed(stored string) bool {
	return strings.HasPrefix(stored, pbkdf2Prefix) || strings.HasPrefix(stored, hashedPrefix)
}

type parsedHash struct {
	hashed     bool // -hashed- format
	prf        func() hash.Hash
	key        []byte
	salt       string
	iterations int
}

// parseHash parses a stored CouchDB password hash without running it.
func parseHash(stored string) (parsedHash, error) {
	switch {
	case strings.HasPrefix(stored, hashedPrefix):
		// -hashed-<sha1 hex of password+salt>,<salt>: CouchDB's oldest format.
		want, salt, ok := strings.Cut(strings.TrimPrefix(stored, hashedPrefix), ",")
		key, err := hex.DecodeString(want)
		if !ok || err != nil || len(key) != sha1.Size {
			return parsedHash{}, errBadHash
		}
		return parsedHash{hashed: true, key: key, salt: salt}, nil
	case strings.HasPrefix(stored, pbkdf2Prefix):
		rest := strings.TrimPrefix(stored, pbkdf2Prefix)
		prf := "sha"
		switch {
		case strings.HasPrefix(rest, ":"):
			p, r, ok := strings.Cut(rest[1:], "-")
			if !ok {
				return parsedHash{}, errBadHash
			}
			prf, rest = p, r
		case strings.HasPrefix(rest, "-"):
			rest = rest[1:]
		default:
			return parsedHash{}, errBadHash
		}
		h, _, ok := prfFunc(prf)
		parts := strings.Split(rest, ",")
		if !ok || len(parts) != 3 {
			return parsedHash{}, errBadHash
		}
		key, err := hex.DecodeString(parts[0])
		if err != nil || len(key) == 0 {
			return parsedHash{}, errBadHash
		}
		iter, err := strconv.Atoi(parts[2])
		if err != nil || iter < 1 {
			return parsedHash{}, errBadHash
		}
		return parsedHash{prf: h, key: key, salt: parts[1], iterations: iter}, nil
	}
	return parsedHash{}, errBadHash
}

// pbkdf2Key runs PBKDF2 for verifyPassword (tests count its iterations).
var pbkdf2Key = pbkdf2.Key[hash.Hash]

// verifyPassword checks password against a stored hash in constant time.
func verifyPassword(stored, password string) (bool, error) {
	p, err := parseHash(stored)
	if err != nil {
		return false, err
	}
	if p.hashed {
		sum := sha1.Sum([]byte(password + p.salt))
		return subtle.ConstantTimeCompare(sum[:], p.key) == 1, nil
	}
	got, err := pbkdf2Key(p.prf, password, []byte(p.salt), p.iterations, len(p.key))
	if err != nil {
		return false, errBadHash
	}
	return subtle.ConstantTimeCompare(got, p.key) == 1, nil
}

type account struct {
	name  string
	hash  string
	roles []string
}

// Accounts are the users a frontend knows: server admins and, as an fdbrep
// extension, configured non-admin users.
type Accounts struct {
	byName map[string]*account
}

// AccountsOptions hash plaintext passwords met by NewAccounts.
type AccountsOptions struct {
	PRF        string // "sha", "sha256" or "sha512"
	Iterations int
}

// NewAccounts builds the account table. admins and users map names to
// CouchDB password hashes or plaintext; plaintext ones are hashed with opts
// and their names returned in plain, so the caller can warn. roles gives
// users' roles; admins get RoleAdmin. A name in both maps is an admin.
func NewAccounts(admins, users map[string]string, roles map[string][]string, opts AccountsOptions) (*Accounts, []string, error) {
	a := &Accounts{byName: map[string]*account{}}
	var plain []string
	add := func(name, stored string, rs []string) error {
		if name == "" || strings.Contains(name, ":") {
			return fmt.Errorf("%w: user name %q must be non-empty without ':'", ErrInvalidOptions, name)
		}
		if !isHashed(stored) {
			h, err := HashPassword(stored, opts.PRF, opts.Iterations)
			if err != nil {
				return err
			}
			stored = h
			plain = append(plain, name)
		} else if _, err := parseHash(stored); err != nil {
			return fmt.Errorf("%w: password hash of %q: %v", ErrInvalidOptions, name, err)
		}
		a.byName[name] = &account{name: name, hash: stored, roles: rs}
		return nil
	}
	for name, stored := range users {
		if _, isAdmin := admins[name]; isAdmin {
			continue
		}
		if err := add(name, stored, append([]string(nil), roles[name]...)); err != nil {
			return nil, nil, err
		}
	}
	for name, stored := range admins {
		if err := add(name, stored, []string{RoleAdmin}); err != nil {
			return nil, nil, err
		}
	}
	return a, plain, nil
}

// authenticator finds the users of requests with its handlers (see
// authenticate): Basic credentials and AuthSession cookies of the
// accounts, JWTs, proxy headers.
type authenticator struct {
	handlers []authHandler

	accounts   atomic.Pointer[Accounts] // replaced by Server.SetAccounts
	secret     []byte
	timeout    time.Duration
	persistent bool
	clock      clockwork.Clock
	decoy      string // a hash of the configured cost, for unknown names
	sameSite   http.SameSite

	mu        sync.Mutex
	cache     map[[32]byte]struct{} // verified name+password+hash digests
	cacheSize int

	guard   *loginGuard
	proxies []netip.Prefix // trusted_proxies, for clientAddr
}

func (a *authenticator) lookup(name string) *account {
	accounts := a.accounts.Load()
	if accounts == nil {
		return nil
	}
	return accounts.byName[name]
}

// login checks a name and password for client (see clientAddr); the
// error is errUnauthorizedLogin for wrong credentials, a 403 while the
// name is locked out from client, or a 429 while client is held back
// after failed checks (see loginGuard).
func (a *authenticator) login(name, password, client string) (*account, *httpError) {
	if he := a.guard.lockedOut(client, name); he != nil {
		return nil, he
	}
	acc := a.lookup(name)
	var digest [32]byte
	if acc != nil {
		digest = sha256.Sum256([]byte(acc.name + "\x00" + password + "\x00" + acc.hash))
		if a.cacheSize > 0 {
			a.mu.Lock()
			_, ok := a.cache[digest]
			a.mu.Unlock()
			if ok {
				return acc, nil // verified before: no hash to compute
			}
		}
	}
	if he := a.guard.admit(client); he != nil {
		return nil, he
	}
	defer a.guard.done()
	if acc == nil {
		// Spend comparable time so that unknown names are not revealed by
		// timing.
		_, _ = verifyPassword(a.decoy, password)
		a.guard.failed(client, name)
		return nil, errUnauthorizedLogin
	}
	ok, err := verifyPassword(acc.hash, password)
	if err != nil || !ok {
		a.guard.failed(client, name)
		return nil, errUnauthorizedLogin
	}
	if a.cacheSize > 0 {
		a.mu.Lock()
		if len(a.cache) >= a.cacheSize {
			clear(a.cache)
		}
		a.cache[digest] = struct{}{}
		a.mu.Unlock()
	}
	return acc, nil
}

// Lockout modes ([chttpd_auth_lockout] mode, CouchDB's).
const (
	// LockoutOff keeps no count of failed logins.
	LockoutOff = "off"
	// LockoutWarn logs a warning at each login of a user locked out from
	// an address, and checks it all the same.
	LockoutWarn = "warn"
	// LockoutEnforce refuses the logins of a user locked out from an
	// address, 403.
	LockoutEnforce = "enforce"
)

// Defaults of the failed-login guard: the lockout's are CouchDB's
// [chttpd_auth_lockout].
const (
	// LockoutModeDefault is [chttpd_auth_lockout] mode's default.
	LockoutModeDefault = LockoutEnforce
	// LockoutThresholdDefault is how many failed logins of one user name
	// from one client address lock that name out from there.
	LockoutThresholdDefault = 5
	// LockoutMaxLifetimeDefault is how long a lockout's count lasts, from
	// its first failure: the lockout ends then.
	LockoutMaxLifetimeDefault = 5 * time.Minute
	// LockoutMaxObjectsDefault bounds the (address, user name) counts
	// kept; past it the oldest go first.
	LockoutMaxObjectsDefault = 10_000
	// LoginFailuresFreeDefault is how many failed password checks one
	// client address makes, for any names, within
	// LockoutMaxLifetimeDefault of its first before it is held back: a
	// guard of the CPU, well above what the lockout lets one user reach.
	LoginFailuresFreeDefault = 100
	// LoginBackoffMaxDefault caps how long an address is held back: the
	// wait doubles from a second with each further failure.
	LoginBackoffMaxDefault = time.Minute
	// loginClientsMax bounds the addresses remembered (the oldest go
	// first).
	loginClientsMax = 10_000
)

// Lockout is the failed-login lockout ([chttpd_auth_lockout]; zero
// fields: the defaults).
type Lockout struct {
	// Mode is LockoutOff, LockoutWarn or LockoutEnforce.
	Mode string
	// Threshold, MaxLifetime and MaxObjects: see the defaults.
	Threshold   int
	MaxLifetime time.Duration
	MaxObjects  int
}

func (l Lockout) valid() bool {
	return slices.Contains([]string{LockoutOff, LockoutWarn, LockoutEnforce}, l.Mode) && l.Threshold > 0 && l.MaxLifetime > 0 && l.MaxObjects > 0
}

func (l Lockout) withDefaults() Lockout {
	l.Mode = cmp.Or(l.Mode, LockoutModeDefault)
	l.Threshold = cmp.Or(l.Threshold, LockoutThresholdDefault)
	l.MaxLifetime = cmp.Or(l.MaxLifetime, LockoutMaxLifetimeDefault)
	l.MaxObjects = cmp.Or(l.MaxObjects, LockoutMaxObjectsDefault)
	return l
}

// loginGuard bounds what failed password checks allow and cost. As
// CouchDB's [chttpd_auth_lockout], a user name whose logins failed
// Threshold times from one client address within MaxLifetime of the first
// is locked out from that address until then: its logins from there are
// refused (403, no hash computed), the right password and a cached one
// too, so that guessing stops; other users and addresses are not
// concerned (behind a proxy, the client is the address it forwards: see
// clientAddr). Unknown names are counted alike, so a lockout tells
// nothing of which names exist. And as a password hash is deliberately
// slow (PBKDF2), an address that keeps failing, whatever the names, is
// held back past LoginFailuresFreeDefault failures (429, no hash
// computed) for a wait that doubles with each further one, and at most
// one hash per CPU runs at once, so that a flood of wrong passwords
// cannot take every core. Verified credentials come from the cache and
// never reach the hold-back.
type loginGuard struct {
	lockout Lockout
	free    int
	maxWait time.Duration
	clock   clockwork.Clock
	log     zerolog.Logger
	sem     chan struct{}

	mu      sync.Mutex
	users   map[[2]string]*loginFailures // by (address, user name)
	clients map[string]*loginFailures    // by address
}

// loginFailures counts failed logins since first; until is when a held
// back address may try again.
type loginFailures struct {
	n     int
	first time.Time
	until time.Time
}

func newLoginGuard(l Lockout, clock clockwork.Clock, log zerolog.Logger) *loginGuard {
	return &loginGuard{lockout: l.withDefaults(), free: LoginFailuresFreeDefault, maxWait: LoginBackoffMaxDefault,
		clock: clock, log: log, sem: make(chan struct{}, runtime.GOMAXPROCS(0)),
		users: map[[2]string]*loginFailures{}, clients: map[string]*loginFailures{}}
}

// errLockedOut is CouchDB's answer to a login of a locked-out user.
var errLockedOut = forbidden("Account is temporarily locked due to multiple authentication failures")

// lockedOut refuses a login of name from client while the name is locked
// out from there (LockoutWarn: logs it, and refuses nothing).
func (g *loginGuard) lockedOut(client, name string) *httpError {
	if g.lockout.Mode == LockoutOff {
		return nil
	}
	g.mu.Lock()
	f := g.current(g.users, [2]string{client, name}, g.clock.Now())
	locked := f != nil && f.n >= g.lockout.Threshold
	g.mu.Unlock()
	switch {
	case !locked:
		return nil
	case g.lockout.Mode == LockoutWarn:
		g.log.Warn().Str("user", name).Str("client", client).Int("threshold", g.lockout.Threshold).
			Msg("authentication failure threshold reached ([chttpd_auth_lockout] mode = warn: not refused)")
		return nil
	}
	return errLockedOut
}

// current is m's count under k, nil when there is none or it is over
// (then forgotten).
func (g *loginGuard) current(m map[[2]string]*loginFailures, k [2]string, now time.Time) *loginFailures {
	f := m[k]
	if f != nil && now.Sub(f.first) >= g.lockout.MaxLifetime {
		delete(m, k)
		return nil
	}
	return f
}

// admit waits for a hashing slot, or refuses a client being held back.
func (g *loginGuard) admit(client string) *httpError {
	g.mu.Lock()
	f := g.clients[client]
	var wait time.Duration
	if f != nil {
		wait = f.until.Sub(g.clock.Now())
	}
	g.mu.Unlock()
	if wait > 0 {
		return newError(http.StatusTooManyRequests, "too_many_requests",
			fmt.Sprintf("too many failed logins from this client; retry in %d s", int(math.Ceil(wait.Seconds()))))
	}
	g.sem <- struct{}{}
	return nil
}

func (g *loginGuard) done() { <-g.sem }

// failed counts a failed login of name from client.
func (g *loginGuard) failed(client, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	if g.lockout.Mode != LockoutOff {
		count(g.users, [2]string{client, name}, now, g.lockout.MaxLifetime, g.lockout.MaxObjects)
	}
	f := count(g.clients, client, now, g.lockout.MaxLifetime, loginClientsMax)
	if over := f.n - g.free; over > 0 {
		wait := g.maxWait
		if over < 32 {
			wait = min(g.maxWait, time.Second<<(over-1))
		}
		f.until = now.Add(wait)
	}
}

// count adds a failure at now to m's count under k, which starts again
// once life has passed since its first; at most max are kept, the oldest
// forgotten first.
func count[K comparable](m map[K]*loginFailures, k K, now time.Time, life time.Duration, max int) *loginFailures {
	f := m[k]
	if f == nil || now.Sub(f.first) >= life {
		if f == nil && len(m) >= max {
			forgetOldest(m)
		}
		f = &loginFailures{first: now}
		m[k] = f
	}
	f.n++
	return f
}

func forgetOldest[K comparable](m map[K]*loginFailures) {
	var oldest K
	var at time.Time
	for k, f := range m {
		if at.IsZero() || f.first.Before(at) {
			oldest, at = k, f.first
		}
	}
	delete(m, oldest)
}

// clientAddr is the client address of a request, which the login guard
// counts by: the host of its remote address, or, when that is one of
// proxies (trusted_proxies), the last address its X-Forwarded-For
// headers name that is not one of proxies (each proxy appends the address
// it got the request from; what a client wrote before comes first and is
// not believed). An entry that is not an address stops the walk at the
// proxy that forwarded it.
func clientAddr(r *http.Request, proxies []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	trusted := func(s string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			ap, perr := netip.ParseAddrPort(s)
			if perr != nil {
				return netip.Addr{}, false
			}
			a = ap.Addr()
		}
		a = a.Unmap()
		return a, slices.ContainsFunc(proxies, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	if _, ok := trusted(host); !ok {
		return host
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := trusted(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			break
		}
		host = a.String()
		if !ok {
			break
		}
	}
	return host
}

func userOf(acc *account, method string) *User {
	return &User{Name: acc.name, Roles: append([]string(nil), acc.roles...), Method: method}
}

// cookieMAC signs "name:hextime" with the server secret and the account's
// password hash, so a password change invalidates the account's cookies.
func (a *authenticator) cookieMAC(acc *account, payload string) []byte {
	m := hmac.New(sha256.New, append(append([]byte{}, a.secret...), acc.hash...))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func (a *authenticator) makeCookie(acc *account, r *http.Request) *http.Cookie {
	payload := acc.name + ":" + strconv.FormatInt(a.clock.Now().Unix(), 16)
	val := base64.RawURLEncoding.EncodeToString(append([]byte(payload+":"), a.cookieMAC(acc, payload)...))
	c := &http.Cookie{Name: "AuthSession", Value: val, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: a.sameSite}
	if a.persistent {
		c.MaxAge = int(a.timeout / time.Second)
	}
	return c
}

// checkCookie returns the account of a valid AuthSession cookie and
// whether the cookie should be refreshed; nil for invalid or expired
// cookies (which CouchDB treats as no cookie).
func (a *authenticator) checkCookie(value string) (*account, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(value, "="))
	if err != nil {
		return nil, false
	}
	name, rest, ok := strings.Cut(string(raw), ":")
	if !ok {
		return nil, false
	}
	hexTime, mac, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, false
	}
	acc := a.lookup(name)
	if acc == nil {
		return nil, false
	}
	if !hmac.Equal([]byte(mac), a.cookieMAC(acc, name+":"+hexTime)) {
		return nil, false
	}
	issued, err := strconv.ParseInt(hexTime, 16, 64)
	if err != nil {
		return nil, false
	}
	age := a.clock.Now().Sub(time.Unix(issued, 0))
	if age < 0 || age >= a.timeout {
		return nil, false
	}
	return acc, age > a.timeout/10
}

// basicUser is the default handler: the account of the request's Basic
// credentials. Wrong credentials are an error (401), as in CouchDB; other
// schemes are not this handler's.
func (a *authenticator) basicUser(r *http.Request) (*User, *http.Cookie, *httpError) {
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "basic") {
		return nil, nil, nil
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		return nil, nil, badRequest("Authorization header has invalid encoding")
	}
	acc, he := a.login(name, password, clientAddr(r, a.proxies))
	if he != nil {
		return nil, nil, he
	}
	return userOf(acc, AuthDefault), nil, nil
}

// cookieUser is the cookie handler: the account of a valid AuthSession
// cookie, and a fresh cookie when it is getting old. A bad cookie is
// ignored.
func (a *authenticator) cookieUser(r *http.Request) (*User, *http.Cookie, *httpError) {
	c, err := r.Cookie("AuthSession")
	if err != nil || c.Value == "" {
		return nil, nil, nil
	}
	acc, stale := a.checkCookie(c.Value)
	if acc == nil {
		return nil, nil, nil
	}
	var refresh *http.Cookie
	if stale {
		refresh = a.makeCookie(acc, r)
	}
	return userOf(acc, AuthCookie), refresh, nil
}
