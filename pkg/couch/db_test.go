package couch_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

const secret = "hunter2-s3cret"

// newDB opens a DB on rawURL with the secret password and fast retries; the
// returned buffer collects its debug log.
func newDB(t *testing.T, rawURL string, opts couch.Options, limiter *couch.RateLimiter) (*couch.DB, *testutil.SyncBuffer) {
	t.Helper()
	opts.Auth = couch.AuthBasic // the fakes count requests; session_test.go tests sessions
	return newAuthDB(t, rawURL, opts, limiter)
}

// newAuthDB is newDB with opts.Auth as given (the zero value: sessions).
func newAuthDB(t *testing.T, rawURL string, opts couch.Options, limiter *couch.RateLimiter) (*couch.DB, *testutil.SyncBuffer) {
	t.Helper()
	ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(
		`{"url":%q,"auth":{"basic":{"username":"bob","password":%q}}}`, rawURL, secret)))
	require.NoError(t, err)
	return openDB(t, ep, opts, limiter)
}

// newAuthDBEndpoint is newAuthDB for a parsed endpoint.
func newAuthDBEndpoint(t *testing.T, ep couch.Endpoint, opts couch.Options) (*couch.DB, *testutil.SyncBuffer) {
	t.Helper()
	return openDB(t, ep, opts, nil)
}

func openDB(t *testing.T, ep couch.Endpoint, opts couch.Options, limiter *couch.RateLimiter) (*couch.DB, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	lg := zerolog.New(logs).Level(zerolog.DebugLevel)
	opts.Logger = &lg
	opts.RetryWait = cmp.Or(opts.RetryWait, time.Millisecond)
	db, err := couch.NewDB(ep, opts, limiter)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db, logs
}

// requireNoSecret checks that the password appears in none of the strings.
func requireNoSecret(t *testing.T, texts ...string) {
	t.Helper()
	for _, s := range texts {
		require.NotContains(t, s, secret)
	}
}

func TestRequestShape(t *testing.T) {
	type seen struct {
		method, uri, body, host string
		length                  int64
		header                  http.Header
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, string(b), r.Host, r.ContentLength, r.Header.Clone()})
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain") // pouchdb-server's label; must not matter
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()

	ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(
		`{"url":"%s/my%%2Fdb?x=1","headers":{"X-Tenant":"acme"},"auth":{"basic":{"username":"bob","password":%q}}}`, srv.URL, secret)))
	require.NoError(t, err)
	db, err := couch.NewDB(ep, couch.Options{Auth: couch.AuthBasic}, nil)
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()

	var out struct{ OK bool }
	require.NoError(t, db.DoJSON(ctx, couch.Request{}, &out))
	require.True(t, out.OK)
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_bulk_docs",
		Query: map[string][]string{"y": {"a b"}}, Body: []byte(`{"docs":[]}`)}, nil))
	require.NoError(t, db.DoJSON(ctx, couch.Request{Path: "/_session", Header: http.Header{"Accept": {"text/plain"}}}, nil))
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPut, Path: couch.EscapeDocID("_local/a/b"),
		Body: []byte(`{}`), Header: http.Header{"content-type": {"application/x"}}}, nil))
	resp, err := db.Do(ctx, couch.Request{Path: couch.EscapeDocID("a/b c")})
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_ensure_full_commit", Body: []byte{},
		Header: http.Header{"Host": {"vhost.example"}}}, nil))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 6)
	auth := "Basic " + base64Std("bob:"+secret)
	for _, s := range got {
		require.Equal(t, auth, s.header.Get("Authorization"))
		require.Equal(t, "acme", s.header.Get("X-Tenant"))
		require.Equal(t, couch.UserAgentDefault, s.header.Get("User-Agent"))
		require.Empty(t, s.header.Get("Accept-Encoding"), "no compression asked")
	}
	require.Equal(t, "GET /my%2Fdb?x=1", got[0].method+" "+got[0].uri) // URLs with a query keep their path
	require.Equal(t, "application/json", got[0].header.Get("Accept"))
	require.Equal(t, "POST /my%2Fdb/_bulk_docs?x=1&y=a+b", got[1].method+" "+got[1].uri)
	require.Equal(t, `{"docs":[]}`, got[1].body)
	require.Equal(t, "application/json", got[1].header.Get("Content-Type"))
	require.Equal(t, "GET /_session?x=1", got[2].method+" "+got[2].uri)
	require.Equal(t, "text/plain", got[2].header.Get("Accept"))
	require.Equal(t, "PUT /my%2Fdb/_local/a%2Fb?x=1", got[3].method+" "+got[3].uri)
	require.Equal(t, "application/x", got[3].header.Get("Content-Type"))
	require.Equal(t, "GET /my%2Fdb/a%2Fb%20c?x=1", got[4].method+" "+got[4].uri)
	require.Equal(t, "POST /my%2Fdb/_ensure_full_commit?x=1", got[5].method+" "+got[5].uri)
	require.Equal(t, "vhost.example", got[5].host)
	require.Equal(t, int64(0), got[5].length)
	require.Equal(t, "application/json", got[5].header.Get("Content-Type"))
}

func base64Std(s string) string {
	req := &http.Request{Header: http.Header{}}
	user, pass, _ := strings.Cut(s, ":")
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func TestHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		_, _ = fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/db/"), "%d", &code)
		w.WriteHeader(code)
		if code != http.StatusGone {
			_, _ = fmt.Fprintf(w, `{"error":"e%d","reason":"r%d"}`, code, code)
		}
	}))
	defer srv.Close()
	db, logs := newDB(t, srv.URL+"/db", couch.Options{RetriesPerRequest: 1}, nil)
	for _, tc := range []struct {
		status int
		is     error
	}{
		{400, couch.ErrBadRequest}, {401, couch.ErrUnauthorized}, {403, couch.ErrForbidden},
		{404, couch.ErrNotFound}, {405, couch.ErrMethodNotAllowed}, {409, couch.ErrConflict},
		{412, couch.ErrPreconditionFailed}, {413, couch.ErrTooLarge}, {414, couch.ErrURITooLong},
		{415, couch.ErrUnsupportedMedia}, {417, couch.ErrExpectationFailed},
		{500, couch.ErrServerError}, {503, couch.ErrServerError}, {410, nil},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			err := db.DoJSON(context.Background(), couch.Request{Path: fmt.Sprint(tc.status)}, nil)
			var herr *couch.HTTPError
			require.ErrorAs(t, err, &herr)
			require.Equal(t, tc.status, herr.Status)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
				require.Equal(t, fmt.Sprintf("e%d", tc.status), herr.Error_)
				require.Equal(t, fmt.Sprintf("r%d", tc.status), herr.Reason)
				require.Contains(t, string(herr.Body), "reason")
			} else {
				require.Equal(t, "gone", herr.Error_)
			}
			require.NotErrorIs(t, err, couch.ErrRequestFailed)
			require.Contains(t, err.Error(), "http://bob:*****@127.0.0.1")
			requireNoSecret(t, err.Error())
		})
	}
	requireNoSecret(t, logs.String())
}

func TestRetries(t *testing.T) {
	var calls atomic.Int64
	failFirst := atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		if strings.HasSuffix(r.URL.Path, "/drop") {
			panic(http.ErrAbortHandler)
		}
		if n <= failFirst.Load() {
			switch n % 3 {
			case 0:
				w.WriteHeader(http.StatusServiceUnavailable)
			case 1:
				w.WriteHeader(http.StatusRequestTimeout)
			default:
				panic(http.ErrAbortHandler) // connection dropped without an answer
			}
			return
		}
		_, _ = w.Write(b) // echo: proves the body was re-sent intact
	}))
	defer srv.Close()
	var seen []couch.Attempt // Options.Observe's
	var seenMu sync.Mutex
	observe := func(a couch.Attempt) {
		seenMu.Lock()
		seen = append(seen, a)
		seenMu.Unlock()
	}
	db, logs := newDB(t, srv.URL+"/db", couch.Options{RetriesPerRequest: 5, Observe: observe}, nil)

	// Five failures, then success on the sixth attempt: each attempt is
	// observed, with its number, the most there may be, and why it failed.
	failFirst.Store(5)
	var out map[string]int
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{Method: http.MethodPost, Path: "_revs_diff",
		Body: []byte(`{"a":1}`)}, &out))
	require.Equal(t, map[string]int{"a": 1}, out)
	require.EqualValues(t, 6, calls.Load())
	seenMu.Lock()
	require.Len(t, seen, 6)
	for i, a := range seen {
		require.Equal(t, i+1, a.N)
		require.Equal(t, 6, a.Max)
		require.False(t, a.Final)
		require.Equal(t, i < 5, a.Err != nil, "attempt %d", i+1)
		require.NotContains(t, a.URL, secret)
	}
	require.Contains(t, seen[0].Err.Error(), "408")
	require.Contains(t, seen[2].Err.Error(), "503")
	seen = nil
	seenMu.Unlock()

	// Six failures exhaust the retries: the last answer is reported.
	calls.Store(0)
	failFirst.Store(6)
	err := db.DoJSON(context.Background(), couch.Request{Method: http.MethodPost, Path: "_revs_diff", Body: []byte(`{}`)}, nil)
	require.ErrorIs(t, err, couch.ErrServerError)
	require.EqualValues(t, 6, calls.Load())
	seenMu.Lock()
	require.Len(t, seen, 6)
	require.True(t, seen[5].Final, "the last attempt gives up")
	seenMu.Unlock()

	// NoRetry makes one attempt.
	calls.Store(0)
	// (POST: net/http itself replays a GET once when a reused connection was
	// closed before any answer.)
	err = db.DoJSON(context.Background(), couch.Request{Method: http.MethodPost, Path: "drop", NoRetry: true}, nil)
	require.ErrorIs(t, err, couch.ErrRequestFailed)
	require.EqualValues(t, 1, calls.Load())
	var rerr *couch.RequestError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 1, rerr.Attempts)
	requireNoSecret(t, err.Error(), logs.String())
	require.Contains(t, logs.String(), "retrying")
}

// TestRetryWaitsOnClock drives the retry loop with a fake clock: each retry
// waits RetryWait, doubling, and not a moment less; RetryTimeLimit is
// measured on the same clock.
func TestRetryWaitsOnClock(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	clk := clockwork.NewFakeClock()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{RetryWait: 250 * time.Millisecond, RetryTimeLimit: time.Second,
		Clock: clk}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do := func() chan error {
		done := make(chan error, 1)
		go func() { done <- db.DoJSON(ctx, couch.Request{}, nil) }()
		return done
	}

	done := do()
	for attempt, wait := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond} {
		require.NoError(t, clk.BlockUntilContext(ctx, 1), "the retry wait")
		clk.Advance(wait - time.Millisecond)
		// The retry timer has not fired, so no further attempt can be under way.
		require.EqualValues(t, attempt+1, calls.Load())
		clk.Advance(time.Millisecond)
	}
	require.NoError(t, <-done)
	require.EqualValues(t, 3, calls.Load())

	// Failures spread over RetryTimeLimit of the clock's time end the
	// retries: the attempt after 0.25 + 0.5 + 1 s of waits is the last,
	// although retries_per_request (5) would allow two more.
	calls.Store(-10)
	done = do()
	for _, wait := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		require.NoError(t, clk.BlockUntilContext(ctx, 1))
		clk.Advance(wait)
	}
	require.ErrorIs(t, <-done, couch.ErrServerError)
	require.EqualValues(t, -6, calls.Load(), "four attempts")
}

func TestRetriesStopAfterTimeLimit(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	// A time limit below the first wait: one retry at most, not 100.
	db, _ := newDB(t, srv.URL+"/db", couch.Options{RetriesPerRequest: 100, RetryWait: 5 * time.Millisecond,
		RetryTimeLimit: time.Millisecond}, nil)
	err := db.DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrServerError)
	require.LessOrEqual(t, calls.Load(), int64(2))
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	db, logs := newDB(t, "http://"+addr+"/db", couch.Options{RetriesPerRequest: 2}, nil)
	err = db.DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrRequestFailed)
	var rerr *couch.RequestError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 3, rerr.Attempts)
	require.Contains(t, err.Error(), "connection refused")
	require.Contains(t, err.Error(), "http://bob:*****@"+addr+"/db/")
	requireNoSecret(t, err.Error(), fmt.Sprintf("%v %+v %#v", err, err, err), logs.String())
}

func TestTooManyRequests(t *testing.T) {
	var calls, limited atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if limited.Add(-1) >= 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	limiter, err := couch.NewRateLimiter(couch.RateLimiterConfig{BaseInterval: time.Millisecond,
		MaxInterval: 50 * time.Millisecond, MinUpdateInterval: time.Nanosecond})
	require.NoError(t, err)
	db, logs := newDB(t, srv.URL+"/db", couch.Options{RetriesPerRequest: couch.NoRetries}, limiter)
	key := "http://" + strings.TrimPrefix(srv.URL, "http://") + " GET"

	// 429s do not use up retries (there are none here).
	limited.Store(4)
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, nil))
	require.EqualValues(t, 5, calls.Load())
	require.Equal(t, 4, strings.Count(logs.String(), "429, backing off"))

	// A peer that never stops answering 429 ends in max_backoff.
	limited.Store(1 << 40)
	err = db.DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrMaxBackoff)
	require.Equal(t, 50*time.Millisecond, limiter.Interval(key))
	requireNoSecret(t, err.Error(), logs.String())
	require.Contains(t, err.Error(), "http://bob:*****@")

	// The limiter is shared: another DB on the same host fails at once.
	db2, _ := newDB(t, srv.URL+"/other", couch.Options{}, limiter)
	before := calls.Load()
	require.ErrorIs(t, db2.DoJSON(context.Background(), couch.Request{}, nil), couch.ErrMaxBackoff)
	require.Equal(t, before, calls.Load())
	// ... but not for another method.
	limited.Store(0)
	require.NoError(t, db2.DoJSON(context.Background(), couch.Request{Method: http.MethodPost, Body: []byte(`{}`)}, nil))
}

func TestConnectionCap(t *testing.T) {
	const limit, total = 3, 12
	var inflight, maxInflight, conns atomic.Int64
	arrived := make(chan struct{}, total)
	gate := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			m := maxInflight.Load()
			if n <= m || maxInflight.CompareAndSwap(m, n) {
				break
			}
		}
		arrived <- struct{}{}
		<-gate
		inflight.Add(-1)
		_, _ = io.WriteString(w, `{}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{HTTPConnections: limit}, nil)

	var wg sync.WaitGroup
	errs := make(chan error, total)
	for range total {
		wg.Go(func() { errs <- db.DoJSON(context.Background(), couch.Request{}, nil) })
	}
	// Let requests through one at a time, each only once `limit` are
	// waiting at the server (or all that remain).
	for done := 0; done < total; done++ {
		for int(inflight.Load()) < min(limit, total-done) {
			<-arrived
		}
		gate <- struct{}{}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, limit, maxInflight.Load())
	require.LessOrEqual(t, conns.Load(), int64(limit))
}

func TestConnectionTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		n := calls[r.URL.Path]
		mu.Unlock()
		silent := func() {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
		switch r.URL.Path {
		case "/db/ok":
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/db/silent", "/db/silent2": // never answers
			silent()
		case "/db/once": // silent before the headers on the first attempt
			if n == 1 {
				silent()
				return
			}
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/db/body": // silent in the middle of the body
			_, _ = io.WriteString(w, `{"rows":[`)
			w.(http.Flusher).Flush()
			silent()
		case "/db/slowreader": // all data at once; the reader is slow
			_, _ = io.WriteString(w, strings.Repeat("x", 100))
		}
	}))
	defer srv.Close()
	defer close(release)
	callsOf := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls["/db/"+path]
	}
	// Generous for a healthy answer on a loaded machine: a stall on a new
	// connection is not retried.
	const timeout = time.Second
	db, logs := newDB(t, srv.URL+"/db", couch.Options{ConnectionTimeout: timeout, RetriesPerRequest: 5, HTTPConnections: 1}, nil)
	ctx := context.Background()
	var out struct{ OK bool }

	// A silent peer on a new connection fails the request at once.
	err := db.DoJSON(ctx, couch.Request{Path: "silent"}, nil)
	require.ErrorIs(t, err, couch.ErrTimeout)
	require.ErrorIs(t, err, couch.ErrRequestFailed)
	require.Equal(t, 1, callsOf("silent"))
	require.Contains(t, logs.String(), "connection_timeout")
	requireNoSecret(t, err.Error())

	// On a pooled connection (which the peer may have dropped unannounced)
	// one stall is retried on a new connection...
	require.NoError(t, db.DoJSON(ctx, couch.Request{Path: "ok"}, &out))
	require.NoError(t, db.DoJSON(ctx, couch.Request{Path: "once"}, &out))
	require.True(t, out.OK)
	require.Equal(t, 2, callsOf("once"))
	// ...and a second one fails.
	require.NoError(t, db.DoJSON(ctx, couch.Request{Path: "ok"}, &out))
	err = db.DoJSON(ctx, couch.Request{Path: "silent2"}, nil)
	require.ErrorIs(t, err, couch.ErrTimeout)
	require.Equal(t, 2, callsOf("silent2"))

	// A body that stops flowing fails the Read with ErrTimeout.
	resp, err := db.Do(ctx, couch.Request{Path: "body", Stream: true})
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, couch.ErrTimeout)
	require.NoError(t, resp.Body.Close())

	// Time spent between Reads is not silence.
	resp, err = db.Do(ctx, couch.Request{Path: "slowreader", Stream: true})
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	time.Sleep(2 * timeout) // a slow consumer, not a timing assertion
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Len(t, rest, 90)
	require.NoError(t, resp.Body.Close())
}

// TestTrickle checks that a peer which is never silent but sends less than
// StallBytes per connection_timeout fails a request that is not a stream,
// and that a stream may trickle.
func TestTrickle(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.WriteString(w, `{"rows":[`)
		for range 100 { // bounded: 100 × timeout/10
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(timeout / 10):
			}
			if _, err := io.WriteString(w, " "); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{ConnectionTimeout: timeout, RetriesPerRequest: 5}, nil)
	err := db.DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrTimeout)
	require.ErrorContains(t, err, "fewer than")
	require.EqualValues(t, 1, calls.Load())

	resp, err := db.Do(context.Background(), couch.Request{Stream: true})
	require.NoError(t, err)
	buf := make([]byte, 1)
	for range 40 { // 9 bytes at once, then 31 × timeout/10 of trickle
		_, err := io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
	}
	require.NoError(t, resp.Body.Close())

	// The body Do returns for a request that is not a stream is guarded
	// too: the trickle fails a Read.
	resp, err = db.Do(context.Background(), couch.Request{})
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, couch.ErrTimeout)
	require.ErrorContains(t, err, "fewer than")
	require.NoError(t, resp.Body.Close())
}

// TestTrickleCountsReadsOnly checks that the trickle guard of a body Do
// returns counts the time its Reads wait, not the caller's pauses
// between them: a caller that takes its time over a fast answer is not
// failed.
func TestTrickleCountsReadsOnly(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	srv := httptest.NewServer(bodyOf(1 << 20))
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{ConnectionTimeout: timeout}, nil)
	resp, err := db.Do(context.Background(), couch.Request{})
	require.NoError(t, err)
	buf := make([]byte, 64<<10) // more than the transport buffers
	for range 3 {
		_, err := io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		time.Sleep(2 * timeout) // a slow consumer, not a timing assertion
	}
	require.NoError(t, resp.Body.Close())
}

func TestRequestTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Trickle data forever: never silent, never done.
		for {
			if _, err := io.WriteString(w, " "); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{RequestTimeout: 50 * time.Millisecond, RetriesPerRequest: couch.NoRetries}, nil)
	err := db.DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrTimeout)

	// Streams are exempt: the body keeps flowing past the request timeout.
	resp, err := db.Do(context.Background(), couch.Request{Stream: true})
	require.NoError(t, err)
	n := 0
	buf := make([]byte, 1)
	deadline := time.Now().Add(150 * time.Millisecond)
	for time.Now().Before(deadline) {
		_, err := resp.Body.Read(buf)
		require.NoError(t, err)
		n++
	}
	require.NoError(t, resp.Body.Close())
}

func TestContextCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	err := db.DoJSON(ctx, couch.Request{}, nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestBadResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `not json`)
	}))
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{}, nil)
	var out map[string]any
	err := db.DoJSON(context.Background(), couch.Request{}, &out)
	require.ErrorIs(t, err, couch.ErrBadResponse)
	requireNoSecret(t, err.Error())
	b, err := db.DoBytes(context.Background(), couch.Request{})
	require.NoError(t, err)
	require.Equal(t, "not json", string(b))
}

// bodyOf answers n bytes of JSON-looking filler, generated as it is
// sent (never held whole), or fewer if the client goes away.
func bodyOf(n int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 32<<10))
		w.Header().Set("Content-Type", "application/json")
		for sent := int64(0); sent < n; sent += int64(len(chunk)) {
			if _, err := w.Write(chunk[:min(int64(len(chunk)), n-sent)]); err != nil {
				return
			}
		}
	}
}

// TestBodyMax checks that a 2xx answer is read up to the request's MaxBody
// and no further: longer, DoJSON and DoBytes fail with a
// *BodyTooLargeError without retrying, and the body Do returns fails its
// Read once it has given MaxBody bytes; a body of exactly MaxBody bytes is
// read.
func TestBodyMax(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/db/exact", bodyOf(1000))
	mux.HandleFunc("/_session", bodyOf(4*couch.LoginAnswerMax))
	mux.HandleFunc("/db/", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		bodyOf(4*couch.BodyMaxDefault)(w, r) // longer than any limit below
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/db", couch.Options{RetriesPerRequest: 5}, nil)
	ctx := context.Background()

	err := db.DoJSON(ctx, couch.Request{Path: "huge"}, nil)
	var tl *couch.BodyTooLargeError
	require.ErrorAs(t, err, &tl)
	require.ErrorIs(t, err, couch.ErrBodyTooLarge)
	require.EqualValues(t, couch.BodyMaxDefault, tl.Limit)
	require.Equal(t, "BodyMaxDefault", tl.Name)
	require.Equal(t, "GET", tl.Method)
	require.Contains(t, tl.URL, "/db/huge")
	requireNoSecret(t, err.Error())
	require.EqualValues(t, 1, calls.Load(), "an answer too large is not asked for again")

	_, err = db.DoBytes(ctx, couch.Request{Path: "huge", MaxBody: 999})
	require.ErrorAs(t, err, &tl)
	require.EqualValues(t, 999, tl.Limit)
	b, err := db.DoBytes(ctx, couch.Request{Path: "exact", MaxBody: 1000})
	require.NoError(t, err)
	require.Len(t, b, 1000)

	for _, stream := range []bool{false, true} {
		resp, err := db.Do(ctx, couch.Request{Path: "huge", MaxBody: 5000, Stream: stream})
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		require.ErrorAs(t, err, &tl)
		require.Len(t, got, 5000)
		require.NoError(t, resp.Body.Close())
	}
	resp, err := db.Do(ctx, couch.Request{Path: "exact", MaxBody: 1000})
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Len(t, got, 1000)
	require.NoError(t, resp.Body.Close())

	// A session's login is bounded by LoginAnswerMax; the request that
	// needed it fails with its answer.
	sdb, _ := newAuthDB(t, srv.URL+"/db", couch.Options{}, nil)
	_, err = sdb.DoBytes(ctx, couch.Request{Path: "exact"})
	require.ErrorAs(t, err, &tl)
	require.EqualValues(t, couch.LoginAnswerMax, tl.Limit)
	require.Equal(t, "LoginAnswerMax", tl.Name)
	require.Contains(t, tl.URL, "/_session")
	require.ErrorContains(t, err, "(LoginAnswerMax)")
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    couch.Options
		want error // nil: valid
	}{
		{"zero is defaults", couch.Options{}, nil},
		{"no retries", couch.Options{RetriesPerRequest: couch.NoRetries}, nil},
		{"negative connections", couch.Options{HTTPConnections: -1}, couch.ErrInvalidOptions},
		{"negative timeout", couch.Options{ConnectionTimeout: -time.Second}, couch.ErrInvalidOptions},
		{"negative retries", couch.Options{RetriesPerRequest: -2}, couch.ErrInvalidOptions},
		{"negative request timeout", couch.Options{RequestTimeout: -1}, couch.ErrInvalidOptions},
		{"wait max below wait", couch.Options{RetryWait: time.Second, RetryWaitMax: time.Millisecond}, couch.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.o.Validate(), tc.want) // a nil want requires no error
		})
	}
	d := couch.Options{}.WithDefaults()
	require.Equal(t, couch.HTTPConnectionsDefault, d.HTTPConnections)
	require.Equal(t, couch.ConnectionTimeoutDefault, d.ConnectionTimeout)
	require.Equal(t, couch.RetriesPerRequestDefault, d.RetriesPerRequest)
	require.Equal(t, 0, couch.Options{RetriesPerRequest: couch.NoRetries}.WithDefaults().RetriesPerRequest)

	_, err := couch.NewDB(couch.Endpoint{}, couch.Options{}, nil)
	require.ErrorIs(t, err, couch.ErrInvalidEndpoint)
}

func TestRedirectsKeepAuthAndBody(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b)+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		switch r.URL.Path {
		case "/old/_bulk_docs":
			http.Redirect(w, r, "/db/_bulk_docs", http.StatusTemporaryRedirect)
		case "/old/":
			http.Redirect(w, r, "/db/", http.StatusMovedPermanently)
		default:
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	db, _ := newDB(t, srv.URL+"/old", couch.Options{}, nil)
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, nil))
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{Method: http.MethodPost, Path: "_bulk_docs", Body: []byte(`{"x":1}`)}, nil))
	auth := "Basic " + base64Std("bob:"+secret)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		"GET /old/  " + auth, "GET /db/  " + auth,
		"POST /old/_bulk_docs {\"x\":1} " + auth, "POST /db/_bulk_docs {\"x\":1} " + auth,
	}, got)
}

func TestForwardProxy(t *testing.T) {
	var seen atomic.Value
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.RequestURI) // a forward proxy gets the absolute URL
		_, _ = io.WriteString(w, `{"via":"proxy"}`)
	}))
	defer proxy.Close()
	pu, err := url.Parse(proxy.URL)
	require.NoError(t, err)
	// The target does not exist: only the proxy can answer.
	db, _ := newDB(t, "http://couch.invalid:5984/db", couch.Options{Proxy: pu}, nil)
	var out struct{ Via string }
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{Path: "_changes"}, &out))
	require.Equal(t, "proxy", out.Via)
	require.Equal(t, "http://couch.invalid:5984/db/_changes", seen.Load())

	require.ErrorIs(t, couch.Options{Proxy: &url.URL{Scheme: "ftp", Host: "h"}}.Validate(), couch.ErrInvalidOptions)
	withPass := couch.Options{Proxy: &url.URL{Scheme: "http", Host: "h", User: url.UserPassword("u", secret)}}
	requireNoSecret(t, fmt.Sprintf("%v %+v %#v %s", withPass, withPass, withPass, withPass))
	require.Contains(t, withPass.String(), "http://u:*****@h")
	requireNoSecret(t, fmt.Sprintf("%v %+v %#v %s", db, db, db, db))
	err = couch.Options{Proxy: &url.URL{Scheme: "gopher", Host: "h", User: url.UserPassword("u", secret)}}.Validate()
	require.ErrorIs(t, err, couch.ErrInvalidOptions)
	requireNoSecret(t, err.Error())
}
