package engine_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/stretchr/testify/require"
)

// TestOptions replicates with each optional behaviour of a specification.
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
