package repdb

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

const testDB = "_replicator"

// newTestStore is a store with an empty _replicator database.
func newTestStore(t *testing.T) (*Store, kv.Database) {
	t.Helper()
	db := kvtest.NewDB(t)
	s := New(db, Options{})
	require.NoError(t, s.CreateDB(context.Background(), testDB, "u1", nil))
	return s, db
}

// events records the hook's events; clear is what it answers.
type events struct {
	seen  []WriteEvent
	clear bool
}

func (e *events) hook(tr kv.Transaction, ev WriteEvent) (bool, error) {
	e.seen = append(e.seen, ev)
	return e.clear, nil
}

// last is the last event (the retry loop may have run the hook more than
// once).
func (e *events) last(t *testing.T) WriteEvent {
	t.Helper()
	require.NotEmpty(t, e.seen)
	return e.seen[len(e.seen)-1]
}

func revOf(d *Doc) string {
	if d == nil {
		return ""
	}
	return d.Rev
}

// openAll reads every leaf of a document, winner first.
func openAll(t *testing.T, s *Store, db kv.Database, id string) []*Doc {
	t.Helper()
	res, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]OpenRev, error) {
		return s.OpenRevs(tr, testDB, id, OpenRevsQuery{All: true})
	})
	require.NoError(t, err)
	out := make([]*Doc, len(res))
	for i, r := range res {
		require.NotNil(t, r.Doc, "leaf %d missing", i)
		out[i] = r.Doc
	}
	return out
}

func counts(t *testing.T, s *Store) (live, deleted int64) {
	t.Helper()
	info, err := s.Info(context.Background(), testDB)
	require.NoError(t, err)
	return info.DocCount, info.DelCount
}

// feed reads the whole feed with every leaf.
func feed(t *testing.T, s *Store, q ChangesQuery) []Change {
	t.Helper()
	var out []Change
	_, err := s.Feed(context.Background(), testDB, q, func(c Change) error {
		out = append(out, c)
		return nil
	})
	require.NoError(t, err)
	return out
}

// A document's life with conflicts: replicated branches, the winner
// chosen as CouchDB does, edits and deletions of either branch, bodies
// moving between the winner's record and the leaves', counters, the
// changes row with every leaf, and what the hook sees at each step.
func TestConflictLifecycle(t *testing.T) {
	ctx := context.Background()
	s, db := newTestStore(t)
	ev := &events{}
	repl := func(path []string, deleted bool, body map[string]any) bool {
		t.Helper()
		added, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "d", Revisions: path, Deleted: deleted, Body: body, Hook: ev.hook})
		require.NoError(t, err)
		return added
	}
	edit := func(base string, deleted bool, body map[string]any) string {
		t.Helper()
		rev, err := s.Write(ctx, Write{DB: testDB, ID: "d", BaseRev: base, Deleted: deleted, Body: body, Hook: ev.hook})
		require.NoError(t, err)
		return rev
	}
	leaves := func() []string {
		var out []string
		for _, d := range openAll(t, s, db, "d") {
			out = append(out, d.Rev)
		}
		return out
	}

	require.True(t, repl([]string{"2-b", "1-a"}, false, map[string]any{"v": "b"}))
	e := ev.last(t)
	require.True(t, e.Written)
	require.Nil(t, e.Old)
	require.Equal(t, "2-b", revOf(e.New))
	require.False(t, repl([]string{"2-b", "1-a"}, false, map[string]any{"v": "b"}), "the same revision again")

	// A conflict that wins (higher id at the same position).
	require.True(t, repl([]string{"2-c", "1-a"}, false, map[string]any{"v": "c"}))
	e = ev.last(t)
	require.True(t, e.WinnerChanged())
	require.Equal(t, "2-b", revOf(e.Old))
	require.Equal(t, "2-b", revOf(e.Replaced))
	require.Equal(t, "2-c", revOf(e.New))
	require.Equal(t, []string{"2-c", "2-b"}, leaves())
	d, err := s.ReadDoc(ctx, testDB, "d")
	require.NoError(t, err)
	require.Equal(t, "c", d.Body["v"])
	require.Equal(t, 2, d.Leaves)
	all := openAll(t, s, db, "d")
	require.Equal(t, []string{"2-b"}, all[0].Conflicts)
	require.Equal(t, "b", all[1].Body["v"])
	require.Equal(t, []string{"2-b", "1-a"}, all[1].Path)
	rows := feed(t, s, ChangesQuery{Limit: -1, AllLeaves: true})
	require.Len(t, rows, 1)
	require.Equal(t, []string{"2-c", "2-b"}, rows[0].Revs)

	// A conflict that loses: the winner does not change.
	require.True(t, repl([]string{"2-a0", "1-a"}, false, map[string]any{"v": "a0"}))
	require.False(t, ev.last(t).WinnerChanged())

	// An edit of a losing branch makes it the longest: it wins, the old
	// winner keeps its body as a leaf, the edited leaf's body goes.
	r3 := edit("2-b", false, map[string]any{"v": "b3"})
	e = ev.last(t)
	require.Equal(t, "2-b", revOf(e.Replaced))
	require.Equal(t, "2-c", revOf(e.Old))
	require.Equal(t, r3, revOf(e.New))
	require.Equal(t, []string{r3, "2-c", "2-a0"}, leaves())
	_, err = s.Write(ctx, Write{DB: testDB, ID: "d", BaseRev: "2-b", Body: map[string]any{}})
	require.ErrorIs(t, err, ErrConflict, "2-b is no longer a leaf")
	_, err = s.Write(ctx, Write{DB: testDB, ID: "d", Body: map[string]any{}})
	require.ErrorIs(t, err, ErrConflict, "no base revision on a live document")

	// Deleting the winner: the best remaining live leaf wins.
	del := edit(r3, true, nil)
	e = ev.last(t)
	require.Equal(t, "2-c", revOf(e.New))
	require.False(t, e.Written)
	require.Equal(t, []string{"2-c", "2-a0", del}, leaves())
	live, dels := counts(t, s)
	require.Equal(t, [2]int64{1, 0}, [2]int64{live, dels})

	// Deleting every live leaf deletes the document: the hook sees no
	// new winner.
	edit("2-a0", true, nil)
	lastDel := edit("2-c", true, nil)
	e = ev.last(t)
	require.Nil(t, e.New)
	require.Equal(t, "2-c", revOf(e.Old))
	_, err = s.ReadDoc(ctx, testDB, "d")
	require.ErrorIs(t, err, ErrDocDeleted)
	live, dels = counts(t, s)
	require.Equal(t, [2]int64{0, 1}, [2]int64{live, dels})
	_, err = s.Write(ctx, Write{DB: testDB, ID: "d", BaseRev: lastDel, Deleted: true, Body: map[string]any{}})
	require.ErrorIs(t, err, ErrDocDeleted)

	// Recreated without a revision: it extends the winning deletion.
	win := openAll(t, s, db, "d")[0].Rev
	again := edit("", false, map[string]any{"v": "again"})
	require.Equal(t, win, openAll(t, s, db, "d")[0].Path[1])
	require.Equal(t, again, ev.last(t).New.Rev)
	live, dels = counts(t, s)
	require.Equal(t, [2]int64{1, 0}, [2]int64{live, dels})
	rows = feed(t, s, ChangesQuery{Limit: -1, AllLeaves: true, IncludeDocs: true, Conflicts: true})
	require.Len(t, rows, 1, "one row per document")
	require.Equal(t, again, rows[0].Revs[0])
	require.Len(t, rows[0].Revs, 3)
	require.Equal(t, "again", rows[0].Doc.Body["v"])
	require.Len(t, rows[0].Doc.DeletedConflicts, 2)

	// No record of a leaf that is gone is left behind.
	keys, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.GetRange(s.sub.Sub("leaf", testDB, "d"), kv.RangeOptions{}).GetSliceWithError()
	})
	require.NoError(t, err)
	require.Len(t, keys, 2, "the two deleted leaves that lose")
}

// Stale _replication_* fields go when the hook asks: a new edit is stored
// without them (another revision id); a replicated revision, whose id is
// fixed, gets a child without them.
func TestClearStateFields(t *testing.T) {
	ctx := context.Background()
	s, db := newTestStore(t)
	ev := &events{clear: true}
	stale := map[string]any{"source": "s", "_replication_state": "triggered", "_replication_id": "x"}

	rev, err := s.Write(ctx, Write{DB: testDB, ID: "new", Body: stale, Hook: ev.hook})
	require.NoError(t, err)
	clean, _ := json.Marshal(map[string]any{"source": "s"})
	require.Equal(t, newRev("", false, clean), rev)
	d, err := s.ReadDoc(ctx, testDB, "new")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"source": "s"}, d.Body)
	require.Equal(t, 1, openAll(t, s, db, "new")[0].Leaves)

	added, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "repl", Revisions: []string{"1-r"}, Body: stale, Hook: ev.hook})
	require.NoError(t, err)
	require.True(t, added)
	all := openAll(t, s, db, "repl")
	require.Len(t, all, 1)
	require.Equal(t, []string{all[0].Rev, "1-r"}, all[0].Path)
	require.Equal(t, map[string]any{"source": "s"}, all[0].Body)

	// Without stale fields nothing changes.
	_, err = s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "plain", Revisions: []string{"1-p"}, Body: map[string]any{"source": "s"}, Hook: ev.hook})
	require.NoError(t, err)
	require.Equal(t, "1-p", openAll(t, s, db, "plain")[0].Rev)
}

// A write's transaction replayed after its commit (commit_unknown_result)
// reports success and writes nothing more: new edits find their revision,
// replicated ones find theirs in the tree.
func TestReplayAfterCommit(t *testing.T) {
	ctx := context.Background()
	s, db := newTestStore(t)
	_, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "d", Revisions: []string{"2-b", "1-a"}, Body: map[string]any{}})
	require.NoError(t, err)
	w := Write{DB: testDB, ID: "d", BaseRev: "2-b", Body: map[string]any{"v": 1}}
	canonical, _ := json.Marshal(w.Body)
	var produced attempts
	attempt := func() (string, error) {
		return kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) { return s.writeTx(tr, w, canonical, &produced) })
	}
	first, err := attempt()
	require.NoError(t, err)
	replay, err := attempt()
	require.NoError(t, err)
	require.Equal(t, first, replay)
	require.Len(t, feed(t, s, ChangesQuery{Limit: -1}), 1)
	added, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "d", Revisions: []string{"2-b", "1-a"}, Body: map[string]any{}})
	require.NoError(t, err)
	require.False(t, added)
	// The same revision with a history that contradicts the tree's (found
	// by FuzzAPI): nothing changes, no ancestor becomes a leaf.
	added, err = s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "d", Revisions: []string{"2-b", "1-z"}, Body: map[string]any{}})
	require.NoError(t, err)
	require.False(t, added)
	require.Len(t, openAll(t, s, db, "d"), 1)
}

// Documents stored before revision trees keep their one branch, and their
// first write stores the tree.
func TestLegacyRecord(t *testing.T) {
	ctx := context.Background()
	s, db := newTestStore(t)
	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if v, err := tr.Get(s.docKey(testDB, "old")).Get(); err != nil || v != nil {
			return nil, err // written by an attempt that reported commit_unknown_result
		}
		v, _ := json.Marshal(record{Rev: "3-c", Revs: []string{"2-b", "1-a"}, Body: json.RawMessage(`{"v":"old"}`)})
		tr.Set(s.docKey(testDB, "old"), v)
		tr.Add(s.countKey(testDB, "doc"), one)
		row, _ := json.Marshal(changeRow{ID: "old", Rev: "3-c"})
		key, err := s.seqSpace(testDB).PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0)})
		require.NoError(t, err)
		tr.SetVersionstampedKey(key, row)
		tr.SetVersionstampedValue(s.docSeqKey(testDB, "old"), make([]byte, 14))
		return nil, nil
	})
	require.NoError(t, err)
	d := openAll(t, s, db, "old")[0]
	require.Equal(t, []string{"3-c", "2-b", "1-a"}, d.Path)
	require.Equal(t, "old", d.Body["v"])
	diff, err := s.RevsDiff(ctx, testDB, map[string][]string{"old": {"2-b", "4-x"}})
	require.NoError(t, err)
	require.Equal(t, map[string]RevsDiffResult{"old": {Missing: []string{"4-x"}, PossibleAncestors: []string{"3-c"}}}, diff)

	rev, err := s.Write(ctx, Write{DB: testDB, ID: "old", BaseRev: "3-c", Body: map[string]any{"v": "new"}})
	require.NoError(t, err)
	d = openAll(t, s, db, "old")[0]
	require.Equal(t, []string{rev, "3-c", "2-b", "1-a"}, d.Path)
	v, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(s.docKey(testDB, "old")).Get() })
	require.NoError(t, err)
	require.NotContains(t, string(v), `"revs"`, "the history now lives in the tree")
	require.Len(t, feed(t, s, ChangesQuery{Limit: -1}), 1)
}

// OpenRevs and RevsDiff answer as CouchDB's open_revs and _revs_diff.
func TestOpenRevsAndRevsDiff(t *testing.T) {
	ctx := context.Background()
	s, db := newTestStore(t)
	for _, p := range [][]string{{"3-c", "2-b", "1-a"}, {"2-x", "1-a"}} {
		_, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: "d", Revisions: p, Body: map[string]any{"at": p[0]}})
		require.NoError(t, err)
	}
	open := func(q OpenRevsQuery) []string {
		t.Helper()
		res, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]OpenRev, error) { return s.OpenRevs(tr, testDB, "d", q) })
		require.NoError(t, err)
		var out []string
		for _, r := range res {
			if r.Doc != nil {
				require.Equal(t, r.Doc.Rev, r.Doc.Body["at"])
				out = append(out, r.Doc.Rev)
			} else {
				out = append(out, "missing "+r.Missing)
			}
		}
		return out
	}
	for _, tc := range []struct {
		q    OpenRevsQuery
		want []string
	}{
		{OpenRevsQuery{}, []string{"3-c"}},
		{OpenRevsQuery{All: true}, []string{"3-c", "2-x"}},
		{OpenRevsQuery{Revs: []string{"2-x", "2-b", "9-z", "2-x"}}, []string{"2-x", "missing 2-b", "missing 9-z"}},
		{OpenRevsQuery{Revs: []string{"1-a"}, Latest: true}, []string{"3-c", "2-x"}},
		{OpenRevsQuery{Revs: []string{"2-b", "3-c"}, Latest: true}, []string{"3-c"}},
	} {
		require.Equal(t, tc.want, open(tc.q), "%+v", tc.q)
	}
	_, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]OpenRev, error) {
		return s.OpenRevs(tr, testDB, "nope", OpenRevsQuery{All: true})
	})
	require.ErrorIs(t, err, ErrDocNotFound)

	diff, err := s.RevsDiff(ctx, testDB, map[string][]string{
		"d":    {"3-c", "2-b", "4-q", "3-y"},
		"none": {"1-z"},
	})
	require.NoError(t, err)
	require.Equal(t, map[string]RevsDiffResult{
		"d":    {Missing: []string{"4-q", "3-y"}, PossibleAncestors: []string{"3-c", "2-x"}},
		"none": {Missing: []string{"1-z"}},
	}, diff)
	_, err = s.RevsDiff(ctx, "x/_replicator", map[string][]string{"d": {"1-a"}})
	require.ErrorIs(t, err, ErrDBNotFound)
}

// Feed and AllDocs read page by page across transactions: every row once,
// in order, with limits, skips, descending order and document filters
// crossing pages.
func TestPagedReads(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t)
	n := 2*scanPageRows + 50
	for i := range n {
		_, err := s.Write(ctx, Write{DB: testDB, ID: fmt.Sprintf("doc%04d", i), Body: map[string]any{"i": i}})
		require.NoError(t, err)
	}
	ids := func(rows []Change) []string {
		out := make([]string, len(rows))
		for i, c := range rows {
			out[i] = c.ID
		}
		return out
	}
	rows := feed(t, s, ChangesQuery{Limit: -1, IncludeDocs: true})
	require.Len(t, rows, n)
	for i, c := range rows {
		require.Equal(t, fmt.Sprintf("doc%04d", i), c.ID)
		require.Equal(t, json.Number(fmt.Sprint(i)), c.Doc.Body["i"])
	}
	require.Equal(t, []string{"doc0000", "doc0001"}, ids(feed(t, s, ChangesQuery{Limit: 2})))
	desc := feed(t, s, ChangesQuery{Limit: 3, Descending: true})
	require.Equal(t, []string{fmt.Sprintf("doc%04d", n-1), fmt.Sprintf("doc%04d", n-2), fmt.Sprintf("doc%04d", n-3)}, ids(desc))
	last, err := s.Feed(ctx, testDB, ChangesQuery{Since: rows[300].Seq, Limit: -1, DocIDs: map[string]bool{"doc0001": true, "doc0420": true}},
		func(c Change) error { require.Equal(t, "doc0420", c.ID); return nil })
	require.NoError(t, err)
	require.Equal(t, rows[n-1].Seq, last, "filtered rows count for last_seq")

	var got []string
	total, err := s.AllDocs(ctx, testDB, AllDocsQuery{Skip: scanPageRows + 5, Limit: 10}, func(d *Doc) error {
		got = append(got, d.ID)
		return nil
	})
	require.NoError(t, err)
	require.EqualValues(t, n, total)
	require.Len(t, got, 10)
	require.Equal(t, fmt.Sprintf("doc%04d", scanPageRows+5), got[0])
	docs, err := s.Lookup(ctx, testDB, []string{"doc0003", "nope"}, true)
	require.NoError(t, err)
	require.Equal(t, "doc0003", docs[0].ID)
	require.Nil(t, docs[1])
}

// Reads of many large documents stay within FoundationDB's advice for a
// transaction (1 MB read, one second): the pages of Feed and AllDocs, and
// the requests naming documents (Lookup, ReadRevs, RevsDiff), cut their
// transactions by bytes as well as by rows.
func TestPagesStayInBudget(t *testing.T) {
	ctx := context.Background()
	budget := kv.DefaultBudget()
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true, Budget: &budget})
	s := New(db, Options{})
	require.NoError(t, s.CreateDB(ctx, testDB, "u1", nil))
	big := strings.Repeat("x", 60_000)
	var ids []string
	var reqs []RevRequest
	diff := map[string][]string{}
	for i := range 40 {
		id := fmt.Sprintf("big%02d", i)
		ids = append(ids, id)
		for _, branch := range []string{"a", "b"} { // a conflict: two bodies, a tree
			_, err := s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: id, Revisions: []string{"2-" + branch, "1-r"},
				Body: map[string]any{"pad": big[:30_000]}})
			require.NoError(t, err)
		}
		reqs = append(reqs, RevRequest{ID: id, Query: OpenRevsQuery{All: true}})
		diff[id] = []string{"2-a", "3-c"}
	}
	rows := feed(t, s, ChangesQuery{Limit: -1, IncludeDocs: true, AllLeaves: true, Conflicts: true})
	require.Len(t, rows, 40)
	for _, c := range rows {
		require.Equal(t, []string{"2-b", "2-a"}, c.Revs)
		require.Equal(t, []string{"2-a"}, c.Doc.Conflicts)
	}
	n := 0
	_, err := s.AllDocs(ctx, testDB, AllDocsQuery{Limit: -1, Conflicts: true}, func(d *Doc) error {
		require.Equal(t, []string{"2-a"}, d.Conflicts)
		n++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 40, n)
	docs, err := s.Lookup(ctx, testDB, ids, true)
	require.NoError(t, err)
	require.Len(t, docs, 40)
	res, err := s.ReadRevs(ctx, testDB, reqs)
	require.NoError(t, err)
	require.Len(t, res, 40)
	for _, r := range res {
		require.Len(t, r.Revs, 2)
	}
	missing, err := s.RevsDiff(ctx, testDB, diff)
	require.NoError(t, err)
	require.Len(t, missing, 40)
}

// A write (new or replicated) whose commit is reported unknown after it
// committed runs its hook's OnCommit hooks once all the same: the retry that finds the write
// adopts them (the replicator's logs and counters of a document added).
func TestHooksAfterCommitUnknown(t *testing.T) {
	ctx := context.Background()
	db := faultkv.Wrap(kvtest.NewDB(t), faultkv.Options{Seed: 7, CommitUnknownResult: 0.5})
	s := New(db, Options{})
	require.NoError(t, s.CreateDB(ctx, testDB, "u1", nil))
	ran := map[string]int{}
	for i := range 50 {
		id := fmt.Sprint("d", i)
		_, err := s.Write(ctx, Write{DB: testDB, ID: id, Body: map[string]any{"v": i},
			Hook: func(tr kv.Transaction, ev WriteEvent) (bool, error) {
				tr.Locals().OnCommit(func() { ran[id]++ })
				return false, nil
			}})
		require.NoError(t, err)
		require.Equal(t, 1, ran[id], id)
		rid := fmt.Sprint("r", i)
		_, err = s.WriteReplicated(ctx, ReplicatedWrite{DB: testDB, ID: rid, Revisions: []string{"1-a"}, Body: map[string]any{},
			Hook: func(tr kv.Transaction, ev WriteEvent) (bool, error) {
				tr.Locals().OnCommit(func() { ran[rid]++ })
				return false, nil
			}})
		require.NoError(t, err)
		require.Equal(t, 1, ran[rid], rid)
	}
	require.NotZero(t, db.Stats().CommitUnknownResult)
}
