package engine_test

import (
	"testing"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
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
