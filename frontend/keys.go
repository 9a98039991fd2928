package frontend

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// Defaults of the password hashing of plaintext passwords in [admins] and
// [users] (AccountsOptions).
const (
	// HashPRFDefault is [chttpd_auth] pbkdf2_prf's default.
	HashPRFDefault = "sha256"
	// HashIterationsDefault is [chttpd_auth] iterations' default (OWASP's
	// figure for PBKDF2-HMAC-SHA256).
	HashIterationsDefault = 600_000
)

// SameSiteDefault is [chttpd_auth] same_site's default: AuthSession
// cookies are not sent with cross-site requests other than top-level
// navigations (a link to Fauxton still finds its session), against
// cross-site request forgery. CouchDB 3.5 sends no SameSite by default
// (docs/COMPAT.md).
const SameSiteDefault = "lax"

// sameSites are [chttpd_auth] same_site's values, in any case, as
// CouchDB 3.5 reads them; "" sends no SameSite attribute.
var sameSites = map[string]http.SameSite{"": http.SameSiteDefaultMode,
	"strict": http.SameSiteStrictMode, "lax": http.SameSiteLaxMode, "none": http.SameSiteNoneMode}

// The [chttpd] and [chttpd_auth] keys of the HTTP API (Options, Limits),
// each declared once: its default is this package's constant. [chttpd]
// bind_address and port are package config's (Config.BindAddress).
var (
	keyMaxRequestSize = config.RegisterInt("chttpd", "max_http_request_size", MaxRequestSizeDefault, 1024, 64<<20,
		"Largest request body accepted, in bytes; larger bodies get 413 too_large.", config.InUnit("bytes"))
	keyMaxDocumentSize = config.RegisterInt("chttpd", "max_document_size", MaxDocumentSizeDefault, 256, 90000,
		"Largest replication document accepted, in bytes of JSON (documents are stored in one FoundationDB value).", config.InUnit("bytes"))
	keyMaxJSONDepth = config.RegisterInt("chttpd", "max_json_depth", MaxJSONDepthDefault, 2, 1000,
		"Deepest nesting of JSON objects and arrays accepted in a request body.")
	keyAdminOnlyAllDBs = config.RegisterBool("chttpd", "admin_only_all_dbs", true,
		"Only server admins may list databases with GET /_all_dbs.")
	keyRequireValidUser = config.RegisterBool("chttpd", "require_valid_user", false,
		"Refuse every unauthenticated request except GET /_up and /_session.")
	keyMaxConnections = config.RegisterInt("chttpd", "max_connections", MaxConnectionsDefault, 1, 1_000_000,
		"Open connections at most on a listener (lowered to the process's file limit less 256). At the cap a new connection closes the one idle, still sending its request or waiting in a longpoll the longest.")
	keyHeaderTimeout = config.RegisterDuration("chttpd", "header_timeout_msec", time.Millisecond, HeaderTimeoutDefault, time.Millisecond, time.Hour,
		"Milliseconds a client has to send its request line and headers.")
	keyBodyTimeout = config.RegisterDuration("chttpd", "body_timeout_msec", time.Millisecond, BodyTimeoutDefault, time.Millisecond, time.Hour,
		"Milliseconds a client has to send a request body once its headers arrived; a slower body gets 408.")
	keyIdleTimeout = config.RegisterDuration("chttpd", "idle_timeout_msec", time.Millisecond, IdleTimeoutDefault, time.Millisecond, time.Hour,
		"Milliseconds a keep-alive connection may stay idle.")
	keyMaxClientRequests = config.RegisterInt("chttpd", "max_client_requests", MaxClientRequestsDefault, 0, 1_000_000,
		"Requests one client (a user, or an anonymous client's address) may have in flight; more get 429. Server admins and GET /_up are not counted. 0 disables the cap.")
	keyMaxHeaderBytes = config.RegisterInt("chttpd", "max_header_bytes", MaxHeaderBytesDefault, 4096, 16<<20,
		"Largest request headers accepted, in bytes.", config.InUnit("bytes"))
	keyUtilsDir = config.RegisterString("chttpd", "utils_dir", "",
		"Directory of Fauxton's prebuilt files (the dist/release directory of the npm package fauxton), served at /_utils/. Empty: scripts/fauxton/node_modules/fauxton/dist/release under the working directory when it exists (`make fauxton` installs it; `make run` starts there); otherwise /_utils answers 404 with how to install it. A directory given here must hold index.html or the node does not start. A container image sets it (FDBREP_CHTTPD__UTILS_DIR).", nil)

	keyAuthHandlers = config.RegisterString("chttpd", "authentication_handlers", AuthHandlersDefault,
		"Authentication handlers a request goes through, in order, until one finds its user (none: anonymous), in CouchDB's syntax, comma-separated: {chttpd_auth, cookie_authentication_handler} (AuthSession cookies), {chttpd_auth, default_authentication_handler} (Basic), {chttpd_auth, jwt_authentication_handler} (Bearer tokens: [jwt_auth], [jwt_keys]), {chttpd_auth, proxy_authentication_handler} (the user a proxy names: proxy_use_secret, x_auth_username in [chttpd_auth]). Another handler stops the node.", nil)

	keySecret = config.RegisterString("chttpd_auth", "secret", "",
		"Key that signs AuthSession cookies and proxy authentication tokens (proxy_use_secret). Empty: a random key per process, so cookies are only valid on the node that issued them; set the same secret on every api_frontend node.", nil, config.Secret())
	keyProxyUseSecret = config.RegisterBool("chttpd_auth", "proxy_use_secret", false,
		"Proxy authentication (the proxy handler of [chttpd] authentication_handlers) requires the x_auth_token header to hold the hex HMAC-SHA256 (or HMAC-SHA1) of the user name keyed with secret, which must then be set; a request without the right token is not that user. Without it, whoever reaches the node can be any user, server admins included: only the proxy may reach it (docs/DEPLOY.md).")
	keyXAuthUserName = config.RegisterString("chttpd_auth", "x_auth_username", ProxyUserNameHeaderDefault,
		"Header naming the user, for proxy authentication.", nil)
	keyXAuthRoles = config.RegisterString("chttpd_auth", "x_auth_roles", ProxyRolesHeaderDefault,
		"Header listing the user's roles, comma-separated (_admin: a server admin), for proxy authentication.", nil)
	keyXAuthToken = config.RegisterString("chttpd_auth", "x_auth_token", ProxyTokenHeaderDefault,
		"Header holding the token of proxy authentication (see proxy_use_secret).", nil)
	keySessionTimeout = config.RegisterDuration("chttpd_auth", "timeout", time.Second, SessionTimeoutDefault, time.Second, config.Forever,
		"Seconds an AuthSession cookie stays valid; it is refreshed when less than 10% of this remains.")
	keyPersistentCookies = config.RegisterBool("chttpd_auth", "allow_persistent_cookies", true,
		"Give AuthSession cookies a Max-Age (otherwise they are session cookies).")
	keyHashPRF = config.RegisterString("chttpd_auth", "pbkdf2_prf", HashPRFDefault,
		"Pseudo-random function used to hash plaintext passwords found in [admins] and [users].", []string{"sha", "sha256", "sha512"})
	keyHashIterations = config.RegisterInt("chttpd_auth", "iterations", HashIterationsDefault, 1, 100_000_000,
		"PBKDF2 iterations used to hash plaintext passwords found in [admins] and [users].")
	keyAuthCacheSize = config.RegisterInt("chttpd_auth", "auth_cache_size", AuthCacheSizeDefault, 0, 1_000_000,
		"Verified credentials remembered, so that Basic auth does not rerun PBKDF2 on every request; 0 disables the cache.")
	keySameSite = config.RegisterString("chttpd_auth", "same_site", SameSiteDefault,
		"SameSite attribute of AuthSession cookies: strict, lax or none, in any case; empty sends none (CouchDB's default). Lax keeps the cookie from cross-site requests but for top-level navigations; browsers keep a none cookie only over HTTPS.", nil)
	keyTrustedProxies = config.RegisterList("chttpd", "trusted_proxies", nil,
		"Addresses (1.2.3.4, ::1) or networks (10.0.0.0/8) of the proxies and load balancers in front of this node: a request from one of them is from the last address its X-Forwarded-For names that is not one of them, for the failed-login lockout and hold-back and the anonymous clients' max_client_requests. Empty: X-Forwarded-For is ignored, and behind a proxy every client is the proxy's address.", nil)

	keyJWTRequiredClaims = config.RegisterString("jwt_auth", "required_claims", JWTRequiredClaimsDefault,
		"What a JWT must have, comma-separated, as CouchDB: exp, nbf, iat (an integer), kid and typ (the header's, typ JWT), and {iss, \"issuer\"} (the iss it must be); tokens missing one get 400. exp (in the future) and nbf (in the past) are checked whenever present, required or not (401 otherwise).", nil)
	keyJWTRolesClaimName = config.RegisterString("jwt_auth", "roles_claim_name", JWTRolesClaimNameDefault,
		"Top-level claim of a JWT holding the user's roles: a list of strings, or a string of comma-separated roles (_admin: a server admin). A token without it has no roles. Ignored when roles_claim_path is set.", nil)
	keyJWTRolesClaimPath = config.RegisterString("jwt_auth", "roles_claim_path", "",
		"Path of the roles claim in a JWT, for a nested one: members separated by '.', '\\.' being a dot within a name (my.nested._couchdb\\.roles). A token without it gets 404, as in CouchDB. Empty: roles_claim_name.", nil)

	keyLockoutMode = config.RegisterString("chttpd_auth_lockout", "mode", LockoutModeDefault,
		"What failed logins do, as in CouchDB: enforce refuses the logins of a user name from a client address (403, the right password too) once threshold of them failed from there within max_lifetime of the first, until then; warn logs a warning instead; off counts nothing.",
		[]string{LockoutOff, LockoutWarn, LockoutEnforce})
	keyLockoutThreshold = config.RegisterInt("chttpd_auth_lockout", "threshold", LockoutThresholdDefault, 1, 1_000_000,
		"Failed logins of one user name from one client address (see [chttpd] trusted_proxies) that lock the name out from there.")
	keyLockoutMaxLifetime = config.RegisterDuration("chttpd_auth_lockout", "max_lifetime", time.Millisecond, LockoutMaxLifetimeDefault, time.Second, 24*time.Hour,
		"Milliseconds a count of failed logins lasts, from its first failure: a lockout ends then.")
	keyLockoutMaxObjects = config.RegisterInt("chttpd_auth_lockout", "max_objects", LockoutMaxObjectsDefault, 1, 10_000_000,
		"Counts of failed logins (user name and client address pairs) kept at most; past it the oldest are forgotten.")
)

func init() {
	config.RegisterCheck(func(c *config.Config) error {
		if _, ok := sameSites[strings.ToLower(keySameSite.Get(c))]; !ok {
			return fmt.Errorf("%w: [chttpd_auth] same_site = %q (%s): want strict, lax, none or empty", config.ErrInvalidValue,
				keySameSite.Get(c), c.Source("chttpd_auth", "same_site"))
		}
		if _, err := TrustedProxiesFromConfig(c); err != nil {
			return err
		}
		_, err := authFromConfig(c)
		return err
	})
}

// authConfig is the authentication that a configuration sets up.
type authConfig struct {
	handlers []string
	jwt      JWTAuth
	proxy    ProxyAuth
}

// authFromConfig reads [chttpd] authentication_handlers, [jwt_auth],
// [jwt_keys] and proxy authentication's [chttpd_auth] keys. An error
// wraps config.ErrInvalidValue and names the key, never a secret: a
// handler fdbrep does not have, required_claims it cannot check, a key
// that does not parse, the jwt handler without a key, the proxy handler
// with proxy_use_secret and no secret.
func authFromConfig(c *config.Config) (authConfig, error) {
	invalid := func(section, key string, err error) error {
		return fmt.Errorf("%w: [%s] %s (%s): %s", config.ErrInvalidValue, section, key, c.Source(section, key),
			strings.TrimPrefix(err.Error(), ErrInvalidOptions.Error()+": "))
	}
	var a authConfig
	var err error
	if a.handlers, err = ParseAuthHandlers(keyAuthHandlers.Get(c)); err != nil {
		return a, invalid("chttpd", "authentication_handlers", err)
	}
	if a.jwt.Required, a.jwt.Issuer, err = ParseJWTRequiredClaims(keyJWTRequiredClaims.Get(c)); err != nil {
		return a, invalid("jwt_auth", "required_claims", err)
	}
	a.jwt.RolesClaimName, a.jwt.RolesClaimPath = keyJWTRolesClaimName.Get(c), keyJWTRolesClaimPath.Get(c)
	a.jwt.Keys = map[string]any{}
	for name, value := range c.Section(config.SectionJWTKeys) {
		if a.jwt.Keys[name], err = ParseJWTKey(name, value); err != nil {
			return a, invalid(config.SectionJWTKeys, name, err)
		}
	}
	a.proxy = ProxyAuth{UserNameHeader: keyXAuthUserName.Get(c), RolesHeader: keyXAuthRoles.Get(c),
		TokenHeader: keyXAuthToken.Get(c), UseSecret: keyProxyUseSecret.Get(c)}
	switch {
	case slices.Contains(a.handlers, AuthJWT) && len(a.jwt.Keys) == 0:
		return a, fmt.Errorf("%w: [chttpd] authentication_handlers (%s) names jwt_authentication_handler, but [jwt_keys] has no key to check tokens with",
			config.ErrInvalidValue, c.Source("chttpd", "authentication_handlers"))
	case slices.Contains(a.handlers, AuthProxy) && a.proxy.UseSecret && keySecret.Get(c) == "":
		return a, fmt.Errorf("%w: [chttpd_auth] proxy_use_secret (%s) needs [chttpd_auth] secret, the key of the proxy's tokens",
			config.ErrInvalidValue, c.Source("chttpd_auth", "proxy_use_secret"))
	}
	return a, nil
}

// TrustedProxiesFromConfig parses [chttpd] trusted_proxies; an item that
// is neither an address nor a network is an error wrapping
// config.ErrInvalidValue.
func TrustedProxiesFromConfig(c *config.Config) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range keyTrustedProxies.Get(c) {
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return nil, fmt.Errorf("%w: [chttpd] trusted_proxies: %q is neither an address (1.2.3.4, ::1) nor a network (10.0.0.0/8) (%s)",
					config.ErrInvalidValue, item, c.Source("chttpd", "trusted_proxies"))
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
