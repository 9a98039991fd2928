package repdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// AllDocsQuery selects documents of AllDocs: ids in [StartKey, EndKey]
// (bounds included, nil for none; StartKey is the high end when
// Descending), Skip rows skipped, at most Limit returned (< 0: all).
// Conflicts fills each document's Path, Conflicts and DeletedConflicts
// (reading the tree of those that have more than one leaf).
type AllDocsQuery struct {
	StartKey, EndKey *string
	Limit, Skip      int
	Descending       bool
	Conflicts        bool
}

// AllDocs reads the live documents of db in id order, page by page, and
// calls emit with each one selected (outside the transactions); it
// returns the number of live documents, read in the first page's
// transaction. ErrDBNotFound when db does not exist.
func (s *Store) AllDocs(ctx context.Context, db string, q AllDocsQuery, emit func(*Doc) error) (int64, error) {
	var total int64
	first := func(tr kv.ReadTransaction) error {
		count := tr.Get(s.countKey(db, "doc"))
		if _, err := s.getMeta(tr, db); err != nil {
			return err
		}
		c, err := count.Get()
		total = kv.DecodeInt64(c)
		return err
	}
	docs := s.sub.Sub("doc", db)
	begin, end := docs.FDBRangeKeys()
	lo, hi := q.StartKey, q.EndKey
	if q.Descending {
		lo, hi = hi, lo
	}
	if lo != nil {
		begin = docs.Pack(tuple.Tuple{*lo})
	}
	if hi != nil {
		end = kv.KeyAfter(docs.Pack(tuple.Tuple{*hi}))
	}
	if q.Limit == 0 || bytes.Compare(begin.FDBKey(), end.FDBKey()) >= 0 {
		// Nothing to list: only the checks and the count.
		_, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (struct{}, error) { return struct{}{}, first(tr) })
		return total, err
	}
	read := func(tr kv.ReadTransaction, rows []kv.KeyValue, b *readBudget) ([]*Doc, int, error) {
		out := make([]*Doc, 0, len(rows))
		for _, r := range rows {
			t, err := docs.Unpack(r.Key)
			if err != nil || len(t) != 1 {
				return nil, 0, fmt.Errorf("repdb: bad document key %s", r.Key)
			}
			id, _ := t[0].(string)
			d, err := decodeRecord(id, r.Value, false)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, d)
		}
		if q.Conflicts {
			n, err := s.fillTrees(tr, db, out, b)
			if err != nil {
				return nil, 0, err
			}
			out = out[:n]
		}
		return out, len(out), nil
	}
	skipped, emitted := 0, 0
	err := scan(ctx, s.db, kv.KeyRange{Begin: begin, End: end}, q.Descending, first, read, func(d *Doc) error {
		if skipped < q.Skip {
			skipped++
			return nil
		}
		if err := emit(d); err != nil {
			return err
		}
		if emitted++; q.Limit > 0 && emitted >= q.Limit {
			return ErrStop
		}
		return nil
	})
	return total, err
}

// fillTrees reads the trees of the documents with more than one leaf,
// in chunks, and fills their Path and conflicts (the others get their
// one-branch values without a read). It stops after the chunk in which b
// ran out and returns how many documents it filled.
func (s *Store) fillTrees(tr kv.ReadTransaction, db string, docs []*Doc, b *readBudget) (int, error) {
	futures := make([]kv.FutureByteSlice, len(docs))
	return chunked(len(docs), b, func(i int) {
		if d := docs[i]; d != nil && d.Leaves > 1 {
			futures[i] = tr.Get(s.treeKey(db, d.ID))
		}
	}, func(i int) error {
		if futures[i] == nil {
			return nil
		}
		return s.fillTree(docs[i], futures[i], b)
	})
}

// fillTree fills d's Path and conflicts from its tree, read by f.
func (s *Store) fillTree(d *Doc, f kv.FutureByteSlice, b *readBudget) error {
	v, err := f.Get()
	if err != nil {
		return err
	}
	b.add(len(v))
	t := chainTree(d.Rev, d.ancestors, d.Deleted)
	if v != nil {
		if t, err = decodeTree(v); err != nil {
			return fmt.Errorf("repdb: corrupt revision tree of %q: %v", d.ID, err)
		}
	}
	withTree(d, t)
	return nil
}

// Lookup reads the winners of the documents ids of db, in order, in
// pages (see paged): a live document, a deleted one (Deleted set) or nil
// for an id never written. conflicts fills Conflicts and DeletedConflicts
// as AllDocsQuery.Conflicts does.
func (s *Store) Lookup(ctx context.Context, db string, ids []string, conflicts bool) ([]*Doc, error) {
	first := func(tr kv.ReadTransaction) error {
		_, err := s.getMeta(tr, db)
		return err
	}
	return paged(ctx, s.db, ids, first, func(tr kv.ReadTransaction, id string, b *readBudget) (*Doc, error) {
		d, err := s.Get(tr, db, id)
		switch {
		case errors.Is(err, ErrDocNotFound):
			return nil, nil
		case err != nil && !errors.Is(err, ErrDocDeleted):
			return nil, err
		}
		b.add(len(d.raw))
		if conflicts && d.Leaves > 1 {
			if err := s.fillTree(d, tr.Get(s.treeKey(db, id)), b); err != nil {
				return nil, err
			}
		}
		return d, nil
	})
}
