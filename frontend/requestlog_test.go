package frontend

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

// lineSignal is a log writer that signals each line (zerolog writes one
// line per Write).
type lineSignal struct{ testsignal.Signal[string] }

func (s *lineSignal) Write(p []byte) (int, error) {
	s.Signal.Signal(string(p))
	return len(p), nil
}

// newLoggedEnv is newEnv whose log lines are signalled.
func newLoggedEnv(t *testing.T) (*testEnv, *lineSignal) {
	lines := &lineSignal{}
	lines.Init()
	e := newEnv(t, func(o *Options) {
		logger := zerolog.New(lines)
		o.Logger = &logger
	})
	return e, lines
}

// The request line names its fields' units: duration_ms is the time the
// request took, in milliseconds, as a number.
func TestRequestLogLine(t *testing.T) {
	e, lines := newLoggedEnv(t)
	require.Equal(t, 200, e.do("GET", "/", anon, nil).Status)
	var line map[string]any
	testutil.WaitUntil(t, &lines.Signal, "the request line of GET /", func(l string) bool {
		line = nil
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		return line["message"] == "request" && line["path"] == "/"
	})
	require.Equal(t, "GET", line["method"])
	require.EqualValues(t, 200, line["status"])
	require.IsType(t, float64(0), line["duration_ms"])
	require.GreaterOrEqual(t, line["duration_ms"], float64(0))
	require.NotContains(t, line, "duration")
}

// Every response carries CouchDB's X-Couch-Request-ID (the client's own
// when it is a valid one, else 10 random hex digits, as chttpd's) and
// X-CouchDB-Body-Time (milliseconds spent reading the body, 0 without
// one), whatever answers: a handler, an error, the authentication; the
// request's log line names the id.
func TestRequestIDs(t *testing.T) {
	e, lines := newLoggedEnv(t)
	generated := regexp.MustCompile(`^[0-9a-f]{10}$`)
	ids := map[string]bool{}
	for _, r := range []resp{
		e.do("GET", "/", anon, nil),
		e.do("GET", "/_up", anon, nil),
		e.do("GET", "/_scheduler/jobs", anon, nil),                      // 401
		e.do("GET", "/_all_dbs", &creds{Name: "ghost", Pass: "x"}, nil), // refused by the authentication
		e.do("GET", "/nope/nope/nope", asAdmin, nil),                    // 404
		e.do("PUT", "/_replicator/hdr", asAdmin, repDoc()),              // a body, read
		e.do("GET", "/", anon, nil, "X-Couch-Request-ID", "bad id!"),
		e.do("GET", "/", anon, nil, "X-Couch-Request-ID", strings.Repeat("a", 37)),
	} {
		id := r.Header.Get("X-Couch-Request-ID")
		require.Regexp(t, generated, id, "%d %s", r.Status, r.Raw)
		require.NotContains(t, ids, id, "a fresh id for each request")
		ids[id] = true
		ms, err := strconv.Atoi(r.Header.Get("X-CouchDB-Body-Time"))
		require.NoError(t, err, "%d %s", r.Status, r.Raw)
		require.GreaterOrEqual(t, ms, 0)
	}

	const own = "my-Request_01"
	r := e.do("POST", "/_session", anon, map[string]any{"name": aliceName, "password": alicePass}, "X-Couch-Request-ID", own)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, own, r.Header.Get("X-Couch-Request-ID"), "the client's own id is kept")
	testutil.WaitUntil(t, &lines.Signal, "the request line of POST /_session", func(l string) bool {
		var line map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		return line["message"] == "request" && line["path"] == "/_session" && line["request_id"] == own
	})
}
