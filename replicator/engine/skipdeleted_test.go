package engine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// TestSkipDeleted: a replication with skip_deleted from a CouchDB 3.5
// database of 10,000 deletions and 50 live documents into a new one
// writes the live documents and no tombstone (without it, every
// tombstone); a later deletion of a document the target holds still
// replicates; its replication id is not the one without the option.
func TestSkipDeleted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	srv := couchtest.StartCouchDB(t)
	srv.CreateDB(t, "src")
	const dead, live = 10_000, 50
	for from := 0; from < dead; from += 2_000 {
		docs := make([]map[string]any, 0, 2_000)
		for i := from; i < from+2_000; i++ {
			docs = append(docs, map[string]any{"_id": fmt.Sprintf("gone-%05d", i), "n": i})
		}
		res := srv.BulkDocs(t, "src", docs, true)
		for i, r := range res {
			docs[i] = map[string]any{"_id": r.ID, "_rev": r.Rev, "_deleted": true}
		}
		srv.BulkDocs(t, "src", docs, true)
	}
	for i := range live {
		srv.PutDoc(t, "src", map[string]any{"_id": fmt.Sprintf("live-%02d", i), "n": i})
	}
	srv.CreateDB(t, "skipping")
	srv.CreateDB(t, "plain")

	skip := srcTo(t, srv, "skipping", engine.Replication{SkipDeleted: true})
	res := runOnce(t, skip, engine.Options{})
	require.True(t, res.Completed)
	info := srv.DBInfo(t, "skipping")
	require.EqualValues(t, live, info["doc_count"])
	require.EqualValues(t, 0, info["doc_del_count"], "no tombstone replicated")
	require.EqualValues(t, live, res.Stats.DocsWritten)

	res = runOnce(t, srcTo(t, srv, "plain", engine.Replication{}), engine.Options{})
	require.True(t, res.Completed)
	require.EqualValues(t, dead, srv.DBInfo(t, "plain")["doc_del_count"], "without it, every tombstone")

	// A deletion of a document the target holds replicates.
	doc := srv.GetDoc(t, "src", "live-07")
	require.Equal(t, 200, srv.Request(t, "DELETE", "/src/live-07?rev="+doc["_rev"].(string), nil, nil))
	res = runOnce(t, skip, engine.Options{})
	require.True(t, res.Completed)
	info = srv.DBInfo(t, "skipping")
	require.EqualValues(t, live-1, info["doc_count"])
	require.EqualValues(t, 1, info["doc_del_count"])

	with, _, err := engine.ReplicationID(skip, testUUID, "")
	require.NoError(t, err)
	skip.SkipDeleted = false
	without, _, err := engine.ReplicationID(skip, testUUID, "")
	require.NoError(t, err)
	require.NotEqual(t, with, without)
}
