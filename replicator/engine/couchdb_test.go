package engine_test

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// What a real CouchDB does that pouchdb-server does not: documents
// fetched with _bulk_get, a large attachment, a document the target
// refuses with 413 (over its max_document_size: counted in
// doc_write_failures, the rest written), and a target reached as a
// member, not an admin, through a _session cookie (its _local checkpoint
// written all the same).
func TestRealCouchDB(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 200)
	big := strings.Repeat("x", 300_000)
	srv.PutDoc(t, "src", map[string]any{"_id": "big", "text": big})
	att := make([]byte, 1<<20)
	for i := range att {
		att[i] = byte(i * 7)
	}
	srv.PutDoc(t, "src", map[string]any{"_id": "att", "_attachments": map[string]any{
		"blob.bin": map[string]any{"content_type": "application/octet-stream", "data": base64.StdEncoding.EncodeToString(att)}}})

	// The target: documents up to 100 kB, writable by its member "rep".
	srv.CreateDB(t, "tgt")
	require.Equal(t, 200, srv.Request(t, "PUT", "/_node/_local/_config/couchdb/max_document_size", []byte(`"100000"`), nil))
	t.Cleanup(func() { srv.Request(t, "DELETE", "/_node/_local/_config/couchdb/max_document_size", nil, nil) })
	srv.AddUser(t, "rep", "rep-pw")
	srv.SetSecurity(t, "tgt", map[string]any{"members": map[string]any{"names": []string{"rep"}}})

	tgt, err := url.Parse(srv.DBURL("tgt"))
	require.NoError(t, err)
	tgt.User = url.UserPassword("rep", "rep-pw")
	rep := engine.Replication{Source: endpoint(t, srv.AuthDBURL("src")), Target: endpoint(t, tgt.String()), WorkerBatchSize: 50}
	res := runOnce(t, rep, engine.Options{Client: engine.ClientSettings{Auth: couch.AuthSession}})

	require.True(t, res.Completed)
	require.EqualValues(t, 202, res.Stats.DocsRead)
	require.EqualValues(t, 1, res.Stats.DocWriteFailures, "the document over max_document_size")
	require.EqualValues(t, 201, res.Stats.DocsWritten)
	require.Positive(t, res.Stats.BulkGetAttempts, "fetched with _bulk_get")
	require.Nil(t, srv.GetDoc(t, "tgt", "big"))
	got := srv.GetDoc(t, "tgt", "att", "attachments=true")
	require.NotNil(t, got)
	data := got["_attachments"].(map[string]any)["blob.bin"].(map[string]any)["data"].(string)
	require.Equal(t, base64.StdEncoding.EncodeToString(att), data, "the attachment, byte for byte")
	// The checkpoint, written as the member on the target.
	base, _, err := engine.ReplicationID(rep, testUUID, "")
	require.NoError(t, err)
	require.NotNil(t, srv.GetDoc(t, "tgt", "_local/"+base), fmt.Sprintf("checkpoint %s on the target", base))
	require.NotNil(t, srv.GetDoc(t, "src", "_local/"+base))
}

// TestDocIDsReplicationIDAsCouchDB: CouchDB's own replicator gives
// doc_ids replications the ids ReplicationID computes: an empty list its
// own id (not the unfiltered replication's), and ids percent-encoded, with
// + for a space, repeated or unsorted, decoded as CouchDB decodes them.
func TestDocIDsReplicationIDAsCouchDB(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	var root struct {
		UUID string `json:"uuid"`
	}
	require.Equal(t, 200, srv.Request(t, "GET", "/", nil, &root))
	require.NotEmpty(t, root.UUID)
	seen := map[string][]string{}
	for _, ids := range [][]string{nil, {}, {"_design%2Ffoo", "8"}, {"8", "_design/foo", "8"}, {"a+b", "a%20b"}, {"%zz%41", "100%"}} {
		body := map[string]any{"source": srv.AuthDBURL("src"), "target": srv.AuthDBURL("tgt"), "continuous": true}
		if ids != nil {
			body["doc_ids"] = ids
		}
		var res struct {
			LocalID string `json:"_local_id"`
		}
		require.Equal(t, 202, srv.Request(t, "POST", "/_replicate", body, &res))
		_, full, err := engine.ReplicationID(srcTo(t, srv, "tgt", engine.Replication{Continuous: true, DocIDs: ids}), root.UUID, "")
		require.NoError(t, err)
		require.Equal(t, res.LocalID, full, "doc_ids %q", ids)
		if prev, ok := seen[full]; ok {
			require.Equal(t, []string{"_design%2Ffoo", "8"}, prev, "only the same ids share an id: %q", ids)
		}
		seen[full] = ids
	}
	require.Len(t, seen, 5)
}
