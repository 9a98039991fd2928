package fdbjobs

// Reading jobs: one job, a page of them, or all of a type.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Job returns a job's state and data with one read, or ErrNotFound.
func (c *Client) Job(ctx context.Context, tx kv.ReadTransactor, typ, id string) (State, json.RawMessage, error) {
	r, err := c.readJob(ctx, tx, typ, id)
	if err != nil {
		return 0, nil, err
	}
	return r.state, r.data, nil
}

// ReadJobs returns the jobs ids of typ in the order given, with their
// reads issued at once (one round trip, not one per job); a missing job
// has State NotFound and no data. Given a caller's transaction it reads in
// it, so a page of jobs can be consistent with an index the caller keeps.
func (c *Client) ReadJobs(ctx context.Context, tx kv.ReadTransactor, typ string, ids []string) ([]JobInfo, error) {
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) ([]JobInfo, error) {
		futs := make([]kv.FutureByteSlice, len(ids))
		for i, id := range ids {
			futs[i] = tr.Get(c.k.dataKey(typ, id))
		}
		rows, err := decodeRows(futs)
		if err != nil {
			return nil, err
		}
		out := make([]JobInfo, len(ids))
		for i, r := range rows {
			out[i] = JobInfo{Type: typ, ID: ids[i], State: NotFound}
			if r != nil {
				out[i].State, out[i].ScheduledTime, out[i].Data = r.state, r.stime, r.data
				out[i].Priority = shardPriority(r.shard)
			}
		}
		return out, nil
	})
}

// JobData returns a job's data, or ErrNotFound.
func (c *Client) JobData(ctx context.Context, tx kv.ReadTransactor, typ, id string) (json.RawMessage, error) {
	r, err := c.readJob(ctx, tx, typ, id)
	if err != nil {
		return nil, err
	}
	return r.data, nil
}

// JobState returns a job's state, or ErrNotFound.
func (c *Client) JobState(ctx context.Context, tx kv.ReadTransactor, typ, id string) (State, error) {
	r, err := c.readJob(ctx, tx, typ, id)
	if err != nil {
		return 0, err
	}
	return r.state, nil
}

func (c *Client) readJob(ctx context.Context, tx kv.ReadTransactor, typ, id string) (*row, error) {
	return c.readJobOfType(ctx, tx, typ, id, false)
}

// readJobOfType reads a job's row, or ErrNotFound; with typed, a type with
// no timeout registered is ErrNotFound too.
func (c *Client) readJobOfType(ctx context.Context, tx kv.ReadTransactor, typ, id string, typed bool) (*row, error) {
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (*row, error) {
		if typed {
			if _, err := c.typeTimeout(tr, typ); err != nil {
				return nil, err
			}
		}
		r, err := c.k.readRow(tr, typ, id)
		if err != nil {
			return nil, err
		}
		if r == nil {
			return nil, fmt.Errorf("job %q of type %q: %w", id, typ, ErrNotFound)
		}
		return r, nil
	})
}

// ActiveJobIDs returns the ids of the running jobs of typ, oldest activity
// first. It reads them in one transaction, the type's leases and the rows
// they name: for very many running jobs use FoldJobs.
func (c *Client) ActiveJobIDs(ctx context.Context, tx kv.ReadTransactor, typ string) ([]string, error) {
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) ([]string, error) {
		kvs, err := tr.GetRange(prefixRange(c.k.leases, tuple.Tuple{typ}), kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		type held struct {
			vs    tuple.Versionstamp
			lk    lock
			id    string
			futOf kv.FutureByteSlice
		}
		var hs []held
		for _, e := range kvs {
			vs, token, entries, err := c.k.decodeLease(e.Key, e.Value)
			if err != nil {
				return nil, err
			}
			for _, en := range entries {
				hs = append(hs, held{vs, lock{token, en.index}, en.id, tr.Get(c.k.dataKey(typ, en.id))})
			}
		}
		var ids []string
		for _, h := range hs {
			v, err := h.futOf.Get()
			if err != nil {
				return nil, err
			}
			if v == nil {
				continue
			}
			r, err := decodeRow(v)
			if err != nil {
				return nil, err
			}
			if r.state == Running && r.seq == h.vs && r.lock.equal(h.lk) {
				ids = append(ids, h.id)
			}
		}
		return ids, nil
	})
}

// JobInfo is one job as FoldJobs reports it.
type JobInfo struct {
	Type          string
	ID            string
	State         State
	ScheduledTime int64
	Priority      int
	Data          json.RawMessage
}

// JobsAfter returns up to limit jobs of typ whose ids follow after ("":
// from the first), in id order, read at tx's snapshot (no conflict with
// what other transactions write to them): a page of a walk over every job
// that goes on across transactions and processes. A caller that changes
// one reads it again in its transaction.
func (c *Client) JobsAfter(ctx context.Context, tx kv.ReadTransactor, typ, after string, limit int) ([]JobInfo, error) {
	if err := checkName("type", typ); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d", ErrInvalidArgument, limit)
	}
	r := prefixRange(c.k.data, tuple.Tuple{typ})
	if after != "" {
		r.Begin = kv.KeyAfter(c.k.dataKey(typ, after))
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) ([]JobInfo, error) {
		kvs, err := tr.Snapshot().GetRange(r, kv.RangeOptions{Limit: limit}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		out := make([]JobInfo, 0, len(kvs))
		for _, e := range kvs {
			j, ok, err := c.k.jobInfo(typ, e)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, j)
			}
		}
		return out, nil
	})
}

// foldBatchBytes is about how much a FoldJobs batch reads (FoundationDB
// advises under 1 MB per transaction): its row count is this over the
// largest row seen so far (over MaxDataSize before any is seen).
const foldBatchBytes = kv.PageBytes

// FoldJobs calls fn for every job of typ, in job id order, reading at
// most FoldBatchDefault jobs (and about foldBatchBytes) per transaction so
// that any number of jobs can be visited without reaching FoundationDB's
// five-second or size limits. A batch that fails with a retryable error,
// transaction_too_old, transaction_too_large or a timeout is read again
// smaller (times Config.BatchFactor, backing off as FoundationDB's OnError
// does after retryable errors) and the size grows back by
// Config.BatchIncrement after each full batch (kv.Batch); after
// kv.BatchAttemptsDefault failures in a row FoldJobs gives up with the
// last error. fn runs outside any transaction; the jobs are not one
// consistent snapshot (each batch is). An error from fn stops the fold and
// is returned.
func (c *Client) FoldJobs(ctx context.Context, typ string, fn func(JobInfo) error) error {
	r := prefixRange(c.k.data, tuple.Tuple{typ})
	begin := r.Begin.FDBKey()
	size := kv.Batch{Max: FoldBatchDefault, Factor: c.cfg.BatchFactor, Increment: c.cfg.BatchIncrement}
	// The largest row seen so far sizes the batches; the first one
	// assumes the largest possible (a few rows).
	largest := 0
	for {
		type batch struct {
			jobs []JobInfo
			more bool // the range goes on after last
			last kv.Key
		}
		n := min(size.Size(), max(1, foldBatchBytes/cmp.Or(largest, MaxDataSize)))
		b, err := once(ctx, c.db, func(tr kv.Transaction) (batch, error) {
			kvs, err := tr.Snapshot().GetRange(kv.KeyRange{Begin: begin, End: r.End},
				kv.RangeOptions{Limit: n}).GetSliceWithError()
			if err != nil {
				return batch{}, err
			}
			out := batch{jobs: make([]JobInfo, 0, len(kvs)), more: len(kvs) == n}
			for _, e := range kvs {
				largest = max(largest, len(e.Key)+len(e.Value))
				out.last = e.Key
				j, ok, err := c.k.jobInfo(typ, e)
				if err != nil {
					return batch{}, err
				}
				if ok {
					out.jobs = append(out.jobs, j)
				}
			}
			return out, nil
		})
		if err != nil {
			if err := size.Retry(ctx, err); err != nil {
				return gaveUp("FoldJobs", err)
			}
			continue
		}
		size.Done()
		for _, j := range b.jobs {
			if err := fn(j); err != nil {
				return err
			}
		}
		if !b.more || b.last == nil {
			return nil
		}
		begin = kv.KeyAfter(b.last)
		size.Grow()
	}
}
