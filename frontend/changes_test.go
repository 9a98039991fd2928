package frontend

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// stream is a streamed _changes reply read line by line.
type stream struct {
	t    *testing.T
	res  *http.Response
	scan *bufio.Scanner
}

// openStream starts a streamed feed request.
func (e *testEnv) openStream(c *creds, path string) *stream {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.url+path, nil)
	require.NoError(e.t, err)
	req.SetBasicAuth(c.Name, c.Pass)
	res, err := (&http.Client{Timeout: 2 * testutil.WaitTimeout}).Do(req) // a hang detector

	require.NoError(e.t, err)
	t := e.t.(*testing.T)
	t.Cleanup(func() { res.Body.Close() })
	return &stream{t: t, res: res, scan: bufio.NewScanner(res.Body)}
}

// line returns the next line; ok is false at the end of the reply.
func (s *stream) line() (string, bool) {
	s.t.Helper()
	if !s.scan.Scan() {
		require.NoError(s.t, s.scan.Err())
		return "", false
	}
	return s.scan.Text(), true
}

// row decodes the next line as a JSON object, skipping heartbeats.
func (s *stream) row() map[string]any {
	s.t.Helper()
	for {
		l, ok := s.line()
		require.True(s.t, ok, "the feed ended")
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(s.t, json.Unmarshal([]byte(l), &m), "line %q", l)
		return m
	}
}

// The continuous feed: rows after since (now: none), then each write as
// it commits, heartbeats as blank lines, and at the limit (or after a
// silent timeout) a last_seq line that ends it.
func TestChangesContinuous(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, 201, e.do("PUT", "/_replicator/old", asAdmin, repDoc()).Status)

	s := e.openStream(asAdmin, "/_replicator/_changes?feed=continuous&since=now&heartbeat=100&limit=2&include_docs=true")
	require.Equal(t, 200, s.res.StatusCode)
	l, ok := s.line()
	require.True(t, ok)
	require.Equal(t, "", l, "a heartbeat while nothing changes")
	require.Equal(t, 201, e.do("PUT", "/_replicator/a", asAlice, repDoc("source", "http://alice:pw-in-url@src.example/db")).Status)
	row := s.row()
	require.Equal(t, "a", row["id"])
	require.Equal(t, "a", row["doc"].(map[string]any)["_id"])
	require.Equal(t, 201, e.do("PUT", "/_replicator/b", asAdmin, repDoc()).Status)
	require.Equal(t, "b", s.row()["id"])
	end := s.row()
	require.Contains(t, end, "last_seq")
	_, more := s.line()
	require.False(t, more, "the limit ends the feed")

	// Without a heartbeat a silent feed ends after timeout.
	s = e.openStream(asBob, "/_replicator/_changes?feed=live&timeout=50&include_docs=true&style=all_docs")
	require.Equal(t, "old", s.row()["id"])
	a := s.row()
	require.Equal(t, "a", a["id"])
	require.Equal(t, "http://src.example/db", a["doc"].(map[string]any)["source"], "Bob sees no credentials")
	require.Equal(t, "b", s.row()["id"])
	require.Equal(t, end["last_seq"], s.row()["last_seq"])
	_, more = s.line()
	require.False(t, more)

	requireError(t, e.do("GET", "/x%2F_replicator/_changes?feed=continuous", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("GET", "/_replicator/_changes?feed=continuous&descending=true", asAdmin, nil), 400, "bad_request")
	requireError(t, e.do("GET", "/_replicator/_changes?feed=continuous&heartbeat=x", asAdmin, nil), 400, "query_parse_error")
}

// The eventsource feed: server-sent events with the sequence as id, and
// heartbeat events.
func TestChangesEventSource(t *testing.T) {
	e := newEnv(t)
	s := e.openStream(asAdmin, "/_replicator/_changes?feed=eventsource&heartbeat=100&limit=1")
	require.Equal(t, "text/event-stream", s.res.Header.Get("Content-Type"))
	var lines []string
	for len(lines) < 2 {
		l, ok := s.line()
		require.True(t, ok)
		lines = append(lines, l)
	}
	require.Equal(t, []string{"event: heartbeat", "data: "}, lines)
	require.Equal(t, 201, e.do("PUT", "/_replicator/a", asAdmin, repDoc()).Status)
	var data, id string
	for {
		l, ok := s.line()
		require.True(t, ok)
		if d, ok := strings.CutPrefix(l, "data: "); ok && d != "" {
			data = d
		}
		if i, ok := strings.CutPrefix(l, "id: "); ok {
			id = i
			break
		}
	}
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &row))
	require.Equal(t, "a", row["id"])
	require.Equal(t, `"`+row["seq"].(string)+`"`, id)
}

// A longpoll feed sends heartbeats while it waits (leading whitespace of
// its JSON reply) and then the change.
func TestChangesLongpollHeartbeat(t *testing.T) {
	e := newEnv(t)
	s := e.openStream(asAdmin, "/_replicator/_changes?feed=longpoll&since=now&heartbeat=100")
	l, ok := s.line()
	require.True(t, ok)
	require.Equal(t, "", l)
	require.Equal(t, 201, e.do("PUT", "/_replicator/a", asAdmin, repDoc()).Status)
	var body strings.Builder
	for {
		l, ok := s.line()
		if !ok {
			break
		}
		body.WriteString(l)
	}
	var reply struct {
		Results []map[string]any `json:"results"`
		LastSeq string           `json:"last_seq"`
	}
	require.NoError(t, json.Unmarshal([]byte(body.String()), &reply), body.String())
	require.Len(t, reply.Results, 1)
	require.Equal(t, reply.Results[0]["seq"], reply.LastSeq)
}

// A feed whose watches fail (too_many_watches) looks again after a
// backoff instead of spinning, and still delivers changes.
func TestChangesFailedWatches(t *testing.T) {
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true, MaxWatches: 1}) // a feed sets two
	e := newEnv(t, func(o *Options) { o.DB = db })
	s := e.openStream(asAdmin, "/_replicator/_changes?feed=continuous&since=now&heartbeat=100&limit=1")
	l, ok := s.line()
	require.True(t, ok)
	require.Equal(t, "", l, "waiting, with heartbeats")
	require.Equal(t, 201, e.do("PUT", "/_replicator/a", asAdmin, repDoc()).Status)
	require.Equal(t, "a", s.row()["id"])
	require.Contains(t, s.row(), "last_seq")
}
