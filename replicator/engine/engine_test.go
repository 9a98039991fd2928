package engine_test

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/stretchr/testify/require"
)

const testUUID = "0123456789abcdef0123456789abcdef"

func hash(s string) string {
	h := md5.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// fixture fills db with n documents of every kind the engine must carry:
// several revisions, deletions, conflicts (two or three leaves, some
// deleted), design documents and attachments. It returns the number of
// leaf revisions written.
func fixture(t *testing.T, srv *couchtest.Server, db string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var docs []map[string]any
	flush := func() {
		if len(docs) > 0 {
			for _, r := range srv.BulkDocs(t, db, docs, false) {
				require.Empty(t, r.Error, "%s: %s", r.ID, r.Reason)
			}
			docs = nil
		}
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("doc-%06d", i)
		gens := 1 + rng.IntN(4)
		branches := 1
		if i%7 == 0 {
			branches = 2 + rng.IntN(2)
		}
		for b := 0; b < branches; b++ {
			ids := make([]string, gens)
			for g := 0; g < gens; g++ {
				// Branches share their first revision.
				key := fmt.Sprintf("%s/%d/%d", id, g, b)
				if g == gens-1 || b == 0 {
					key = fmt.Sprintf("%s/%d/%d", id, g, b)
				}
				if g == 0 {
					key = id + "/root"
				}
				ids[gens-1-g] = hash(key)
			}
			if gens == 1 && b > 0 {
				ids[0] = hash(fmt.Sprintf("%s/0/%d", id, b))
			}
			d := map[string]any{
				"_id":        id,
				"_rev":       fmt.Sprintf("%d-%s", gens, ids[0]),
				"_revisions": map[string]any{"start": gens, "ids": ids},
				"n":          i,
				"branch":     b,
				"tags":       []any{"x", float64(i % 3)},
				"nested":     map[string]any{"even": i%2 == 0},
			}
			if i%11 == 5 && b == branches-1 {
				d["_deleted"] = true
			}
			docs = append(docs, d)
		}
		if len(docs) >= 500 {
			flush()
		}
	}
	flush()
	// Attachments and design documents, written through the normal API.
	for i := 0; i < 5; i++ {
		srv.PutDoc(t, db, map[string]any{
			"_id": fmt.Sprintf("att-%d", i),
			"_attachments": map[string]any{
				"a.txt":   map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("hello %d", i)))},
				"b/c.bin": map[string]any{"content_type": "application/octet-stream", "data": base64.StdEncoding.EncodeToString([]byte{0, 1, 2, byte(i), 255})},
			},
		})
	}
	// Conflicting leaves that each carry attachments.
	var conflicted []map[string]any
	for i := 0; i < 3; i++ {
		for b := 0; b < 2; b++ {
			h := hash(fmt.Sprintf("attconf-%d-%d", i, b))
			conflicted = append(conflicted, map[string]any{
				"_id": fmt.Sprintf("attconf-%d", i), "_rev": "1-" + h, "_revisions": map[string]any{"start": 1, "ids": []string{h}},
				"branch": b,
				"_attachments": map[string]any{fmt.Sprintf("leaf-%d.txt", b): map[string]any{"content_type": "text/plain",
					"data": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("leaf %d of %d", b, i)))}},
			})
		}
	}
	for _, r := range srv.BulkDocs(t, db, conflicted, false) {
		require.Empty(t, r.Error, "%s: %s", r.ID, r.Reason)
	}
	srv.PutDoc(t, db, map[string]any{
		"_id":     "_design/app",
		"filters": map[string]any{"even": "function(doc, req) { return doc.n % 2 === 0 && (!req.query.max || doc.n < Number(req.query.max)); }"},
		"views":   map[string]any{"small": map[string]any{"map": "function(doc) { if (doc.n < 20) emit(doc.n); }"}},
	})
}

func endpoint(t *testing.T, url string) couch.Endpoint {
	t.Helper()
	ep, err := couch.ParseEndpoint(json.RawMessage(strconv.Quote(url)))
	require.NoError(t, err)
	return ep
}

func runOnce(t *testing.T, rep engine.Replication, opts engine.Options) engine.Result {
	t.Helper()
	if opts.ServerUUID == "" {
		opts.ServerUUID = testUUID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := engine.Start(ctx, rep, opts).Wait()
	require.NoError(t, err)
	return res
}

func TestOneShot(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "a")
	srv.CreateDB(t, "b")
	fixture(t, srv, "a", 2000, 1)
	want := enginetest.Take(t, srv.DBURL("a"))
	leaves := 0
	for _, revs := range want {
		leaves += len(revs)
	}
	require.Greater(t, leaves, len(want), "the fixture has conflicts")

	rep := engine.Replication{Source: endpoint(t, srv.DBURL("a")), Target: endpoint(t, srv.DBURL("b")), WorkerBatchSize: 100}
	res := runOnce(t, rep, engine.Options{})
	enginetest.RequireEqual(t, want, enginetest.Take(t, srv.DBURL("b")))
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
	_, lastSeq := srv.Changes(t, "a", "0")
	require.JSONEq(t, string(lastSeq), string(res.SourceLastSeq))
	require.Equal(t, string(lastSeq), res.Stats.ThroughSeq)
	require.Equal(t, string(lastSeq), res.Stats.CheckpointedSourceSeq)
	require.NotNil(t, res.Stats.ChangesPending)
	require.Zero(t, *res.Stats.ChangesPending)

	// Both sides carry the same checkpoint document.
	base, _, err := engine.ReplicationID(rep, testUUID, "")
	require.NoError(t, err)
	srcLog := srv.GetDoc(t, "a", "_local/"+base)
	tgtLog := srv.GetDoc(t, "b", "_local/"+base)
	require.NotNil(t, srcLog)
	delete(srcLog, "_rev")
	delete(tgtLog, "_rev")
	require.Equal(t, srcLog, tgtLog)
	require.Equal(t, res.SessionID, srcLog["session_id"])

	// Nothing to do the second time.
	again := runOnce(t, rep, engine.Options{})
	require.True(t, again.NoChanges)
	require.Equal(t, res.Stats.DocsWritten, again.Stats.DocsWritten, "counters carry over")

	// Attachments the other way: new and updated attachment documents on b
	// replicate back to a.
	rev := srv.GetDoc(t, "b", "att-1")["_rev"].(string)
	srv.PutDoc(t, "b", map[string]any{"_id": "att-1", "_rev": rev, "v": 2, "_attachments": map[string]any{
		"new.txt": map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("from b"))},
	}})
	srv.PutDoc(t, "b", map[string]any{"_id": "from-b", "_attachments": map[string]any{
		"x.json": map[string]any{"content_type": "application/json", "data": base64.StdEncoding.EncodeToString([]byte(`{"a":1}`))},
	}})
	back := engine.Replication{Source: endpoint(t, srv.DBURL("b")), Target: endpoint(t, srv.DBURL("a"))}
	res = runOnce(t, back, engine.Options{})
	require.Equal(t, int64(2), res.Stats.DocsWritten)
	enginetest.RequireSame(t, srv.DBURL("a"), srv.DBURL("b"))
}
