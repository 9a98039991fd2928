package repdb

import (
	"context"
	"errors"
	"slices"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// OpenRevsQuery selects revisions of a document for OpenRevs.
type OpenRevsQuery struct {
	// Revs are the revisions asked for; none means the winner.
	Revs []string
	// All asks for every leaf (open_revs=all).
	All bool
	// Latest gives, for a revision of Revs that is not a leaf, the leaves
	// that descend from it (latest=true).
	Latest bool
}

// OpenRev is one answer of OpenRevs: a revision with its body and path,
// or Missing, a revision the document does not hold with a body (unknown,
// stemmed, or an ancestor, whose bodies are not kept).
type OpenRev struct {
	Doc     *Doc
	Missing string
}

// OpenRevs reads revisions of a document in tr, with their bodies and
// paths (Doc.Path); the winner also gets its Conflicts and
// DeletedConflicts. Only leaves have bodies, as in a compacted CouchDB
// database. Answers follow the order of q.Revs, each revision once. A
// document that never existed gives ErrDocNotFound for the winner or
// All, and every revision missing otherwise; a deleted winner is returned
// with Deleted set.
func (s *Store) OpenRevs(tr kv.ReadTransaction, db, id string, q OpenRevsQuery) ([]OpenRev, error) {
	return s.openRevs(tr, db, id, q, &readBudget{})
}

// openRevs is OpenRevs, counting what it reads in b.
func (s *Store) openRevs(tr kv.ReadTransaction, db, id string, q OpenRevsQuery, b *readBudget) ([]OpenRev, error) {
	st, err := s.load(tr, db, id)
	if err != nil {
		return nil, err
	}
	b.add(st.size)
	if st.winner == nil {
		if q.All || len(q.Revs) == 0 {
			return nil, ErrDocNotFound
		}
		var out []OpenRev
		for i, r := range q.Revs {
			if !slices.Contains(q.Revs[:i], r) {
				out = append(out, OpenRev{Missing: r})
			}
		}
		return out, nil
	}
	var want []string // revisions to read, or "" + missing
	var missing []string
	switch {
	case q.All:
		for _, l := range st.tree.Leaves() {
			want = append(want, l.Rev)
		}
	case len(q.Revs) == 0:
		want = []string{st.winner.Rev}
	default:
		for _, r := range q.Revs {
			switch {
			case st.tree.IsLeaf(r):
				want = append(want, r)
			case q.Latest && st.tree.Has(r):
				for _, l := range st.tree.LeavesUnder(r) {
					want = append(want, l.Rev)
				}
			default:
				missing = append(missing, r)
			}
		}
	}
	// Read the leaves' records at once.
	futures := map[string]kv.FutureByteSlice{}
	for _, r := range want {
		if _, ok := futures[r]; !ok && r != st.winner.Rev {
			futures[r] = tr.Get(s.leafKey(db, id, r))
		}
	}
	out := make([]OpenRev, 0, len(want)+len(missing))
	seen := map[string]bool{}
	for _, r := range want {
		if seen[r] {
			continue
		}
		seen[r] = true
		var d *Doc
		if r == st.winner.Rev {
			c := *st.winner
			d = withTree(&c, st.tree)
		} else {
			v, err := futures[r].Get()
			if err != nil {
				return nil, err
			}
			b.add(len(v))
			if v == nil {
				return nil, errors.New("repdb: corrupt document " + id + ": no record of leaf " + r)
			}
			if d, err = decodeRecord(id, v, false); err != nil {
				return nil, err
			}
			d.Path = st.tree.Path(r)
		}
		out = append(out, OpenRev{Doc: d})
	}
	for _, r := range missing {
		if !seen[r] {
			seen[r] = true
			out = append(out, OpenRev{Missing: r})
		}
	}
	return out, nil
}

// RevRequest is one document's revisions for ReadRevs.
type RevRequest struct {
	ID    string
	Query OpenRevsQuery
}

// RevResult is ReadRevs' answer to one RevRequest: OpenRevs' revisions,
// or its error for this document alone (ErrDocNotFound).
type RevResult struct {
	Revs []OpenRev
	Err  error
}

// ReadRevs runs OpenRevs for each request, in order, in pages (see paged),
// so a request as large as the body limit allows never makes one large
// transaction.
func (s *Store) ReadRevs(ctx context.Context, db string, reqs []RevRequest) ([]RevResult, error) {
	return paged(ctx, s.db, reqs, nil, func(tr kv.ReadTransaction, rq RevRequest, b *readBudget) (RevResult, error) {
		revs, err := s.openRevs(tr, db, rq.ID, rq.Query, b)
		if errors.Is(err, ErrDocNotFound) {
			return RevResult{Err: err}, nil
		}
		return RevResult{Revs: revs}, err
	})
}

// RevsDiffResult is one document's answer of RevsDiff.
type RevsDiffResult struct {
	Missing []string
	// PossibleAncestors are the document's leaves positioned below one
	// of the missing revisions.
	PossibleAncestors []string
}

// RevsDiff answers _revs_diff: for each document of revs, the revisions
// it does not hold (not in its tree, which includes stemmed ones) and its
// possible ancestors among them; documents that hold every revision are
// left out. It reads the documents in pages (see paged).
func (s *Store) RevsDiff(ctx context.Context, db string, revs map[string][]string) (map[string]RevsDiffResult, error) {
	ids := make([]string, 0, len(revs))
	for id := range revs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	res, err := paged(ctx, s.db, ids, nil, func(tr kv.ReadTransaction, id string, b *readBudget) (*RevsDiffResult, error) {
		st, err := s.load(tr, db, id)
		if err != nil {
			return nil, err
		}
		b.add(st.size)
		var r RevsDiffResult
		maxPos := 0
		for _, rev := range revs[id] {
			if !st.tree.Has(rev) && !slices.Contains(r.Missing, rev) {
				r.Missing = append(r.Missing, rev)
				pos, _ := RevPos(rev)
				maxPos = max(maxPos, pos)
			}
		}
		if len(r.Missing) == 0 {
			return nil, nil
		}
		for _, l := range st.tree.Leaves() {
			if pos, _ := RevPos(l.Rev); pos < maxPos {
				r.PossibleAncestors = append(r.PossibleAncestors, l.Rev)
			}
		}
		return &r, nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]RevsDiffResult{}
	for i, r := range res {
		if r != nil {
			out[ids[i]] = *r
		}
	}
	return out, nil
}
