package engine_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// TestOneShot replicates every kind of document once, then again with
// nothing to do, then back.
func TestOneShot(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	srv.CreateDB(t, "tgt")
	fixture(t, srv, "src", 2000, 1)
	want := enginetest.Take(t, srv.AuthDBURL("src"))
	leaves := 0
	for _, revs := range want {
		leaves += len(revs)
	}
	require.Greater(t, leaves, len(want), "the fixture has conflicts")

	rep := srcTo(t, srv, "tgt", engine.Replication{WorkerBatchSize: 100})
	res := runOnce(t, rep, engine.Options{})
	enginetest.RequireEqual(t, want, enginetest.Take(t, srv.AuthDBURL("tgt")))
	require.True(t, res.OK)
	require.True(t, res.Completed)
	require.Equal(t, int64(leaves), res.Stats.RevisionsChecked)
	require.Equal(t, int64(leaves), res.Stats.MissingRevisionsFound)
	require.Equal(t, int64(leaves), res.Stats.DocsRead)
	require.Equal(t, int64(leaves), res.Stats.DocsWritten)
	require.Zero(t, res.Stats.DocWriteFailures)
	require.Len(t, res.History, 1)
	require.Equal(t, res.SessionID, res.History[0].SessionID)
	require.Equal(t, engine.ReplicationIDVersion, res.ReplicationIDVersion)
	_, lastSeq := srv.Changes(t, "src", "0")
	require.JSONEq(t, string(lastSeq), string(res.SourceLastSeq))
	require.Equal(t, seqText(lastSeq), res.Stats.ThroughSeq)
	require.Equal(t, seqText(lastSeq), res.Stats.CheckpointedSourceSeq)
	require.NotNil(t, res.Stats.ChangesPending)
	require.Zero(t, *res.Stats.ChangesPending)

	// Both sides carry the same checkpoint document.
	base, _, err := engine.ReplicationID(rep, testUUID, "")
	require.NoError(t, err)
	srcLog := srv.GetDoc(t, "src", "_local/"+base)
	tgtLog := srv.GetDoc(t, "tgt", "_local/"+base)
	require.NotNil(t, srcLog)
	delete(srcLog, "_rev")
	delete(tgtLog, "_rev")
	require.Equal(t, srcLog, tgtLog)
	require.Equal(t, res.SessionID, srcLog["session_id"])

	// Nothing to do the second time.
	again := runOnce(t, rep, engine.Options{})
	require.True(t, again.NoChanges)
	require.Equal(t, res.Stats.DocsWritten, again.Stats.DocsWritten, "counters carry over")

	// Attachments the other way: new and updated attachment documents on
	// the target replicate back to the source.
	rev := srv.GetDoc(t, "tgt", "att-1")["_rev"].(string)
	srv.PutDoc(t, "tgt", map[string]any{"_id": "att-1", "_rev": rev, "v": 2, "_attachments": map[string]any{
		"new.txt": map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("from b"))},
	}})
	srv.PutDoc(t, "tgt", map[string]any{"_id": "from-b", "_attachments": map[string]any{
		"x.json": map[string]any{"content_type": "application/json", "data": base64.StdEncoding.EncodeToString([]byte(`{"a":1}`))},
	}})
	back := engine.Replication{Source: endpoint(t, srv.AuthDBURL("tgt")), Target: endpoint(t, srv.AuthDBURL("src"))}
	res = runOnce(t, back, engine.Options{})
	require.Equal(t, int64(2), res.Stats.DocsWritten)
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("tgt"))
}

// TestWriteFailures checks that documents the target refuses (a
// validate_doc_update throwing forbidden / unauthorized) are counted in
// doc_write_failures and skipped while the rest is replicated.
func TestWriteFailures(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 50)
	srv.CreateDB(t, "tgt")
	srv.PutDoc(t, "tgt", map[string]any{"_id": "_design/guard", "validate_doc_update": `function(doc) {
		if (doc.n === 7) { throw({forbidden: "no sevens"}); }
		if (doc.n === 8) { throw({unauthorized: "no eights"}); }
	}`})
	res := runOnce(t, srcTo(t, srv, "tgt", engine.Replication{WorkerBatchSize: 20}), engine.Options{})
	require.Equal(t, int64(2), res.Stats.DocWriteFailures)
	require.Equal(t, int64(48), res.Stats.DocsWritten)
	require.Nil(t, srv.GetDoc(t, "tgt", "doc-00000007"))
	require.NotNil(t, srv.GetDoc(t, "tgt", "doc-00000009"))
	require.Equal(t, int64(2), res.History[0].DocWriteFailures)
}

// TestOptions replicates with each optional behaviour of a specification.
func TestOptions(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	fixture(t, srv, "src", 40, 4)
	_, lastSeq := srv.Changes(t, "src", "0")

	t.Run("winning_revs_only", func(t *testing.T) {
		runOnce(t, srcTo(t, srv, "winners", engine.Replication{CreateTarget: true, WinningRevsOnly: true}), engine.Options{})
		got := enginetest.Take(t, srv.AuthDBURL("winners"))
		src := enginetest.Take(t, srv.AuthDBURL("src"))
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
		res := runOnce(t, srcTo(t, srv, "since", engine.Replication{CreateTarget: true, SinceSeq: since}), engine.Options{})
		require.JSONEq(t, string(since), string(res.StartSeq))
		require.Len(t, enginetest.Take(t, srv.AuthDBURL("since")), 4)
	})
	t.Run("use_checkpoints false", func(t *testing.T) {
		rep := srcTo(t, srv, "nockpt", engine.Replication{CreateTarget: true, DisableCheckpoints: true})
		res := runOnce(t, rep, engine.Options{})
		require.NotNil(t, res.UseCheckpoints)
		require.False(t, *res.UseCheckpoints)
		base, _, err := engine.ReplicationID(rep, testUUID, "")
		require.NoError(t, err)
		require.Nil(t, srv.GetDoc(t, "src", "_local/"+base))
		require.Nil(t, srv.GetDoc(t, "nockpt", "_local/"+base))
		enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("nockpt"))
		require.Equal(t, seqText(lastSeq), res.Stats.ThroughSeq)
	})
	t.Run("proxy", func(t *testing.T) {
		var hits atomic.Int64
		proxy := httptest.NewServer(&httputil.ReverseProxy{Director: func(r *http.Request) { hits.Add(1) }})
		t.Cleanup(proxy.Close)
		u, err := url.Parse(proxy.URL)
		require.NoError(t, err)
		runOnce(t, srcTo(t, srv, "proxied", engine.Replication{CreateTarget: true, SourceProxy: u, TargetProxy: u}), engine.Options{})
		require.Positive(t, hits.Load())
		enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("proxied"))
	})
	t.Run("doc_ids checkpoint fields", func(t *testing.T) {
		rep := srcTo(t, srv, "ids", engine.Replication{CreateTarget: true, DocIDs: []string{"doc-000001"}, DisableBulkGet: true})
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

func TestFilters(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	fixture(t, srv, "src", 60, 2)
	src := enginetest.Take(t, srv.AuthDBURL("src"))

	// ids returns the ids of source documents whose winning-ish body
	// matches keep (any leaf matching is enough for the all-leaves filters).
	ids := func(keep func(id string, n float64) bool) []string {
		var out []string
		for id, revs := range src {
			for _, r := range revs {
				num, ok := r.Body["n"].(json.Number)
				if !ok {
					continue
				}
				if n, _ := num.Float64(); keep(id, n) {
					out = append(out, id)
					break
				}
			}
		}
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name string
		rep  func(*engine.Replication)
		want []string
	}{
		{
			"doc_ids",
			func(r *engine.Replication) { r.DocIDs = []string{"doc-000003", "doc-000010", "att-1", "nope"} },
			[]string{"att-1", "doc-000003", "doc-000010"},
		},
		{
			"selector",
			func(r *engine.Replication) { r.Selector = json.RawMessage(`{"n":{"$lt":5}}`) },
			ids(func(_ string, n float64) bool { return n < 5 }),
		},
		{
			"ddoc filter with query_params",
			func(r *engine.Replication) {
				r.Filter = "app/even"
				r.QueryParams = json.RawMessage(`{"max":"20"}`)
			},
			ids(func(_ string, n float64) bool { return int(n)%2 == 0 && n < 20 }),
		},
		{
			"view",
			func(r *engine.Replication) {
				r.Filter = "_view"
				r.QueryParams = json.RawMessage(`{"view":"app/small"}`)
			},
			ids(func(_ string, n float64) bool { return n < 20 }),
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tgt := fmt.Sprintf("tgt%d", i)
			rep := srcTo(t, srv, tgt, engine.Replication{CreateTarget: true, WorkerBatchSize: 7})
			tt.rep(&rep)
			runOnce(t, rep, engine.Options{})
			got := enginetest.Take(t, srv.AuthDBURL(tgt))
			want := enginetest.Snapshot{}
			for _, id := range tt.want {
				want[id] = src[id]
			}
			if len(tt.want) == 0 {
				t.Fatal("test expects no documents")
			}
			enginetest.RequireEqual(t, want, got)
		})
	}
}

// TestPagedFeeds replicates a pouchdb-server source larger than one page of
// its one-shot feed, unfiltered and filtered (the filter must not end the
// paging early).
func TestPagedFeeds(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 450)
	srv.PutDoc(t, "src", map[string]any{"_id": "_design/app",
		"filters": map[string]any{"third": "function(doc) { return doc.n % 3 === 0; }"}})
	for _, tt := range []struct {
		name, filter string
		want         int64
	}{{"unfiltered", "", 451}, {"filtered", "app/third", 150}} {
		t.Run(tt.name, func(t *testing.T) {
			rep := srcTo(t, srv, "tgt-"+tt.name, engine.Replication{CreateTarget: true, Filter: tt.filter,
				WorkerBatchSize: 10, WorkerProcesses: 2})
			res := runOnce(t, rep, engine.Options{})
			require.Equal(t, tt.want, res.Stats.DocsWritten)
			require.True(t, res.Completed)
			_, lastSeq := srv.Changes(t, "src", "0")
			require.Equal(t, seqText(lastSeq), res.Stats.ThroughSeq)
		})
	}
}

// TestEmptyDocIDs checks that an empty doc_ids list replicates nothing,
// and that a run that replicated no change answers no_changes, as
// CouchDB's does: also when its filter passed none of the source's
// changes, whose feed's last_seq its checkpoint moved to (which CouchDB's
// does not).
func TestEmptyDocIDs(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 5)
	res := runOnce(t, srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true, DocIDs: []string{}}), engine.Options{})
	require.Zero(t, res.Stats.DocsWritten)
	require.True(t, res.NoChanges)
	require.Empty(t, enginetest.Take(t, srv.AuthDBURL("tgt")))

	missing := srcTo(t, srv, "tgt", engine.Replication{DocIDs: []string{"nope"}})
	res = runOnce(t, missing, engine.Options{})
	require.True(t, res.NoChanges, "nothing passed the filter")
	base, _, err := engine.ReplicationID(missing, testUUID, "")
	require.NoError(t, err)
	require.NotNil(t, srv.GetDoc(t, "src", "_local/"+base), "checkpointed past the filtered changes")

	found := srcTo(t, srv, "tgt", engine.Replication{DocIDs: []string{"nope", "doc-00000001"}})
	res = runOnce(t, found, engine.Options{})
	require.False(t, res.NoChanges)
	require.EqualValues(t, 1, res.Stats.DocsWritten)
	res = runOnce(t, found, engine.Options{})
	require.True(t, res.NoChanges, "nothing new")
}
