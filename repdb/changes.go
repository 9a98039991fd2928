package repdb

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Change is one row of the changes feed: a document's last write.
type Change struct {
	// Seq is the write's sequence: its versionstamp in hex (24 digits).
	Seq string
	ID  string
	// Rev is the winning revision, Deleted whether it is a deletion.
	Rev     string
	Deleted bool
	// Revs are the leaves, winner first, with ChangesQuery.AllLeaves;
	// only Rev otherwise.
	Revs []string
	// Doc is the winner with ChangesQuery.IncludeDocs (nil for
	// deletions).
	Doc *Doc
}

// parseSeq turns a since value into a versionstamp; "0" and "" mean the
// beginning.
func parseSeq(since string) (tuple.Versionstamp, bool, error) {
	if since == "" || since == "0" {
		return tuple.Versionstamp{}, false, nil
	}
	b, err := hex.DecodeString(since)
	if err != nil || len(b) != 12 {
		return tuple.Versionstamp{}, false, fmt.Errorf("%w: %q", ErrBadSequence, since)
	}
	var vs tuple.Versionstamp
	copy(vs.TransactionVersion[:], b[:10])
	vs.UserVersion = binary.BigEndian.Uint16(b[10:])
	if !vs.IsComplete() { // all ones: no commit has this version
		return tuple.Versionstamp{}, false, fmt.Errorf("%w: %q", ErrBadSequence, since)
	}
	return vs, true, nil
}

// feedRange is the part of db's feed after since.
func (s *Store) feedRange(db, since string) (kv.KeyRange, error) {
	vs, after, err := parseSeq(since)
	if err != nil {
		return kv.KeyRange{}, err
	}
	sp := s.seqSpace(db)
	begin, end := sp.FDBRangeKeys()
	if after {
		begin = kv.KeyAfter(sp.Pack(tuple.Tuple{vs}))
	}
	return kv.KeyRange{Begin: begin, End: end}, nil
}

// ChangesQuery selects rows of a changes feed: those after Since ("" or
// "0": from the start), oldest first or, with Descending, newest first, at
// most Limit of them (< 0: all) among those DocIDs keeps.
type ChangesQuery struct {
	Since       string
	Limit       int
	Descending  bool
	IncludeDocs bool
	// AllLeaves lists every leaf in Change.Revs (style=all_docs).
	AllLeaves bool
	// Conflicts fills the Conflicts and DeletedConflicts of included
	// documents.
	Conflicts bool
	// DocIDs, when not nil, keeps only the rows of these documents
	// (filter=_doc_ids).
	DocIDs map[string]bool
}

// Feed reads db's changes feed after q.Since page by page (one read
// transaction each, see scanPageRows and pageBudget: the documents and
// trees a page brings count) and calls emit with each row kept,
// outside the transactions. It returns the last sequence read: that of
// the last row emitted when Limit ends the feed, else that of the last
// row read (filtered ones count, as in CouchDB), or Since ("0" for "")
// when there is none; descending feeds report the oldest row read, where
// the next page continues. ErrBadSequence for a since that is not a
// sequence of this store, ErrDBNotFound for a missing database.
func (s *Store) Feed(ctx context.Context, db string, q ChangesQuery, emit func(Change) error) (string, error) {
	rng, err := s.feedRange(db, q.Since)
	if err != nil {
		return "", err
	}
	last := q.Since
	if last == "" {
		last = "0"
	}
	first := func(tr kv.ReadTransaction) error {
		_, err := s.getMeta(tr, db)
		return err
	}
	if q.Limit == 0 {
		_, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (struct{}, error) { return struct{}{}, first(tr) })
		return last, err
	}
	type row struct {
		c      Change
		keep   bool
		leaves int
	}
	read := func(tr kv.ReadTransaction, rows []kv.KeyValue, b *readBudget) ([]row, int, error) {
		out := make([]row, len(rows))
		for i, r := range rows {
			seq, err := s.seqOf(db, r.Key)
			if err != nil {
				return nil, 0, err
			}
			var cr changeRow
			if err := json.Unmarshal(r.Value, &cr); err != nil {
				return nil, 0, fmt.Errorf("repdb: corrupt change row: %v", err)
			}
			out[i] = row{c: Change{Seq: seq, ID: cr.ID, Rev: cr.Rev, Deleted: cr.Deleted, Revs: []string{cr.Rev}},
				keep: q.DocIDs == nil || q.DocIDs[cr.ID], leaves: cr.Leaves}
			if cr.Leaves > 1 && q.AllLeaves {
				out[i].c.Revs = nil // filled from the tree
			}
		}
		// The documents and trees a row needs, read in chunks within the
		// page's budget.
		docs := make([]kv.FutureByteSlice, len(rows))
		trees := make([]kv.FutureByteSlice, len(rows))
		used, err := chunked(len(out), b, func(i int) {
			c := &out[i].c
			if !out[i].keep {
				return
			}
			if q.IncludeDocs && !c.Deleted {
				docs[i] = tr.Get(s.docKey(db, c.ID))
			}
			if out[i].leaves > 1 && (q.AllLeaves || (q.IncludeDocs && q.Conflicts)) {
				trees[i] = tr.Get(s.treeKey(db, c.ID))
			}
		}, func(i int) error {
			return s.fillChange(&out[i].c, docs[i], trees[i], q.Conflicts, b)
		})
		if err != nil {
			return nil, 0, err
		}
		return out[:used], used, nil
	}
	emitted := 0
	err = scan(ctx, s.db, rng, q.Descending, first, read, func(r row) error {
		last = r.c.Seq
		if !r.keep {
			return nil
		}
		if err := emit(r.c); err != nil {
			return err
		}
		if emitted++; q.Limit > 0 && emitted >= q.Limit {
			return ErrStop
		}
		return nil
	})
	return last, err
}

// fillChange completes a change row from its document's record and tree
// (each future nil when not read): the included document, its conflicts,
// every leaf.
func (s *Store) fillChange(c *Change, doc, tree kv.FutureByteSlice, conflicts bool, b *readBudget) error {
	var t *RevTree
	if tree != nil {
		v, err := tree.Get()
		if err != nil {
			return err
		}
		b.add(len(v))
		if v != nil {
			if t, err = decodeTree(v); err != nil {
				return fmt.Errorf("repdb: corrupt revision tree of %q: %v", c.ID, err)
			}
		}
	}
	if doc != nil {
		v, err := doc.Get()
		if err != nil {
			return err
		}
		b.add(len(v))
		if v != nil {
			if c.Doc, err = decodeRecord(c.ID, v, false); err != nil {
				return err
			}
		}
	}
	if t == nil { // a document from before trees, or no tree asked for
		t = chainTree(c.Rev, nil, c.Deleted)
		if c.Doc != nil {
			t = chainTree(c.Rev, c.Doc.ancestors, c.Deleted)
		}
	}
	if c.Revs == nil {
		for _, l := range t.Leaves() {
			c.Revs = append(c.Revs, l.Rev)
		}
	}
	if c.Doc != nil && conflicts {
		withTree(c.Doc, t)
	}
	return nil
}

// WaitChange returns watches that fire after the first document write of
// db after since (the feed key) or the database's deletion (its metadata
// key), or nil when there already is a change: the check and the watches
// are in one transaction, so no write slips between.
func (s *Store) WaitChange(ctx context.Context, db, since string) ([]kv.FutureNil, error) {
	rng, err := s.feedRange(db, since)
	if err != nil {
		return nil, err
	}
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) ([]kv.FutureNil, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			return nil, err
		}
		rows, err := tr.GetRange(rng, kv.RangeOptions{Limit: 1}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		if len(rows) > 0 {
			return nil, nil
		}
		return []kv.FutureNil{tr.Watch(s.feedKey(db)), tr.Watch(s.dbKey(db))}, nil
	})
}
