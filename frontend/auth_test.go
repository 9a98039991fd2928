package frontend

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestPasswordHashes(t *testing.T) {
	for _, prf := range []string{"sha", "sha256", "sha512"} {
		h, err := HashPassword("pw", prf, 5)
		require.NoError(t, err)
		ok, err := verifyPassword(h, "pw")
		require.NoError(t, err)
		require.True(t, ok, h)
		ok, err = verifyPassword(h, "wrong")
		require.NoError(t, err)
		require.False(t, ok)
	}
	// A hash made by CouchDB 3.x for password "pass" (-pbkdf2-, sha1, 10
	// iterations, salt used as its ASCII bytes).
	couch := "-pbkdf2-" + mustHex(t, "pass", "sha", "1e0e2e47e7a7a1fa06c7c3c4ce9db97d", 10) + ",1e0e2e47e7a7a1fa06c7c3c4ce9db97d,10"
	ok, err := verifyPassword(couch, "pass")
	require.NoError(t, err)
	require.True(t, ok)
	// -hashed- format: sha1(password + salt).
	ok, err = verifyPassword("-hashed-"+sha1Hex("passsalt")+",salt", "pass")
	require.NoError(t, err)
	require.True(t, ok)
	for _, bad := range []string{"-pbkdf2-zz,salt,10", "-pbkdf2:md5-00,salt,1", "-pbkdf2-00,salt,0", "-pbkdf2-00,salt", "-hashed-00", "plain"} {
		_, err := verifyPassword(bad, "x")
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), bad)
	}
	_, _, err = NewAccounts(map[string]string{"a": "-pbkdf2-zz,salt,10"}, nil, nil, AccountsOptions{PRF: "sha256", Iterations: 1})
	require.ErrorIs(t, err, ErrInvalidOptions)
	_, _, err = NewAccounts(map[string]string{"a:b": "pw"}, nil, nil, AccountsOptions{PRF: "sha256", Iterations: 1})
	require.ErrorIs(t, err, ErrInvalidOptions)
}

func TestBasicAuth(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/_session", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, map[string]any{"name": adminName, "roles": []any{"_admin"}}, r.Body["userCtx"])
	require.Equal(t, "default", r.Body["info"].(map[string]any)["authenticated"])
	r = e.do("GET", "/_session", asAlice, nil)
	require.Equal(t, map[string]any{"name": aliceName, "roles": []any{"dev"}}, r.Body["userCtx"])
	r = e.do("GET", "/_session", anon, nil)
	require.Equal(t, map[string]any{"name": nil, "roles": []any{}}, r.Body["userCtx"])

	// Wrong password or unknown user: 401 on any endpoint, as CouchDB.
	requireError(t, e.do("GET", "/", &creds{Name: adminName, Pass: "nope"}, nil), 401, "unauthorized")
	requireError(t, e.do("GET", "/", &creds{Name: "ghost", Pass: "x"}, nil), 401, "unauthorized")
	requireError(t, e.do("GET", "/", anon, nil, "Authorization", "Basic !!!"), 400, "bad_request")
	// Cached verification still refuses wrong passwords.
	require.Equal(t, 200, e.do("GET", "/_all_dbs", asAdmin, nil).Status)
	requireError(t, e.do("GET", "/_all_dbs", &creds{Name: adminName, Pass: adminPass + "x"}, nil), 401, "unauthorized")

	// Anonymous users cannot touch replicator databases.
	requireError(t, e.do("GET", "/_replicator", anon, nil), 401, "unauthorized")
	requireError(t, e.do("PUT", "/_replicator/x", anon, repDoc()), 401, "unauthorized")
	requireError(t, e.do("GET", "/_replicator/_all_docs", anon, nil), 401, "unauthorized")
	for _, p := range []string{"/_scheduler/jobs", "/_scheduler/docs", "/_active_tasks", "/_node/_local/_stats", "/_node/_local/_prometheus"} {
		requireError(t, e.do("GET", p, anon, nil), 401, "unauthorized")
	}
	for _, p := range []string{"/_node/_local/_stats", "/_node/_local/_prometheus"} {
		requireError(t, e.do("GET", p, asAlice, nil), 401, "unauthorized")
	}
}

func TestCookieSessions(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(1_700_000_000, 0))
	advance := clock.Advance
	e := newEnv(t, func(o *Options) { o.SessionTimeout = 100 * time.Second; o.Clock = clock })

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}
	post := func(ct, body string) *http.Response {
		res, err := client.Post(e.url+"/_session", ct, strings.NewReader(body))
		require.NoError(t, err)
		res.Body.Close()
		return res
	}
	getSession := func() map[string]any {
		res, err := client.Get(e.url + "/_session")
		require.NoError(t, err)
		defer res.Body.Close()
		var m map[string]any
		require.NoError(t, decodeJSONBody(res, &m))
		return m["userCtx"].(map[string]any)
	}

	require.Equal(t, 401, post("application/json", `{"name":"alice","password":"nope"}`).StatusCode)
	require.Equal(t, 415, post("text/plain", `name=alice`).StatusCode)
	require.Equal(t, 400, post("application/json", `{"name":`).StatusCode)
	require.Nil(t, getSession()["name"])

	res := post("application/x-www-form-urlencoded", url.Values{"name": {aliceName}, "password": {alicePass}}.Encode())
	require.Equal(t, 200, res.StatusCode)
	c := res.Cookies()[0]
	require.Equal(t, "AuthSession", c.Name)
	require.True(t, c.HttpOnly)
	require.Equal(t, 100, c.MaxAge)
	require.NotContains(t, c.Value, alicePass)
	require.Equal(t, aliceName, getSession()["name"])

	// The cookie authenticates writes.
	req, _ := http.NewRequest("PUT", e.url+"/_replicator/via_cookie", strings.NewReader(`{"source":"http://a/b","target":"http://c/d"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err = client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 201, res.StatusCode)

	// Past 10% of its life the cookie is refreshed; past its timeout it is
	// ignored (anonymous).
	advance(20 * time.Second)
	res, err = client.Get(e.url + "/_session")
	require.NoError(t, err)
	res.Body.Close()
	require.NotEmpty(t, res.Header.Get("Set-Cookie"))
	advance(99 * time.Second)
	require.Equal(t, aliceName, getSession()["name"]) // refreshed cookie still valid
	advance(101 * time.Second)
	require.Nil(t, getSession()["name"])

	// JSON login, then DELETE /_session logs out.
	require.Equal(t, 200, post("application/json", `{"name":"admin","password":"`+adminPass+`"}`).StatusCode)
	require.Equal(t, adminName, getSession()["name"])
	req, _ = http.NewRequest("DELETE", e.url+"/_session", nil)
	res, err = client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
	require.Nil(t, getSession()["name"])

	// Forged and tampered cookies are ignored.
	acc := e.srv.auth.lookup(adminName)
	good := e.srv.auth.makeCookie(acc, &http.Request{}).Value
	for _, v := range []string{"garbage", good[:len(good)-2] + "AA", "YWRtaW46MDox"} {
		req, _ := http.NewRequest("GET", e.url+"/_session", nil)
		req.AddCookie(&http.Cookie{Name: "AuthSession", Value: v})
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, decodeJSONBody(res, &m))
		require.Nil(t, m["userCtx"].(map[string]any)["name"], v)
	}
	// A cookie from another secret is ignored.
	other := newEnv(t)
	req, _ = http.NewRequest("GET", other.url+"/_session", nil)
	req.AddCookie(&http.Cookie{Name: "AuthSession", Value: good})
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, decodeJSONBody(res, &m))
	require.Nil(t, m["userCtx"].(map[string]any)["name"])
}

// TestSessionUsername: POST /_session takes the user name as "name" or
// as "username" (CouchDB's own test suite logs in so), in JSON and form
// bodies; given both, they must agree; given neither, it is a bad
// request, as in CouchDB 3.5.
func TestSessionUsername(t *testing.T) {
	e := newEnv(t)
	const form = "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		name string
		body any
		ct   string
	}{
		{"json username", map[string]any{"username": aliceName, "password": alicePass}, ""},
		{"json name", map[string]any{"name": aliceName, "password": alicePass}, ""},
		{"json both, equal", map[string]any{"name": aliceName, "username": aliceName, "password": alicePass}, ""},
		{"form username", url.Values{"username": {aliceName}, "password": {alicePass}}.Encode(), form},
		{"form name", url.Values{"name": {aliceName}, "password": {alicePass}}.Encode(), form},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.ct != "" {
				hdr = []string{"Content-Type", tc.ct}
			}
			r := e.do("POST", "/_session", anon, tc.body, hdr...)
			require.Equal(t, 200, r.Status, r.Raw)
			require.Equal(t, aliceName, r.Body["name"])
			cookie, _, _ := strings.Cut(r.Header.Get("Set-Cookie"), ";")
			r = e.do("GET", "/_session", anon, nil, "Cookie", cookie)
			require.Equal(t, aliceName, r.Body["userCtx"].(map[string]any)["name"])
		})
	}
	for _, tc := range []struct {
		body   any
		reason string
	}{
		{map[string]any{"password": alicePass}, "request body must contain a username"},
		{map[string]any{"name": aliceName, "username": bobName, "password": alicePass}, "request body contains different usernames"},
		{map[string]any{"username": 1, "password": alicePass}, "`username` must be a string"},
		{"password=" + alicePass, "request body must contain a username"},
		{"name=alice&username=bob&password=" + alicePass, "request body contains different usernames"},
	} {
		hdr := []string{"Content-Type", "application/json"}
		if _, isForm := tc.body.(string); isForm {
			hdr = []string{"Content-Type", form}
		}
		r := e.do("POST", "/_session", anon, tc.body, hdr...)
		requireError(t, r, 400, "bad_request")
		require.Equal(t, tc.reason, r.Body["reason"])
	}
	requireError(t, e.do("POST", "/_session", anon, map[string]any{"username": aliceName, "password": "nope"}), 401, "unauthorized")
}

func TestRequireValidUser(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RequireValidUser = true })
	r := e.do("GET", "/", anon, nil)
	requireError(t, r, 401, "unauthorized")
	require.Equal(t, `Basic realm="server"`, r.Header.Get("WWW-Authenticate"))
	e.requireUp(t) // no user needed
	require.Equal(t, 200, e.do("GET", "/_session", anon, nil).Status)
	require.Equal(t, 200, e.do("GET", "/", asBob, nil).Status)
}
