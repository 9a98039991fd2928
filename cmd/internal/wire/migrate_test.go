package wire_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/cli"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// couch3Doc is a document of a CouchDB 3.x _replicator database, with its
// revision history: one leaf, or two for a conflict.
type couch3Doc struct {
	id     string
	leaves []map[string]any // each with _id, _rev, _revisions (and _deleted)
}

// revID is a CouchDB-style revision id (32 hex digits) derived from seed.
func revID(seed ...any) string {
	sum := md5.Sum([]byte(fmt.Sprint(seed...)))
	return hex.EncodeToString(sum[:])
}

// leaf builds a revision of id with its history of n revisions (ids
// derived from branch) and body fields.
func leaf(id, branch string, n int, deleted bool, body map[string]any) map[string]any {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = revID(id, branch, n-i) // newest first
	}
	ids[n-1] = revID(id, "root", 1) // every branch starts at the same revision
	d := map[string]any{"_id": id, "_rev": fmt.Sprintf("%d-%s", n, ids[0]),
		"_revisions": map[string]any{"start": n, "ids": ids}}
	for k, v := range body {
		d[k] = v
	}
	if deleted {
		d["_deleted"] = true
	}
	return d
}

// couch3ReplicatorDB builds n documents as a CouchDB 3.x _replicator
// database holds them, and returns them with the ids of those that must
// start in fdbrep (no _replication_state: pending). Kinds, by i % 10:
// 0-3 completed one-shot replications (their second revision written by
// the replicator: state, time, stats, a 2.x _replication_id), 4-5 failed
// duplicates (state and reason), 6-8 pending continuous replications to
// endpoints that do not answer (they crash and retry, never writing into
// their documents), 9 deleted documents. Every 25th document also has a
// conflict: pending ones a second live branch, the others a deleted one.
// Owners are the test users; some endpoints carry credentials. The
// deleted _design/_replicator that CouchDB 3 leaves behind is there too.
func couch3ReplicatorDB(n int) (docs []couch3Doc, pending []string) {
	owners := []string{adminName, aliceName, bobName}
	for i := range n {
		id := fmt.Sprintf("rep-%04d", i)
		owner := owners[i%len(owners)]
		spec := map[string]any{
			"source":        fmt.Sprintf("http://%s:secret-%d@127.0.0.1:9/src-%d", owner, i, i),
			"target":        map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/tgt-%d", i), "headers": map[string]any{"x-note": "kept"}},
			"create_target": true,
			"owner":         owner,
		}
		with := func(extra map[string]any) map[string]any {
			m := map[string]any{}
			for k, v := range spec {
				m[k] = v
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		d := couch3Doc{id: id}
		var body map[string]any
		revs := 2
		switch kind := i % 10; {
		case kind <= 3:
			body = with(map[string]any{
				"_replication_state":      "completed",
				"_replication_state_time": "2024-05-01T10:00:00Z",
				"_replication_id":         revID("repid", i),
				"_replication_stats": map[string]any{"revisions_checked": 12, "missing_revisions_found": 12,
					"docs_read": 12, "docs_written": 12, "doc_write_failures": 0, "checkpointed_source_seq": "12-g1AAAA"},
			})
		case kind <= 5:
			body = with(map[string]any{
				"continuous":                true,
				"_replication_state":        "failed",
				"_replication_state_time":   "2024-05-02T11:00:00Z",
				"_replication_state_reason": fmt.Sprintf("Replication `%s+continuous` specified by document `%s` already started", revID("dup", i), id),
			})
		case kind <= 8:
			body, revs = with(map[string]any{"continuous": true}), 1
			pending = append(pending, id)
		}
		if i%25 == 2 || i%25 == 7 {
			revs = 2 // branches share the first revision: the main one must go beyond it
		}
		if body == nil {
			d.leaves = append(d.leaves, leaf(id, "main", 3, true, nil))
		} else {
			d.leaves = append(d.leaves, leaf(id, "main", revs, false, body))
		}
		switch i % 25 {
		case 7: // a conflict: the same kind of document with another target
			other := map[string]any{}
			for k, v := range body {
				other[k] = v
			}
			other["target"] = fmt.Sprintf("http://127.0.0.1:9/other-%d", i)
			d.leaves = append(d.leaves, leaf(id, "other", 2, false, other))
		case 2: // a deleted branch
			d.leaves = append(d.leaves, leaf(id, "gone", 3, true, nil))
		}
		docs = append(docs, d)
	}
	ddoc := "_design/_replicator"
	docs = append(docs, couch3Doc{id: ddoc, leaves: []map[string]any{leaf(ddoc, "main", 2, true, nil)}})
	sort.Strings(pending)
	return docs, pending
}

// loadCouch3 writes docs into a database of peer with new_edits=false, as
// a replication would.
func loadCouch3(t *testing.T, peer *couchtest.Server, db string, docs []couch3Doc) {
	t.Helper()
	peer.CreateDB(t, db)
	var batch []map[string]any
	for i, d := range docs {
		batch = append(batch, d.leaves...)
		if len(batch) >= 200 || i == len(docs)-1 {
			for _, res := range peer.BulkDocs(t, db, batch, false) {
				require.Empty(t, res.Error, "%+v", res)
			}
			batch = nil
		}
	}
}

// adminDBURL is the URL of one of the service's databases with the
// admin's credentials.
func (s *service) adminDBURL(db string) string {
	u, err := url.Parse(s.url)
	require.NoError(s.t, err)
	u.User = url.UserPassword(adminName, adminPass)
	return u.String() + "/" + url.PathEscape(db)
}

// requireStarted checks that /_scheduler/docs lists exactly ids for db in
// a state of a job that runs or will; the others it lists are the
// documents that arrived completed or failed, shown so.
func (s *service) requireStarted(db string, ids []string) {
	s.t.Helper()
	r := s.do("GET", "/_scheduler/docs/"+url.PathEscape(db)+"?limit=5000", asAdmin, nil)
	require.Equal(s.t, 200, r.Status, r.Raw)
	var got []string
	for _, d := range r.Body["docs"].([]any) {
		doc := d.(map[string]any)
		if doc["state"] == "completed" || doc["state"] == "failed" {
			continue
		}
		require.Contains(s.t, []string{"pending", "running", "crashing"}, doc["state"], "%v", doc)
		got = append(got, doc["doc_id"].(string))
	}
	sort.Strings(got)
	require.Equal(s.t, ids, got)
}

// TestMigrateReplicatorDB replicates a CouchDB 3.x _replicator database of
// 1,000 documents (completed, failed, pending and deleted ones, conflicts,
// CouchDB 3's deleted design document) from pouchdb-server into fdbrep and
// back out, with fdbrep's own engine and with PouchDB.replicate: exactly
// the pending documents start, and every leaf of every document comes back
// identical, revisions and conflicts included.
func TestMigrateReplicatorDB(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts pouchdb-server and replicates 1,000 documents four times")
	}
	peer := couchtest.StartPouchDB(t)
	docs, pending := couch3ReplicatorDB(1000)
	// pouchdb-server runs the replications of its own _replicator
	// database: the 3.x database is held under another name.
	loadCouch3(t, peer, "couch3", docs)
	original := enginetest.Take(t, peer.DBURL("couch3"))
	require.Len(t, original, len(docs))
	conflicted := 0
	for _, leaves := range original {
		if len(leaves) > 1 {
			conflicted++
		}
	}
	require.Equal(t, 80, conflicted, "documents with conflicts or deleted branches")

	t.Run("engine", func(t *testing.T) {
		e := newService(t)
		r := e.do("POST", "/_replicate", asAdmin, map[string]any{"source": peer.DBURL("couch3"), "target": e.adminDBURL("_replicator")})
		require.Equal(t, 200, r.Status, r.Raw)
		require.EqualValues(t, 0, r.Body["history"].([]any)[0].(map[string]any)["doc_write_failures"], r.Raw)
		enginetest.RequireEqual(t, original, enginetest.Take(t, e.adminDBURL("_replicator")))
		e.requireStarted("_replicator", pending)

		// The backup out is a replication document of another replicator
		// database (one in _replicator would be part of what it copies).
		require.Equal(t, 201, e.do("PUT", "/backups%2F_replicator", asAdmin, nil).Status)
		r = e.do("PUT", "/backups%2F_replicator/nightly", asAdmin, map[string]any{"source": e.adminDBURL("_replicator"),
			"target": peer.DBURL("engine_backup"), "create_target": true})
		require.Equal(t, 201, r.Status, r.Raw)
		e.waitDocState("backups/_replicator", "nightly", "completed")
		enginetest.RequireEqual(t, original, enginetest.Take(t, peer.DBURL("engine_backup")))
		requireNoSecret(t, e)
	})

	t.Run("pouchdb", func(t *testing.T) {
		e := newService(t)
		db := "migrated/_replicator"
		ctx := context.Background()
		res, err := couchtest.PouchReplicate(ctx, peer.DBURL("couch3"), e.adminDBURL(db), 0, 0)
		require.NoError(t, err)
		require.True(t, res.OK)
		require.Zero(t, res.DocWriteFailures)
		enginetest.RequireEqual(t, original, enginetest.Take(t, e.adminDBURL(db)))
		e.requireStarted(db, pending)

		res, err = couchtest.PouchReplicate(ctx, e.adminDBURL(db), peer.DBURL("pouch_backup"), 0, 0)
		require.NoError(t, err)
		require.True(t, res.OK)
		enginetest.RequireEqual(t, original, enginetest.Take(t, peer.DBURL("pouch_backup")))
		// Replicating again finds nothing to do.
		res, err = couchtest.PouchReplicate(ctx, peer.DBURL("couch3"), e.adminDBURL(db), 0, 0)
		require.NoError(t, err)
		require.Zero(t, res.DocsWritten)
		requireNoSecret(t, e)
	})
}

// TestMigrateFromCouchDB moves the CouchDB 3.x _replicator database of
// TestMigrateReplicatorDB in from a real CouchDB 3.5 with CouchDB's own
// replicator pushing into fdbrep, as a user migrating does, and back out
// into that CouchDB with fdbrep's: exactly the pending documents start,
// and every leaf of every document comes back identical.
func TestMigrateFromCouchDB(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB and replicates 1,000 documents twice")
	}
	couch := couchtest.StartCouchDB(t) // before the service: its cleanup runs last
	couch.ReportOnFailure(t)
	couch.NoReplicatorJitter(t)
	docs, pending := couch3ReplicatorDB(1000)
	// Under another name than _replicator, whose documents CouchDB would
	// run itself.
	loadCouch3(t, couch, "couch3", docs)
	original := enginetest.Take(t, couch.AuthDBURL("couch3"))
	require.Len(t, original, len(docs))
	e := newService(t)

	var res map[string]any
	require.Equal(t, 200, couch.Request(t, "POST", "/_replicate",
		map[string]any{"source": couch.AuthDBURL("couch3"), "target": e.adminDBURL("_replicator")}, &res))
	require.Equal(t, true, res["ok"], "%v", res)
	require.EqualValues(t, 0, res["history"].([]any)[0].(map[string]any)["doc_write_failures"], "%v", res)
	enginetest.RequireEqual(t, original, enginetest.Take(t, e.adminDBURL("_replicator")))
	e.requireStarted("_replicator", pending)

	require.Equal(t, 201, e.do("PUT", "/backups%2F_replicator", asAdmin, nil).Status)
	r := e.do("PUT", "/backups%2F_replicator/nightly", asAdmin, map[string]any{"source": e.adminDBURL("_replicator"),
		"target": couch.AuthDBURL("fdbrep_backup"), "create_target": true})
	require.Equal(t, 201, r.Status, r.Raw)
	e.waitDocState("backups/_replicator", "nightly", "completed")
	enginetest.RequireEqual(t, original, enginetest.Take(t, couch.AuthDBURL("fdbrep_backup")))
	requireNoSecret(t, e)
}

// requireNoSecret checks that no password of the migrated documents
// reached the service's logs (the pending ones run and fail).
func requireNoSecret(t *testing.T, e *service) {
	t.Helper()
	require.NotContains(t, e.logs.String(), "secret-", "a password in the logs")
}

// TestMigrateKeepsCheckpoints moves in replications a real CouchDB 3.5
// ran, as README's migration says: CouchDB's own replicator runs two
// continuous replications of its _replicator database (one plain, one
// with a Mango selector) to checkpoints; the dry run (fdbrep
// migrate-check) says both will go on from them, and says in one line
// when the server refuses the credentials; CouchDB's replications stop
// (max_jobs 0), 100 documents more are written, and the _replicator
// database moves into an fdbrep given CouchDB's server UUID ([couchdb]
// uuid). Each replication goes on from CouchDB's checkpoint: the
// revisions it checks after the move are the changes since (100, and 50
// of them for the selector), not the database, and its info.checkpoint
// says where it started.
func TestMigrateKeepsCheckpoints(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB and replicates 1,000 documents twice")
	}
	couch := couchtest.StartCouchDB(t) // before the service: its cleanup runs last
	couch.ReportOnFailure(t)
	couch.NoReplicatorJitter(t)
	const uuid, docs, more = "3f1d0c9e8b7a6f5e4d3c2b1a09f8e7d6", 1000, 100
	for key, value := range map[string]string{"couchdb/uuid": uuid, "replicator/interval": "1000"} {
		require.Equal(t, 200, couch.Request(t, "PUT", "/_node/_local/_config/"+key, []byte(strconv.Quote(value)), nil))
	}
	couch.CreateDB(t, "src")
	couch.AddDocs(t, "src", 0, docs)
	couch.EnsureDB(t, "_replicator")
	reps := map[string]map[string]any{
		"plain": {"source": couch.AuthDBURL("src"), "target": couch.AuthDBURL("all"), "create_target": true,
			"continuous": true, "checkpoint_interval": 500},
		"even": {"source": couch.AuthDBURL("src"), "target": couch.AuthDBURL("even"), "create_target": true,
			"continuous": true, "checkpoint_interval": 500, "selector": map[string]any{"n": map[string]any{"$mod": []int{2, 0}}}},
	}
	written := map[string]int{"plain": docs, "even": docs / 2}
	targets := map[string]string{"plain": "all", "even": "even"}
	for id, body := range reps {
		body["_id"] = id
		couch.PutDoc(t, "_replicator", body)
	}
	// CouchDB's checkpoints, once they cover every document.
	type checkpoint struct {
		seq     string
		checked float64
	}
	// The replication ids, as CouchDB's scheduler showed them while the
	// replications ran (once stopped by a restart, it shows none).
	repIDs := map[string]string{}
	couchCheckpoint := func(id string) (checkpoint, bool) {
		if repIDs[id] == "" {
			var d struct {
				ID *string `json:"id"`
			}
			if couch.Request(t, "GET", "/_scheduler/docs/_replicator/"+id, nil, &d) != 200 || d.ID == nil {
				return checkpoint{}, false
			}
			repIDs[id], _, _ = strings.Cut(*d.ID, "+")
		}
		log := couch.GetDoc(t, "src", "_local/"+repIDs[id])
		if log == nil {
			return checkpoint{}, false
		}
		last := log["history"].([]any)[0].(map[string]any)
		seq, _ := log["source_last_seq"].(string)
		// CouchDB writes the source's checkpoint, then the target's: the
		// dry run reads both.
		tlog := couch.GetDoc(t, targets[id], "_local/"+repIDs[id])
		if tlog == nil || tlog["source_last_seq"] != log["source_last_seq"] {
			return checkpoint{}, false
		}
		return checkpoint{seq: seq, checked: last["missing_checked"].(float64)}, last["docs_written"].(float64) == float64(written[id])
	}
	// CouchDB's replicator copies the database slowly on a loaded
	// machine (the race pass): the bound is its, not the code's.
	for id := range reps {
		testutil.EventuallyWithin(t, couchReplicationWait, "CouchDB checkpointed "+id, func() bool { _, ok := couchCheckpoint(id); return ok })
	}

	// The dry run.
	root := strings.TrimSuffix(couch.AuthDBURL("_replicator"), "/_replicator")
	var out bytes.Buffer
	require.NoError(t, cli.MigrateCheck(context.Background(), []string{root}, cli.Env{Stdout: &out, Stderr: io.Discard}))
	require.Contains(t, out.String(), "2 of 2 replications that will run go on from their checkpoints; 0 start over", out.String())
	require.NotContains(t, out.String(), couchtest.CouchPassword)
	err := cli.MigrateCheck(context.Background(), []string{strings.Replace(root, ":"+couchtest.CouchPassword+"@", ":wrong@", 1)},
		cli.Env{Stdout: io.Discard, Stderr: io.Discard})
	require.ErrorContains(t, err, "refused the credentials")
	require.NotContains(t, err.Error(), "\n")

	// CouchDB's replications stop, each with a last checkpoint: max_jobs
	// 0, applied at once by a restart of its applications (otherwise at
	// its next scheduling interval, a minute after it started).
	require.Equal(t, 200, couch.Request(t, "PUT", "/_node/_local/_config/replicator/max_jobs", []byte(`"0"`), nil))
	couch.Restart(t)
	for id := range reps {
		testutil.EventuallyWithin(t, couchReplicationWait, "CouchDB stopped "+id, func() bool {
			var d struct {
				State string `json:"state"`
			}
			return couch.Request(t, "GET", "/_scheduler/docs/_replicator/"+id, nil, &d) == 200 && d.State != "running"
		})
	}
	before := map[string]checkpoint{}
	for id := range reps {
		before[id], _ = couchCheckpoint(id)
	}
	couch.AddDocs(t, "src", docs, more)
	written["plain"] += more
	written["even"] += more / 2

	// The move, into an fdbrep that has CouchDB's server UUID.
	e := newService(t, func(m map[string]map[string]string) { m["couchdb"] = map[string]string{"uuid": uuid} })
	r := e.do("POST", "/_replicate", asAdmin, map[string]any{"source": couch.AuthDBURL("_replicator"), "target": e.adminDBURL("_replicator")})
	require.Equal(t, 200, r.Status, r.Raw)
	for id := range reps {
		var info map[string]any
		testutil.Eventually(t, id+" caught up in fdbrep", func() bool {
			r := e.do("GET", "/_scheduler/docs/_replicator/"+id, asAdmin, nil)
			info, _ = r.Body["info"].(map[string]any)
			return info != nil && info["docs_written"] == float64(written[id])
		})
		started, _ := info["checkpoint"].(map[string]any)
		require.Equal(t, map[string]any{"found": true, "since": before[id].seq}, started, "%s: %v", id, info)
		after := int(info["revisions_checked"].(float64) - before[id].checked)
		t.Logf("%s: %d revisions checked after the move (CouchDB had checked %.0f)", id, after, before[id].checked)
		require.Equal(t, map[string]int{"plain": more, "even": more / 2}[id], after, "only the changes since CouchDB's checkpoint")
	}
	// A replication that found no checkpoint says so.
	r = e.do("PUT", "/_replicator/fresh", asAdmin, map[string]any{"source": couch.AuthDBURL("src"), "target": couch.AuthDBURL("fresh"), "create_target": true})
	require.Equal(t, 201, r.Status, r.Raw)
	info := e.waitDocState("_replicator", "fresh", "completed")["info"].(map[string]any)
	require.Equal(t, map[string]any{"found": false, "since": "0"}, info["checkpoint"], "%v", info)
}

// couchReplicationWait bounds a wait for CouchDB's own replicator to copy
// a test's database (1,000 documents), which the race pass's load has
// made take over a minute.
const couchReplicationWait = 3 * time.Minute
