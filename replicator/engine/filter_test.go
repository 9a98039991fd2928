package engine_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/stretchr/testify/require"
)

func TestFilters(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	fixture(t, srv, "src", 60, 2)
	src := enginetest.Take(t, srv.DBURL("src"))

	// expect returns the ids of source documents whose winning-ish body
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
			rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL(tgt)),
				CreateTarget: true, WorkerBatchSize: 7}
			tt.rep(&rep)
			runOnce(t, rep, engine.Options{})
			got := enginetest.Take(t, srv.DBURL(tgt))
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
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 450)
	srv.PutDoc(t, "src", map[string]any{"_id": "_design/app",
		"filters": map[string]any{"third": "function(doc) { return doc.n % 3 === 0; }"}})
	for _, tt := range []struct {
		name, filter string
		want         int64
	}{{"unfiltered", "", 451}, {"filtered", "app/third", 150}} {
		t.Run(tt.name, func(t *testing.T) {
			rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt-"+tt.name)),
				CreateTarget: true, Filter: tt.filter, WorkerBatchSize: 10, WorkerProcesses: 2}
			res := runOnce(t, rep, engine.Options{})
			require.Equal(t, tt.want, res.Stats.DocsWritten)
			require.True(t, res.Completed)
			_, lastSeq := srv.Changes(t, "src", "0")
			require.Equal(t, string(lastSeq), res.Stats.ThroughSeq)
		})
	}
}

// TestEmptyDocIDs checks that an empty doc_ids list replicates nothing.
func TestEmptyDocIDs(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 5)
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")),
		CreateTarget: true, DocIDs: []string{}}
	res := runOnce(t, rep, engine.Options{})
	require.Zero(t, res.Stats.DocsWritten)
	require.Empty(t, enginetest.Take(t, srv.DBURL("tgt")))
}
