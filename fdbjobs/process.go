package fdbjobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Completion is one job of a batch Update or Finish, with its new data (nil
// keeps the current data).
type Completion struct {
	Job  *Job
	Data json.RawMessage
}

// Update is the worker's heartbeat and fence: it checks that the worker
// still holds job, stores data (nil keeps the current data) and records the
// job's activity, so the activity monitor leaves it running for another
// type timeout. A worker must call it at least once per type timeout, and
// in every transaction in which it writes something for the job (pass that
// transaction as tx): the lock check then makes the writes conditional on
// still holding the job. It returns ErrHalt when the job was removed,
// re-enqueued or taken by another worker; the worker must then stop.
//
// After Update, job.Resubmitted and job.ScheduledTime tell whether the job
// was resubmitted while running. At most one Update or Finish per job per
// transaction: reading a row written with a versionstamp in the same
// transaction fails with accessed_unreadable (1036).
func (c *Client) Update(ctx context.Context, tx kv.Transactor, job *Job, data json.RawMessage) error {
	errs, err := c.UpdateBatch(ctx, tx, []Completion{{Job: job, Data: data}})
	if err != nil {
		return err
	}
	return errs[0]
}

// Finish ends the worker's hold on job and stores data (nil keeps the
// current data). The job becomes finished, or pending again at its
// scheduled time if it was resubmitted while running. It returns ErrHalt
// when the worker no longer holds the job, in which case nothing is
// written. A retry after commit_unknown_result of a Finish that committed
// returns nil.
func (c *Client) Finish(ctx context.Context, tx kv.Transactor, job *Job, data json.RawMessage) error {
	errs, err := c.FinishBatch(ctx, tx, []Completion{{Job: job, Data: data}})
	if err != nil {
		return err
	}
	return errs[0]
}

// FinishAt ends the worker's hold on job as Finish does, and makes it
// pending at stime (Unix ms, 0 for no schedule) with data (nil keeps the
// current data), whether or not it was resubmitted while running: the
// worker's own resubmit, fenced by its lock. It returns ErrHalt when the
// worker no longer holds the job, in which case nothing is written. A
// retry after commit_unknown_result of a FinishAt that committed returns
// nil and writes nothing, though the job may have moved on since (been
// resubmitted to another time, taken by another worker): Resubmit then
// Finish in one transaction would move it back.
func (c *Client) FinishAt(ctx context.Context, tx kv.Transactor, job *Job, stime int64, data json.RawMessage) error {
	if err := checkSTime(stime); err != nil {
		return err
	}
	errs, err := c.end(ctx, tx, []Completion{{Job: job, Data: data}},
		func(tr kv.Transaction, j *Job, r *row, data []byte, seen *tuple.Versionstamp) (*row, bool, error) {
			if r != nil && r.lock.equal(j.lock) {
				r.resubmit, r.stime = true, stime
			}
			return c.finishRow(tr, j, r, data, seen)
		}, nil)
	if err != nil {
		return err
	}
	return errs[0]
}

// UpdateBatch is Update for many jobs in one transaction. The second result
// is the transaction's error; otherwise errs[i] is the outcome for items[i]
// (nil or ErrHalt), and the jobs whose item succeeded were updated.
func (c *Client) UpdateBatch(ctx context.Context, tx kv.Transactor, items []Completion) (errs []error, err error) {
	return c.batch(ctx, tx, items, c.updateRow, nil)
}

// FinishBatch is Finish for many jobs in one transaction, with per-item
// outcomes as in UpdateBatch.
func (c *Client) FinishBatch(ctx context.Context, tx kv.Transactor, items []Completion) (errs []error, err error) {
	return c.end(ctx, tx, items, c.finishRow, nil)
}

// applyFunc applies an Update or Finish to one job's row r (nil when the
// job is gone). seen holds the row's seq as first read by this call: a retry
// after commit_unknown_result finds a different one if it committed. It
// reports whether it wrote a new seq (an Update's heartbeat), for which
// the caller writes a lease.
type applyFunc func(tr kv.Transaction, j *Job, r *row, data []byte, seen *tuple.Versionstamp) (after *row, renewed bool, err error)

// batch applies apply to each of items' jobs in one transaction; then,
// when not nil, written calls with the rows each attempt of it wrote (nil
// for a job it did not write), in the same transaction.
func (c *Client) batch(ctx context.Context, tx kv.Transactor, items []Completion, apply applyFunc, written func(tr kv.Transaction, after []*row)) ([]error, error) {
	return c.batchWith(ctx, tx, items, nil, apply, written, knownDrop)
}

// knownUse is what a batch does with its jobs' known rows (Job.known).
type knownUse int

const (
	// knownDrop forgets them: the batch may write the rows and leave the
	// jobs running (an Update).
	knownDrop knownUse = iota
	// knownEnd ends the jobs: its first attempt, in a transaction of its
	// own, takes the rows of a lease not touched since as read (see
	// touchKey), and reads only the lease's two keys.
	knownEnd
	// knownKeep leaves them: the batch writes no row of a job it leaves
	// running.
	knownKeep
)

// end is batch for a call that ends each job it writes (Finish and its
// kin, a Runtime's ends): see knownEnd.
func (c *Client) end(ctx context.Context, tx kv.Transactor, items []Completion, apply applyFunc, written func(tr kv.Transaction, after []*row)) ([]error, error) {
	return c.batchWith(ctx, tx, items, nil, apply, written, knownEnd)
}

// leaseFence is the read of one lease's key and its touch key, and the
// batch's items the lease holds whose rows are known.
type leaseFence struct {
	lease, touched kv.FutureByteSlice
	items          []int
}

// batchWith is batch with before, when not nil, called at the start of
// each attempt of its transaction (to issue reads apply will wait for).
func (c *Client) batchWith(ctx context.Context, tx kv.Transactor, items []Completion, before func(tr kv.Transaction), apply applyFunc, written func(tr kv.Transaction, after []*row), use knownUse) ([]error, error) {
	if len(items) == 0 || len(items) > MaxBatch {
		return nil, fmt.Errorf("%w: batch size %d outside [1, %d]", ErrInvalidArgument, len(items), MaxBatch)
	}
	datas := make([][]byte, len(items))
	seen := make(map[[2]string]bool, len(items))
	for i, it := range items {
		if it.Job == nil || !it.Job.lock.held() {
			return nil, fmt.Errorf("%w: item %d: not a job returned by Accept", ErrInvalidArgument, i)
		}
		k := [2]string{it.Job.Type, it.Job.ID}
		if seen[k] {
			return nil, fmt.Errorf("%w: job %q appears twice in one batch", ErrInvalidArgument, it.Job.ID)
		}
		seen[k] = true
		d, err := checkOptionalData(it.Data)
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", it.Job.ID, err)
		}
		datas[i] = d
	}
	type outcome struct {
		errs    []error
		after   []*row
		renewed []bool // a new seq and lease written (heartbeat)
		left    []bool // the job left its lease (Job.lease)
		// moved is, for a job whose heartbeat an earlier attempt of this
		// call committed (commit_unknown_result), the seq it wrote: the
		// versionstamp of the lease that attempt wrote, which the job
		// holds now.
		moved    []*tuple.Versionstamp
		enqueued []string     // the types of the jobs a Finish made pending
		vs       kv.FutureKey // of the commit, when it wrote leases
	}
	firstSeq := make([]*tuple.Versionstamp, len(items))
	// Joined to a caller's transaction, the batch cannot know whether or
	// when it commits: it leaves the workers' lease counts alone (a job
	// then counts in its old lease until it leaves it in a transaction of
	// its own, which only delays that lease's clear) and tracks no new
	// lease (the activity monitor clears those).
	_, joined := tx.(kv.Transaction)
	// The rows the jobs' Accepts wrote, for an end's first attempt to
	// take as read where their lease is untouched (touchKey). A later
	// attempt reads them: the first may have committed. Joined to a
	// caller's transaction, which may run again, an end reads them too.
	known := make([]*row, len(items))
	for i, it := range items {
		known[i] = it.Job.known.Swap(nil)
	}
	fast := use == knownEnd && !joined
	attempts := 0
	out, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (outcome, error) {
		tr, flush := coalesceAdds(tr)
		defer flush()
		attempts++
		if before != nil {
			before(tr)
		}
		futs := make([]kv.FutureByteSlice, len(items))
		rows := make([]*row, len(items))
		var fences []*leaseFence
		if attempts == 1 && fast {
			byLease := map[*lease]*leaseFence{}
			for i, it := range items {
				l, r := it.Job.lease, known[i]
				if l == nil || r == nil || r.storedToken == nil || r.storedSeq != l.vs {
					continue
				}
				f := byLease[l]
				if f == nil {
					token := it.Job.lock.token
					f = &leaseFence{lease: tr.Get(c.k.leaseKey(it.Job.Type, l.shard, l.vs, token)), touched: tr.Get(c.k.touchKey(it.Job.Type, l.vs, token))}
					byLease[l] = f
					fences = append(fences, f)
				}
				f.items = append(f.items, i)
				rows[i] = r
			}
		}
		for i, it := range items {
			if rows[i] == nil {
				futs[i] = tr.Get(c.k.dataKey(it.Job.Type, it.Job.ID))
			}
		}
		for _, f := range fences {
			lv, err := f.lease.Get()
			if err != nil {
				return outcome{}, err
			}
			tv, err := f.touched.Get()
			if err != nil {
				return outcome{}, err
			}
			if lv != nil && tv == nil {
				// The rows are as their Accept wrote them, and any later
				// write of one touches the lease (writeRow, clearRow; a
				// claim's sendBack writes only a row no end takes as
				// known), or clears it: the reads conflict with it.
				// Another end of the job's that read its row is such a
				// write, even when this end's commit, left behind by a
				// ctx that ended, lands after it.
				for _, i := range f.items {
					rows[i].holder = true // its end's writes touch nothing
				}
				continue
			}
			for _, i := range f.items {
				rows[i], futs[i] = nil, tr.Get(c.k.dataKey(items[i].Job.Type, items[i].Job.ID))
			}
		}
		n := len(items)
		o := outcome{errs: make([]error, n), after: make([]*row, n), renewed: make([]bool, n), left: make([]bool, n),
			moved: make([]*tuple.Versionstamp, n)}
		enqueued := map[string]bool{}
		leaving := map[*lease]int{}    // jobs leaving each lease in this batch
		grants := map[claimRef][]int{} // heartbeats, by type and token
		var order []claimRef           // grants' keys in item order
		for i, it := range items {
			r := rows[i]
			if r == nil {
				v, err := futs[i].Get()
				if err != nil {
					return outcome{}, err
				}
				if v != nil {
					if r, err = decodeRow(v); err != nil {
						return outcome{}, err
					}
				}
			}
			if firstSeq[i] == nil && r != nil && r.state == Running {
				seq := r.seq
				firstSeq[i] = &seq
			}
			// A seq moved since this call first read it: an earlier
			// attempt's heartbeat committed, and the job left its lease.
			moved := r != nil && r.state == Running && firstSeq[i] != nil && r.seq != *firstSeq[i]
			after, renewed, err := apply(tr, it.Job, r, datas[i], firstSeq[i])
			o.left[i] = err != nil || renewed || moved || after == nil || after.state != Running
			if l := it.Job.lease; l != nil && o.left[i] {
				leaving[l]++
			}
			if err != nil {
				o.errs[i] = fmt.Errorf("job %q of type %q: %w", it.Job.ID, it.Job.Type, err)
				continue
			}
			o.after[i], o.renewed[i] = after, renewed
			if moved && after != nil && after.state == Running && after.seq == r.seq {
				seq := r.seq
				o.moved[i] = &seq
			}
			if renewed {
				ref := claimRef{it.Job.Type, string(it.Job.lock.token)}
				if grants[ref] == nil {
					order = append(order, ref)
				}
				grants[ref] = append(grants[ref], i)
			}
			if after != nil && after.state == Pending && !enqueued[it.Job.Type] {
				c.k.bumpPending(tr, it.Job.Type) // a Finish re-enqueued a resubmitted job
				enqueued[it.Job.Type] = true
				o.enqueued = append(o.enqueued, it.Job.Type)
			}
		}
		if written != nil {
			written(tr, o.after)
		}
		for _, ref := range order {
			idx, ids := make([]int64, 0, len(grants[ref])), make([]string, 0, len(grants[ref]))
			for _, i := range grants[ref] {
				idx, ids = append(idx, items[i].Job.lock.index), append(ids, items[i].Job.ID)
			}
			// In the base shard, as an Accept's: where the monitor looks.
			shard := shardBase(o.after[grants[ref][0]].shard)
			c.k.writeLease(tr, ref.typ, shard, []byte(ref.token), idx, ids)
		}
		if joined {
			return o, nil
		}
		if len(order) > 0 {
			o.vs = tr.GetVersionstamp()
		}
		// A lease whose last job leaves goes: the jobs of one lease are
		// all of one Accept (or heartbeat) call's token, held in this
		// process, so the count is exact; a lease not cleared here (a
		// job abandoned, or counted out by a retry) is the activity
		// monitor's to clear.
		for i, it := range items {
			if l := it.Job.lease; l != nil && o.left[i] && leaving[l] > 0 {
				if l.emptiedBy(leaving[l]) {
					tr.Clear(c.k.leaseKey(it.Job.Type, l.shard, l.vs, it.Job.lock.token))
					tr.Clear(c.k.touchKey(it.Job.Type, l.vs, it.Job.lock.token))
				}
				leaving[l] = 0
			}
		}
		return o, nil
	})
	if err != nil {
		return nil, err
	}
	c.committed(tx, out.enqueued...)
	if joined {
		for i, it := range items {
			if r := out.after[i]; r != nil {
				it.Job.Data, it.Job.ScheduledTime, it.Job.Resubmitted = r.data, r.stime, r.resubmit
			}
		}
		return out.errs, nil
	}
	var granted map[claimRef]*lease
	if out.vs != nil {
		vs, err := out.vs.Get()
		if err != nil {
			return nil, err
		}
		granted = map[claimRef]*lease{}
		for i, it := range items {
			if !out.renewed[i] {
				continue
			}
			ref := claimRef{it.Job.Type, string(it.Job.lock.token)}
			if granted[ref] == nil {
				granted[ref] = &lease{shard: shardBase(out.after[i].shard)}
				copy(granted[ref].vs.TransactionVersion[:], vs)
			}
			granted[ref].held++
		}
	}
	// The leases an earlier attempt wrote and committed unseen: the jobs
	// whose seq it moved hold them, one per token and versionstamp, so
	// that their Finish clears them as it clears any other.
	type movedRef struct {
		claimRef
		vs tuple.Versionstamp
	}
	recovered := map[movedRef]*lease{}
	for i, it := range items {
		if vs := out.moved[i]; vs != nil {
			ref := movedRef{claimRef{it.Job.Type, string(it.Job.lock.token)}, *vs}
			if recovered[ref] == nil {
				recovered[ref] = &lease{shard: shardBase(out.after[i].shard), vs: *vs}
			}
			recovered[ref].held++
		}
	}
	for i, it := range items {
		j := it.Job
		if out.left[i] {
			if j.lease != nil {
				j.lease.leave(1)
			}
			j.lease = nil // untracked after a retry moved it: the monitor's
		}
		if out.renewed[i] {
			j.lease = granted[claimRef{j.Type, string(j.lock.token)}]
		}
		if vs := out.moved[i]; vs != nil {
			j.lease = recovered[movedRef{claimRef{j.Type, string(j.lock.token)}, *vs}]
		}
		if r := out.after[i]; r != nil {
			j.Data, j.ScheduledTime, j.Resubmitted = r.data, r.stime, r.resubmit
		}
		// A job this batch left running as it was keeps its known row.
		if r := out.after[i]; use == knownKeep && known[i] != nil && out.errs[i] == nil && r != nil && r.state == Running &&
			!out.left[i] && !out.renewed[i] && out.moved[i] == nil {
			j.known.Store(known[i])
		}
	}
	return out.errs, nil
}

// claimRef names the jobs of one Accept call: a type and the call's token.
type claimRef struct{ typ, token string }

// updateRow is Update's body for one job.
func (c *Client) updateRow(tr kv.Transaction, j *Job, r *row, data []byte, seen *tuple.Versionstamp) (*row, bool, error) {
	if r == nil || !r.lock.equal(j.lock) {
		return nil, false, ErrHalt
	}
	if seen != nil && r.seq != *seen {
		// Only this lock's holder moves the seq: an earlier attempt of
		// this call committed. Writing again would be a second heartbeat.
		return r, false, nil
	}
	if data != nil {
		r.data = data
	}
	r.seqNew = true
	c.k.writeRow(tr, j.Type, j.ID, r)
	return r, true, nil
}

// finishRow is Finish's body for one job. A row whose last finisher is j
// means this is a retry of a Finish that committed: nothing to do.
func (c *Client) finishRow(tr kv.Transaction, j *Job, r *row, data []byte, _ *tuple.Versionstamp) (*row, bool, error) {
	if r == nil {
		return nil, false, ErrHalt
	}
	if !r.lock.equal(j.lock) {
		if r.prev.equal(j.lock) {
			return nil, false, nil
		}
		return nil, false, ErrHalt
	}
	if data != nil {
		r.data = data
	}
	r.prev = j.lock
	if r.resubmit {
		stime := r.stime
		c.k.enqueue(tr, j.Type, j.ID, r, stime)
		r.resubmit = true // reported to the caller: it is pending again
		return r, false, nil
	}
	r.state, r.lock, r.resubmit = Finished, lock{}, false
	c.k.writeRow(tr, j.Type, j.ID, r)
	return r, false, nil
}

// Resubmit schedules job to run again at stime with data (nil keeps the
// current data). It does not check the lock: a job's creator may call it
// with any Job value of that type and id (see also Add, which does the
// same given only the id):
//   - finished: pending again at stime;
//   - pending at the same stime: nothing changes;
//   - pending at another stime: moved to stime, data replaced;
//   - running: flagged so that Finish makes it pending at stime; the data
//     is not changed and job.Resubmitted becomes true. A Runtime that
//     sends the job back before its run began (its partition full, or no
//     start left: SetPartitionLimit) makes it pending at the later of
//     stime and its next look: one run, none before stime.
//
// It returns ErrNotFound for a removed job.
func (c *Client) Resubmit(ctx context.Context, tx kv.Transactor, job *Job, stime int64, data json.RawMessage) error {
	if job == nil {
		return fmt.Errorf("%w: nil job", ErrInvalidArgument)
	}
	d, token, err := resubmitArgs(stime, data)
	if err != nil {
		return err
	}
	// Whether an attempt enqueued the job: the one that committed may be
	// an earlier one than the last (commit_unknown_result, after which
	// the retry finds the row changed already). One that did not commit
	// wakes the acceptors for nothing, which costs them a look.
	enqueued := false
	st, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (State, error) {
		r, err := c.k.readRow(tr, job.Type, job.ID)
		if err != nil {
			return 0, err
		}
		if r == nil {
			return 0, fmt.Errorf("job %q of type %q: %w", job.ID, job.Type, ErrNotFound)
		}
		if c.resubmitRow(tr, job.Type, job.ID, r, stime, 0, d, token) {
			c.k.bumpPending(tr, job.Type)
			enqueued = true
		}
		return r.state, nil
	})
	if err != nil {
		return err
	}
	if enqueued {
		c.committed(tx, job.Type)
	}
	job.ScheduledTime = stime
	if st == Running {
		job.Resubmitted = true
	}
	return nil
}

// Reenqueue makes a running job pending again at its scheduled time, as
// the activity monitor does with a job whose worker stopped sending
// heartbeats, but at once: for a node that restarted and knows that the
// jobs its previous incarnation ran have no worker any more. A worker
// still holding the job's lock gets ErrHalt at its next Update. It reports
// whether the job was running (and is now pending); a job in another state
// or missing is left alone. A retry after commit_unknown_result that
// finds the lock it took away gone reports true (the job may since have
// been finished by its worker instead: either way, that worker lost it).
// The type's ReenqueueHook runs in the same transaction.
func (c *Client) Reenqueue(ctx context.Context, tx kv.Transactor, typ, id string) (bool, error) {
	if err := checkName("type", typ); err != nil {
		return false, err
	}
	if err := checkName("job id", id); err != nil {
		return false, err
	}
	var took *lock // the lock an earlier attempt took away
	ok, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (bool, error) {
		r, err := c.k.readRow(tr, typ, id)
		if err != nil {
			return false, err
		}
		if took != nil && (r == nil || !r.lock.equal(*took)) {
			return true, nil
		}
		if r == nil || r.state != Running {
			return false, nil
		}
		l := r.lock
		took = &l
		return true, c.reenqueueRows(tr, typ, []string{id}, []*row{r})
	})
	if ok && err == nil {
		c.committed(tx, typ)
	}
	return ok, err
}
