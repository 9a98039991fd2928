package repdb

import (
	"context"
	"errors"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Reads that may cover a whole database (AllDocs, Feed) or many documents
// (ReadRevs, RevsDiff, Lookup) page through transactions, so that none
// grows with the database or the request: a page reads at most
// scanPageRows rows or pageDocs documents, and stops early once it has
// read pageBudget bytes. FoundationDB advises staying under 1 MB; rows
// and documents are read in chunks of readChunk (a chunk started is
// finished, up to eight 64 kB documents), so the budget leaves room.
const (
	scanPageRows = 200
	pageDocs     = 50
	pageBudget   = kv.PageBytes
	readChunk    = 8
)

// readBudget counts the bytes a page's transaction read.
type readBudget struct{ n int }

func (b *readBudget) add(n int)   { b.n += n }
func (b *readBudget) spent() bool { return b.n >= pageBudget }

// scan reads rng in pages, one read transaction each: the page's rows
// (at most scanPageRows, fewer when pageBudget runs out) go to read,
// which turns them into values inside the transaction and reports how
// many rows it used (fewer when the budget ran out on the reads it made,
// at least one); emit receives the values between transactions. first,
// when not nil, runs in the first page's transaction (database checks,
// counters). A page's transaction retried reads the same page again:
// nothing is emitted twice.
func scan[T any](ctx context.Context, db kv.Database, rng kv.KeyRange, reverse bool,
	first func(tr kv.ReadTransaction) error,
	read func(tr kv.ReadTransaction, rows []kv.KeyValue, b *readBudget) ([]T, int, error),
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
			b := &readBudget{}
			rows, exhausted, err := readRows(tr, rng, reverse, b)
			if err != nil {
				return page{}, err
			}
			if len(rows) == 0 {
				return page{done: true}, nil
			}
			vals, used, err := read(tr, rows, b)
			if err != nil {
				return page{}, err
			}
			used = min(max(used, 1), len(rows))
			return page{vals: vals, last: rows[used-1].Key, done: exhausted && used == len(rows)}, nil
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

// readRows reads the rows of a page: up to scanPageRows of rng, in range
// reads of readChunk rows so that it stops close to the budget (a range
// read fetches what it is asked for). exhausted reports the end of rng.
func readRows(tr kv.ReadTransaction, rng kv.KeyRange, reverse bool, b *readBudget) (rows []kv.KeyValue, exhausted bool, err error) {
	for len(rows) < scanPageRows && !b.spent() {
		n := min(readChunk, scanPageRows-len(rows))
		got, err := tr.GetRange(rng, kv.RangeOptions{Limit: n, Reverse: reverse, Mode: kv.StreamingModeExact}).GetSliceWithError()
		if err != nil {
			return nil, false, err
		}
		for _, r := range got {
			b.add(len(r.Key) + len(r.Value))
		}
		rows = append(rows, got...)
		if len(got) < n {
			return rows, true, nil
		}
		last := got[len(got)-1].Key
		if reverse {
			rng.End = last
		} else {
			rng.Begin = kv.KeyAfter(last)
		}
	}
	return rows, false, nil
}

// chunked runs the reads of n items in chunks of readChunk: start issues
// item i's reads (futures), finish waits for them. It stops after the
// chunk in which b ran out and returns how many items it read (all of
// them, or at least one chunk).
func chunked(n int, b *readBudget, start func(i int), finish func(i int) error) (int, error) {
	for lo := 0; lo < n; lo += readChunk {
		hi := min(lo+readChunk, n)
		for i := lo; i < hi; i++ {
			start(i)
		}
		for i := lo; i < hi; i++ {
			if err := finish(i); err != nil {
				return 0, err
			}
		}
		if b.spent() {
			return hi, nil
		}
	}
	return n, nil
}

// paged runs do for each item, in order, in read transactions of at most
// pageDocs items each, cut short when pageBudget runs out (at least one
// item per transaction); first, when not nil, starts each transaction.
func paged[I, R any](ctx context.Context, db kv.Database, items []I, first func(tr kv.ReadTransaction) error,
	do func(tr kv.ReadTransaction, it I, b *readBudget) (R, error)) ([]R, error) {
	out := make([]R, 0, len(items))
	for len(items) > 0 {
		res, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]R, error) {
			if first != nil {
				if err := first(tr); err != nil {
					return nil, err
				}
			}
			b := &readBudget{}
			var res []R
			for _, it := range items[:min(pageDocs, len(items))] {
				r, err := do(tr, it, b)
				if err != nil {
					return nil, err
				}
				if res = append(res, r); b.spent() {
					break
				}
			}
			return res, nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
		items = items[len(res):]
	}
	return out, nil
}
