package engine_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
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
