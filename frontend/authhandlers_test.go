package frontend

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// session is GET /_session's userCtx and info.
func (e *testEnv) session(c *creds, hdr ...string) (ctx, info map[string]any) {
	e.t.Helper()
	r := e.do("GET", "/_session", c, nil, hdr...)
	require.Equal(e.t, 200, r.Status, r.Raw)
	return r.Body["userCtx"].(map[string]any), r.Body["info"].(map[string]any)
}

const proxySecret = "proxy-secret-xyz"

// TestProxyAuth: the proxy handler takes the user and roles its headers
// name; with proxy_use_secret only along with the right token, without
// which the request goes on as if the headers were not there.
func TestProxyAuth(t *testing.T) {
	proxyEnv := func(p ProxyAuth) *testEnv {
		return newEnv(t, func(o *Options) {
			o.AuthHandlers, o.Proxy, o.Secret = []string{AuthProxy, AuthCookie, AuthDefault}, p, []byte(proxySecret)
		})
	}
	user := func(name, roles string, more ...string) []string {
		return append([]string{"X-Auth-CouchDB-UserName", name, "X-Auth-CouchDB-Roles", roles}, more...)
	}

	t.Run("without secret", func(t *testing.T) {
		e := proxyEnv(ProxyAuth{})
		ctx, info := e.session(anon, user("carol", "_admin, ops")...)
		require.Equal(t, map[string]any{"name": "carol", "roles": []any{"_admin", "ops"}}, ctx)
		require.Equal(t, "proxy", info["authenticated"])
		require.Equal(t, []any{"proxy", "cookie", "default"}, info["authentication_handlers"])
		require.Equal(t, 200, e.do("GET", "/_all_dbs", anon, nil, user("carol", "_admin")...).Status)
		requireReply(t, e.do("GET", "/_all_dbs", anon, nil, user("carol", "ops")...), 401, "unauthorized", "You are not a server admin.")
		ctx, _ = e.session(anon, "X-Auth-CouchDB-UserName", "dave")
		require.Equal(t, map[string]any{"name": "dave", "roles": []any{}}, ctx)
		// No name: not this handler's request.
		ctx, _ = e.session(anon, user("", "_admin")...)
		require.Nil(t, ctx["name"])
		// The proxy handler comes first: it wins over Basic credentials,
		// wrong ones included.
		ctx, _ = e.session(&creds{Name: adminName, Pass: "wrong"}, user("carol", "")...)
		require.Equal(t, "carol", ctx["name"])
	})

	t.Run("with secret", func(t *testing.T) {
		e := proxyEnv(ProxyAuth{UseSecret: true})
		token := ProxyToken([]byte(proxySecret), "carol")
		m := hmac.New(sha1.New, []byte(proxySecret))
		m.Write([]byte("carol"))
		sha1Token := hex.EncodeToString(m.Sum(nil))
		for _, tc := range []struct {
			name, token string
			ok          bool
		}{
			{"HMAC-SHA256", token, true},
			{"HMAC-SHA1", sha1Token, true},
			{"none", "", false},
			{"wrong", strings.Repeat("0", len(token)), false},
			{"upper case", strings.ToUpper(token), false},
			{"another user's", ProxyToken([]byte(proxySecret), "dave"), false},
			{"another secret's", ProxyToken([]byte("guess"), "carol"), false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				hdr := user("carol", "_admin", "X-Auth-CouchDB-Token", tc.token)
				ctx, _ := e.session(anon, hdr...)
				r := e.do("GET", "/_all_dbs", anon, nil, hdr...)
				if tc.ok {
					require.Equal(t, "carol", ctx["name"])
					require.Equal(t, 200, r.Status, r.Raw)
					return
				}
				require.Nil(t, ctx["name"])
				requireReply(t, r, 401, "unauthorized", "You are not a server admin.")
				// The handlers after it still apply.
				ctx, _ = e.session(asAlice, hdr...)
				require.Equal(t, aliceName, ctx["name"])
			})
		}
	})

	t.Run("own headers", func(t *testing.T) {
		e := proxyEnv(ProxyAuth{UseSecret: true, UserNameHeader: "X-Forwarded-User", RolesHeader: "X-Forwarded-Groups", TokenHeader: "X-Forwarded-Sig"})
		ctx, _ := e.session(anon, "X-Forwarded-User", "erin", "X-Forwarded-Groups", "a,b", "X-Forwarded-Sig", ProxyToken([]byte(proxySecret), "erin"))
		require.Equal(t, map[string]any{"name": "erin", "roles": []any{"a", "b"}}, ctx)
		ctx, _ = e.session(anon, user("carol", "_admin", "X-Auth-CouchDB-Token", ProxyToken([]byte(proxySecret), "carol"))...)
		require.Nil(t, ctx["name"])
	})

	// UseSecret without a configured secret (only a random one) is a
	// programming error.
	_, err := New(Options{DB: newEnv(t).db, AuthHandlers: []string{AuthProxy}, Proxy: ProxyAuth{UseSecret: true}})
	require.ErrorIs(t, err, ErrInvalidOptions)
}

// TestAuthHandlersOrder: only the handlers configured apply, in their
// order, the first to find a user or refuse the request deciding.
func TestAuthHandlersOrder(t *testing.T) {
	k := newJWTKeys(t)
	token := bearer(sign(t, jwt.SigningMethodHS256, k.hmac, nil, jwt.MapClaims{"sub": "jan"}))
	proxy := []string{"X-Auth-CouchDB-UserName", "carol"}
	env := func(handlers ...string) *testEnv {
		return newEnv(t, func(o *Options) {
			o.AuthHandlers, o.JWT = handlers, k.options(t)
			o.JWT.Required = nil
		})
	}

	// The default: cookie, then Basic; Bearer tokens and proxy headers
	// are not looked at.
	e := newEnv(t)
	_, info := e.session(anon)
	require.Equal(t, []any{"cookie", "default"}, info["authentication_handlers"])
	ctx, _ := e.session(anon, token...)
	require.Nil(t, ctx["name"])
	ctx, _ = e.session(anon, proxy...)
	require.Nil(t, ctx["name"])
	// The cookie comes first: with a valid one, Basic credentials are not
	// looked at, as in CouchDB.
	acc := e.srv.auth.lookup(aliceName)
	cookie := "AuthSession=" + e.srv.auth.makeCookie(acc, &http.Request{}).Value
	ctx, info = e.session(&creds{Name: adminName, Pass: "wrong"}, "Cookie", cookie)
	require.Equal(t, aliceName, ctx["name"])
	require.Equal(t, "cookie", info["authenticated"])

	// Basic only: cookies are not looked at.
	e = env(AuthDefault)
	ctx, _ = e.session(anon, "Cookie", "AuthSession="+e.srv.auth.makeCookie(e.srv.auth.lookup(aliceName), &http.Request{}).Value)
	require.Nil(t, ctx["name"])
	ctx, info = e.session(asAlice)
	require.Equal(t, aliceName, ctx["name"])
	require.Equal(t, []any{"default"}, info["authentication_handlers"])

	// Basic before the proxy: wrong credentials are refused before the
	// proxy's headers are read.
	e = env(AuthDefault, AuthProxy)
	requireError(t, e.do("GET", "/_session", &creds{Name: adminName, Pass: "wrong"}, nil, proxy...), 401, "unauthorized")
	ctx, _ = e.session(anon, proxy...)
	require.Equal(t, "carol", ctx["name"])

	// A bad token is refused, not passed on to the handlers after jwt.
	e = env(AuthJWT, AuthProxy, AuthDefault)
	requireReply(t, e.do("GET", "/_session", anon, nil, append(bearer("x.y.z"), proxy...)...), 400, "bad_request", "Malformed token")
	ctx, info = e.session(anon, token...)
	require.Equal(t, "jan", ctx["name"])
	require.Equal(t, []any{"jwt", "proxy", "default"}, info["authentication_handlers"])
	ctx, _ = e.session(asAlice, proxy...)
	require.Equal(t, "carol", ctx["name"])
}

func TestParseAuthHandlers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: AuthHandlersDefault, want: []string{AuthCookie, AuthDefault}},
		{in: "{chttpd_auth, jwt_authentication_handler}, {chttpd_auth, cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}",
			want: []string{AuthJWT, AuthCookie, AuthDefault}},
		{in: "{couch_httpd_auth,proxy_authentification_handler},{chttpd_auth, default_authentication_handler},",
			want: []string{AuthProxy, AuthDefault}},
		{in: "{chttpd_auth, null_authentication_handler}", err: "{chttpd_auth, null_authentication_handler} is not a handler fdbrep has"},
		{in: "{my_auth, cookie_authentication_handler}", err: "{my_auth, cookie_authentication_handler} is not a handler fdbrep has"},
		{in: "cookie, default", err: `"cookie, default": want {chttpd_auth, <handler>} items`},
		{in: "{chttpd_auth, cookie_authentication_handler} {chttpd_auth, default_authentication_handler}", err: "want {chttpd_auth, <handler>} items"},
		{in: " ", err: "no authentication handler"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseAuthHandlers(tc.in)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalidOptions)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestAuthFromConfig: the configuration's authentication, and the errors
// that stop a node, each naming its key and never a secret.
func TestAuthFromConfig(t *testing.T) {
	k := newJWTKeys(t)
	const all = "{chttpd_auth, jwt_authentication_handler}, {chttpd_auth, proxy_authentication_handler}, {chttpd_auth, default_authentication_handler}"
	cfg, err := config.FromMap(map[string]map[string]string{
		"chttpd":      {"authentication_handlers": all},
		"chttpd_auth": {"proxy_use_secret": "true", "secret": proxySecret, "x_auth_roles": "X-Groups"},
		"jwt_auth":    {"required_claims": `exp, {iss, "me"}`, "roles_claim_path": `a.b`},
		"jwt_keys":    k.config(t),
	})
	require.NoError(t, err)
	o, _, err := OptionsFromConfig(cfg)
	require.NoError(t, err)
	require.Equal(t, []string{AuthJWT, AuthProxy, AuthDefault}, o.AuthHandlers)
	require.Equal(t, ProxyAuth{UserNameHeader: ProxyUserNameHeaderDefault, RolesHeader: "X-Groups", TokenHeader: ProxyTokenHeaderDefault, UseSecret: true}, o.Proxy)
	require.Equal(t, []string{"exp", "iss"}, o.JWT.Required)
	require.Equal(t, "me", o.JWT.Issuer)
	require.Equal(t, JWTRolesClaimNameDefault, o.JWT.RolesClaimName)
	require.Equal(t, "a.b", o.JWT.RolesClaimPath)
	require.Len(t, o.JWT.Keys, len(k.config(t)))
	require.Equal(t, k.hmac, o.JWT.Keys["hmac:_default"])

	// The default: cookie and Basic.
	o, _, err = OptionsFromConfig(config.Default())
	require.NoError(t, err)
	require.Equal(t, []string{AuthCookie, AuthDefault}, o.AuthHandlers)
	require.Equal(t, []string{"exp"}, o.JWT.Required)

	for _, tc := range []struct {
		name string
		m    map[string]map[string]string
		err  string
	}{
		{"unknown handler", map[string]map[string]string{"chttpd": {"authentication_handlers": "{chttpd_auth, null_authentication_handler}"}},
			"[chttpd] authentication_handlers (map): {chttpd_auth, null_authentication_handler} is not a handler fdbrep has"},
		{"jwt without keys", map[string]map[string]string{"chttpd": {"authentication_handlers": all}, "chttpd_auth": {"secret": "x"}},
			"names jwt_authentication_handler, but [jwt_keys] has no key"},
		{"bad key", map[string]map[string]string{"jwt_keys": {"hmac:Kid": "$$secret$$"}},
			"[jwt_keys] hmac:Kid (map): hmac:Kid: the HMAC secret must be given in base64"},
		{"bad required claims", map[string]map[string]string{"jwt_auth": {"required_claims": "exp, aud"}},
			`[jwt_auth] required_claims (map): "aud" is not a claim fdbrep checks`},
		{"proxy secret without a secret", map[string]map[string]string{"chttpd": {"authentication_handlers": "{chttpd_auth, proxy_authentication_handler}"},
			"chttpd_auth": {"proxy_use_secret": "true"}},
			"[chttpd_auth] proxy_use_secret (map) needs [chttpd_auth] secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.FromMap(tc.m)
			require.ErrorIs(t, err, config.ErrInvalidValue)
			require.ErrorContains(t, err, tc.err)
			require.NotContains(t, err.Error(), "$$secret$$")
		})
	}
	// proxy_use_secret without the proxy handler is no error (CouchDB's
	// local.ini may carry it).
	_, err = config.FromMap(map[string]map[string]string{"chttpd_auth": {"proxy_use_secret": "true"}})
	require.NoError(t, err)
}
