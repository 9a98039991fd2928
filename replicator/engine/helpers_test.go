package engine_test

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// testUUID is the server UUID of the tests' runs.
const testUUID = "0123456789abcdef0123456789abcdef"

// hash is the MD5 of s in hex, a revision hash.
func hash(s string) string {
	h := md5.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// fixture fills db with n documents of every kind the engine must carry:
// several revisions, deletions, conflicts (two or three leaves, some
// deleted), design documents and attachments.
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

// runTimeout bounds every run a test starts: a run still going after it
// is a hang (a hang detector, not a speed requirement).
const runTimeout = 2 * time.Minute

// startPeer starts a real CouchDB 3.5 holding the database "src" with
// docs documents doc-00000000… (see couchtest.Server.AddDocs): the
// protocol is tested against the server users replicate with (skipped,
// saying so, where ../shared/couchdb is absent). Endpoints name its admin
// (AuthDBURL, authURL). Tests of pouchdb-server's quirks start one
// themselves.
func startPeer(t *testing.T, docs int) *couchtest.Server {
	t.Helper()
	srv := couchtest.StartCouchDB(t)
	srv.CreateDB(t, "src")
	if docs > 0 {
		srv.AddDocs(t, "src", 0, docs)
	}
	return srv
}

// endpoint parses a database URL as a replication endpoint.
func endpoint(t *testing.T, url string) couch.Endpoint {
	t.Helper()
	ep, err := couch.ParseEndpoint(json.RawMessage(strconv.Quote(url)))
	require.NoError(t, err)
	return ep
}

// srcTo returns rep replicating the database src of srv into its database
// tgt.
func srcTo(t *testing.T, srv *couchtest.Server, tgt string, rep engine.Replication) engine.Replication {
	t.Helper()
	rep.Source, rep.Target = endpoint(t, srv.AuthDBURL("src")), endpoint(t, srv.AuthDBURL(tgt))
	return rep
}

// testRun is a run a test started, with the checkpoints it reported.
type testRun struct {
	*engine.Run
	t           *testing.T
	ctx         context.Context // the run's; ends after runTimeout
	checkpoints testsignal.Signal[engine.Checkpoint]
}

// start starts rep with opts, their ServerUUID testUUID unless set, on a
// context that ends after runTimeout or with the test. The run's
// checkpoints are kept for next (up to testsignal.BufferSize unread ones),
// after opts.OnCheckpoint, if set, has seen them.
func start(t *testing.T, rep engine.Replication, opts engine.Options) *testRun {
	t.Helper()
	opts.ServerUUID = cmp.Or(opts.ServerUUID, testUUID)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	t.Cleanup(cancel)
	r := &testRun{t: t, ctx: ctx}
	r.checkpoints.Init()
	hook := opts.OnCheckpoint
	opts.OnCheckpoint = func(c engine.Checkpoint) {
		if hook != nil {
			hook(c)
		}
		r.checkpoints.Signal(c)
	}
	r.Run = engine.Start(ctx, rep, opts)
	return r
}

// next returns the run's next checkpoint; it fails the test if the run
// ends, or its context does, first.
func (r *testRun) next() engine.Checkpoint {
	r.t.Helper()
	select {
	case c := <-r.checkpoints.C():
		return c
	case <-r.Done():
		select {
		case c := <-r.checkpoints.C(): // reported just before the end
			return c
		default:
		}
		_, err := r.Wait()
		r.t.Fatalf("the run ended: %v", err)
	case <-r.ctx.Done():
		r.t.Fatalf("no checkpoint within %v: %+v", runTimeout, r.Progress())
	}
	panic("unreachable")
}

// waitWritten returns the first checkpoint that counts at least n
// documents written.
func (r *testRun) waitWritten(n int64) engine.Checkpoint {
	r.t.Helper()
	for {
		if c := r.next(); c.Stats.DocsWritten >= n {
			return c
		}
	}
}

// waitProgress waits until cond holds of the run's counters, which it
// polls: nothing signals the writes between two checkpoints. It fails the
// test if the run ends first.
func (r *testRun) waitProgress(what string, cond func(engine.Stats) bool) {
	r.t.Helper()
	held := false
	testutil.Eventually(r.t, what, func() bool {
		held = cond(r.Progress())
		return held || ended(r.Run)
	})
	if !held {
		_, err := r.Wait()
		r.t.Fatalf("the run ended before %s: %v", what, err)
	}
}

// ended reports whether run has ended.
func ended(run *engine.Run) bool {
	select {
	case <-run.Done():
		return true
	default:
		return false
	}
}

// runOnce runs rep to its end and requires it to succeed.
func runOnce(t *testing.T, rep engine.Replication, opts engine.Options) engine.Result {
	t.Helper()
	res, err := start(t, rep, opts).Wait()
	require.NoError(t, err)
	return res
}

// seqText is a sequence as engine.Stats shows it: a string sequence
// (CouchDB's) unquoted, an integer one (PouchDB's) as it is.
func seqText(seq json.RawMessage) string {
	var s string
	if json.Unmarshal(seq, &s) == nil {
		return s
	}
	return string(seq)
}

// authURL is raw with srv's admin as userinfo (a proxy in front of srv;
// raw itself without a server admin).
func authURL(srv *couchtest.Server, raw string) string {
	name, password := srv.Admin()
	if name == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	u.User = url.UserPassword(name, password)
	return u.String()
}
