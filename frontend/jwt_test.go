package frontend

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// jwtKeys are signing keys of every kind, made for a test, and the
// [jwt_keys] that check them.
type jwtKeys struct {
	hmac, hmac2 []byte
	rsa         *rsa.PrivateKey
	ec          *ecdsa.PrivateKey
	ec384       *ecdsa.PrivateKey
}

func newJWTKeys(t testing.TB) *jwtKeys {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ek384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)
	return &jwtKeys{hmac: []byte("hmac secret for the tests"), hmac2: []byte("another secret"), rsa: rk, ec: ek, ec384: ek384}
}

// config is the [jwt_keys] section of the keys, as CouchDB's ini holds
// it: the HMAC secrets in base64, the public keys in PEM with their
// newlines written "\n".
func (k *jwtKeys) config(t testing.TB) map[string]string {
	t.Helper()
	return map[string]string{
		"hmac:_default": "aG1hYyBzZWNyZXQgZm9yIHRoZSB0ZXN0cw==", // base64 of k.hmac
		"hmac:h2":       "YW5vdGhlciBzZWNyZXQ",                  // k.hmac2, unpadded
		"rsa:r1":        pemLine(t, &k.rsa.PublicKey),
		"ec:e1":         pemLine(t, &k.ec.PublicKey),
		"ec:e384":       pemLine(t, &k.ec384.PublicKey),
	}
}

func pemLine(t testing.TB, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	return strings.ReplaceAll(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), "\n", `\n`)
}

// options is JWTAuth with the keys, parsed as a node parses [jwt_keys].
func (k *jwtKeys) options(t testing.TB) JWTAuth {
	t.Helper()
	o := JWTAuth{Keys: map[string]any{}, Required: []string{"exp"}}
	for name, v := range k.config(t) {
		key, err := ParseJWTKey(name, v)
		require.NoError(t, err, name)
		o.Keys[name] = key
	}
	return o
}

// sign makes a token: header holds the header's extra parameters (kid).
func sign(t testing.TB, m jwt.SigningMethod, key any, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// jwtNow is the fake time of the JWT tests.
var jwtNow = time.Unix(1_800_000_000, 0)

// claims are valid claims at jwtNow, edited by more (see edit).
func claims(more ...any) jwt.MapClaims {
	return edit(jwt.MapClaims{"sub": "jan", "exp": jwtNow.Unix() + 60}, more...)
}

// edit sets c's claims named in more's name, value pairs (a nil value
// removes the claim) and returns c.
func edit(c jwt.MapClaims, more ...any) jwt.MapClaims {
	for i := 0; i+1 < len(more); i += 2 {
		if more[i+1] == nil {
			delete(c, more[i].(string))
		} else {
			c[more[i].(string)] = more[i+1]
		}
	}
	return c
}

func newJWTEnv(t *testing.T, keys *jwtKeys, mod ...func(*JWTAuth)) *testEnv {
	t.Helper()
	o := keys.options(t)
	for _, m := range mod {
		m(&o)
	}
	return newEnv(t, func(opts *Options) {
		opts.AuthHandlers = []string{AuthJWT, AuthCookie, AuthDefault}
		opts.JWT = o
		opts.Clock = clockwork.NewFakeClockAt(jwtNow)
	})
}

// requireReply checks a refusal's status, error and reason.
func requireReply(t *testing.T, r resp, status int, errName, reason string) {
	t.Helper()
	requireError(t, r, status, errName)
	require.Equal(t, reason, r.Body["reason"], r.Raw)
}

// TestJWTAuth: tokens signed with each kind of key authenticate their
// "sub" with the roles of "_couchdb.roles" ("_admin": a server admin);
// a token that fails is refused with CouchDB 3.5's reply (checked
// against the real one in TestAuthHandlersMatchCouchDB).
func TestJWTAuth(t *testing.T) {
	k := newJWTKeys(t)
	e := newJWTEnv(t, k)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	rolesAdmin := claims("_couchdb.roles", []string{"_admin", "ops"})
	for _, tc := range []struct {
		name  string
		token string
		// status 200: the user is jan, with roles.
		status  int
		errName string
		reason  string
		roles   []any
		admin   bool
	}{
		{name: "HS256, no kid", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims()), status: 200, roles: []any{}},
		{name: "HS384 by kid", token: sign(t, jwt.SigningMethodHS384, k.hmac2, map[string]any{"kid": "h2"}, claims()), status: 200, roles: []any{}},
		{name: "HS512 admin", token: sign(t, jwt.SigningMethodHS512, k.hmac, nil, rolesAdmin), status: 200, roles: []any{"_admin", "ops"}, admin: true},
		{name: "RS256", token: sign(t, jwt.SigningMethodRS256, k.rsa, map[string]any{"kid": "r1"}, rolesAdmin), status: 200, roles: []any{"_admin", "ops"}, admin: true},
		{name: "RS512", token: sign(t, jwt.SigningMethodRS512, k.rsa, map[string]any{"kid": "r1"}, claims()), status: 200, roles: []any{}},
		{name: "ES256", token: sign(t, jwt.SigningMethodES256, k.ec, map[string]any{"kid": "e1"}, rolesAdmin), status: 200, roles: []any{"_admin", "ops"}, admin: true},
		{name: "ES384", token: sign(t, jwt.SigningMethodES384, k.ec384, map[string]any{"kid": "e384"}, claims()), status: 200, roles: []any{}},
		{name: "roles as a string", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("_couchdb.roles", "a, b,")), status: 200, roles: []any{"a", "b"}},

		{name: "unknown kid", token: sign(t, jwt.SigningMethodRS256, k.rsa, map[string]any{"kid": "nope"}, claims()),
			status: 400, errName: "bad_request", reason: "Unknown kid"},
		{name: "RSA token without kid", token: sign(t, jwt.SigningMethodRS256, k.rsa, nil, claims()),
			status: 400, errName: "bad_request", reason: "Unknown kid"},
		{name: "an HMAC token never meets an RSA key", token: sign(t, jwt.SigningMethodHS256, []byte(pemLine(t, &k.rsa.PublicKey)), map[string]any{"kid": "r1"}, rolesAdmin),
			status: 400, errName: "bad_request", reason: "Unknown kid"},
		{name: "an EC token never meets an RSA key", token: sign(t, jwt.SigningMethodES256, k.ec, map[string]any{"kid": "r1"}, claims()),
			status: 400, errName: "bad_request", reason: "Unknown kid"},
		{name: "wrong HMAC secret", token: sign(t, jwt.SigningMethodHS256, []byte("guess"), nil, rolesAdmin),
			status: 400, errName: "bad_request", reason: "Bad HMAC"},
		{name: "wrong RSA key", token: sign(t, jwt.SigningMethodRS256, other, map[string]any{"kid": "r1"}, rolesAdmin),
			status: 400, errName: "bad_request", reason: "Bad signature"},
		{name: "EC key of another curve", token: sign(t, jwt.SigningMethodES256, k.ec, map[string]any{"kid": "e384"}, claims()),
			status: 400, errName: "bad_request", reason: "Bad signature"},
		{name: "alg none", token: sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, nil, rolesAdmin),
			status: 400, errName: "bad_request", reason: "Invalid alg header parameter"},
		{name: "alg PS256", token: sign(t, jwt.SigningMethodPS256, k.rsa, map[string]any{"kid": "r1"}, claims()),
			status: 400, errName: "bad_request", reason: "Invalid alg header parameter"},
		{name: "no alg", token: "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJqYW4ifQ.c2ln",
			status: 400, errName: "bad_request", reason: "Missing alg header parameter"},
		{name: "two parts", token: "abc.def", status: 400, errName: "bad_request", reason: "Malformed token"},
		{name: "not base64", token: "a!!.b.c", status: 400, errName: "bad_request", reason: "Malformed token"},
		{name: "expired", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("exp", jwtNow.Unix())),
			status: 401, errName: "unauthorized", reason: "exp not in future"},
		{name: "no exp", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("exp", nil)),
			status: 400, errName: "bad_request", reason: "Missing exp claim"},
		{name: "exp not a number", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("exp", "tomorrow")),
			status: 400, errName: "bad_request", reason: "Invalid exp claim"},
		{name: "nbf in the future", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("nbf", jwtNow.Unix()+1)),
			status: 401, errName: "unauthorized", reason: "nbf not in past"},
		{name: "nbf now", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("nbf", jwtNow.Unix())),
			status: 401, errName: "unauthorized", reason: "nbf not in past"},
		{name: "nbf past", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("nbf", jwtNow.Unix()-1)), status: 200, roles: []any{}},
		{name: "no sub", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("sub", nil)),
			status: 401, errName: "unauthorized", reason: "Token missing sub claim."},
		{name: "empty sub", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("sub", "", "_couchdb.roles", []string{"_admin"})),
			status: 401, errName: "unauthorized", reason: "Token missing sub claim."},
		{name: "sub not a string", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("sub", 5)),
			status: 400, errName: "bad_request", reason: "Malformed token"},
		{name: "a role not a string", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("_couchdb.roles", []any{"a", 1})),
			status: 400, errName: "bad_request", reason: "Malformed token"},
		{name: "roles a number", token: sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("_couchdb.roles", 3)),
			status: 400, errName: "bad_request", reason: "Malformed token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", "/_session", anon, nil, bearer(tc.token)...)
			if tc.status != 200 {
				requireReply(t, r, tc.status, tc.errName, tc.reason)
				requireReply(t, e.do("GET", "/_all_dbs", anon, nil, bearer(tc.token)...), tc.status, tc.errName, tc.reason)
				return
			}
			require.Equal(t, 200, r.Status, r.Raw)
			require.Equal(t, map[string]any{"name": "jan", "roles": tc.roles}, r.Body["userCtx"])
			require.Equal(t, "jwt", r.Body["info"].(map[string]any)["authenticated"])
			require.Equal(t, []any{"jwt", "cookie", "default"}, r.Body["info"].(map[string]any)["authentication_handlers"])
			if tc.admin {
				require.Equal(t, 200, e.do("GET", "/_all_dbs", anon, nil, bearer(tc.token)...).Status)
			} else {
				requireReply(t, e.do("GET", "/_all_dbs", anon, nil, bearer(tc.token)...), 401, "unauthorized", "You are not a server admin.")
			}
		})
	}

	// A JWT user owns the replication documents it writes, as any user.
	tok := sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims())
	r := e.do("PUT", "/_replicator/by_jan", anon, repDoc(), bearer(tok)...)
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "jan", e.do("GET", "/_replicator/by_jan", asAdmin, nil).Body["owner"])
	// Basic and cookies still work after the jwt handler.
	require.Equal(t, adminName, e.do("GET", "/_session", asAdmin, nil).Body["userCtx"].(map[string]any)["name"])
}

// TestJWTRequiredClaims: [jwt_auth] required_claims' checks, in CouchDB's
// order (iss, iat, nbf, exp) and with its replies.
func TestJWTRequiredClaims(t *testing.T) {
	k := newJWTKeys(t)
	e := newJWTEnv(t, k, func(o *JWTAuth) {
		var err error
		o.Required, o.Issuer, err = ParseJWTRequiredClaims(`exp, nbf,iat, kid , typ, {iss, "https://idp.example"}`)
		require.NoError(t, err)
	})
	full := func(more ...any) jwt.MapClaims {
		return claims(append([]any{"nbf", jwtNow.Unix() - 10, "iat", jwtNow.Unix() - 10, "iss", "https://idp.example"}, more...)...)
	}
	kid := map[string]any{"kid": "_default", "typ": "JWT"}
	for _, tc := range []struct {
		name   string
		header map[string]any
		claims jwt.MapClaims
		status int
		reason string
	}{
		{name: "all there", header: kid, claims: full(), status: 200},
		{name: "no iss", header: kid, claims: full("iss", nil, "nbf", nil), status: 400, reason: "Missing iss claim"},
		{name: "another iss", header: kid, claims: full("iss", "https://evil.example"), status: 400, reason: "Invalid iss claim"},
		{name: "no iat", header: kid, claims: full("iat", nil), status: 400, reason: "Missing iat claim"},
		{name: "iat not an integer", header: kid, claims: full("iat", 1.5), status: 400, reason: "Invalid iat claim"},
		{name: "no nbf", header: kid, claims: full("nbf", nil), status: 400, reason: "Missing nbf claim"},
		{name: "no exp", header: kid, claims: full("exp", nil), status: 400, reason: "Missing exp claim"},
		{name: "no kid", header: map[string]any{"typ": "JWT"}, claims: full(), status: 400, reason: "Missing kid claim"},
		{name: "no typ", header: map[string]any{"kid": "_default"}, claims: full(), status: 400, reason: "Missing typ header parameter"},
		{name: "typ not JWT", header: map[string]any{"kid": "_default", "typ": "at+jwt"}, claims: full(), status: 400, reason: "Invalid typ header parameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, tc.claims)
			delete(tok.Header, "typ")
			for k, v := range tc.header {
				tok.Header[k] = v
			}
			s, err := tok.SignedString(k.hmac)
			require.NoError(t, err)
			r := e.do("GET", "/_session", anon, nil, bearer(s)...)
			if tc.status == 200 {
				require.Equal(t, 200, r.Status, r.Raw)
				require.Equal(t, "jan", r.Body["userCtx"].(map[string]any)["name"])
				return
			}
			requireReply(t, r, tc.status, "bad_request", tc.reason)
		})
	}

	// Nothing required: a token without exp is accepted; an expired one
	// is refused all the same.
	none := newJWTEnv(t, k, func(o *JWTAuth) { o.Required = nil })
	require.Equal(t, "jan", none.do("GET", "/_session", anon, nil, bearer(sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("exp", nil)))...).Body["userCtx"].(map[string]any)["name"])
	requireReply(t, none.do("GET", "/_session", anon, nil, bearer(sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims("exp", jwtNow.Unix()-1)))...),
		401, "unauthorized", "exp not in future")
}

func TestParseJWTRequiredClaims(t *testing.T) {
	for _, tc := range []struct {
		in       string
		required []string
		issuer   string
		err      string
	}{
		{in: "", required: nil},
		{in: "exp", required: []string{"exp"}},
		{in: ` exp , nbf,{iss,"My Company"}, kid`, required: []string{"exp", "nbf", "iss", "kid"}, issuer: "My Company"},
		{in: `{aud, "x"}`, err: `"aud" is not a claim fdbrep checks`},
		{in: "exp, iss", err: "iss needs the issuer"},
		{in: `{exp, "1"}`, err: "only iss takes a value"},
		{in: "exp nbf", err: "want names and {name, \"value\"} pairs"},
		{in: "Exp", err: "want names"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			required, issuer, err := ParseJWTRequiredClaims(tc.in)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalidOptions)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.required, required)
			require.Equal(t, tc.issuer, issuer)
		})
	}
}

// TestJWTRoles: the roles claim by name or by path, as CouchDB finds it.
func TestJWTRoles(t *testing.T) {
	k := newJWTKeys(t)
	token := func(more ...any) []string {
		return bearer(sign(t, jwt.SigningMethodHS256, k.hmac, nil, claims(more...)))
	}
	named := newJWTEnv(t, k, func(o *JWTAuth) { o.RolesClaimName = "groups" })
	r := named.do("GET", "/_session", anon, nil, token("groups", []string{"_admin"}, "_couchdb.roles", []string{"x"})...)
	require.Equal(t, []any{"_admin"}, r.Body["userCtx"].(map[string]any)["roles"], r.Raw)
	r = named.do("GET", "/_session", anon, nil, token("_couchdb.roles", []string{"x"})...)
	require.Equal(t, []any{}, r.Body["userCtx"].(map[string]any)["roles"], r.Raw)

	path := newJWTEnv(t, k, func(o *JWTAuth) { o.RolesClaimName, o.RolesClaimPath = "ignored", `my.nested._couchdb\.roles` })
	nested := map[string]any{"nested": map[string]any{"_couchdb.roles": []string{"_admin", "dev"}}}
	r = path.do("GET", "/_session", anon, nil, token("my", nested)...)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, []any{"_admin", "dev"}, r.Body["userCtx"].(map[string]any)["roles"], r.Raw)
	require.Equal(t, 200, path.do("GET", "/_all_dbs", anon, nil, token("my", nested)...).Status)
	requireReply(t, path.do("GET", "/_session", anon, nil, token("ignored", []string{"x"})...), 404, "not_found", "missing json key: my")
	requireReply(t, path.do("GET", "/_session", anon, nil, token("my", map[string]any{"nested": map[string]any{}})...), 404, "not_found", "missing json key: _couchdb.roles")
	requireReply(t, path.do("GET", "/_session", anon, nil, token("my", "flat")...), 404, "not_found", "json_mismatch")
	requireReply(t, path.do("GET", "/_session", anon, nil, token("my", map[string]any{"nested": map[string]any{"_couchdb.roles": nil}})...), 400, "bad_request", "Malformed token")
}

func TestParseJWTKey(t *testing.T) {
	k := newJWTKeys(t)
	cfg := k.config(t)
	key, err := ParseJWTKey("hmac:_default", cfg["hmac:_default"])
	require.NoError(t, err)
	require.Equal(t, k.hmac, key)
	key, err = ParseJWTKey("hmac:h2", cfg["hmac:h2"])
	require.NoError(t, err)
	require.Equal(t, k.hmac2, key)
	key, err = ParseJWTKey("rsa:r1", cfg["rsa:r1"])
	require.NoError(t, err)
	require.True(t, k.rsa.PublicKey.Equal(key))
	// PKCS#1 RSA public keys too, and real newlines.
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)}))
	key, err = ParseJWTKey("rsa:r2", pkcs1)
	require.NoError(t, err)
	require.True(t, k.rsa.PublicKey.Equal(key))
	key, err = ParseJWTKey("ec:e1", cfg["ec:e1"])
	require.NoError(t, err)
	require.True(t, k.ec.PublicKey.Equal(key))

	for _, tc := range []struct{ name, value, err string }{
		{"hmac:x", "not base64!", "hmac:x: the HMAC secret must be given in base64"},
		{"hmac:x", "", "hmac:x: the HMAC secret must be given in base64"},
		{"rsa:x", cfg["ec:e1"], "rsa:x: not an RSA public key"},
		{"ec:x", cfg["rsa:r1"], "ec:x: not an EC public key"},
		{"rsa:x", "MIIBIjAN", "rsa:x: not an RSA public key"},
		{"ed:x", cfg["ec:e1"], "ed:x: the kind of key must be hmac, rsa or ec"},
		{"_default", cfg["hmac:_default"], `"_default" is not <kind>:<kid>`},
		{"hmac:", cfg["hmac:_default"], `"hmac:" is not <kind>:<kid>`},
	} {
		_, err := ParseJWTKey(tc.name, tc.value)
		require.ErrorIs(t, err, ErrInvalidOptions, tc.name)
		require.ErrorContains(t, err, tc.err)
		require.NotContains(t, err.Error(), "aG1hYyBzZWNyZXQ", "errors never hold a secret")
	}
}
