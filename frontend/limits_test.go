package frontend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// hangBound bounds waits that detect a hang; it is not a speed
// expectation.
const hangBound = 30 * time.Second

// rawRequest opens a connection to e, sends head (request line and
// headers, then the blank line) and returns the connection.
func rawRequest(t *testing.T, e *testEnv, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, head+"\r\n")
	require.NoError(t, err)
	return c
}

// readStatus reads a response's status code from c (0 when the
// connection ends without one).
func readStatus(t *testing.T, c net.Conn) int {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(hangBound)))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Logf("no response: %v", err)
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// H1: a client that sends headers and then trickles (here: withholds) its
// body gets an error reply as soon as the request is refused, instead of
// holding the connection until the body is drained.
func TestEarlyErrorDoesNotWaitForTheBody(t *testing.T) {
	e := newEnv(t)
	c := rawRequest(t, e, "PUT /_replicator/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n")
	_, err := io.WriteString(c, "{")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, readStatus(t, c), "anonymous: refused before the body arrives")
}

// H1: after that early reply the connection closes at once: net/http
// would otherwise drain the unread body (up to 256 kB) before closing,
// and the connection, busy and not evictable, would wait for a body that
// never comes (1,100 such clients kept a node at its connection cap:
// TestSlowClientsAtFileLimit). It closes with a FIN, not a reset: closed
// at once with the body's byte unread, the kernel reset it, and a client
// may lose the reply (72 of 200 runs read ECONNRESET, LingerDefault).
func TestEarlyErrorClosesTheConnection(t *testing.T) {
	e := newEnv(t)
	for _, head := range []string{
		"PUT /_replicator/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n",
		"PUT /_replicator/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
	} {
		c := rawRequest(t, e, head)
		_, err := io.WriteString(c, "{")
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(hangBound)))
		r := bufio.NewReader(c)
		res, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		require.True(t, res.Close, "the reply says Connection: close")
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		_, err = r.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the server closed the connection, before the hang bound and without a reset")
	}
}

// What net/http refuses before any handler runs (headers over
// MaxHeaderBytes, a request without Host, an unknown HTTP version or
// transfer coding) is a CouchDB JSON error with its status, the
// connection closing: a 70 KB URL was a plain-text 431.
func TestParserRefusalsAreJSON(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		head   string
		status int
		err    string
		reason string
	}{
		{"GET /_replicator/" + strings.Repeat("a", 70<<10) + " HTTP/1.1\r\nHost: x\r\n", 431, "request_header_fields_too_large",
			"the request line and headers are over 65536 bytes ([chttpd] max_header_bytes)"},
		{"GET / HTTP/1.1\r\n", 400, "bad_request", "missing required Host header"},
		{"GET /_replicator/%zz HTTP/1.1\r\nHost: x\r\n", 400, "bad_request", ""},
		{"GET / HTTP/9.9\r\nHost: x\r\n", 505, "http_version_not_supported", ""},
		{"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n", 501, "not_implemented", ""},
	} {
		c := rawRequest(t, e, tc.head)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(hangBound)))
		r := bufio.NewReader(c)
		res, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		require.Equal(t, tc.status, res.StatusCode)
		require.Equal(t, "application/json", res.Header.Get("Content-Type"))
		require.True(t, res.Close)
		var body map[string]string
		require.NoError(t, decodeJSONBody(res, &body))
		require.Equal(t, tc.err, body["error"], "%d", tc.status)
		require.NotEmpty(t, body["reason"])
		if tc.reason != "" {
			require.Equal(t, tc.reason, body["reason"])
		}
		// Until the server closes the connection (after a 431, net/http
		// lingers 500 ms first): its goroutine ends with the test.
		_, _ = io.Copy(io.Discard, r)
	}
}

// A request whose body was read to its end keeps its connection: the next
// request on it is served (a JSON decoder stops at the body's last byte
// without reading EOF; that counts as read).
func TestKeepAliveAfterABodyRead(t *testing.T) {
	e := newEnv(t)
	auth := "Authorization: Basic " + basicAuth(adminName, adminPass) + "\r\n"
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	for i := range 3 {
		body := `{"source":"http://127.0.0.1:1/a","target":"http://127.0.0.1:1/b"}`
		_, err := fmt.Fprintf(c, "PUT /_replicator/k%d HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s",
			i, len(body), auth, body)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(hangBound)))
		res, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode)
		require.False(t, res.Close, "request %d: the connection stays open", i)
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
	}
}

// H1: a body that does not arrive within BodyTimeout ends the request with
// 408.
func TestBodyTimeout(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.BodyTimeout = 100 * time.Millisecond })
	auth := "Authorization: Basic " + basicAuth(aliceName, alicePass) + "\r\n"
	c := rawRequest(t, e, "PUT /_replicator/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"+auth)
	_, err := io.WriteString(c, `{"source":`)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestTimeout, readStatus(t, c))
	requireError(t, e.do("GET", "/_replicator/x", asAdmin, nil), 404, "not_found")
}

// H1: at the connection cap, new clients are served by closing the
// connections that wait the longest for a request or trickle a body; /_up
// and admins keep answering.
func TestConnectionCapEvictsSlowClients(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxConnections = 20 })
	var idle []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		idle = append(idle, c)
	}
	auth := "Authorization: Basic " + basicAuth(aliceName, alicePass) + "\r\n"
	for i := 0; i < 20; i++ {
		c := rawRequest(t, e, "PUT /_replicator/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"+auth)
		_, err := io.WriteString(c, "{")
		require.NoError(t, err)
	}
	// Each slow request is evictable once its handler reads the body;
	// before that (authenticating, which a slow store stretches) it is a
	// busy connection, and at the cap with every connection busy a new
	// one is refused (latency pass of a clean-clone CI run).
	testutil.Eventually(t, "the slow requests wait for their bodies", func() bool {
		return e.hs.conns.evictable() == 20
	})
	for i := 0; i < 5; i++ {
		e.requireUp(t)
		require.Equal(t, 200, e.do("GET", "/_all_dbs", asAdmin, nil).Status)
	}
	open, capacity := e.hs.Connections()
	require.Equal(t, 20, capacity)
	require.LessOrEqual(t, open, capacity)
	// The idle connections were closed to make room.
	closed := 0
	for _, c := range idle {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(hangBound)))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			closed++
		}
	}
	require.Equal(t, len(idle), closed)
}

// H1: one client cannot take every request slot: past MaxClientRequests
// its requests get 429, while other users, admins and /_up go on.
func TestPerClientRequestCap(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxClientRequests = 3 })
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.do("GET", "/_replicator/_changes?feed=longpoll&since=now&timeout=60000", asBob, nil)
		}()
	}
	testutil.Eventually(t, "bob's longpolls in flight", func() bool {
		e.srv.clients.mu.Lock()
		defer e.srv.clients.mu.Unlock()
		return e.srv.clients.n["user:"+bobName] == 3
	})
	requireError(t, e.do("GET", "/_replicator", asBob, nil), 429, "too_many_requests")
	require.Equal(t, 200, e.do("GET", "/_replicator", asAlice, nil).Status)
	require.Equal(t, 200, e.do("GET", "/_all_dbs", asAdmin, nil).Status)
	e.requireUp(t)
	// A write ends the longpolls.
	require.Equal(t, 201, e.do("PUT", "/_replicator/wake", asAdmin, repDoc()).Status)
	wg.Wait()
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil).Status)
}

// L5: failed password checks are costly (PBKDF2), so an address that
// keeps failing, whatever the names, is held back with 429 (no hash
// computed), for a wait that grows with each failure; a cached credential
// never waits, and the address may try again once the wait is over.
func TestFailedLoginBackoff(t *testing.T) {
	clock := clockwork.NewFakeClock()
	e := newEnv(t, func(o *Options) { o.Clock = clock })
	require.Equal(t, 200, e.do("GET", "/_replicator", asAlice, nil).Status) // cached from now on
	ghost := func(i int) *creds { return &creds{Name: fmt.Sprintf("ghost%d", i), Pass: "x"} }
	for i := range LoginFailuresFreeDefault {
		requireError(t, e.do("GET", "/_replicator", ghost(i), nil), 401, "unauthorized")
	}
	requireError(t, e.do("GET", "/_replicator", ghost(-1), nil), 401, "unauthorized") // the first failure past the free ones
	for _, c := range []*creds{ghost(0), asBob, {Name: aliceName, Pass: "wrong"}} {
		requireError(t, e.do("GET", "/_replicator", c, nil), 429, "too_many_requests")
	}
	require.Equal(t, 200, e.do("GET", "/_replicator", asAlice, nil).Status, "a cached credential does not wait")
	clock.Advance(time.Second)
	requireError(t, e.do("GET", "/_replicator", ghost(-2), nil), 401, "unauthorized")
	r := e.do("GET", "/_replicator", asBob, nil)
	requireError(t, r, 429, "too_many_requests")
	require.Contains(t, r.Body["reason"], "retry in 2 s", "the wait doubled")
	clock.Advance(2 * time.Second)
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil).Status)
	// The count starts again max_lifetime after its first failure.
	clock.Advance(LockoutMaxLifetimeDefault)
	requireError(t, e.do("GET", "/_replicator", ghost(-3), nil), 401, "unauthorized")
	requireError(t, e.do("GET", "/_replicator", ghost(-4), nil), 401, "unauthorized")
}

// As CouchDB's [chttpd_auth_lockout]: a user name whose logins failed
// threshold times from an address is locked out from there, 403, the
// right password too, until max_lifetime after the first failure; other
// users' logins from that address are not concerned, a first one (not
// cached) included.
func TestLoginLockoutIsPerUser(t *testing.T) {
	clock := clockwork.NewFakeClock()
	e := newEnv(t, func(o *Options) { o.Clock = clock })
	wrong := &creds{Name: bobName, Pass: "wrong"}
	for range LockoutThresholdDefault {
		requireError(t, e.do("GET", "/_replicator", wrong, nil), 401, "unauthorized")
	}
	for _, c := range []*creds{wrong, asBob} {
		r := e.do("GET", "/_replicator", c, nil)
		requireError(t, r, 403, "forbidden")
		require.Equal(t, "Account is temporarily locked due to multiple authentication failures", r.Body["reason"])
	}
	r := e.do("POST", "/_session", nil, map[string]any{"name": bobName, "password": bobPass})
	requireError(t, r, 403, "forbidden")

	require.Equal(t, 200, e.do("GET", "/_replicator", asAlice, nil).Status, "alice's first login from the same address")
	r = e.do("POST", "/_session", nil, map[string]any{"name": aliceName, "password": alicePass})
	require.Equal(t, 200, r.Status, r.Raw)
	requireError(t, e.do("GET", "/_replicator", &creds{Name: aliceName, Pass: "wrong"}, nil), 401, "unauthorized")

	// Unknown names are locked out alike: a lockout says nothing of which
	// names exist.
	ghost := &creds{Name: "ghost", Pass: "x"}
	for range LockoutThresholdDefault {
		requireError(t, e.do("GET", "/_replicator", ghost, nil), 401, "unauthorized")
	}
	requireError(t, e.do("GET", "/_replicator", ghost, nil), 403, "forbidden")

	clock.Advance(LockoutMaxLifetimeDefault)
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil).Status, "the lockout ended")
}

// [chttpd_auth_lockout] mode = warn logs a locked-out user's logins and
// refuses none; off counts nothing (the address's hold-back stays).
func TestLoginLockoutModes(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Lockout.Mode = LockoutWarn })
	wrong := &creds{Name: bobName, Pass: "wrong"}
	for range LockoutThresholdDefault + 1 {
		requireError(t, e.do("GET", "/_replicator", wrong, nil), 401, "unauthorized")
	}
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil).Status)
	require.Contains(t, e.logs.String(), "authentication failure threshold reached")
	require.NotContains(t, e.logs.String(), "wrong")

	e = newEnv(t, func(o *Options) { o.Lockout.Mode = LockoutOff })
	for range LockoutThresholdDefault + 1 {
		requireError(t, e.do("GET", "/_replicator", wrong, nil), 401, "unauthorized")
	}
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil).Status)
}

// Behind a proxy named in trusted_proxies, the client is the address its
// X-Forwarded-For names last (a client's own entries before it are not
// believed): bob locked out from one client is not from another. From
// anyone else X-Forwarded-For is ignored.
func TestLoginLockoutBehindTrustedProxy(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	wrong := &creds{Name: bobName, Pass: "wrong"}
	for range LockoutThresholdDefault {
		requireError(t, e.do("GET", "/_replicator", wrong, nil, "X-Forwarded-For", "203.0.113.1"), 401, "unauthorized")
	}
	requireError(t, e.do("GET", "/_replicator", asBob, nil, "X-Forwarded-For", "203.0.113.1"), 403, "forbidden")
	// What the client wrote before the proxy's entry is not believed.
	requireError(t, e.do("GET", "/_replicator", asBob, nil, "X-Forwarded-For", "198.51.100.9, 203.0.113.1"), 403, "forbidden")
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil, "X-Forwarded-For", "203.0.113.2").Status, "another client")
	require.Equal(t, 200, e.do("GET", "/_replicator", asBob, nil).Status, "the proxy itself")

	e = newEnv(t) // no trusted proxy
	for range LockoutThresholdDefault {
		requireError(t, e.do("GET", "/_replicator", wrong, nil, "X-Forwarded-For", "203.0.113.1"), 401, "unauthorized")
	}
	// X-Forwarded-For from a client that is not a trusted proxy names
	// nobody.
	requireError(t, e.do("GET", "/_replicator", asBob, nil, "X-Forwarded-For", "203.0.113.2"), 403, "forbidden")
}

func TestClientAddr(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		remote string
		xff    []string
		want   string
	}{
		{"192.0.2.1:5000", nil, "192.0.2.1"},
		{"192.0.2.1:5000", []string{"203.0.113.1"}, "192.0.2.1"},
		{"10.0.0.5:5000", nil, "10.0.0.5"},
		{"10.0.0.5:5000", []string{"203.0.113.1"}, "203.0.113.1"},
		{"10.0.0.5:5000", []string{"198.51.100.9, 203.0.113.1, 10.0.0.6"}, "203.0.113.1"},
		{"10.0.0.5:5000", []string{"198.51.100.9", "203.0.113.1:4711"}, "203.0.113.1"},
		{"10.0.0.5:5000", []string{"garbage, 10.0.0.6"}, "10.0.0.6"},
		{"10.0.0.5:5000", []string{"10.0.0.7, 10.0.0.6"}, "10.0.0.7"},
		{"[::1]:5000", []string{"2001:db8::1"}, "2001:db8::1"},
		{"[::ffff:10.0.0.5]:5000", []string{"203.0.113.1"}, "203.0.113.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		require.Equal(t, tc.want, clientAddr(r, proxies), "%s %q", tc.remote, tc.xff)
	}
}

func basicAuth(name, pass string) string {
	return strings.TrimPrefix((&testutil.Creds{Name: name, Pass: pass}).Authorization(), "Basic ")
}

func TestLockoutOptions(t *testing.T) {
	for _, l := range []Lockout{{Mode: "strict"}, {Threshold: -1}, {MaxLifetime: -time.Second}, {MaxObjects: -1}} {
		_, err := New(Options{DB: kvtest.NewDB(t), Lockout: l})
		require.ErrorIs(t, err, ErrInvalidOptions, "%+v", l)
	}
}
