package testutil

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Resp is a decoded response of Do.
type Resp struct {
	Status int
	Header http.Header
	Raw    string
	// Body or List is the JSON reply, when it is an object or an array.
	Body map[string]any
	List []any
}

// Creds are Basic credentials for Do; nil sends none.
type Creds struct{ Name, Pass string }

// Authorization is the value of c's Authorization header.
func (c *Creds) Authorization() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Name+":"+c.Pass))
}

// client bounds every request of Do: a hang detector, not a speed
// expectation.
var client = &http.Client{Timeout: 2 * WaitTimeout}

// Do sends a request to url and decodes a JSON reply. body is sent as it
// is when it is a string or []byte and JSON-encoded otherwise (nil: no
// body), with Content-Type application/json unless hdr (name, value
// pairs) sets another.
func Do(t testing.TB, method, url string, c *Creds, body any, hdr ...string) Resp {
	t.Helper()
	return DoWith(t, client, method, url, c, body, hdr...)
}

// DoWith is Do with the HTTP client hc (an https:// server's CA, a client
// certificate).
func DoWith(t testing.TB, hc *http.Client, method, url string, c *Creds, body any, hdr ...string) Resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c != nil {
		req.SetBasicAuth(c.Name, c.Pass)
	}
	res, err := hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := Resp{Status: res.StatusCode, Header: res.Header, Raw: string(raw)}
	if method != http.MethodHead && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		var v any
		require.NoError(t, json.Unmarshal(raw, &v), "body %s", raw)
		switch x := v.(type) {
		case map[string]any:
			out.Body = x
		case []any:
			out.List = x
		}
	}
	return out
}

// RequireError checks a CouchDB error reply: status, "error" and a string
// "reason".
func RequireError(t testing.TB, r Resp, status int, errName string) {
	t.Helper()
	require.Equal(t, status, r.Status, "body %s", r.Raw)
	require.Equal(t, errName, r.Body["error"], "body %s", r.Raw)
	require.IsType(t, "", r.Body["reason"], "body %s", r.Raw)
}

// The test users of the HTTP tests: a server admin and two users; Alice
// has the role "dev".
const (
	AdminName, AdminPass = "admin", "s3cret-admin"
	AliceName, AlicePass = "alice", "alice-pw-123"
	BobName, BobPass     = "bob", "bob-pw-456"
)

// Credentials of the test users, for Do.
var (
	AsAdmin = &Creds{Name: AdminName, Pass: AdminPass}
	AsAlice = &Creds{Name: AliceName, Pass: AlicePass}
	AsBob   = &Creds{Name: BobName, Pass: BobPass}
)

// CountingServer starts an HTTP server on loopback that answers with h
// and counts the connections it accepts (a peer that must not be reached),
// closed at the test's end.
func CountingServer(t testing.TB, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var accepts atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepts.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &accepts
}
