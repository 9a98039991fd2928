package engine_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// gatedTarget is a proxy to a peer that holds every _bulk_docs until the
// test releases it, and counts them.
type gatedTarget struct {
	*httptest.Server
	arrived chan struct{} // a _bulk_docs arrived (one send per request)
	release chan struct{} // closed: held requests go on
	writes  atomic.Int64
}

func newGatedTarget(t *testing.T, peer string) *gatedTarget {
	t.Helper()
	u, err := url.Parse(peer)
	require.NoError(t, err)
	g := &gatedTarget{arrived: make(chan struct{}, 100), release: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(u)
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk_docs") {
			g.writes.Add(1)
			g.arrived <- struct{}{}
			<-g.release
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
		g.Close()
	})
	return g
}

// startGated starts a continuous replication of docs documents from a
// CouchDB into its database tgt through a gatedTarget, and waits until its
// first _bulk_docs is held in flight.
func startGated(t *testing.T, docs int) (*testRun, *gatedTarget, *couchtest.Server) {
	t.Helper()
	srv := startPeer(t, docs)
	srv.CreateDB(t, "tgt")
	gate := newGatedTarget(t, srv.URL())
	name, pass := srv.Admin()
	rep := srcTo(t, srv, "tgt", engine.Replication{Continuous: true, WorkerProcesses: 1, WorkerBatchSize: 50})
	rep.Target = endpoint(t, strings.Replace(gate.URL, "://", "://"+name+":"+pass+"@", 1)+"/tgt")
	run := start(t, rep, engine.Options{})
	<-gate.arrived
	return run, gate, srv
}

// Halt cuts the feed and the reads at once and starts no write after it
// is called, but lets a _bulk_docs in flight finish: the counters then
// count exactly what the target took, and no final checkpoint is written.
func TestHaltLetsTheWriteInFlightFinish(t *testing.T) {
	run, gate, srv := startGated(t, 300) // its first _bulk_docs in flight
	halted := make(chan error, 1)
	go func() { halted <- run.Halt(context.Background()) }()
	select {
	case err := <-halted:
		t.Fatalf("Halt returned while a write was in flight: %v", err)
	case <-run.Done():
		t.Fatal("the run ended while a write was in flight")
	default:
	}
	close(gate.release)
	err := <-halted
	require.ErrorIs(t, err, engine.ErrHalted)
	_, werr := run.Wait()
	require.ErrorIs(t, werr, engine.ErrHalted)

	require.Equal(t, int64(1), gate.writes.Load(), "no write starts after Halt")
	written := run.Progress().DocsWritten
	require.Positive(t, written, "the write in flight is counted")
	require.Len(t, srv.AllDocs(t, "tgt", false), int(written), "the counters are what the target took")
}

// Halt's context bounds the wait for the writes in flight: a target that
// never answers is cut when it ends.
func TestHaltContextCutsAWriteThatHangs(t *testing.T) {
	run, _, _ := startGated(t, 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, run.Halt(ctx), engine.ErrHalted)
	require.Zero(t, run.Progress().DocsWritten)
}
