package repdb

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Pages of the reads that can cover a whole database (AllDocs, Feed):
// each transaction reads at most scanPageRows rows and stops early once
// the documents it read exceed scanPageBytes, so no transaction grows with
// the database.
const (
	scanPageRows  = 200
	scanPageBytes = 1 << 20
)

// scan reads rng in pages, one read transaction each: read turns a page's
// rows into values inside the transaction and reports how many rows it
// used (fewer when a byte budget ran out, at least one); emit receives the
// values between transactions. first, when not nil, runs in the first
// page's transaction (database checks, counters). A page's transaction
// retried reads the same page again: nothing is emitted twice.
func scan[T any](ctx context.Context, db kv.Database, rng kv.KeyRange, reverse bool,
	first func(tr kv.ReadTransaction) error,
	read func(tr kv.ReadTransaction, rows []kv.KeyValue) ([]T, int, error),
	emit func(T) error) error {
	type page struct {
		vals []T
		last kv.Key
		done bool
	}
	for firstPage := true; ; firstPage = false {
		p, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (page, error) {
			if firstPage && first != nil {
				if err := first(tr); err != nil {
					return page{}, err
				}
			}
			rows, err := tr.GetRange(rng, kv.RangeOptions{Limit: scanPageRows, Reverse: reverse}).GetSliceWithError()
			if err != nil {
				return page{}, err
			}
			if len(rows) == 0 {
				return page{done: true}, nil
			}
			vals, used, err := read(tr, rows)
			if err != nil {
				return page{}, err
			}
			used = min(max(used, 1), len(rows))
			return page{vals: vals, last: rows[used-1].Key, done: used == len(rows) && len(rows) < scanPageRows}, nil
		})
		if err != nil {
			return err
		}
		for _, v := range p.vals {
			if err := emit(v); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		if p.done {
			return nil
		}
		if reverse {
			rng.End = p.last
		} else {
			rng.Begin = kv.KeyAfter(p.last)
		}
	}
}

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
	read := func(tr kv.ReadTransaction, rows []kv.KeyValue) ([]*Doc, int, error) {
		out := make([]*Doc, 0, len(rows))
		size, used := 0, 0
		for _, r := range rows {
			used++
			t, err := docs.Unpack(r.Key)
			if err != nil || len(t) != 1 {
				continue
			}
			id, _ := t[0].(string)
			d, err := decodeRecord(id, r.Value, false)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, d)
			if size += len(r.Value); size > scanPageBytes {
				break
			}
		}
		if q.Conflicts {
			if err := s.fillTrees(tr, db, out); err != nil {
				return nil, 0, err
			}
		}
		return out, used, nil
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

// fillTrees reads, at once, the trees of the documents with more than
// one leaf and fills their Path and conflicts; the others get their
// one-branch values without a read.
func (s *Store) fillTrees(tr kv.ReadTransaction, db string, docs []*Doc) error {
	futures := make([]kv.FutureByteSlice, len(docs))
	for i, d := range docs {
		if d != nil && d.Leaves > 1 {
			futures[i] = tr.Get(s.treeKey(db, d.ID))
		}
	}
	for i, d := range docs {
		if futures[i] == nil {
			continue
		}
		v, err := futures[i].Get()
		if err != nil {
			return err
		}
		t := chainTree(d.Rev, d.ancestors, d.Deleted)
		if v != nil {
			if t, err = decodeTree(v); err != nil {
				return errors.New("repdb: corrupt revision tree of " + d.ID + ": " + err.Error())
			}
		}
		withTree(d, t)
	}
	return nil
}

// lookupPage bounds the ids Lookup reads per transaction.
const lookupPage = 100

// Lookup reads the winners of the documents ids of db, in order, at most
// lookupPage per transaction: a live document, a deleted one (Deleted
// set) or nil for an id never written. conflicts fills Conflicts and
// DeletedConflicts as AllDocsQuery.Conflicts does.
func (s *Store) Lookup(ctx context.Context, db string, ids []string, conflicts bool) ([]*Doc, error) {
	out := make([]*Doc, 0, len(ids))
	for page := range slices.Chunk(ids, lookupPage) {
		docs, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]*Doc, error) {
			if _, err := s.getMeta(tr, db); err != nil {
				return nil, err
			}
			docs := make([]*Doc, len(page))
			for i, id := range page {
				d, err := s.Get(tr, db, id)
				switch {
				case err == nil, errors.Is(err, ErrDocDeleted):
					docs[i] = d
				case errors.Is(err, ErrDocNotFound):
				default:
					return nil, err
				}
			}
			if conflicts {
				if err := s.fillTrees(tr, db, docs); err != nil {
					return nil, err
				}
			}
			return docs, nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, docs...)
	}
	return out, nil
}
