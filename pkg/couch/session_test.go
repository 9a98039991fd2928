package couch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// sessionPeer is a real CouchDB 3.5 whose user bob (not an admin) alone
// may read the database "sec" (anonymous requests get 401), behind a
// proxy that counts how requests authenticate and injects faults.
func sessionPeer(t *testing.T) *couchtest.FaultProxy {
	t.Helper()
	srv := couchtest.StartCouchDB(t)
	srv.AddUser(t, "bob", secret)
	srv.CreateDB(t, "sec")
	srv.SetSecurity(t, "sec", map[string]any{"members": map[string]any{"names": []string{"bob"}}})
	return couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{})
}

// getInfo reads the database info n times.
func getInfo(t *testing.T, db *couch.DB, n int) {
	t.Helper()
	for range n {
		var info map[string]any
		require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, &info))
		require.Equal(t, "sec", info["db_name"])
	}
}

// delta is what the proxy counted since before.
func delta(p *couchtest.FaultProxy, before couchtest.FaultCounts) couchtest.FaultCounts {
	c := p.Counts()
	return couchtest.FaultCounts{Requests: c.Requests - before.Requests, Logins: c.Logins - before.Logins,
		Basic: c.Basic - before.Basic, Cookie: c.Cookie - before.Cookie}
}

// By default a DB logs in once and sends the cookie; with AuthBasic it
// sends Basic on every request; without credentials it sends neither.
func TestSessionAuth(t *testing.T) {
	t.Parallel()
	proxy := sessionPeer(t)
	userinfo := strings.Replace(proxy.URL(), "://", "://bob:"+secret+"@", 1) + "/sec"
	authObj := fmt.Sprintf(`{"url":%q,"auth":{"basic":{"username":"bob","password":%q}}}`, proxy.URL()+"/sec", secret)
	tests := []struct {
		name     string
		endpoint string
		auth     couch.AuthMode
		want     couchtest.FaultCounts // Requests, Logins, Basic, Cookie
	}{
		{"session, URL userinfo", fmt.Sprintf("%q", userinfo), couch.AuthSession, couchtest.FaultCounts{Requests: 6, Logins: 1, Cookie: 5}},
		{"session, auth.basic", authObj, couch.AuthSession, couchtest.FaultCounts{Requests: 6, Logins: 1, Cookie: 5}},
		{"basic", authObj, couch.AuthBasic, couchtest.FaultCounts{Requests: 5, Basic: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, err := couch.ParseEndpoint(json.RawMessage(tt.endpoint))
			require.NoError(t, err)
			db, logs := newAuthDBEndpoint(t, ep, couch.Options{Auth: tt.auth})
			before := proxy.Counts()
			getInfo(t, db, 5)
			require.Equal(t, tt.want, delta(proxy, before))
			requireNoSecret(t, logs.String())
		})
	}

	// Anonymous: nothing to log in with.
	anon, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf("%q", proxy.URL()+"/sec")))
	require.NoError(t, err)
	db, _ := newAuthDBEndpoint(t, anon, couch.Options{})
	before := proxy.Counts()
	require.ErrorIs(t, db.DoJSON(context.Background(), couch.Request{Path: "_changes"}, nil), couch.ErrUnauthorized)
	require.Equal(t, couchtest.FaultCounts{Requests: 1}, delta(proxy, before))
}

// Concurrent first requests wait for one login.
func TestSessionOneLogin(t *testing.T) {
	t.Parallel()
	proxy := sessionPeer(t)
	db, _ := newAuthDB(t, proxy.URL()+"/sec", couch.Options{HTTPConnections: 4}, nil)
	before := proxy.Counts()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() { errs <- db.DoJSON(context.Background(), couch.Request{}, nil) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, couchtest.FaultCounts{Requests: 17, Logins: 1, Cookie: 16}, delta(proxy, before))
}

// A wrong password costs one failed login per DB, whatever the requests:
// the peer's 401 to the login is its answer, not a cue to try Basic with
// the same password (each try counts toward CouchDB's
// [chttpd_auth_lockout]), and every request fails with it, the peer's
// reason kept. The password appears nowhere.
func TestSessionWrongPassword(t *testing.T) {
	t.Parallel()
	proxy := sessionPeer(t)
	login := func(r *http.Request) bool { return r.URL.Path == "/_session" }
	tests := []struct {
		name       string
		script     []couchtest.Fault // on the logins
		requests   int
		concurrent bool
		want       couchtest.FaultCounts // Requests, Logins, Basic
	}{
		{"one request", nil, 1, false, couchtest.FaultCounts{Requests: 1, Logins: 1}},
		{"requests after it", nil, 3, false, couchtest.FaultCounts{Requests: 1, Logins: 1}},
		{"concurrent requests", nil, 8, true, couchtest.FaultCounts{Requests: 1, Logins: 1}},
		// A proxy in front asks for Basic on the login (401 with
		// WWW-Authenticate): the second login, with Basic, is the one
		// CouchDB refuses.
		{"the login wants Basic", []couchtest.Fault{couchtest.Fault401}, 3, false, couchtest.FaultCounts{Requests: 2, Logins: 2, Basic: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(`{"url":%q,"auth":{"basic":{"username":"bob","password":%q}}}`,
				proxy.URL()+"/sec", "wrong-"+secret)))
			require.NoError(t, err)
			db, logs := newAuthDBEndpoint(t, ep, couch.Options{HTTPConnections: 4})
			require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{Match: login}))
			proxy.Script(tt.script...)
			t.Cleanup(func() { require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{})) })
			before := proxy.Counts()
			errs := make(chan error, tt.requests)
			var wg sync.WaitGroup
			for range tt.requests {
				get := func() { errs <- db.DoJSON(context.Background(), couch.Request{}, nil) }
				if tt.concurrent {
					wg.Go(get)
				} else {
					get()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.ErrorIs(t, err, couch.ErrUnauthorized)
				var herr *couch.HTTPError
				require.ErrorAs(t, err, &herr)
				require.True(t, herr.Login, "the login's answer")
				require.Equal(t, "POST", herr.Method)
				require.Equal(t, "Name or password is incorrect.", herr.Reason)
				for _, s := range []string{err.Error(), logs.String(), fmt.Sprintf("%v %+v %#v", db, db, db)} {
					require.NotContains(t, s, "wrong-")
					requireNoSecret(t, s)
				}
			}
			require.Equal(t, tt.want, delta(proxy, before))
			require.Contains(t, logs.String(), "the peer refused the login")
			require.NotContains(t, logs.String(), "sending Basic auth on every request")
		})
	}

	// The cases' DBs cost CouchDB 4 failed logins of bob from here, under
	// its lockout threshold (5 within 5 minutes): the right password
	// still works.
	db, _ := newAuthDB(t, proxy.URL()+"/sec", couch.Options{}, nil)
	getInfo(t, db, 1)

	// A 401 with WWW-Authenticate whose reason says the peer checked the
	// name and password is not repeated with Basic either.
	var logins atomic.Int64
	checked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logins.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="server"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"unauthorized","reason":"Name or password is incorrect."}`)
	}))
	t.Cleanup(checked.Close)
	db, _ = newAuthDB(t, checked.URL+"/sec", couch.Options{}, nil)
	for range 2 {
		require.ErrorIs(t, db.DoJSON(context.Background(), couch.Request{}, nil), couch.ErrUnauthorized)
	}
	require.Equal(t, int64(1), logins.Load())
}

// Cookies are renewed when the peer refuses them (401) and when they near
// expiry; a peer without _session, or whose cookies never work, gets
// Basic.
func TestSessionRenewalAndFallback(t *testing.T) {
	t.Parallel()
	proxy := sessionPeer(t)
	withCookie := func(r *http.Request) bool { _, err := r.Cookie("AuthSession"); return err == nil }
	login := func(r *http.Request) bool { return r.URL.Path == "/_session" }

	tests := []struct {
		name   string
		faults func(p *couchtest.FaultProxy) // after the first request
		match  func(*http.Request) bool
		want   couchtest.FaultCounts // of the second request
		logs   string
	}{
		// The cookie worked, then is refused: log in again, retry.
		{"expired cookie", func(p *couchtest.FaultProxy) { p.Script(couchtest.Fault401) }, withCookie,
			couchtest.FaultCounts{Requests: 3, Logins: 1, Cookie: 2}, "session cookie refused, logging in again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, logs := newAuthDB(t, proxy.URL()+"/sec", couch.Options{}, nil)
			getInfo(t, db, 1)
			require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{Match: tt.match}))
			tt.faults(proxy)
			before := proxy.Counts()
			getInfo(t, db, 1)
			require.Equal(t, tt.want, delta(proxy, before))
			require.Contains(t, logs.String(), tt.logs)
			requireNoSecret(t, logs.String())
		})
	}

	// Peers whose sessions do not work, from the first login on.
	fallbacks := []struct {
		name   string
		match  func(*http.Request) bool
		script []couchtest.Fault
		rate   float64 // of Fault401 on matching requests
		want   couchtest.FaultCounts
	}{
		// No _session: Basic from then on.
		{"no _session", login, []couchtest.Fault{couchtest.Fault404}, 0, couchtest.FaultCounts{Requests: 4, Logins: 1, Basic: 3}},
		// A cookie that is refused at once (a proxy dropping cookies).
		{"cookies refused", withCookie, nil, 1, couchtest.FaultCounts{Requests: 5, Logins: 1, Cookie: 1, Basic: 3}},
		// The login wants Basic too (require_valid_user): a second login
		// with it gets the cookie.
		{"require_valid_user", login, []couchtest.Fault{couchtest.Fault401}, 0, couchtest.FaultCounts{Requests: 5, Logins: 2, Basic: 1, Cookie: 3}},
	}
	for _, tt := range fallbacks {
		t.Run(tt.name, func(t *testing.T) {
			db, logs := newAuthDB(t, proxy.URL()+"/sec", couch.Options{}, nil)
			require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{Match: tt.match, Rate401: tt.rate}))
			proxy.Script(tt.script...)
			t.Cleanup(func() { require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{})) })
			before := proxy.Counts()
			getInfo(t, db, 3)
			require.Equal(t, tt.want, delta(proxy, before))
			requireNoSecret(t, logs.String())
		})
	}
	require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{}))

	// Renewal before expiry: CouchDB's cookie (Max-Age 600 s, its
	// [chttpd_auth] timeout) is renewed at 90% of its age.
	clock := clockwork.NewFakeClock()
	db, _ := newAuthDB(t, proxy.URL()+"/sec", couch.Options{Clock: clock, SessionRefreshInterval: time.Minute}, nil)
	before := proxy.Counts()
	getInfo(t, db, 2)
	clock.Advance(539 * time.Second)
	getInfo(t, db, 1)
	require.Equal(t, int64(1), delta(proxy, before).Logins, "Max-Age, not SessionRefreshInterval, counts")
	clock.Advance(2 * time.Second)
	getInfo(t, db, 1)
	require.Equal(t, couchtest.FaultCounts{Requests: 6, Logins: 2, Cookie: 4}, delta(proxy, before))

	// A cookie without Max-Age (pouchdb-server's) is renewed after
	// SessionRefreshInterval.
	pouch := couchtest.StartPouchDB(t, couchtest.WithAdmin("bob", secret))
	pouch.CreateDB(t, "sec")
	pouchProxy := couchtest.NewFaultProxy(t, pouch.URL(), couchtest.FaultConfig{})
	db, _ = newAuthDB(t, pouchProxy.URL()+"/sec", couch.Options{Clock: clock, SessionRefreshInterval: time.Minute}, nil)
	before = pouchProxy.Counts()
	getInfo(t, db, 2)
	clock.Advance(59 * time.Second)
	getInfo(t, db, 1)
	require.Equal(t, int64(1), delta(pouchProxy, before).Logins)
	clock.Advance(time.Minute)
	getInfo(t, db, 1)
	require.Equal(t, couchtest.FaultCounts{Requests: 6, Logins: 2, Cookie: 4}, delta(pouchProxy, before))
}

// The login is a form post to the server root's /_session, without the
// endpoint's query string, with its custom headers; later requests carry
// the cookie after the endpoint's own cookies.
func TestSessionRequestShape(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []*http.Request
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r.Clone(context.Background())), append(bodies, string(b))
		mu.Unlock()
		if r.URL.Path == "/_session" {
			w.Header().Add("Set-Cookie", "Other=x; Path=/")
			w.Header().Add("Set-Cookie", "AuthSession=c1; Max-Age=600; Path=/; HttpOnly")
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(
		`{"url":"%s/base/db?x=1","headers":{"X-Tenant":"acme","Cookie":"lb=7"},"auth":{"basic":{"username":"bob","password":%q}}}`, srv.URL, secret)))
	require.NoError(t, err)
	clock := clockwork.NewFakeClock()
	db, logs := newAuthDBEndpoint(t, ep, couch.Options{Clock: clock})
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, nil))
	clock.Advance(539 * time.Second) // 90% of Max-Age is 540 s
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, nil))
	clock.Advance(time.Second)
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, nil))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 5)
	login := got[0]
	require.Equal(t, "POST /_session", login.Method+" "+login.URL.RequestURI())
	require.Equal(t, "application/x-www-form-urlencoded", login.Header.Get("Content-Type"))
	require.Equal(t, "name=bob&password="+secret, bodies[0])
	require.Empty(t, login.Header.Get("Authorization"))
	require.Equal(t, "acme", login.Header.Get("X-Tenant"))
	for i, r := range got[1:] {
		if i == 2 {
			require.Equal(t, "/_session", r.URL.Path, "renewed at 90%% of Max-Age")
			continue
		}
		require.Equal(t, "GET /base/db?x=1", r.Method+" "+r.URL.RequestURI())
		require.Equal(t, "lb=7; AuthSession=c1", r.Header.Get("Cookie"))
		require.Empty(t, r.Header.Get("Authorization"))
	}
	requireNoSecret(t, logs.String())
}
