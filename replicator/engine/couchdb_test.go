package engine_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
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

// TestReplicationIDsAsCouchDB is the golden test of replication ids: a
// real CouchDB 3.5, given a known server UUID, starts each specification
// (POST /_replicate, continuous, which answers its _local_id at once) and
// fdbrep computes the id of the same body, parsed by the replicator's
// parser as a document or request is, with the same UUID. Where fdbrep
// keeps its own id (since_seq, which CouchDB 3.5 does not hash; a user
// name or header names fdbrep cannot tell were written so), CouchDB's is
// the first of CheckpointIDs, under which a run takes its checkpoints
// over.
func TestReplicationIDsAsCouchDB(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	const uuid = "5f0c1e0a9b8d4c7e8f6a5b4c3d2e1f00"
	require.Equal(t, 200, srv.Request(t, "PUT", "/_node/_local/_config/couchdb/uuid", []byte(`"`+uuid+`"`), nil))
	srv.PutDoc(t, "src", map[string]any{"_id": "_design/d", "filters": map[string]any{
		"lines": "function(doc, req) {\n  return doc.n > 1;\n}\n",
		"one":   "  function(doc) { return true; }\n",
	}})
	src, tgt := srv.AuthDBURL("src"), srv.AuthDBURL("tgt")
	plainSrc := srv.DBURL("src")
	host := strings.TrimPrefix(srv.URL(), "http://")
	basic := base64.StdEncoding.EncodeToString([]byte("admin:pass"))
	q := strconv.Quote
	for _, tc := range []struct {
		name string
		body string // the members besides source and target, or the whole body when it has "source"
		// alternate: CouchDB's id is not fdbrep's but the first of
		// CheckpointIDs.
		alternate bool
	}{
		{name: "plain"},
		{name: "create_target", body: `"create_target": true`},
		{name: "doc_ids", body: `"doc_ids": ["b", "a", "_design%2Fd"]`},
		{name: "_view filter", body: `"filter": "_view", "query_params": {"view": "d/v", "b": 1, "a": [1, {"y": 2, "x": 1}]}`},
		{name: "user filter of several lines", body: `"filter": "d/lines", "query_params": {"b": "2", "a": "1"}`},
		{name: "user filter of one line", body: `"filter": "d/one"`},
		{name: "winning_revs_only", body: `"winning_revs_only": true`},
		{name: "since_seq", body: `"since_seq": "3-abc"`, alternate: true},
		{name: "selector", body: `"selector": {"type": "a", "n": {"$gt": 1, "$lt": 9}}`},
		{name: "selector $not $nor $or", body: `"selector": {"$not": {"a": {"$in": [1, 2]}}, "$nor": [{"b": 1}, {"c": {"$exists": true}}], "$or": [{"d": {"e": {"$size": 2}}}, {"f": {"$regex": "^x"}}]}`},
		{name: "selector $elemMatch", body: `"selector": {"tags": {"$elemMatch": {"$gte": 80, "$lt": 85}}, "g": {"$all": [1]}, "h": {"$mod": [2, 0]}}`},
		{name: "selector with object values", body: `"selector": {"a": {"z": 1, "y": {"$ne": {"q": 1, "p": 2}}}, "b": null, "c": 1.5, "d": {}}`},
		{name: "selector with a repeated key", body: `"selector": {"a": 1, "b": 2, "a": 3}`},
		{name: "selector $text", body: `"selector": {"$text": "word", "x": {"$beginsWith": "y"}}`},
		{name: "headers", body: `"source": {"url": ` + q(src) + `, "headers": {"X-Trace": "1", "Accept": "application/json", "User-Agent": "me"}}, "target": ` + q(tgt)},
		{name: "lower-case headers", body: `"source": {"url": ` + q(src) + `, "headers": {"x-api-key": "k"}}, "target": ` + q(tgt), alternate: true},
		{name: "auth.basic", body: `"source": {"url": ` + q(plainSrc) + `, "auth": {"basic": {"username": "admin", "password": "pass"}}}, "target": ` + q(tgt)},
		{name: "basic header", body: `"source": {"url": ` + q(plainSrc) + `, "headers": {"Authorization": "Basic ` + basic + `"}}, "target": ` + q(tgt)},
		{name: "auth.basic over user info", body: `"source": {"url": ` + q("http://other:pw@"+host+"/src") + `, "auth": {"basic": {"username": "admin", "password": "pass"}}}, "target": ` + q(tgt)},
		{name: "user info percent-encoded", body: `"source": ` + q("http://bob%40example.com:pw@"+host+"/src") + `, "target": ` + q(tgt), alternate: true},
		{name: "https", body: `"source": "https://admin:pass@127.0.0.1/src", "target": "https://127.0.0.1:443/tgt"`},
		{name: "https with a port", body: `"source": "https://127.0.0.1:6984/src", "target": "https://127.0.0.1:5984/tgt"`},
		{name: "http ports", body: `"source": "http://127.0.0.1:5984/src", "target": "http://127.0.0.1:443/tgt?q=1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if !strings.Contains(body, `"source"`) {
				body = strings.TrimSuffix(`"source": `+q(src)+`, "target": `+q(tgt)+`, `+body, ", ")
			}
			body = `{` + body + `, "continuous": true}`
			var res struct {
				LocalID string `json:"_local_id"`
				Error   string `json:"error"`
				Reason  string `json:"reason"`
			}
			st := srv.Request(t, "POST", "/_replicate", []byte(body), &res)
			// (Not cancelled: a cancel waits for the job to stop, seconds
			// for an endpoint that is not there; the server goes with the
			// test.)
			require.Equal(t, 202, st, "%s: %s %s", body, res.Error, res.Reason)
			spec, err := replicator.ParseSpec(json.RawMessage(body))
			require.NoError(t, err)
			rep, err := spec.Replication()
			require.NoError(t, err)
			code := ""
			if rep.Filter != "" && !strings.HasPrefix(rep.Filter, "_") {
				code, err = engine.FetchFilterCode(context.Background(), rep, engine.Options{ServerUUID: uuid})
				require.NoError(t, err)
			}
			base, full, err := engine.ReplicationID(rep, uuid, code)
			require.NoError(t, err)
			couchBase, suffix, _ := strings.Cut(res.LocalID, "+")
			if !tc.alternate {
				require.Equal(t, res.LocalID, full, body)
				return
			}
			require.NotEqual(t, couchBase, base, "fdbrep's own id")
			require.Equal(t, "continuous", suffix)
			others, err := engine.CheckpointIDs(rep, uuid, code)
			require.NoError(t, err)
			require.NotEmpty(t, others)
			require.Equal(t, couchBase, others[0], "CouchDB's id is the first looked under")
		})
	}
}

// TestResumesFromCouchDBCheckpoints: replications CouchDB 3.5 ran, with
// checkpoints, go on in fdbrep from those checkpoints when fdbrep has
// CouchDB's server UUID: a plain one, whose id is the same (only the
// changes since are checked), and a since_seq one, whose id CouchDB 3.5
// computes without since_seq (its checkpoint is taken over from that id,
// and the next is written under fdbrep's). The dry run (FindCheckpoint)
// says so before. (fdbrep's earlier ids started the since_seq one again
// from since_seq.)
func TestResumesFromCouchDBCheckpoints(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 200)
	srv.NoReplicatorJitter(t)
	const uuid = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
	require.Equal(t, 200, srv.Request(t, "PUT", "/_node/_local/_config/couchdb/uuid", []byte(`"`+uuid+`"`), nil))
	changes, _ := srv.Changes(t, "src", "0")
	sinceSeq := changes[99].Seq // the 100th change
	var couch []map[string]any
	for _, body := range []map[string]any{
		{"source": srv.AuthDBURL("src"), "target": srv.AuthDBURL("tgt"), "create_target": true},
		{"source": srv.AuthDBURL("src"), "target": srv.AuthDBURL("tgt2"), "create_target": true, "since_seq": sinceSeq},
	} {
		var res map[string]any
		require.Equal(t, 200, srv.Request(t, "POST", "/_replicate", body, &res), "%v", res)
		couch = append(couch, res)
	}
	checked := func(res map[string]any) int64 {
		return int64(res["history"].([]any)[0].(map[string]any)["missing_checked"].(float64))
	}
	require.EqualValues(t, 200, checked(couch[0]))
	require.EqualValues(t, 100, checked(couch[1]))
	srv.AddDocs(t, "src", 200, 10)

	for i, tc := range []struct {
		rep      engine.Replication
		migrated bool
	}{
		{srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true}), false},
		{srcTo(t, srv, "tgt2", engine.Replication{CreateTarget: true, SinceSeq: sinceSeq}), true},
	} {
		base, _, err := engine.ReplicationID(tc.rep, uuid, "")
		require.NoError(t, err)
		probe, err := engine.FindCheckpoint(context.Background(), tc.rep, engine.Options{ServerUUID: uuid})
		require.NoError(t, err)
		require.True(t, probe.Start.Found, "the dry run finds CouchDB's checkpoint")
		require.Equal(t, couch[i]["source_last_seq"], probe.Start.Since)
		require.True(t, probe.OnSource && probe.OnTarget)

		r := start(t, tc.rep, engine.Options{ServerUUID: uuid})
		res, err := r.Wait()
		require.NoError(t, err)
		started := r.Sync().Checkpoint
		require.NotNil(t, started)
		require.True(t, started.Found)
		require.Equal(t, probe.Start, *started)
		require.Equal(t, couch[i]["source_last_seq"], seqText(res.StartSeq), "from CouchDB's checkpoint")
		require.EqualValues(t, 10, res.Stats.RevisionsChecked-checked(couch[i]), "only the changes since CouchDB's checkpoint")
		require.NotNil(t, srv.GetDoc(t, "src", "_local/"+base), "the next checkpoint is under fdbrep's id")
		if tc.migrated {
			require.NotEqual(t, base, started.MigratedFrom)
			require.NotEmpty(t, started.MigratedFrom)
		} else {
			require.Empty(t, started.MigratedFrom)
		}
	}
}
