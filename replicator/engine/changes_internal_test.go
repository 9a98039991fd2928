package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeTransport answers requests with a handler and records them.
type fakeTransport struct {
	mu      sync.Mutex
	reqs    []httpRequest
	handler func(n int, r httpRequest) (*httpResult, error)
}

// call answers with the handler's result; as couchTransport does, a status
// other than 2xx becomes a *statusError, whose body is not decoded for a
// streamed request.
func (f *fakeTransport) call(ctx context.Context, r httpRequest) (*httpResult, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	n := len(f.reqs)
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := f.handler(n, r)
	if err != nil || (res.status >= 200 && res.status <= 299) {
		return res, err
	}
	body := res.body
	if res.stream != nil {
		res.stream.Close()
		body = nil
	}
	return nil, newStatusError(r.method, f.redacted()+r.path, res.status, body)
}

func (f *fakeTransport) redacted() string { return "http://fake/db/" }
func (f *fakeTransport) close()           {}

func (f *fakeTransport) requests() []httpRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]httpRequest(nil), f.reqs...)
}

func streamOf(status int, body string) *httpResult {
	return &httpResult{status: status, header: http.Header{}, stream: io.NopCloser(strings.NewReader(body))}
}

// blockingStream is a continuous feed that sends body and then stays open
// until ctx ends.
func blockingStream(ctx context.Context, body string) *httpResult {
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(body))
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	return &httpResult{status: http.StatusOK, header: http.Header{}, stream: pr}
}

// testRep is rep between two fake endpoints, with defaults filled in.
func testRep(rep Replication) Replication {
	rep.Source.URL, _ = url.Parse("http://fake/db/")
	rep.Target.URL = rep.Source.URL
	return rep.WithDefaults()
}

// newTestReader reads the changes of the source src from sequence 0.
func newTestReader(rep Replication, src transport) *changesReader {
	return newChangesReader(testRep(rep), &peer{t: src}, json.RawMessage("0"), false, clockwork.NewRealClock(), zerolog.Nop())
}

// newTestWorkers are workers between the source src and itself.
func newTestWorkers(rep Replication, src transport) *workers {
	p := &peer{t: src}
	return &workers{rep: testRep(rep), src: p, tgt: p, stats: &counters{}, clock: clockwork.NewRealClock(),
		log: zerolog.Nop(), maxBulkBytes: bulkDocsMaxBytesDefault, perWorkerConn: 1}
}

// newTestCheckpointer records checkpoints on a peer that is both source
// and target, starting from sequence 0.
func newTestCheckpointer(t transport) *checkpointer {
	p := &peer{t: t}
	return &checkpointer{src: p, tgt: p, id: CheckpointIDPrefix + "base", sessionID: "session",
		startSeq: json.RawMessage("0"), committedSeq: json.RawMessage("0"), tracker: newSeqTracker(json.RawMessage("0")),
		stats: &counters{}, clock: clockwork.NewRealClock(), log: zerolog.Nop()}
}

// throughWaits runs f on a fake clock, which use installs, and lets it
// through its retry waits: for each wait, once a timer is set, it checks
// that no further request goes out to ft a moment before the wait is over,
// then ends the wait. It returns f's error.
func throughWaits(t *testing.T, ft *fakeTransport, use func(clockwork.Clock), f func(context.Context) error, waits ...time.Duration) error {
	t.Helper()
	clk := clockwork.NewFakeClock()
	use(clk)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	for i, d := range waits {
		require.NoError(t, clk.BlockUntilContext(ctx, 1), "retry wait %d", i+1)
		clk.Advance(d - time.Millisecond)
		require.Len(t, ft.requests(), i+1, "a request before the wait of %v was over", d)
		clk.Advance(time.Millisecond)
	}
	return <-done
}

func collectChanges(t *testing.T, r *changesReader, ctx context.Context, n int) []change {
	t.Helper()
	out := r.rows
	errc := make(chan error, 1)
	go func() { errc <- r.read(ctx) }()
	var got []change
	for len(got) < n {
		select {
		case c := <-out:
			got = append(got, c)
		case err := <-errc:
			for len(out) > 0 && len(got) < n { // rows sent before the reader returned
				got = append(got, <-out)
			}
			if len(got) < n {
				t.Fatalf("reader ended early: %v (rows %v)", err, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out with rows %v", got)
		}
	}
	return got
}

// TestContinuousFeedReconnects follows CouchDB's continuous feed: it ends
// with last_seq after the timeout and is re-requested from there; a stream
// cut mid-row is resumed from the last row.
func TestContinuousFeedReconnects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ft := &fakeTransport{}
	ft.handler = func(n int, r httpRequest) (*httpResult, error) {
		switch n {
		case 1:
			return streamOf(200, `{"seq":"1-a","id":"a","changes":[{"rev":"1-x"}]}`+"\n"+`{"seq":"2-a","id":"b","changes":[{"rev":"1-y"}]}`+"\n"+`{"last_seq":"3-a"}`+"\n"), nil
		case 2:
			return streamOf(200, `{"seq":"4-a","id":"c","changes":[{"rev":"1-z"}]}`+"\n"+`{"seq":"5-a","id":"d","chan`), nil
		default:
			return blockingStream(ctx, `{"seq":"6-a","id":"e","changes":[{"rev":"1-w"}]}`+"\n"), nil
		}
	}
	r := newTestReader(Replication{Continuous: true}, ft)
	got := collectChanges(t, r, ctx, 5)
	var ids, seqs []string
	for _, c := range got {
		ids = append(ids, c.ID)
		seqs = append(seqs, seqString(c.Seq))
	}
	require.Equal(t, []string{"a", "b", "", "c", "e"}, ids, "a last_seq marker follows b")
	require.Equal(t, []string{"1-a", "2-a", "3-a", "4-a", "6-a"}, seqs)
	reqs := ft.requests()
	require.GreaterOrEqual(t, len(reqs), 3)
	require.Equal(t, "continuous", reqs[0].query.Get("feed"))
	require.Equal(t, "all_docs", reqs[0].query.Get("style"))
	require.Equal(t, "10000", reqs[0].query.Get("timeout"))
	require.Equal(t, "0", reqs[0].query.Get("since"))
	require.Equal(t, "3-a", reqs[1].query.Get("since"))
	require.Equal(t, "4-a", reqs[2].query.Get("since"), "resumed from the last complete row")
}

func TestChangesFilters(t *testing.T) {
	t.Run("doc_ids falls back to client-side filtering on 405", func(t *testing.T) {
		ft := &fakeTransport{}
		ft.handler = func(n int, r httpRequest) (*httpResult, error) {
			if r.method == http.MethodPost {
				return streamOf(405, `{"error":"method_not_allowed"}`), nil
			}
			return streamOf(200, `{"results":[{"seq":1,"id":"a","changes":[{"rev":"1-x"}]},{"seq":2,"id":"b","changes":[{"rev":"1-y"}]},{"seq":3,"id":"c","changes":[{"rev":"1-y"}]}],"last_seq":3}`), nil
		}
		r := newTestReader(Replication{DocIDs: []string{"b"}}, ft)
		got := collectChanges(t, r, context.Background(), 2)
		require.Equal(t, "b", got[0].ID)
		require.Equal(t, "", got[1].ID, "the last_seq marker lets the checkpoint pass c")
		require.Equal(t, "3", string(got[1].Seq))
		reqs := ft.requests()
		require.Equal(t, http.MethodPost, reqs[0].method)
		require.Equal(t, "_doc_ids", reqs[0].query.Get("filter"))
		require.JSONEq(t, `{"doc_ids":["b"]}`, string(reqs[0].body))
		require.Equal(t, http.MethodGet, reqs[1].method)
		require.Empty(t, reqs[1].query.Get("filter"))
	})
	t.Run("doc_ids are sent percent-decoded, as CouchDB's replicator sends them", func(t *testing.T) {
		ft := &fakeTransport{}
		ft.handler = func(n int, r httpRequest) (*httpResult, error) {
			if r.method == http.MethodPost {
				return streamOf(405, `{"error":"method_not_allowed"}`), nil
			}
			return streamOf(200, `{"results":[{"seq":1,"id":"_design/foo","changes":[{"rev":"1-x"}]},{"seq":2,"id":"_design%2Ffoo","changes":[{"rev":"1-y"}]}],"last_seq":2}`), nil
		}
		r := newTestReader(Replication{DocIDs: []string{"_design%2Ffoo", "b", "a+b", "100%", "%zz%41", "b"}}, ft)
		got := collectChanges(t, r, context.Background(), 2)
		require.Equal(t, "_design/foo", got[0].ID, "the client-side filter keeps the decoded id")
		require.Equal(t, "", got[1].ID)
		require.JSONEq(t, `{"doc_ids":["%zzA","100%","_design/foo","a b","b"]}`, string(ft.requests()[0].body))
	})
	for _, pouch := range []bool{false, true} {
		ft := &fakeTransport{handler: func(n int, r httpRequest) (*httpResult, error) {
			return streamOf(200, `{"results":[{"seq":1,"id":"a","changes":[{"rev":"1-x"}]}],"last_seq":1}`), nil
		}}
		r := newTestReader(Replication{Selector: json.RawMessage(`{"a": {"$gt": 1}}`)}, ft)
		r.src.pouch = pouch
		collectChanges(t, r, context.Background(), 1)
		req := ft.requests()[0]
		require.Equal(t, "_selector", req.query.Get("filter"))
		if pouch {
			require.Equal(t, http.MethodGet, req.method, "pouchdb-server crashes on a POSTed selector")
			require.Equal(t, `{"a":{"$gt":1}}`, req.query.Get("selector"))
		} else {
			require.Equal(t, http.MethodPost, req.method)
			require.JSONEq(t, `{"selector":{"a":{"$gt":1}}}`, string(req.body))
		}
	}
	ft := &fakeTransport{handler: func(n int, r httpRequest) (*httpResult, error) {
		return streamOf(200, `{"results":[],"last_seq":0}`), nil
	}}
	r := newTestReader(Replication{Filter: "_view", QueryParams: json.RawMessage(`{"view":"d/v","key":"k","n":5}`), WinningRevsOnly: true}, ft)
	require.NoError(t, r.read(context.Background()))
	q := ft.requests()[0].query
	require.Equal(t, "_view", q.Get("filter"))
	require.Equal(t, "d/v", q.Get("view"))
	require.Equal(t, `"k"`, q.Get("key"), "view arguments are JSON")
	require.Equal(t, "5", q.Get("n"))
	require.Equal(t, "main_only", q.Get("style"))
	require.Equal(t, "normal", q.Get("feed"))
}

func TestChangesGivesUp(t *testing.T) {
	ft := &fakeTransport{handler: func(n int, r httpRequest) (*httpResult, error) {
		return nil, errors.New("connection refused")
	}}
	r := newTestReader(Replication{RetriesPerRequest: 2}, ft)
	r.rep.RetriesPerRequest = 2
	err := r.read(context.Background())
	require.ErrorIs(t, err, ErrChangesFeed)
	require.Len(t, ft.requests(), 1, "the transport has retried the request already")

	// A reply cut while it is read is requested again, as often as
	// retries_per_request allows when no row arrives, after waits of 250 ms
	// doubling.
	ft = &fakeTransport{handler: func(n int, r httpRequest) (*httpResult, error) {
		return streamOf(200, `{"results":[`), nil
	}}
	r = newTestReader(Replication{}, ft)
	r.rep.RetriesPerRequest = 2
	err = throughWaits(t, ft, func(c clockwork.Clock) { r.clock = c }, r.read, 250*time.Millisecond, 500*time.Millisecond)
	require.ErrorIs(t, err, ErrChangesFeed)
	require.ErrorIs(t, err, errBadFeed)
	require.Len(t, ft.requests(), 3)

	ft = &fakeTransport{handler: func(n int, r httpRequest) (*httpResult, error) {
		return streamOf(500, `{"error":"unknown"}`), nil
	}}
	r = newTestReader(Replication{}, ft)
	err = r.read(context.Background())
	require.ErrorIs(t, err, ErrChangesFeed)
	require.Len(t, ft.requests(), 1, "the transport has retried the 500 already")

	ft = &fakeTransport{handler: func(n int, r httpRequest) (*httpResult, error) {
		return streamOf(401, `{"error":"unauthorized"}`), nil
	}}
	r = newTestReader(Replication{}, ft)
	err = r.read(context.Background())
	require.ErrorIs(t, err, ErrUnauthorized)
	require.Len(t, ft.requests(), 1)
}

// TestCheckpointWrites covers the checkpoint write path: a lost reply
// (409 on the next write, the stored body is ours) is adopted, a restarted
// peer fails the checkpoint.
func TestCheckpointWrites(t *testing.T) {
	var stored *CheckpointDoc
	restarted := false
	ft := &fakeTransport{}
	ft.handler = func(n int, r httpRequest) (*httpResult, error) {
		switch {
		case r.path == "_ensure_full_commit":
			ist := `"100"`
			if restarted {
				ist = `"200"`
			}
			return &httpResult{status: 201, body: []byte(`{"ok":true,"instance_start_time":` + ist + `}`)}, nil
		case r.method == http.MethodPut:
			var d CheckpointDoc
			require.NoError(t, json.Unmarshal(r.body, &d))
			if stored != nil && d.Rev != stored.Rev {
				return &httpResult{status: 409, body: []byte(`{"error":"conflict"}`)}, nil
			}
			d.Rev = "0-" + string(rune('1'+n%9))
			stored = &d
			return &httpResult{status: 201, body: []byte(`{"ok":true,"id":"x","rev":"` + d.Rev + `"}`)}, nil
		case r.method == http.MethodGet:
			b, _ := json.Marshal(stored)
			return &httpResult{status: 200, body: b}, nil
		}
		return &httpResult{status: 500}, nil
	}
	r := newTestCheckpointer(ft)
	r.srcStartTime, r.tgtStartTime = json.RawMessage(`"100"`), json.RawMessage(`"100"`)
	require.NoError(t, r.writeLogs(context.Background(), json.RawMessage("5")))
	// Source and target are the same fake: the target write saw a 409 for
	// the source's fresh revision and adopted it since the body is ours.
	require.Equal(t, r.srcLogRev, r.tgtLogRev)
	require.Equal(t, "5", string(stored.SourceLastSeq))
	require.Len(t, stored.History, 1)

	restarted = true
	err := r.writeLogs(context.Background(), json.RawMessage("6"))
	require.ErrorIs(t, err, ErrCheckpoint)
	require.Contains(t, err.Error(), "instance_start_time")
}
