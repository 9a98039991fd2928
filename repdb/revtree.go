package repdb

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Bounds of revision trees.
const (
	// RevsLimit is how many revisions each branch of a document's
	// revision tree keeps, counted from its leaf (CouchDB's default
	// revs_limit): older ones are stemmed away, as CouchDB does.
	RevsLimit = 1000
	// MaxTreeBytes caps a revision tree's encoding, which is stored in one
	// value. A tree that is still larger once stemmed to RevsLimit is
	// stemmed to half as many revisions per branch, again until it fits;
	// a tree whose leaves alone do not fit (thousands of conflicts) is
	// refused with ErrTooLarge. A chain of RevsLimit CouchDB revisions
	// takes about 40 kB.
	MaxTreeBytes = 64 << 10
	// MaxRevIDLength caps the part of a revision after "N-" (CouchDB and
	// PouchDB write 32 hexadecimal digits).
	MaxRevIDLength = 100
)

// ParseRev splits a revision "N-id" into its position N (≥ 1) and id; ok
// is false for anything else: a position that is not a positive integer,
// an empty id, or one longer than MaxRevIDLength or holding characters
// other than printable ASCII.
func ParseRev(rev string) (pos int, id string, ok bool) {
	n, id, found := strings.Cut(rev, "-")
	if !found || id == "" || len(id) > MaxRevIDLength || n == "" || n[0] == '0' || len(n) > 9 {
		return 0, "", false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return 0, "", false
		}
	}
	pos, _ = strconv.Atoi(n)
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return 0, "", false
		}
	}
	return pos, id, true
}

// revNode is one revision of a tree.
type revNode struct {
	pos     int
	id      string
	parent  string // "" for a root
	deleted bool   // meaningful for leaves only
}

// RevTree is a document's revision tree (a forest once stemmed or when
// replicated revisions share no history): every revision kept, its
// parent, and whether each leaf is a deletion. The zero value is an empty
// tree. It is not safe for concurrent use.
type RevTree struct {
	nodes map[string]*revNode
}

func (t *RevTree) node(rev string) *revNode {
	if t.nodes == nil {
		return nil
	}
	return t.nodes[rev]
}

// Has reports whether rev is in the tree (a leaf or an ancestor kept).
func (t *RevTree) Has(rev string) bool { return t.node(rev) != nil }

// Len is the number of revisions in the tree.
func (t *RevTree) Len() int { return len(t.nodes) }

// Leaf is a leaf revision of a tree.
type Leaf struct {
	Rev     string
	Deleted bool
}

// childCount counts each revision's children.
func (t *RevTree) childCount() map[string]int {
	n := make(map[string]int, len(t.nodes))
	for _, nd := range t.nodes {
		if nd.parent != "" {
			n[nd.parent]++
		}
	}
	return n
}

// Leaves returns the leaves in CouchDB's order, the winner first: live
// leaves before deleted ones, then the highest position, then the highest
// revision id (compared as strings, which orders CouchDB's hexadecimal ids
// as CouchDB does).
func (t *RevTree) Leaves() []Leaf {
	children := t.childCount()
	var out []Leaf
	for rev, nd := range t.nodes {
		if children[rev] == 0 {
			out = append(out, Leaf{Rev: rev, Deleted: nd.deleted})
		}
	}
	slices.SortFunc(out, func(a, b Leaf) int { return t.compareLeaves(a, b) })
	return out
}

// compareLeaves orders a before b when a wins over b.
func (t *RevTree) compareLeaves(a, b Leaf) int {
	if a.Deleted != b.Deleted {
		if a.Deleted {
			return 1
		}
		return -1
	}
	na, nb := t.nodes[a.Rev], t.nodes[b.Rev]
	if c := cmp.Compare(nb.pos, na.pos); c != 0 {
		return c
	}
	return strings.Compare(nb.id, na.id)
}

// Winner returns the winning leaf ("" for an empty tree).
func (t *RevTree) Winner() Leaf {
	leaves := t.Leaves()
	if len(leaves) == 0 {
		return Leaf{}
	}
	return leaves[0]
}

// IsLeaf reports whether rev is a leaf of the tree.
func (t *RevTree) IsLeaf(rev string) bool {
	if !t.Has(rev) {
		return false
	}
	for _, nd := range t.nodes {
		if nd.parent == rev {
			return false
		}
	}
	return true
}

// Path returns rev and its ancestors kept, newest first (nil when rev is
// not in the tree).
func (t *RevTree) Path(rev string) []string {
	var out []string
	for nd := t.node(rev); nd != nil; nd = t.node(nd.parent) {
		out = append(out, strconv.Itoa(nd.pos)+"-"+nd.id)
		if len(out) > len(t.nodes) { // a cycle: corrupt data
			return out
		}
	}
	return out
}

// LeavesUnder returns the leaves that descend from rev (rev itself when
// it is a leaf), winner first: what CouchDB's latest=true gives for rev.
func (t *RevTree) LeavesUnder(rev string) []Leaf {
	var out []Leaf
	for _, l := range t.Leaves() {
		for _, r := range t.Path(l.Rev) {
			if r == rev {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// add inserts a revision with its parent ("" for a root).
func (t *RevTree) add(rev, parent string, deleted bool) {
	pos, id, _ := ParseRev(rev)
	if t.nodes == nil {
		t.nodes = map[string]*revNode{}
	}
	t.nodes[rev] = &revNode{pos: pos, id: id, parent: parent, deleted: deleted}
}

// Merge adds a replicated revision with its history (path: the revision
// first, then its ancestors, newest first, each one position below the
// one before), as CouchDB merges new_edits=false writes. Walking the path
// from the revision down, each revision the tree lacks is added under the
// next one; a root of the tree that the path continues gets its parent
// (history stemmed away comes back; the tree is stemmed again when
// stored); the walk stops where the path contradicts the tree (a revision
// whose parent is another one), ignoring the rest. So an ancestor is only
// ever added with a child, and for consistent histories the result does
// not depend on the order of merges. added reports that
// the revision itself was new, changed that the tree changed at all
// (grafts only, when not added). An invalid path is an error wrapping
// ErrBadDoc.
func (t *RevTree) Merge(path []string, deleted bool) (added, changed bool, err error) {
	if err := checkPath(path); err != nil {
		return false, false, err
	}
	added = !t.Has(path[0])
	type edge struct{ rev, parent string }
	var adds []edge
walk:
	for i, r := range path {
		parent := ""
		if i+1 < len(path) {
			parent = path[i+1]
		}
		nd := t.node(r)
		if nd == nil {
			adds = append(adds, edge{r, parent})
			continue
		}
		switch {
		case nd.parent == parent: // known history: go on, a root may lie below
		case nd.parent == "":
			nd.parent, changed = parent, true // a root the path continues
		default:
			break walk // the path contradicts the tree's history
		}
	}
	for _, a := range adds {
		t.add(a.rev, a.parent, a.rev == path[0] && deleted)
	}
	return added, changed || len(adds) > 0, nil
}

// checkPath validates a revision path: valid revisions with consecutive
// positions, newest first, no repeats.
func checkPath(path []string) error {
	if len(path) == 0 {
		return fmt.Errorf("%w: no revision", ErrBadDoc)
	}
	prev := 0
	for i, r := range path {
		pos, _, ok := ParseRev(r)
		if !ok {
			return fmt.Errorf("%w: invalid revision %q", ErrBadDoc, r)
		}
		if i > 0 && pos != prev-1 {
			return fmt.Errorf("%w: _revisions must list consecutive revisions, newest first", ErrBadDoc)
		}
		prev = pos
	}
	return nil
}

// Stem keeps, on every branch, the limit revisions nearest its leaf, as
// CouchDB's revs_limit does; revisions left without their parent become
// roots. Leaves are never removed.
func (t *RevTree) Stem(limit int) {
	limit = max(limit, 1)
	keep := make(map[string]bool, len(t.nodes))
	for _, l := range t.Leaves() {
		n := 0
		for nd, rev := t.node(l.Rev), l.Rev; nd != nil && n < limit; nd, rev = t.node(nd.parent), nd.parent {
			keep[rev] = true
			n++
		}
	}
	for rev := range t.nodes {
		if !keep[rev] {
			delete(t.nodes, rev)
		}
	}
	for _, nd := range t.nodes {
		if nd.parent != "" && !keep[nd.parent] {
			nd.parent = ""
		}
	}
}

// treeJSON is a tree as stored: {"n": [[parent, "id"(, 1)], ...]}, the
// revisions in position order (parents before children); parent is the
// index of the parent revision in the list, or, for a root, minus its
// position; a third element 1 marks a deleted leaf.
type treeJSON struct {
	Nodes [][]json.RawMessage `json:"n"`
}

// encode stores the tree compactly (see treeJSON).
func (t *RevTree) encode() []byte {
	revs := make([]string, 0, len(t.nodes))
	for rev := range t.nodes {
		revs = append(revs, rev)
	}
	slices.SortFunc(revs, func(a, b string) int {
		na, nb := t.nodes[a], t.nodes[b]
		return cmp.Or(cmp.Compare(na.pos, nb.pos), strings.Compare(na.id, nb.id))
	})
	index := make(map[string]int, len(revs))
	var b strings.Builder
	b.WriteString(`{"n":[`)
	for i, rev := range revs {
		nd := t.nodes[rev]
		index[rev] = i
		if i > 0 {
			b.WriteByte(',')
		}
		parent := -nd.pos
		if nd.parent != "" {
			parent = index[nd.parent]
		}
		id, _ := json.Marshal(nd.id)
		b.WriteString("[" + strconv.Itoa(parent) + "," + string(id))
		if nd.deleted {
			b.WriteString(",1")
		}
		b.WriteByte(']')
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// decodeTree reads a stored tree.
func decodeTree(v []byte) (*RevTree, error) {
	var tj treeJSON
	if err := json.Unmarshal(v, &tj); err != nil {
		return nil, err
	}
	t := &RevTree{nodes: make(map[string]*revNode, len(tj.Nodes))}
	revs := make([]string, len(tj.Nodes))
	for i, n := range tj.Nodes {
		if len(n) < 2 {
			return nil, fmt.Errorf("revision %d: %d fields", i, len(n))
		}
		var parent int
		var id string
		if err := json.Unmarshal(n[0], &parent); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(n[1], &id); err != nil {
			return nil, err
		}
		nd := &revNode{id: id}
		switch {
		case parent < 0:
			nd.pos = -parent
		case parent < i:
			nd.parent = revs[parent]
			nd.pos = t.nodes[nd.parent].pos + 1
		default:
			return nil, fmt.Errorf("revision %d: parent %d", i, parent)
		}
		nd.deleted = len(n) > 2 && string(n[2]) == "1"
		revs[i] = strconv.Itoa(nd.pos) + "-" + id
		t.nodes[revs[i]] = nd
	}
	return t, nil
}

// chainTree is the tree of a document stored before trees were: one
// branch, rev and its ancestors newest first.
func chainTree(rev string, ancestors []string, deleted bool) *RevTree {
	t := &RevTree{}
	path := append([]string{rev}, ancestors...)
	if checkPath(path) != nil {
		path = path[:1]
	}
	for i := len(path) - 1; i >= 0; i-- {
		parent := ""
		if i+1 < len(path) {
			parent = path[i+1]
		}
		t.add(path[i], parent, i == 0 && deleted)
	}
	return t
}

// bound stems the tree to RevsLimit and then, while its encoding exceeds
// MaxTreeBytes, to half as many revisions per branch; it returns the
// encoding, or ErrTooLarge when even the leaves alone do not fit.
func (t *RevTree) bound() ([]byte, error) {
	limit := RevsLimit
	for {
		t.Stem(limit)
		b := t.encode()
		if len(b) <= MaxTreeBytes {
			return b, nil
		}
		if limit == 1 {
			return nil, fmt.Errorf("%w: too many conflicting revisions", ErrTooLarge)
		}
		limit /= 2
	}
}

// clone returns a deep copy.
func (t *RevTree) clone() *RevTree {
	c := &RevTree{nodes: make(map[string]*revNode, len(t.nodes))}
	for rev, nd := range t.nodes {
		n := *nd
		c.nodes[rev] = &n
	}
	return c
}
