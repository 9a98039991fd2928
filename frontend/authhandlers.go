package frontend

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"regexp"
	"strings"
)

// Authentication handlers, CouchDB's [chttpd] authentication_handlers: a
// request goes through the configured handlers in order until one finds
// its user or refuses it (wrong Basic credentials, a bad JWT); a request
// that none finds a user for is anonymous. A handler that does not
// apply (no Basic credentials, no cookie or an invalid one, no Bearer
// token, no proxy user header or a wrong proxy token) passes the request
// on.

// Names of the authentication handlers, as GET /_session lists them and
// User.Method holds them.
const (
	// AuthCookie: AuthSession cookies (POST /_session).
	AuthCookie = "cookie"
	// AuthDefault: Basic credentials of [admins] and [users].
	AuthDefault = "default"
	// AuthJWT: Bearer tokens (JWTAuth).
	AuthJWT = "jwt"
	// AuthProxy: the user named by headers of a trusted proxy (ProxyAuth).
	AuthProxy = "proxy"
)

// AuthHandlersDefault is [chttpd] authentication_handlers' default,
// CouchDB's: AuthSession cookies, then Basic credentials (AuthCookie,
// AuthDefault).
const AuthHandlersDefault = "{chttpd_auth, cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}"

// authHandlerFuncs are CouchDB's handler functions fdbrep has, by the name
// of the handler each is.
var authHandlerFuncs = map[string]string{
	"cookie_authentication_handler":  AuthCookie,
	"default_authentication_handler": AuthDefault,
	"jwt_authentication_handler":     AuthJWT,
	"proxy_authentication_handler":   AuthProxy,
	"proxy_authentification_handler": AuthProxy, // CouchDB's deprecated spelling
}

// authHandlerSpec is one item of [chttpd] authentication_handlers.
var authHandlerSpec = regexp.MustCompile(`^\s*\{\s*([a-z_]+)\s*,\s*([a-z_]+)\s*\}\s*(?:,|$)`)

// ParseAuthHandlers parses [chttpd] authentication_handlers in CouchDB's
// syntax ({chttpd_auth, cookie_authentication_handler}, {chttpd_auth,
// default_authentication_handler}; the module may be couch_httpd_auth
// too) into the names of the handlers, in order. A handler fdbrep does
// not have is an error (null_authentication_handler, which made every
// request a server admin's, among them).
func ParseAuthHandlers(s string) ([]string, error) {
	var names []string
	for rest := strings.TrimSpace(s); rest != ""; {
		m := authHandlerSpec.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("%w: %q: want {chttpd_auth, <handler>} items separated by commas", ErrInvalidOptions, rest)
		}
		rest = strings.TrimSpace(rest[len(m[0]):])
		name, ok := authHandlerFuncs[m[2]]
		if !ok || m[1] != "chttpd_auth" && m[1] != "couch_httpd_auth" {
			return nil, fmt.Errorf("%w: {%s, %s} is not a handler fdbrep has: it has cookie_authentication_handler, default_authentication_handler, jwt_authentication_handler and proxy_authentication_handler of chttpd_auth",
				ErrInvalidOptions, m[1], m[2])
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no authentication handler", ErrInvalidOptions)
	}
	return names, nil
}

// Defaults of proxy authentication ([chttpd_auth] x_auth_username,
// x_auth_roles, x_auth_token), CouchDB's.
const (
	ProxyUserNameHeaderDefault = "X-Auth-CouchDB-UserName"
	ProxyRolesHeaderDefault    = "X-Auth-CouchDB-Roles"
	ProxyTokenHeaderDefault    = "X-Auth-CouchDB-Token"
)

// ProxyAuth configures proxy authentication, CouchDB's
// proxy_authentication_handler: a request with the user name header is
// that user, with the roles of the roles header (comma-separated;
// "_admin" makes a server admin), whether or not an account has the
// name. It trusts whoever can reach the node: only a proxy that
// authenticates its users and sets (and strips) these headers must, so
// UseSecret should be set.
type ProxyAuth struct {
	// UserNameHeader, RolesHeader, TokenHeader name the headers; ""
	// means the defaults.
	UserNameHeader, RolesHeader, TokenHeader string
	// UseSecret ([chttpd_auth] proxy_use_secret) requires the token
	// header to hold ProxyToken of the user name with Options.Secret
	// ([chttpd_auth] secret), which must then be set: without the right
	// token the headers are ignored (the next handlers decide), as in
	// CouchDB.
	UseSecret bool
}

// proxyHandler authenticates the users a proxy names.
type proxyHandler struct {
	user, roles, token string
	secret             []byte // nil: no token needed
}

// ProxyToken is the token of proxy authentication for user name: the hex
// HMAC-SHA256 of the name keyed with secret. As CouchDB 3.5 with its
// default [chttpd_auth] hash_algorithms, the hex HMAC-SHA1 is accepted
// too.
func ProxyToken(secret []byte, name string) string { return proxyMAC(sha256.New, secret, name) }

func proxyMAC(h func() hash.Hash, secret []byte, name string) string {
	m := hmac.New(h, secret)
	m.Write([]byte(name))
	return hex.EncodeToString(m.Sum(nil))
}

// authenticate returns the user the headers name, nil without a name or,
// with a secret, without its token.
func (p *proxyHandler) authenticate(r *http.Request) *User {
	name := r.Header.Get(p.user)
	if name == "" {
		return nil
	}
	if p.secret != nil {
		token, ok := []byte(r.Header.Get(p.token)), false
		for _, h := range []func() hash.Hash{sha256.New, sha1.New} {
			ok = ok || subtle.ConstantTimeCompare([]byte(proxyMAC(h, p.secret, name)), token) == 1
		}
		if !ok {
			return nil
		}
	}
	return &User{Name: name, Roles: splitRoles(r.Header.Get(p.roles)), Method: AuthProxy}
}

// authHandler is one handler of the chain: a user, a refusal, or neither
// (the request goes on to the next handler).
type authHandler struct {
	name string
	run  func(r *http.Request) (u *User, refresh *http.Cookie, err *httpError)
}

// setHandlers builds the chain of names (nil: AuthHandlersDefault's).
func (a *authenticator) setHandlers(names []string, jwtOpts JWTAuth, proxy ProxyAuth, secret []byte) error {
	if names == nil {
		names = []string{AuthCookie, AuthDefault}
	}
	a.handlers = nil
	for _, name := range names {
		h := authHandler{name: name}
		switch name {
		case AuthCookie:
			h.run = a.cookieUser
		case AuthDefault:
			h.run = a.basicUser
		case AuthJWT:
			j, err := newJWTHandler(jwtOpts)
			if err != nil {
				return err
			}
			h.run = func(r *http.Request) (*User, *http.Cookie, *httpError) {
				u, he := j.authenticate(r, a.clock.Now())
				return u, nil, he
			}
		case AuthProxy:
			p := &proxyHandler{user: cmp.Or(proxy.UserNameHeader, ProxyUserNameHeaderDefault),
				roles: cmp.Or(proxy.RolesHeader, ProxyRolesHeaderDefault), token: cmp.Or(proxy.TokenHeader, ProxyTokenHeaderDefault)}
			if proxy.UseSecret {
				if len(secret) == 0 {
					return fmt.Errorf("%w: proxy authentication with UseSecret needs Secret", ErrInvalidOptions)
				}
				p.secret = secret
			}
			h.run = func(r *http.Request) (*User, *http.Cookie, *httpError) { return p.authenticate(r), nil, nil }
		default:
			return fmt.Errorf("%w: authentication handler %q: want %s, %s, %s or %s", ErrInvalidOptions, name, AuthCookie, AuthDefault, AuthJWT, AuthProxy)
		}
		a.handlers = append(a.handlers, h)
	}
	return nil
}

// handlerNames are the names of the chain's handlers, in order.
func (a *authenticator) handlerNames() []string {
	names := make([]string, len(a.handlers))
	for i, h := range a.handlers {
		names[i] = h.name
	}
	return names
}

// authenticate finds the request's user: the first the handlers find, in
// order, or the refusal of one of them; nil for an anonymous request.
// refresh is a cookie to set on the response, or nil.
func (a *authenticator) authenticate(r *http.Request) (u *User, refresh *http.Cookie, err *httpError) {
	for _, h := range a.handlers {
		if u, refresh, err = h.run(r); u != nil || err != nil {
			return u, refresh, err
		}
	}
	return nil, nil, nil
}
