package fdbjobs

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Group commit of the attempts' ends: a kind's completer takes the end of
// one attempt, then every other end already waiting, and writes them in
// one transaction (River's batch completer, without its wait: a lone end
// is written at once, and ends batch up only while a transaction is in
// flight). Each is fenced by its job's lock as Finish is.
const (
	// completeBatchMax is the most ends one transaction writes.
	completeBatchMax = 500
	// completeBatchBytes is about the most job data one writes.
	completeBatchBytes = kv.PageBytes
)

// ending is the end of one attempt: data (nil keeps the job's), finished
// (stime < 0) with e's outcome, or pending again at stime.
type ending struct {
	job   *Job
	data  []byte
	stime int64
	e     *envelope
	done  chan error
}

// complete hands the end to k's completer and returns its outcome (nil,
// ErrHalt, or the transaction's error).
func (r *Runtime) complete(hardCtx context.Context, k *kindWorker, en *ending) error {
	en.done = make(chan error, 1)
	// The hold bounds the wait: past it another node may have the job.
	ctx, cancel := en.job.HoldContext(context.WithoutCancel(hardCtx))
	defer cancel()
	select {
	case k.ends <- en:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return <-en.done
}

// completer writes k's ends until ctx ends (after the last job has ended).
func (r *Runtime) completer(ctx context.Context, k *kindWorker) {
	for {
		var batch []*ending
		select {
		case en := <-k.ends:
			batch = append(batch, en)
		case <-ctx.Done():
			return
		}
		size := len(batch[0].data)
	more:
		for len(batch) < completeBatchMax && size < completeBatchBytes {
			select {
			case en := <-k.ends:
				batch = append(batch, en)
				size += len(en.data) + 256
			default:
				break more
			}
		}
		errs, err := r.c.endBatch(batch)
		if err != nil && len(batch) > 1 {
			// The transaction failed as a whole (too large, a timeout): each
			// end on its own.
			errs, err = make([]error, len(batch)), nil
			for i, en := range batch {
				e, berr := r.c.endBatch([]*ending{en})
				if berr == nil {
					berr = e[0]
				}
				errs[i] = berr
			}
		}
		for i, en := range batch {
			if err != nil {
				en.done <- err
			} else {
				en.done <- errs[i]
			}
		}
	}
}

// endBatch writes ends in one transaction, bounded by the earliest of
// their holds.
func (c *Client) endBatch(ends []*ending) ([]error, error) {
	items := make([]Completion, len(ends))
	byJob := make(map[*Job]*ending, len(ends))
	first, deadline := ends[0].job, time.Time{}
	for i, en := range ends {
		items[i] = Completion{Job: en.job, Data: en.data}
		byJob[en.job] = en
		if d, ok := en.job.HoldDeadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			first, deadline = en.job, d
		}
	}
	ctx, cancel := first.HoldContext(context.Background())
	defer cancel()
	return c.batch(ctx, nil, items, func(tr kv.Transaction, j *Job, r *row, data []byte, seen *tuple.Versionstamp) (*row, bool, error) {
		en := byJob[j]
		if en.stime >= 0 && r != nil && r.lock.equal(j.lock) {
			r.resubmit, r.stime = true, en.stime // FinishAt
		}
		after, renewed, err := c.finishRow(tr, j, r, data, seen)
		if err == nil && after != nil && after.state == Finished {
			c.k.retainSet(tr, j.Type, j.ID, en.e)
		}
		return after, renewed, err
	})
}
