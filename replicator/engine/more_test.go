package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/stretchr/testify/require"
)

// TestWriteFailures checks that documents the target refuses (a
// validate_doc_update throwing forbidden / unauthorized) are counted in
// doc_write_failures and skipped while the rest is replicated.
func TestWriteFailures(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.CreateDB(t, "tgt")
	srv.AddDocs(t, "src", 0, 50)
	srv.PutDoc(t, "tgt", map[string]any{"_id": "_design/guard", "validate_doc_update": `function(doc) {
		if (doc.n === 7) { throw({forbidden: "no sevens"}); }
		if (doc.n === 8) { throw({unauthorized: "no eights"}); }
	}`})
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")), WorkerBatchSize: 20}
	res := runOnce(t, rep, engine.Options{})
	require.Equal(t, int64(2), res.Stats.DocWriteFailures)
	require.Equal(t, int64(48), res.Stats.DocsWritten)
	require.Nil(t, srv.GetDoc(t, "tgt", "doc-00000007"))
	require.NotNil(t, srv.GetDoc(t, "tgt", "doc-00000009"))
	require.Equal(t, int64(2), res.History[0].DocWriteFailures)
}

func TestOptions(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	fixture(t, srv, "src", 40, 4)
	_, lastSeq := srv.Changes(t, "src", "0")

	t.Run("winning_revs_only", func(t *testing.T) {
		rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("winners")),
			CreateTarget: true, WinningRevsOnly: true}
		runOnce(t, rep, engine.Options{})
		got := enginetest.Take(t, srv.DBURL("winners"))
		src := enginetest.Take(t, srv.DBURL("src"))
		require.Len(t, got, len(src))
		for id, revs := range got {
			require.Len(t, revs, 1, id)
			winner := srv.GetDoc(t, "src", id, "revs=true")
			if winner == nil { // deleted winner
				continue
			}
			_, ok := revs[winner["_rev"].(string)]
			require.True(t, ok, "%s: the winner is replicated", id)
		}
	})
	t.Run("since_seq", func(t *testing.T) {
		rows, _ := srv.Changes(t, "src", "0")
		since := rows[len(rows)-5].Seq
		rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("since")),
			CreateTarget: true, SinceSeq: since}
		res := runOnce(t, rep, engine.Options{})
		require.JSONEq(t, string(since), string(res.StartSeq))
		require.Len(t, enginetest.Take(t, srv.DBURL("since")), 4)
	})
	t.Run("use_checkpoints false", func(t *testing.T) {
		rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("nockpt")),
			CreateTarget: true, DisableCheckpoints: true}
		res := runOnce(t, rep, engine.Options{})
		require.NotNil(t, res.UseCheckpoints)
		require.False(t, *res.UseCheckpoints)
		base, _, err := engine.ReplicationID(rep, testUUID, "")
		require.NoError(t, err)
		require.Nil(t, srv.GetDoc(t, "src", "_local/"+base))
		require.Nil(t, srv.GetDoc(t, "nockpt", "_local/"+base))
		enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("nockpt"))
		require.Equal(t, string(lastSeq), res.Stats.ThroughSeq)
	})
	t.Run("proxy", func(t *testing.T) {
		var hits atomic.Int64
		proxy := httptest.NewServer(&httputil.ReverseProxy{Director: func(r *http.Request) { hits.Add(1) }})
		t.Cleanup(proxy.Close)
		u, err := url.Parse(proxy.URL)
		require.NoError(t, err)
		rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("proxied")),
			CreateTarget: true, SourceProxy: u, TargetProxy: u}
		runOnce(t, rep, engine.Options{})
		require.Positive(t, hits.Load())
		enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("proxied"))
	})
	t.Run("doc_ids checkpoint fields", func(t *testing.T) {
		rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("ids")),
			CreateTarget: true, DocIDs: []string{"doc-000001"}, DisableBulkGet: true}
		res := runOnce(t, rep, engine.Options{})
		require.Positive(t, res.Stats.DocsWritten)
		require.Zero(t, res.Stats.BulkGetAttempts)
		base, _, err := engine.ReplicationID(rep, testUUID, "")
		require.NoError(t, err)
		log := srv.GetDoc(t, "ids", "_local/"+base)
		require.NotNil(t, log)
		require.Contains(t, log, "start_time")
		require.Equal(t, float64(res.Stats.DocsWritten), log["docs_written"])
	})
}

// TestStopAndCancel checks the lifecycle edges: Stop after the end, Stop
// twice, cancelling the context, and that no goroutines stay behind.
func TestStopAndCancel(t *testing.T) {
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 20)
	before := runtime.NumGoroutine()
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")),
		CreateTarget: true, Continuous: true}

	ctx, cancel := context.WithCancel(context.Background())
	run := engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID})
	cancel()
	_, err := run.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, run.Stop(context.Background()), context.Canceled, "Stop after the end returns the run's error")

	// Stopped at once: during its setup (ErrStopped) or just after it (nil).
	run = engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID})
	err = run.Stop(context.Background())
	if err != nil {
		require.ErrorIs(t, err, engine.ErrStopped)
	}
	require.Equal(t, err, run.Stop(context.Background()))
	_, werr := run.Wait()
	require.Equal(t, err, werr)

	// Stopped once set up: nil.
	run = engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID})
	for {
		if _, _, ok := run.ID(); ok {
			break
		}
		select {
		case <-run.Done():
			_, err := run.Wait()
			t.Fatalf("the run ended: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, run.Stop(context.Background()))
	require.NoError(t, run.Stop(context.Background()))
	_, err = run.Wait()
	require.NoError(t, err)

	// An already expired stop context aborts without a final checkpoint.
	run = engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID})
	expired, cancelExpired := context.WithCancel(context.Background())
	cancelExpired()
	err = run.Stop(expired)
	if err != nil {
		require.ErrorIs(t, err, engine.ErrStopped)
	}

	// Goroutines settle back (idle HTTP connections are closed by the run).
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before+2, "goroutines left behind")
	_ = json.RawMessage{}
}

// TestMaxBackoff checks that a peer answering nothing but 429 ends the run
// with ErrMaxBackoff once the shared limiter reaches its ceiling.
func TestMaxBackoff(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 10)
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{Seed: 1, Rate429: 1})
	limiter, err := couch.NewRateLimiter(couch.RateLimiterConfig{MaxInterval: 200 * time.Millisecond, MinUpdateInterval: time.Millisecond})
	require.NoError(t, err)
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, proxy.URL()+"/tgt")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID, Limiter: limiter}).Wait()
	require.ErrorIs(t, err, engine.ErrMaxBackoff)
}

func TestEmptyDocIDs(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 5)
	rep, err := engine.ParseReplication([]byte(`{"source": "` + srv.DBURL("src") + `", "target": "` + srv.DBURL("tgt") + `", "create_target": true, "doc_ids": []}`))
	require.NoError(t, err)
	res := runOnce(t, rep, engine.Options{})
	require.Zero(t, res.Stats.DocsWritten)
	require.Empty(t, enginetest.Take(t, srv.DBURL("tgt")))
}
