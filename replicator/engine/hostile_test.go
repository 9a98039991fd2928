package engine_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// hostilePeer is a real CouchDB behind a proxy the test runs, which
// answers the requests answer takes with answers no CouchDB sends (huge,
// endless, decompression bombs) and forwards the others, so that a run
// gets as far as the request the test aims at.
type hostilePeer struct {
	srv    *httptest.Server
	real   *couchtest.Server
	answer func(w http.ResponseWriter, r *http.Request) bool
	hits   atomic.Int64 // answers answer began
}

func startHostile(t *testing.T, real *couchtest.Server, answer func(w http.ResponseWriter, r *http.Request) bool) *hostilePeer {
	t.Helper()
	up, err := url.Parse(real.URL())
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(up)
	h := &hostilePeer{real: real, answer: answer}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.answer(&countingWriter{ResponseWriter: w, hits: &h.hits}, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// countingWriter counts an answer in hits as its first byte goes out,
// before the client can see it.
type countingWriter struct {
	http.ResponseWriter
	hits    *atomic.Int64
	counted bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if !w.counted {
		w.counted = true
		w.hits.Add(1)
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets the answer drip.
func (w *countingWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// dbURL is the URL of database db through the proxy, with the real
// server's admin as userinfo.
func (h *hostilePeer) dbURL(db string) string { return authURL(h.real, h.srv.URL+"/"+db) }

// filler writes prefix, then n bytes of fill (n < 0: without end) in
// chunks, generated as they are sent and never held whole, until the
// client goes away. With n ≥ 0 the answer declares its length.
func filler(w http.ResponseWriter, contentType, prefix string, fill byte, n int64) {
	w.Header().Set("Content-Type", contentType)
	if n >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(prefix))+n, 10))
	}
	if _, err := io.WriteString(w, prefix); err != nil {
		return
	}
	chunk := bytes.Repeat([]byte{fill}, 64<<10)
	for sent := int64(0); n < 0 || sent < n; sent += int64(len(chunk)) {
		if n >= 0 {
			chunk = chunk[:min(int64(len(chunk)), n-sent)]
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// huge is the size of the answers a hostile peer declares: far more than
// any node has memory for.
const huge = 2 << 30

// heapWatch samples the process's heap (HeapInuse) every few milliseconds
// from its start until stop, and keeps its peak above the heap at the
// start; past limit it calls over at once, so that a broken bound fails
// the test before it takes the machine.
type heapWatch struct {
	base, peak uint64
	done       chan struct{}
	stopped    sync.WaitGroup
}

func watchHeap(limit int64, over func()) *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapWatch{base: ms.HeapInuse, done: make(chan struct{})}
	h.stopped.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		fired := false
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > h.base {
				h.peak = max(h.peak, ms.HeapInuse-h.base)
			}
			if int64(h.peak) > limit && !fired {
				fired = true
				over()
			}
			select {
			case <-h.done:
				return
			case <-tick.C:
			}
		}
	})
	return h
}

// stop ends the sampling and returns the peak.
func (h *heapWatch) stop() uint64 {
	close(h.done)
	h.stopped.Wait()
	return h.peak
}

// heapSlack is what the test's own machinery may add to the heap beside a
// run (its proxies, CouchDB helpers, the sampler).
const heapSlack = 32 << 20

// runWatched runs rep to its end while watching the heap, and returns its
// error with the peak of the heap above the start. A heap over
// MemoryBound(rep) (and heapSlack) ends the run and fails the test.
func runWatched(t *testing.T, rep engine.Replication) (error, uint64) {
	t.Helper()
	bound := engine.MemoryBound(rep) + heapSlack
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	watch := watchHeap(bound, cancel)
	run := engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID})
	_, err := run.Wait()
	peak := watch.stop()
	require.LessOrEqual(t, int64(peak), bound, "the heap grew past MemoryBound: %d MiB", peak>>20)
	return err, peak
}

// openRevsQuery reports whether r is a document's open_revs fetch.
func openRevsQuery(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Has("open_revs")
}

// gzipBomb is a gzip stream of n zero bytes (about n/1000 bytes long).
func gzipBomb(t *testing.T, n int64) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for written := int64(0); written < n; written += int64(len(zeros)) {
		_, err := zw.Write(zeros)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// TestHostilePeer runs replications against peers that answer what no
// CouchDB sends: each run fails, naming the limit its peer's answer broke
// (http_request_failed, under the error class of the request's step),
// while the process's heap stays under MemoryBound; an oversized
// _bulk_get reply only costs the run its fetches one by one. It is not
// parallel, so that the heap it watches is its runs' alone.
func TestHostilePeer(t *testing.T) {
	srv := startPeer(t, 20)
	// A document with an attachment: fetched with open_revs.
	attRev := srv.PutDoc(t, "src", map[string]any{"_id": "with-att", "_attachments": map[string]any{
		"a.txt": map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("hello"))}}})
	bomb := gzipBomb(t, 4*engine.DocMax)

	type answerer = func(w http.ResponseWriter, r *http.Request) bool
	path := func(method, p string, write func(w http.ResponseWriter, r *http.Request)) answerer {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != method || strings.TrimSuffix(r.URL.Path, "/") != p {
				return false
			}
			write(w, r)
			return true
		}
	}
	tests := []struct {
		name       string
		hostileSrc bool // the source is hostile; else the target
		answer     answerer
		rep        engine.Replication
		targetDoc  bool     // the target holds a document (no inline documents, _revs_diff asked)
		want       []string // in the run's error
		wantErr    error    // the error class of the step
		wantIs     []error  // what the error wraps: ErrHTTP and couch.ErrBodyTooLarge when nil
		complete   bool     // the run completes instead
	}{
		{name: "database info, declared huge", hostileSrc: true,
			answer: path("GET", "/src", func(w http.ResponseWriter, r *http.Request) {
				filler(w, "application/json", `{"update_seq":"`, 'x', huge)
			}),
			want: []string{"http_request_failed: source ", "GET /src/ answered more than 4194304 bytes (AnswerMax)"}},
		{name: "database info, endless",
			answer: path("GET", "/tgt", func(w http.ResponseWriter, r *http.Request) {
				filler(w, "application/json", `{"db_name":"`, 'x', -1)
			}),
			want: []string{"http_request_failed: target ", "(AnswerMax)"}},
		{name: "session login", hostileSrc: true,
			answer: path("POST", "/_session", func(w http.ResponseWriter, r *http.Request) {
				filler(w, "application/json", `{"ok":true,"name":"`, 'x', -1)
			}),
			want: []string{"POST /_session answered more than 1048576 bytes (LoginAnswerMax)"}},
		{name: "checkpoint document", hostileSrc: true,
			answer: func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != "GET" || !strings.HasPrefix(r.URL.Path, "/src/_local/") {
					return false
				}
				filler(w, "application/json", `{"_id":"_local/x","history":[`, ' ', -1)
				return true
			},
			want: []string{"reading the source checkpoint: http_request_failed", "(AnswerMax)"}},
		{name: "revs_diff", targetDoc: true,
			answer: path("POST", "/tgt/_revs_diff", func(w http.ResponseWriter, r *http.Request) {
				filler(w, "application/json", `{"doc-00000000":{"missing":["`, 'x', huge)
			}),
			wantErr: engine.ErrRevsDiff, want: []string{"(AnswerMax plus the request's size)"}},
		{name: "changes row", hostileSrc: true,
			answer: func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/src/_changes" || r.URL.Query().Get("feed") == "" {
					return false
				}
				filler(w, "application/json", `{"results":[{"seq":"1-a","id":"`, 'x', -1)
				return true
			},
			wantErr: engine.ErrChangesFeed, want: []string{"sent a row of more than 1048576 bytes (ChangesRowMax)"}},
		{name: "continuous changes row", hostileSrc: true, rep: engine.Replication{Continuous: true},
			answer: func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/src/_changes" || r.URL.Query().Get("feed") != "continuous" {
					return false
				}
				filler(w, "application/json", `{"seq":"1-a","id":"d","changes":[{"rev":"`, 'x', -1)
				return true
			},
			wantErr: engine.ErrChangesFeed, want: []string{"(ChangesRowMax)"}},
		{name: "open_revs part", hostileSrc: true,
			answer: func(w http.ResponseWriter, r *http.Request) bool {
				if !openRevsQuery(r) {
					return false
				}
				filler(w, `multipart/mixed; boundary="b"`, "--b\r\nContent-Type: application/json\r\n\r\n{\"_id\":\"", 'x', huge)
				return true
			},
			wantErr: engine.ErrOpenRevs, want: []string{"answered more than 67108864 bytes (DocMax)"}},
		{name: "open_revs drip", hostileSrc: true, rep: engine.Replication{ConnectionTimeout: 300 * time.Millisecond, RetriesPerRequest: 1},
			answer: func(w http.ResponseWriter, r *http.Request) bool {
				if !openRevsQuery(r) {
					return false
				}
				w.Header().Set("Content-Type", `multipart/mixed; boundary="b"`)
				for {
					if _, err := io.WriteString(w, " "); err != nil {
						return true
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return true
					case <-time.After(30 * time.Millisecond):
					}
				}
			},
			wantErr: engine.ErrOpenRevs, wantIs: []error{couch.ErrTimeout}, want: []string{"fewer than 1024 bytes"}},
		{name: "gzip bomb attachment", hostileSrc: true,
			answer: func(w http.ResponseWriter, r *http.Request) bool {
				if !openRevsQuery(r) {
					return false
				}
				doc := map[string]any{"_id": "with-att", "_rev": attRev,
					"_revisions": map[string]any{"start": 1, "ids": []string{strings.TrimPrefix(attRev, "1-")}},
					"_attachments": map[string]any{"a.txt": map[string]any{"content_type": "text/plain", "revpos": 1,
						"encoding": "gzip", "data": base64.StdEncoding.EncodeToString(bomb)}}}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode([]any{map[string]any{"ok": doc}})
				return true
			},
			// The target passes for a pouchdb-server, which gets
			// attachments decompressed.
			rep: engine.Replication{}, targetDoc: true,
			want: []string{"document with-att holds, decompressed, more than 67108864 bytes (DocMax)"}},
		{name: "_bulk_get result", hostileSrc: true, targetDoc: true, complete: true,
			answer: path("POST", "/src/_bulk_get", func(w http.ResponseWriter, r *http.Request) {
				filler(w, "application/json", `{"results":[{"id":"doc-00000000","docs":[{"ok":{"_id":"`, 'x', -1)
			})},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tgt := fmt.Sprintf("tgt%d", i)
			srv.CreateDB(t, tgt)
			if tc.targetDoc { // a revision of the source's, as a replication writes it
				doc := srv.GetDoc(t, "src", "doc-00000000", "revs=true")
				for _, r := range srv.BulkDocs(t, tgt, []map[string]any{doc}, false) {
					require.Empty(t, r.Error)
				}
			}
			answer := tc.answer
			if !tc.hostileSrc {
				// The target's paths are /tgt…: the proxy serves tgtN.
				answer = func(w http.ResponseWriter, r *http.Request) bool {
					r2 := r.Clone(r.Context())
					r2.URL.Path = strings.Replace(r.URL.Path, "/"+tgt, "/tgt", 1)
					return tc.answer(w, r2)
				}
			}
			if tc.name == "gzip bomb attachment" {
				inner := answer
				answer = func(w http.ResponseWriter, r *http.Request) bool {
					if r.Method == "GET" && strings.TrimSuffix(r.URL.Path, "/") == "/"+tgt {
						var info map[string]any
						require.Equal(t, 200, srv.Request(t, "GET", "/"+tgt, nil, &info))
						info["adapter"] = "leveldb" // a pouchdb-server
						w.Header().Set("Content-Type", "application/json")
						_ = json.NewEncoder(w).Encode(info)
						return true
					}
					return inner(w, r)
				}
			}
			h := startHostile(t, srv, answer)
			rep := tc.rep
			rep.Source, rep.Target = endpoint(t, srv.AuthDBURL("src")), endpoint(t, h.dbURL(tgt))
			if tc.hostileSrc || tc.name == "gzip bomb attachment" {
				rep.Source = endpoint(t, h.dbURL("src"))
			}
			err, peak := runWatched(t, rep)
			t.Logf("heap peak above the start: %d MiB (MemoryBound %d MiB)", peak>>20, engine.MemoryBound(rep)>>20)
			require.Positive(t, h.hits.Load(), "the hostile answer was asked for; the run: %v", err)
			if tc.complete {
				require.NoError(t, err)
				enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL(tgt))
				return
			}
			require.Error(t, err)
			wantIs := tc.wantIs
			if wantIs == nil {
				wantIs = []error{engine.ErrHTTP, couch.ErrBodyTooLarge}
			}
			for _, is := range wantIs {
				require.ErrorIs(t, err, is)
			}
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, err.Error(), couchtest.CouchPassword)
		})
	}
}

// TestHostilePeerAlone runs a replication whose source answers an
// open_revs fetch without end beside one between two honest databases:
// the first fails with DocMax named, the second completes, and the heap
// stays under the two runs' bounds.
func TestHostilePeerAlone(t *testing.T) {
	srv := startPeer(t, 300)
	srv.PutDoc(t, "src", map[string]any{"_id": "with-att", "_attachments": map[string]any{
		"a.txt": map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("hello"))}}})
	h := startHostile(t, srv, func(w http.ResponseWriter, r *http.Request) bool {
		if !openRevsQuery(r) {
			return false
		}
		filler(w, `multipart/mixed; boundary="b"`, "--b\r\nContent-Type: application/json\r\n\r\n{\"_id\":\"", 'x', -1)
		return true
	})
	bad := engine.Replication{Source: endpoint(t, h.dbURL("src")), Target: endpoint(t, srv.AuthDBURL("bad")), CreateTarget: true}
	good := srcTo(t, srv, "good", engine.Replication{CreateTarget: true})
	bound := engine.MemoryBound(bad) + engine.MemoryBound(good) + heapSlack
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	watch := watchHeap(bound, cancel)
	badRun := engine.Start(ctx, bad, engine.Options{ServerUUID: testUUID})
	goodRun := engine.Start(ctx, good, engine.Options{ServerUUID: testUUID})
	_, badErr := badRun.Wait()
	res, goodErr := goodRun.Wait()
	peak := watch.stop()
	require.LessOrEqual(t, int64(peak), bound, "the heap grew past the runs' MemoryBound: %d MiB", peak>>20)
	require.ErrorIs(t, badErr, engine.ErrOpenRevs)
	require.ErrorIs(t, badErr, couch.ErrBodyTooLarge)
	require.ErrorContains(t, badErr, "(DocMax)")
	require.NoError(t, goodErr)
	require.True(t, res.Completed)
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("good"))
}
