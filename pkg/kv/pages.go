package kv

import "context"

// Pages scans rng in key order, a page of at most limit key-values per
// transaction, and calls fn with each page in the transaction that read
// it, where fn may also write. The scan moves past a page only once that
// transaction committed: a retried attempt (a conflict, a timeout,
// commit_unknown_result) reads and hands fn the same page again, so fn
// must be idempotent as any transaction body is, and the cursor cannot
// skip a page whose writes were lost. It returns at the end of rng (a
// page shorter than limit), when fn returns stop, or with the first error
// (a transaction's error after Transact's retries, or fn's). The reads are
// serializable: a page's keys conflict with writes to them before its
// commit.
func Pages(ctx context.Context, t Transactor, rng KeyRange, limit int, fn func(tr Transaction, page []KeyValue) (stop bool, err error)) error {
	limit = max(limit, 1)
	for {
		type result struct {
			next Key // nil: done
		}
		r, err := Transact(ctx, t, func(tr Transaction) (result, error) {
			page, err := tr.GetRange(rng, RangeOptions{Limit: limit}).GetSliceWithError()
			if err != nil {
				return result{}, err
			}
			stop, err := fn(tr, page)
			if err != nil || stop || len(page) < limit {
				return result{}, err
			}
			return result{next: KeyAfter(page[len(page)-1].Key)}, nil
		})
		if err != nil || r.next == nil {
			return err
		}
		rng.Begin = r.next
	}
}

// ReadPages scans rng in key order, a page of at most limit key-values per
// read-only transaction, and calls fn with each page after its
// transaction ended, so that fn may do I/O or start transactions of its
// own and runs once per page whatever the retries. Pages are separate
// snapshots: a key written behind the cursor after its page was read is
// not seen, one written ahead of it is. It returns at the end of rng, when
// fn returns stop, or with the first error.
func ReadPages(ctx context.Context, t ReadTransactor, rng KeyRange, limit int, fn func(page []KeyValue) (stop bool, err error)) error {
	limit = max(limit, 1)
	for {
		page, err := ReadTransact(ctx, t, func(tr ReadTransaction) ([]KeyValue, error) {
			return tr.Snapshot().GetRange(rng, RangeOptions{Limit: limit}).GetSliceWithError()
		})
		if err != nil {
			return err
		}
		if stop, err := fn(page); err != nil || stop || len(page) < limit {
			return err
		}
		rng.Begin = KeyAfter(page[len(page)-1].Key)
	}
}
