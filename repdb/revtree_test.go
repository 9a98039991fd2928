package repdb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/stretchr/testify/require"
)

// treeModel is the obvious revision forest: every revision with its
// parent, leaves found by brute force, no stemming.
type treeModel struct {
	parent  map[string]string
	deleted map[string]bool
}

func newTreeModel() *treeModel {
	return &treeModel{parent: map[string]string{}, deleted: map[string]bool{}}
}

func (m *treeModel) has(rev string) bool { _, ok := m.parent[rev]; return ok }

// merge adds a path (newest first): for consistent histories, the union
// of the paths' revisions, each with the parent a path gives it.
func (m *treeModel) merge(path []string, deleted bool) (added, changed bool) {
	added = !m.has(path[0])
	for i, r := range path {
		parent := ""
		if i+1 < len(path) {
			parent = path[i+1]
		}
		if p, ok := m.parent[r]; !ok || (p == "" && parent != "") {
			m.parent[r], changed = parent, true
		}
	}
	if added {
		m.deleted[path[0]] = deleted
	}
	return added, changed
}

func (m *treeModel) leaves() []Leaf {
	isParent := map[string]bool{}
	for _, p := range m.parent {
		isParent[p] = true
	}
	var out []Leaf
	for r := range m.parent {
		if !isParent[r] {
			out = append(out, Leaf{Rev: r, Deleted: m.deleted[r]})
		}
	}
	// CouchDB's order, spelled out: live first, then the longest, then
	// the highest revision id.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Deleted != b.Deleted {
			return !a.Deleted
		}
		pa, ida, _ := ParseRev(a.Rev)
		pb, idb, _ := ParseRev(b.Rev)
		if pa != pb {
			return pa > pb
		}
		return ida > idb
	})
	return out
}

// stem keeps what lies within limit revisions of a leaf.
func (m *treeModel) stem(limit int) {
	keep := map[string]bool{}
	for _, l := range m.leaves() {
		r := l.Rev
		for n := 0; n < limit && r != ""; n++ {
			keep[r] = true
			r = m.parent[r]
		}
	}
	for r := range m.parent {
		if !keep[r] {
			delete(m.parent, r)
			delete(m.deleted, r)
		}
	}
	for r, p := range m.parent {
		if p != "" && !keep[p] {
			m.parent[r] = ""
		}
	}
}

// requireSame compares a tree with the model.
func requireSame(t testing.TB, m *treeModel, tree *RevTree, msg string) {
	t.Helper()
	require.Equal(t, len(m.parent), tree.Len(), msg)
	for r, p := range m.parent {
		nd := tree.node(r)
		require.NotNil(t, nd, "%s: %s missing", msg, r)
		require.Equal(t, p, nd.parent, "%s: parent of %s", msg, r)
	}
	require.Equal(t, m.leaves(), tree.Leaves(), msg)
}

// randomPath is a path for a replicated revision: a new branch from a
// random revision of the model (or a new root), of random length, with
// random ids (from a small alphabet, so that ids tie and compare).
func randomPath(rng *rand.Rand, m *treeModel) []string {
	revs := make([]string, 0, len(m.parent))
	for r := range m.parent {
		revs = append(revs, r)
	}
	sort.Strings(revs)
	var base []string // the history the new branch continues, newest first
	if len(revs) > 0 && rng.IntN(5) > 0 {
		r := revs[rng.IntN(len(revs))]
		for r != "" {
			base = append(base, r)
			r = m.parent[r]
		}
		// Replicated histories are often stemmed: drop old ones.
		base = base[:1+rng.IntN(len(base))]
	}
	pos := 1
	if len(base) > 0 {
		pos, _, _ = ParseRev(base[0])
		pos++
	} else {
		pos = 1 + rng.IntN(4)
	}
	n := 1 + rng.IntN(3)
	var path []string
	for i := n - 1; i >= 0; i-- {
		path = append(path, fmt.Sprintf("%d-%c%x", pos+i, 'a'+rune(rng.IntN(3)), rng.IntN(1<<20)))
	}
	return append(path, base...)
}

// TestRevTreeModel merges random replicated paths into a tree and a
// model and compares them after every step: revisions, parents, leaves
// and the winner (live before deleted, then the longest, then the highest
// id); then stems both, and checks that the encoding round-trips and that
// merging the same paths in another order gives the same tree.
func TestRevTreeModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(testutil.Seed(t), 1))
	for round := range 200 {
		m := newTreeModel()
		tree := &RevTree{}
		type merged struct {
			path    []string
			deleted bool
		}
		var history []merged
		for step := range 1 + rng.IntN(25) {
			path := randomPath(rng, m)
			deleted := rng.IntN(4) == 0
			msg := fmt.Sprintf("round %d step %d path %v deleted %v", round, step, path, deleted)
			added, changed, err := tree.Merge(path, deleted)
			require.NoError(t, err, msg)
			wantAdded, wantChanged := m.merge(path, deleted)
			require.Equal(t, wantAdded, added, msg)
			require.Equal(t, wantChanged, changed, msg)
			requireSame(t, m, tree, msg)
			_, again, err := tree.Merge(path, deleted)
			require.NoError(t, err)
			require.False(t, again, "%s: merged twice", msg)
			history = append(history, merged{path, deleted})
			if w := tree.Winner(); w.Rev != "" {
				require.True(t, tree.IsLeaf(w.Rev))
				require.Equal(t, w.Rev, tree.Path(w.Rev)[0])
			}
		}
		decoded, err := decodeTree(tree.encode())
		require.NoError(t, err)
		requireSame(t, m, decoded, fmt.Sprintf("round %d: decoded", round))

		// The same merges in another order give the same tree.
		other := &RevTree{}
		for _, i := range rng.Perm(len(history)) {
			_, _, err := other.Merge(history[i].path, history[i].deleted)
			require.NoError(t, err)
		}
		requireSame(t, m, other, fmt.Sprintf("round %d: merged in another order", round))

		limit := 1 + rng.IntN(4)
		m.stem(limit)
		tree.Stem(limit)
		requireSame(t, m, tree, fmt.Sprintf("round %d: stemmed to %d", round, limit))
	}
}

func leafRevs(ls []Leaf) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Rev
	}
	return out
}

// The winner rules, case by case.
func TestRevTreeWinner(t *testing.T) {
	for _, tc := range []struct {
		name   string
		paths  [][]string
		dels   []bool
		winner string
		order  []string
	}{
		{"longest wins", [][]string{{"2-b", "1-a"}, {"3-c", "2-x", "1-a"}}, []bool{false, false}, "3-c", []string{"3-c", "2-b"}},
		{"highest id breaks ties", [][]string{{"2-b", "1-a"}, {"2-c", "1-a"}}, []bool{false, false}, "2-c", []string{"2-c", "2-b"}},
		{"live beats a longer deletion", [][]string{{"2-b", "1-a"}, {"5-z", "4-y", "3-x", "2-w", "1-a"}}, []bool{false, true}, "2-b", []string{"2-b", "5-z"}},
		{"all deleted: the longest", [][]string{{"2-b", "1-a"}, {"3-c", "2-x", "1-a"}}, []bool{true, true}, "3-c", []string{"3-c", "2-b"}},
		{"disjoint roots", [][]string{{"7-q", "6-p"}, {"2-b", "1-a"}}, []bool{false, false}, "7-q", []string{"7-q", "2-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := &RevTree{}
			for i, p := range tc.paths {
				_, _, err := tree.Merge(p, tc.dels[i])
				require.NoError(t, err)
			}
			require.Equal(t, tc.winner, tree.Winner().Rev)
			require.Equal(t, tc.order, leafRevs(tree.Leaves()))
		})
	}
}

// Invalid paths are refused; the tree is left alone.
func TestRevTreeMergeInvalid(t *testing.T) {
	for _, path := range [][]string{
		nil, {""}, {"x"}, {"0-a"}, {"1-"}, {"-1-a"}, {"2-b", "2-a"}, {"3-c", "1-a"}, {"1-a b"},
		{"1-" + strings.Repeat("a", MaxRevIDLength+1)}, {"01-a"},
	} {
		tree := &RevTree{}
		_, _, err := tree.Merge(path, false)
		require.ErrorIs(t, err, ErrBadDoc, "%q", path)
		require.Zero(t, tree.Len())
	}
}

// A chain longer than RevsLimit is stemmed to it; a tree whose encoding
// would not fit is stemmed further; too many leaves are refused.
func TestRevTreeBound(t *testing.T) {
	tree := &RevTree{}
	path := make([]string, 0, RevsLimit+50)
	for i := RevsLimit + 50; i >= 1; i-- {
		path = append(path, fmt.Sprintf("%d-%032x", i, i))
	}
	_, _, err := tree.Merge(path, false)
	require.NoError(t, err)
	b, err := tree.bound()
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), MaxTreeBytes)
	require.Equal(t, RevsLimit, tree.Len())
	require.Len(t, tree.Path(path[0]), RevsLimit)

	// Two long branches do not fit together: each keeps half as many.
	for i := RevsLimit + 50; i >= 2; i-- {
		path[RevsLimit+50-i] = fmt.Sprintf("%d-%032x", i, i*7+3)
	}
	_, _, err = tree.Merge(append(path[:RevsLimit+49], fmt.Sprintf("1-%032x", 1)), false)
	require.NoError(t, err)
	b, err = tree.bound()
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), MaxTreeBytes)
	require.Len(t, tree.Leaves(), 2)
	require.Len(t, tree.Path(tree.Winner().Rev), RevsLimit/2)

	many := &RevTree{}
	for i := range MaxTreeBytes / 20 {
		_, _, err := many.Merge([]string{fmt.Sprintf("1-%032x", i)}, false)
		require.NoError(t, err)
	}
	_, err = many.bound()
	require.ErrorIs(t, err, ErrTooLarge)
}

// A document stored before trees has its one branch.
func TestChainTree(t *testing.T) {
	tree := chainTree("3-c", []string{"2-b", "1-a"}, true)
	require.Equal(t, []string{"3-c", "2-b", "1-a"}, tree.Path("3-c"))
	require.Equal(t, []Leaf{{Rev: "3-c", Deleted: true}}, tree.Leaves())
	// A history that is not a path keeps the revision alone.
	require.Equal(t, 1, chainTree("3-c", []string{"1-a"}, false).Len())
}

// FuzzRevTreeMerge merges paths decoded from the input and checks the
// tree's invariants after each: parents one position below, the merged
// revision present and a second merge a no-op, the winner a leaf heading
// its path, LeavesUnder consistent, and the encoding round-trips.
func FuzzRevTreeMerge(f *testing.F) {
	f.Add("2-b 1-a|3-c 2-b|2-x 1-a!|5-e 4-d")
	f.Add("1-a|1-b!|2-c 1-b")
	f.Add("9-z 8-y|10-q 9-z 8-y 7-x|2-a 1-r")
	f.Add("2-b 1-a|2-b 1-c") // the same revision with another history
	f.Fuzz(func(t *testing.T, in string) {
		tree := &RevTree{}
		given := map[string]bool{} // revisions merged with a body
		for _, p := range strings.Split(in, "|") {
			deleted := strings.HasSuffix(p, "!")
			path := strings.Fields(strings.TrimSuffix(p, "!"))
			if _, _, err := tree.Merge(path, deleted); err != nil {
				require.ErrorIs(t, err, ErrBadDoc)
				continue
			}
			given[path[0]] = true
			added, changed, err := tree.Merge(path, deleted)
			require.NoError(t, err)
			require.False(t, added || changed)
			require.True(t, tree.Has(path[0]))
			for rev, nd := range tree.nodes {
				pos, id, ok := ParseRev(rev)
				require.True(t, ok, rev)
				require.Equal(t, pos, nd.pos)
				require.Equal(t, id, nd.id)
				if nd.parent != "" {
					require.Equal(t, pos-1, tree.node(nd.parent).pos, rev)
				}
			}
			leaves := tree.Leaves()
			require.NotEmpty(t, leaves)
			for _, l := range leaves {
				require.True(t, given[l.Rev], "leaf %s came as an ancestor only: it has no body", l.Rev)
			}
			w := tree.Winner()
			require.True(t, tree.IsLeaf(w.Rev))
			require.Equal(t, w, leaves[0])
			for _, l := range leaves {
				require.Contains(t, tree.LeavesUnder(tree.Path(l.Rev)[len(tree.Path(l.Rev))-1]), l)
			}
			decoded, err := decodeTree(tree.encode())
			require.NoError(t, err)
			require.Equal(t, leaves, decoded.Leaves())
			require.Equal(t, tree.Len(), decoded.Len())
			require.True(t, slices.Equal(tree.Path(w.Rev), decoded.Path(w.Rev)))
		}
	})
}
