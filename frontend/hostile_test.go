package frontend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostileRequests sends malformed paths, parameters and headers: each
// gets a 4xx CouchDB error (never a 5xx or a dropped connection) and
// nothing is stored.
func TestHostileRequests(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		method, path string
		hdr          []string
	}{
		{"GET", "/_replicator/%zz", nil},
		{"PUT", "/%zz", nil},
		{"GET", "/_replicator/_all_docs?limit=99999999999999999999999", nil},
		{"GET", "/_replicator/_all_docs?skip=-5", nil},
		{"GET", "/_replicator/_all_docs?startkey=%22%5Cud800%22x", nil},
		{"GET", "/_replicator/_changes?since=" + strings.Repeat("f", 5000), nil},
		{"GET", "/_replicator/_changes?limit=1e3", nil},
		{"GET", "/_replicator/doc?revs=perhaps", nil},
		{"PUT", "/_replicator/" + strings.Repeat("%F0", 10), nil},
		{"DELETE", "/_replicator/doc?rev=not-a-rev", nil},
		{"GET", "/_uuids?count=-1", nil},
		{"GET", "/_scheduler/docs/%zz", nil},
		{"GET", "/_scheduler/docs/notarepdb/doc", nil},
		{"GET", "/_node/othernode/_stats", nil},
		{"GET", "/", []string{"Authorization", "Basic " + strings.Repeat("A", 10000)}},
		{"GET", "/", []string{"Authorization", "Basic Og=="}}, // ":" : empty name
		{"PUT", "/_replicator/x", []string{"Content-Length", "99999999999"}},
	} {
		t.Run(tc.method+" "+tc.path[:min(len(tc.path), 40)], func(t *testing.T) {
			body := ""
			if tc.method == "PUT" {
				body = `{"source":"http://a/b","target":"http://c/d"}`
			}
			status, raw := rawDo(t, e.url, tc.method, tc.path, body, tc.hdr...)
			require.GreaterOrEqual(t, status, 400, raw)
			require.Less(t, status, 500, raw)
			require.Contains(t, raw, `"error"`) // net/http's own refusals too (bad escapes)
		})
	}
	require.EqualValues(t, 0, e.do("GET", "/_replicator", asAdmin, nil).Body["doc_count"])

	// A raw request with a lying Content-Length and a truncated body.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /_replicator/trunc HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"source\":", basic(adminName, adminPass))
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 400, res.StatusCode)
	requireError(t, e.do("GET", "/_replicator/trunc", asAdmin, nil), 404, "not_found")
}

func basic(name, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(name, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

// rawDo sends a request byte for byte (paths and headers the Go client
// would refuse) and returns the status and body.
func rawDo(t *testing.T, base, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n", method, path)
	hasAuth, hasLen := false, false
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
		hasAuth = hasAuth || hdr[i] == "Authorization"
		hasLen = hasLen || hdr[i] == "Content-Length"
	}
	if !hasAuth {
		fmt.Fprintf(&b, "Authorization: Basic %s\r\n", basic(adminName, adminPass))
	}
	if !hasLen {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	_, err = conn.Write([]byte(b.String()))
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}
