package engine_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// The node's settings of its runs, against a real CouchDB 3.5.

// max_document_id_length: a document whose id is longer is not
// replicated, and counts in doc_write_failures, as CouchDB counts it.
func TestMaxDocIDLength(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	for _, id := range []string{"short", "exactly-16-bytes", "seventeen-bytes-x"} {
		srv.PutDoc(t, "src", map[string]any{"_id": id})
	}
	res := runOnce(t, srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true, MaxDocIDLength: 16}), engine.Options{})
	require.EqualValues(t, 1, res.Stats.DocWriteFailures)
	require.EqualValues(t, 2, res.Stats.DocsWritten)
	got := enginetest.Take(t, srv.AuthDBURL("tgt"))
	require.Contains(t, got, "short")
	require.Contains(t, got, "exactly-16-bytes")
	require.NotContains(t, got, "seventeen-bytes-x")
}

// missing_doc_retry_msec: a revision the feed listed but open_revs
// answered missing is asked for again after the run's MissingDocRetry,
// on its clock (a proxy answers the first open_revs of the document as
// missing, as a cluster whose copies are not yet in step would).
func TestMissingDocRetry(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	srv.PutDoc(t, "src", map[string]any{"_id": "x", "v": 1})
	srv.CreateDB(t, "tgt")
	srv.PutDoc(t, "tgt", map[string]any{"_id": "other"}) // not empty: documents are fetched, not taken from the feed
	clk := clockwork.NewFakeClock()
	var mu sync.Mutex
	var fetches []time.Time // the clock's time at each open_revs of x
	base, err := url.Parse(srv.URL())
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(base)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/src/x") && r.URL.Query().Has("open_revs") {
			mu.Lock()
			fetches = append(fetches, clk.Now())
			first := len(fetches) == 1
			mu.Unlock()
			if first {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`[{"missing":` + strings.Trim(r.URL.Query().Get("open_revs"), "[]") + `}]`))
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	name, pass := srv.Admin()
	via := "http://" + name + ":" + pass + "@" + strings.TrimPrefix(proxy.URL, "http://")

	const retry = 5 * time.Second // not the default's 2 s
	rep := engine.Replication{Source: endpoint(t, via+"/src"), Target: endpoint(t, srv.AuthDBURL("tgt")),
		DisableBulkGet: true, MissingDocRetry: retry}
	run := start(t, rep, engine.Options{Clock: clk})
	// Second by second, while the run waits on its checkpoint ticker and
	// on the retry.
	for {
		ctx, cancel := context.WithCancel(run.ctx)
		go func() {
			select {
			case <-run.Done():
			case <-ctx.Done():
			}
			cancel()
		}()
		err := clk.BlockUntilContext(ctx, 2)
		cancel()
		if err != nil {
			break
		}
		clk.Advance(time.Second)
	}
	res, err := run.Wait()
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Stats.DocsWritten)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, fetches, 2)
	require.Equal(t, retry, fetches[1].Sub(fetches[0]))
}

// The run's events, as CouchDB's couch_replicator stats count them:
// worker_processes workers started by a run that got through its setup,
// a setup that failed, the requests and answers of its clients.
func TestRunCounts(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 10)
	var mu sync.Mutex
	runs := map[engine.Count]int{}
	hosts := map[string]int{}
	opts := engine.Options{Count: func(c engine.Count) {
		mu.Lock()
		defer mu.Unlock()
		runs[c]++
	}}
	opts.Client.Count = func(host string, _ couch.Count) {
		mu.Lock()
		defer mu.Unlock()
		hosts[host]++
	}
	runOnce(t, srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true, WorkerProcesses: 3}), opts)
	missing := srcTo(t, srv, "tgt", engine.Replication{})
	missing.Source = endpoint(t, srv.AuthDBURL("nosuch"))
	_, err := start(t, missing, opts).Wait()
	require.ErrorIs(t, err, engine.ErrDBNotFound)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[engine.Count]int{engine.CountWorkerStarted: 3, engine.CountFailedStart: 1}, runs)
	u, err := url.Parse(srv.URL())
	require.NoError(t, err)
	require.Positive(t, hosts[u.Host], "%v", hosts)
}
