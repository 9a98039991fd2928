package wire_test

import (
	"encoding/base64"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// TestDifferentialReplication runs the same replications with a real
// CouchDB 3.5's own replicator and with fdbrep, between databases of that
// one CouchDB, and requires identical targets: every leaf revision of every
// document (deleted ones too) with its body, _revisions history and
// attachment stubs, and the source's _local documents left behind.
func TestDifferentialReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t) // before the service: its cleanup runs last
	couch.NoReplicatorJitter(t)
	d := &differential{couch: couch, e: newService(t)}

	t.Run("full", func(t *testing.T) {
		src, _ := d.source(t, "full")
		c, f := d.oneShot(t, "full", nil, func(s snapshot) { require.Len(t, s.Docs["c1"], 2, "two leaves") })
		// Both targets are the source itself, _local documents aside.
		require.Equal(t, d.snapshot(t, src).Docs, d.snapshot(t, c).Docs, "CouchDB's target is the source")
		require.Equal(t, d.snapshot(t, src).Docs, d.snapshot(t, f).Docs, "fdbrep's target is the source")
	})
	t.Run("doc_ids", func(t *testing.T) {
		d.source(t, "ids")
		d.oneShot(t, "ids", map[string]any{
			"doc_ids": []string{"p01", "u1", "d1", "d2", "c1", "c2", "c3", "att-small", "att-big", "_design/app", "absent"},
		}, func(s snapshot) {
			require.Len(t, s.Docs, 10)
			require.NotContains(t, s.Docs, "p02")
		})
	})
	t.Run("selector", func(t *testing.T) {
		d.source(t, "sel")
		d.oneShot(t, "sel", map[string]any{"selector": map[string]any{"kind": "a"}}, func(s snapshot) {
			require.Contains(t, s.Docs, "p02")
			require.NotContains(t, s.Docs, "p01")
		})
	})
	t.Run("filter", func(t *testing.T) {
		d.source(t, "flt")
		d.oneShot(t, "flt", map[string]any{"filter": "app/f", "query_params": map[string]any{"kind": "a"}}, func(s snapshot) {
			require.Contains(t, s.Docs, "d1", "the filter passes deletions")
			require.NotContains(t, s.Docs, "p01")
		})
	})
	t.Run("since_seq", func(t *testing.T) {
		_, mid := d.source(t, "since")
		d.oneShot(t, "since", map[string]any{"since_seq": mid}, func(s snapshot) {
			require.Contains(t, s.Docs, "u1")
			require.NotContains(t, s.Docs, "p01")
		})
	})
	t.Run("winning_revs_only", func(t *testing.T) {
		d.source(t, "win")
		d.oneShot(t, "win", map[string]any{"winning_revs_only": true}, func(s snapshot) {
			require.Len(t, s.Docs["c1"], 1, "one leaf")
		})
	})
	t.Run("continuous", func(t *testing.T) {
		src, _ := d.source(t, "cont")
		body := d.body("cont", map[string]any{"continuous": true})
		c, f := d.start(t, body)
		d.waitCaughtUp(t, src, c, f)
		d.moreChanges(t, src)
		d.waitCaughtUp(t, src, c, f)
		d.requireSame(t, c, f)
		cancel := maps.Clone(body)
		cancel["cancel"] = true
		rc, rf := d.both(t, cancel)
		requireSameReply(t, rc, rf, 200)
	})
	t.Run("cancel", func(t *testing.T) {
		src, _ := d.source(t, "cncl")
		body := d.body("cncl", map[string]any{"continuous": true})
		c, f := d.start(t, body)
		d.waitCaughtUp(t, src, c, f)
		cancel := maps.Clone(body)
		cancel["cancel"] = true
		rc, rf := d.both(t, cancel)
		requireSameReply(t, rc, rf, 200)
		// Cancelled already: not found on both.
		rc, rf = d.both(t, cancel)
		requireSameReply(t, rc, rf, 404)
		require.Equal(t, rc.Body["error"], rf.Body["error"], "CouchDB: %s; fdbrep: %s", rc.Raw, rf.Raw)
		d.requireSame(t, c, f)

		// Another one (a filtered one: another replication id), cancelled by
		// its replication_id.
		body = d.body("cncl", map[string]any{"continuous": true, "selector": map[string]any{"kind": "b"}})
		rc, rf = d.both(t, body)
		requireSameReply(t, rc, rf, 202)
		rc2 := d.couchDo(t, "POST", "/_replicate", map[string]any{"replication_id": rc.Body["_local_id"], "cancel": true})
		rf2 := d.e.do("POST", "/_replicate", asAdmin, map[string]any{"replication_id": rf.Body["_local_id"], "cancel": true})
		requireSameReply(t, rc2, rf2, 200)
		// An id that never ran.
		rc2 = d.couchDo(t, "POST", "/_replicate", map[string]any{"replication_id": "0123456789abcdef0123456789abcdef+continuous", "cancel": true})
		rf2 = d.e.do("POST", "/_replicate", asAdmin, map[string]any{"replication_id": "0123456789abcdef0123456789abcdef+continuous", "cancel": true})
		requireSameReply(t, rc2, rf2, 404)
		require.Equal(t, rc2.Body["error"], rf2.Body["error"], "CouchDB: %s; fdbrep: %s", rc2.Raw, rf2.Raw)
	})
}

// differential runs replications on CouchDB's replicator and on fdbrep.
type differential struct {
	couch *couchtest.Server
	e     *service
}

// localIDs are the _local documents every source has; no replication
// copies them.
var localIDs = []string{"_local/l1", "_local/l2"}

// couchDo sends a request to CouchDB as its admin.
func (d *differential) couchDo(t *testing.T, method, path string, body any) resp {
	t.Helper()
	return testutil.Do(t, method, d.couch.URL()+path, &creds{Name: couchtest.CouchAdmin, Pass: couchtest.CouchPassword}, body)
}

// targets are the names of a scenario's two targets: CouchDB's and fdbrep's.
func targets(name string) (string, string) { return name + "-tgt-couch", name + "-tgt-fdbrep" }

// body is the replication of scenario name (source name-src) with extra
// fields, to CouchDB's target; both posts it to each replicator with its
// own target.
func (d *differential) body(name string, extra map[string]any) map[string]any {
	c, _ := targets(name)
	b := map[string]any{"source": d.couch.AuthDBURL(name + "-src"), "target": d.couch.AuthDBURL(c), "create_target": true}
	maps.Copy(b, extra)
	return b
}

// both posts body to CouchDB's POST /_replicate, and to fdbrep's with the
// target replaced by fdbrep's target.
func (d *differential) both(t *testing.T, body map[string]any) (couchReply, fdbrepReply resp) {
	t.Helper()
	couchReply = d.couchDo(t, "POST", "/_replicate", body)
	fb := maps.Clone(body)
	u, err := url.Parse(body["target"].(string))
	require.NoError(t, err)
	name, err := url.PathUnescape(u.Path[1:])
	require.NoError(t, err)
	require.Regexp(t, `-tgt-couch$`, name)
	_, f := targets(name[:len(name)-len("-tgt-couch")])
	fb["target"] = d.couch.AuthDBURL(f)
	fdbrepReply = d.e.do("POST", "/_replicate", asAdmin, fb)
	return couchReply, fdbrepReply
}

// requireSameReply requires both replies to have status and the same
// top-level fields, but for those fdbrep adds where docs/COMPAT.md says
// (a cancel's "stats" or "stop_unconfirmed").
func requireSameReply(t *testing.T, c, f resp, status int) {
	t.Helper()
	require.Equal(t, status, c.Status, "CouchDB: %s", c.Raw)
	require.Equal(t, status, f.Status, "fdbrep: %s", f.Raw)
	keys := slices.DeleteFunc(slices.Collect(maps.Keys(f.Body)), func(k string) bool {
		_, couch := c.Body[k]
		return !couch && (k == "stats" || k == "stop_unconfirmed")
	})
	require.ElementsMatch(t, slices.Collect(maps.Keys(c.Body)), keys, "CouchDB: %s; fdbrep: %s", c.Raw, f.Raw)
}

// oneShot runs a one-shot replication of scenario name on both, requires
// the same counters and targets, then the same reply fields, and returns
// the targets.
func (d *differential) oneShot(t *testing.T, name string, extra map[string]any, check func(snapshot)) (string, string) {
	t.Helper()
	c, f := d.both(t, d.body(name, extra))
	require.Equal(t, 200, c.Status, "CouchDB: %s", c.Raw)
	require.Equal(t, 200, f.Status, "fdbrep: %s", f.Raw)
	require.Equal(t, true, c.Body["ok"], c.Raw)
	require.Equal(t, true, f.Body["ok"], f.Raw)
	hc, hf := lastHistory(t, c), lastHistory(t, f)
	for _, k := range []string{"missing_checked", "missing_found", "docs_read", "docs_written", "doc_write_failures"} {
		require.Equal(t, hc[k], hf[k], "%s: CouchDB %v; fdbrep %v", k, hc, hf)
	}
	ct, ft := targets(name)
	check(d.requireSame(t, ct, ft))
	require.Empty(t, missingKeys(c.Body, f.Body), "fields of CouchDB's reply fdbrep's lacks (CouchDB: %s; fdbrep: %s)", c.Raw, f.Raw)
	requireSameReply(t, c, f, 200)
	return ct, ft
}

// missingKeys lists want's keys that got lacks.
func missingKeys(want, got map[string]any) []string {
	var out []string
	for k := range want {
		if _, ok := got[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// lastHistory is a one-shot reply's newest history entry.
func lastHistory(t *testing.T, r resp) map[string]any {
	t.Helper()
	h, ok := r.Body["history"].([]any)
	require.True(t, ok && len(h) > 0, r.Raw)
	return h[0].(map[string]any)
}

// start starts a continuous replication on both and returns the targets.
func (d *differential) start(t *testing.T, body map[string]any) (string, string) {
	t.Helper()
	c, f := d.both(t, body)
	requireSameReply(t, c, f, 202)
	name, err := url.Parse(body["target"].(string))
	require.NoError(t, err)
	cn := name.Path[1:]
	return cn, cn[:len(cn)-len("couch")] + "fdbrep"
}

// waitCaughtUp waits until both targets have every leaf of the source.
func (d *differential) waitCaughtUp(t *testing.T, src string, tgts ...string) {
	t.Helper()
	want, ok := d.leaves(t, src)
	require.True(t, ok)
	for _, tgt := range tgts {
		testutil.Eventually(t, tgt+" has the leaves of "+src, func() bool {
			got, ok := d.leaves(t, tgt)
			return ok && maps.EqualFunc(got, want, slices.Equal)
		})
	}
}

// leaves lists a database's leaf revisions by document (false while it
// does not exist).
func (d *differential) leaves(t *testing.T, db string) (map[string][]string, bool) {
	t.Helper()
	var res struct {
		Results []couchtest.Change `json:"results"`
	}
	if d.couch.Request(t, "GET", "/"+url.PathEscape(db)+"/_changes?style=all_docs", nil, &res) != http.StatusOK {
		return nil, false
	}
	out := map[string][]string{}
	for _, c := range res.Results {
		for _, r := range c.Changes {
			out[c.ID] = append(out[c.ID], r.Rev)
		}
		slices.Sort(out[c.ID])
	}
	return out, true
}

// snapshot is a database's canonical content: each document's leaf
// revisions (GET ?revs=true&open_revs=all: body, _deleted, _revisions,
// attachment stubs), sorted by revision, and the status of GET on each of
// localIDs.
type snapshot struct {
	Docs  map[string][]map[string]any
	Local map[string]int
}

func (d *differential) snapshot(t *testing.T, db string) snapshot {
	t.Helper()
	ids, ok := d.leaves(t, db)
	require.True(t, ok, "%s exists", db)
	s := snapshot{Docs: map[string][]map[string]any{}, Local: map[string]int{}}
	for id := range ids {
		var revs []map[string]any
		path := couchtest.DocPath(db, id) + "?revs=true&open_revs=all"
		require.Equal(t, 200, d.couch.Request(t, "GET", path, nil, &revs), path)
		var leaves []map[string]any
		for _, r := range revs {
			doc, ok := r["ok"].(map[string]any)
			require.True(t, ok, "%s: %v", path, r)
			leaves = append(leaves, doc)
		}
		slices.SortFunc(leaves, func(a, b map[string]any) int {
			return strings.Compare(a["_rev"].(string), b["_rev"].(string))
		})
		s.Docs[id] = leaves
	}
	for _, id := range localIDs {
		s.Local[id] = d.couch.Request(t, "GET", couchtest.DocPath(db, id), nil, nil)
	}
	return s
}

// requireSame requires CouchDB's target and fdbrep's to be the same and
// returns CouchDB's snapshot.
func (d *differential) requireSame(t *testing.T, couchTarget, fdbrepTarget string) snapshot {
	t.Helper()
	c, f := d.snapshot(t, couchTarget), d.snapshot(t, fdbrepTarget)
	require.NotEmpty(t, c.Docs, "CouchDB's target has documents")
	for _, id := range localIDs {
		require.Equal(t, http.StatusNotFound, c.Local[id], "CouchDB's target has no %s", id)
	}
	require.Equal(t, c, f, "CouchDB's target (want) and fdbrep's (got)")
	return c
}

// b64 is data in base64.
func b64(data []byte) string { return base64.StdEncoding.EncodeToString(data) }

// source creates and fills scenario name's source, name-src, and returns
// it with its update_seq taken midway (after the first half of the
// writes). It holds plain, updated, deleted (one with a body), conflicted
// (one with a deleted branch, one with an attachment on a branch)
// documents, documents with inline attachments and a 200 kB one, a design
// document with a filter, and _local documents.
func (d *differential) source(t *testing.T, name string) (string, any) {
	t.Helper()
	c := d.couch
	db := name + "-src"
	c.CreateDB(t, db)
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	kind := func(i int) string { return []string{"a", "b"}[i%2] }
	var docs []map[string]any
	for i := 1; i <= 10; i++ {
		docs = append(docs, map[string]any{"_id": fmt.Sprintf("p%02d", i), "kind": kind(i), "n": i, "nested": map[string]any{"list": []any{i, "x", nil, true}}})
	}
	for _, id := range []string{"u1", "u2", "d1", "d2"} {
		docs = append(docs, map[string]any{"_id": id, "kind": "a", "v": 0})
	}
	docs = append(docs,
		map[string]any{"_id": "att-small", "kind": "a", "_attachments": map[string]any{
			"a.txt": map[string]any{"content_type": "text/plain", "data": b64([]byte("hello, attachment"))},
			"b.bin": map[string]any{"content_type": "application/octet-stream", "data": b64([]byte{0, 1, 2, 3, 255})},
		}},
		map[string]any{"_id": "att-big", "kind": "a", "_attachments": map[string]any{
			"big.bin": map[string]any{"content_type": "application/octet-stream", "data": b64(big)},
		}},
		map[string]any{"_id": "_design/app", "language": "javascript", "filters": map[string]any{
			"f": "function(doc, req) { return doc.kind === req.query.kind || !!doc._deleted; }",
		}},
	)
	for _, r := range c.BulkDocs(t, db, docs, true) {
		require.Empty(t, r.Error, "%s: %s", r.ID, r.Reason)
	}
	c.PutDoc(t, db, map[string]any{"_id": "_local/l1", "kind": "a", "v": 1})
	// c1: 1-a with two branches 2-b and 2-c.
	conflict(t, c, db, map[string]any{"_id": "c1", "_rev": "2-b", "_revisions": map[string]any{"start": 2, "ids": []string{"b", "a"}}, "kind": "a", "v": "b"})
	conflict(t, c, db, map[string]any{"_id": "c1", "_rev": "2-c", "_revisions": map[string]any{"start": 2, "ids": []string{"c", "a"}}, "kind": "b", "v": "c"})
	mid := c.DBInfo(t, db)["update_seq"]

	// Updates: u1 three times, u2 once.
	rev := c.GetDoc(t, db, "u1")["_rev"]
	for v := 1; v <= 3; v++ {
		rev = c.PutDoc(t, db, map[string]any{"_id": "u1", "_rev": rev, "kind": "a", "v": v})
	}
	c.PutDoc(t, db, map[string]any{"_id": "u2", "_rev": c.GetDoc(t, db, "u2")["_rev"], "kind": "b", "v": 1})
	// Deletions: d1 plainly, d2 with a body.
	require.Equal(t, 200, c.Request(t, "DELETE", couchtest.DocPath(db, "d1")+"?rev="+c.GetDoc(t, db, "d1")["_rev"].(string), nil, nil))
	c.PutDoc(t, db, map[string]any{"_id": "d2", "_rev": c.GetDoc(t, db, "d2")["_rev"], "_deleted": true, "kind": "a"})
	// An attachment added to att-small (another revpos).
	doc := c.GetDoc(t, db, "att-small")
	doc["_attachments"].(map[string]any)["c.txt"] = map[string]any{"content_type": "text/plain", "data": b64([]byte("added later"))}
	c.PutDoc(t, db, doc)
	// c2: 1-x, a branch 2-y and a deleted branch 3-z.
	conflict(t, c, db, map[string]any{"_id": "c2", "_rev": "2-y", "_revisions": map[string]any{"start": 2, "ids": []string{"y", "x"}}, "kind": "a", "v": "y"})
	conflict(t, c, db, map[string]any{"_id": "c2", "_rev": "3-z", "_revisions": map[string]any{"start": 3, "ids": []string{"z", "w", "x"}}, "_deleted": true})
	// c3: 1-p, a branch 2-q with an attachment and a branch 2-r.
	conflict(t, c, db, map[string]any{"_id": "c3", "_rev": "2-q", "_revisions": map[string]any{"start": 2, "ids": []string{"q", "p"}}, "kind": "a",
		"_attachments": map[string]any{"q.txt": map[string]any{"content_type": "text/plain", "data": b64([]byte("on branch q"))}}})
	conflict(t, c, db, map[string]any{"_id": "c3", "_rev": "2-r", "_revisions": map[string]any{"start": 2, "ids": []string{"r", "p"}}, "kind": "b"})
	for i := 11; i <= 15; i++ {
		c.PutDoc(t, db, map[string]any{"_id": fmt.Sprintf("p%02d", i), "kind": kind(i), "n": i})
	}
	c.PutDoc(t, db, map[string]any{"_id": "_local/l2", "kind": "a", "v": 2})
	return db, mid
}

// conflict writes one revision as given (new_edits=false).
func conflict(t *testing.T, c *couchtest.Server, db string, doc map[string]any) {
	t.Helper()
	for _, r := range c.BulkDocs(t, db, []map[string]any{doc}, false) {
		require.Empty(t, r.Error, "%s: %s", r.ID, r.Reason)
	}
}

// moreChanges adds, updates and deletes documents of a source that
// continuous replications follow.
func (d *differential) moreChanges(t *testing.T, db string) {
	t.Helper()
	c := d.couch
	c.PutDoc(t, db, map[string]any{"_id": "late1", "kind": "a", "n": 100})
	c.PutDoc(t, db, map[string]any{"_id": "late-att", "kind": "b", "_attachments": map[string]any{
		"l.txt": map[string]any{"content_type": "text/plain", "data": b64([]byte("late attachment"))},
	}})
	doc := c.GetDoc(t, db, "p01")
	doc["n"] = 1001
	c.PutDoc(t, db, doc)
	require.Equal(t, 200, c.Request(t, "DELETE", couchtest.DocPath(db, "p02")+"?rev="+c.GetDoc(t, db, "p02")["_rev"].(string), nil, nil))
	conflict(t, c, db, map[string]any{"_id": "p03", "_rev": "2-zz", "_revisions": map[string]any{"start": 2, "ids": []string{"zz", "ghost"}}, "kind": "b", "v": "zz"})
	c.PutDoc(t, db, map[string]any{"_id": "_local/l1", "_rev": c.GetDoc(t, db, "_local/l1")["_rev"], "v": 2})
}
