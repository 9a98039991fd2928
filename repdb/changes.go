package repdb

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Change is one row of the changes feed: a document's last write.
type Change struct {
	// Seq is the write's sequence: its versionstamp in hex (24 digits).
	Seq     string
	ID      string
	Rev     string
	Deleted bool
	// Doc is the document with include_docs (nil for deletions).
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
// "0": from the start), at most Limit (< 0: all), oldest first or, with
// Descending, newest first.
type ChangesQuery struct {
	Since       string
	Limit       int
	Descending  bool
	IncludeDocs bool
}

// Changes reads db's feed after since, at most limit rows (< 0: all), and
// returns them with the last sequence read (since itself, or "0", when
// there is none). ErrBadSequence for a since that is not a sequence of
// this store.
func (s *Store) Changes(ctx context.Context, db, since string, limit int, includeDocs bool) ([]Change, string, error) {
	return s.ChangesOf(ctx, db, ChangesQuery{Since: since, Limit: limit, IncludeDocs: includeDocs})
}

// ChangesOf is Changes with every option; descending rows report as last
// sequence the oldest row read, where the next page continues.
func (s *Store) ChangesOf(ctx context.Context, db string, q ChangesQuery) ([]Change, string, error) {
	since, limit, includeDocs := q.Since, q.Limit, q.IncludeDocs
	rng, err := s.feedRange(db, since)
	if err != nil {
		return nil, "", err
	}
	type result struct {
		rows []Change
		last string
	}
	res, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (result, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			return result{}, err
		}
		res := result{last: since}
		if res.last == "" {
			res.last = "0"
		}
		if limit == 0 {
			return res, nil
		}
		opts := kv.RangeOptions{Reverse: q.Descending}
		if limit > 0 {
			opts.Limit = limit
		}
		rows, err := tr.GetRange(rng, opts).GetSliceWithError()
		if err != nil {
			return result{}, err
		}
		for _, r := range rows {
			seq, err := s.seqOf(db, r.Key)
			if err != nil {
				return result{}, err
			}
			var row changeRow
			if err := json.Unmarshal(r.Value, &row); err != nil {
				return result{}, fmt.Errorf("repdb: corrupt change row: %v", err)
			}
			c := Change{Seq: seq, ID: row.ID, Rev: row.Rev, Deleted: row.Deleted}
			if includeDocs && !c.Deleted {
				d, err := s.Get(tr, db, c.ID)
				if err != nil && !errors.Is(err, ErrDocDeleted) && !errors.Is(err, ErrDocNotFound) {
					return result{}, err
				}
				c.Doc = d
			}
			res.rows = append(res.rows, c)
			res.last = seq
		}
		return res, nil
	})
	return res.rows, res.last, err
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
