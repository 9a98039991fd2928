package fdbjobs

import (
	"cmp"
	"context"
	"errors"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Group commit of the attempts' ends: each of a kind's completers takes
// the end of one attempt, then every other end already waiting, and
// writes them in one transaction (River's batch completer, without its
// wait: a lone end is written at once, and ends batch up only while
// transactions are in flight). Each is fenced by its job's lock as Finish
// is. A job's runner hands its end over and goes on to its next job: up
// to completeQueue ends wait for the completers, and a runner that finds
// the queue full waits, at most until the job's hold deadline.
const (
	// completersPerKind is how many completers a kind has on a Runtime:
	// as many transactions of ends in flight at once. With one, ends
	// queued behind its commit's latency, and on one FoundationDB
	// process a burn-down ran 20% slower (make bench-jobs).
	completersPerKind = 4
	// completeBatchMax is the most ends one transaction writes.
	completeBatchMax = 500
	// completeBatchBytes is about the most job data one writes.
	completeBatchBytes = kv.PageBytes
	// completeQueue is how many ends wait for a kind's completers at most.
	completeQueue = completeBatchMax
)

// ending is the end of one attempt: data (nil keeps the job's), finished
// (stime < 0) with e's outcome, or pending again at stime. err is the
// attempt's error, for the log.
type ending struct {
	job   *Job
	data  []byte
	stime int64
	e     *envelope
	// failed is the error of a failed attempt (nil when it completed,
	// snoozed or was handed back) and maxAttempts its job's MaxAttempts,
	// for the log.
	failed      error
	maxAttempts int
	// attempt: the end of an attempt (not a snooze or a hand-back), for
	// the metrics.
	attempt bool
	// leased: the job held one of its Runtime's places (placelease.go):
	// its end has no place of its own to give back.
	leased bool
}

// complete hands the end to k's completer, which writes it and logs what
// it could not write. The hold bounds the wait for room in the queue:
// past it another node may have the job. It returns false when the end
// was not handed over.
func (r *Runtime) complete(hardCtx context.Context, k *kindWorker, en *ending) bool {
	select {
	case k.ends <- en:
		return true
	default:
	}
	ctx, cancel := en.job.HoldContext(context.WithoutCancel(hardCtx))
	defer cancel()
	select {
	case k.ends <- en:
		return true
	case <-ctx.Done():
		r.c.cfg.Logger.Warn().Err(context.Cause(ctx)).Str("kind", k.kind).Str("job", en.job.ID).
			Msg("fdbjobs: runtime: ending the job's attempt; the activity monitor hands it back")
		return false
	}
}

// completer writes k's ends until ctx ends, then those still queued (the
// run loop ends ctx after the last job has ended), beside the kind's
// other completers.
func (r *Runtime) completer(ctx context.Context, k *kindWorker) {
	for {
		var batch []*ending
		select {
		case en := <-k.ends:
			batch = append(batch, en)
		case <-ctx.Done():
			select {
			case en := <-k.ends:
				batch = append(batch, en)
			default:
				return
			}
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
			werr := err
			if werr == nil {
				werr = errs[i]
			}
			r.ended(k, en, werr)
		}
	}
}

// ended logs the end of an attempt once the completer wrote it (werr nil
// or ErrHalt) or could not (werr).
func (r *Runtime) ended(k *kindWorker, en *ending, werr error) {
	log := r.c.cfg.Logger
	if werr != nil && !errors.Is(werr, ErrHalt) {
		log.Warn().Err(werr).Str("kind", k.kind).Str("job", en.job.ID).
			Msg("fdbjobs: runtime: ending the job's attempt; the activity monitor hands it back")
	}
	if werr == nil && en.attempt {
		r.c.metrics.Load().ended(k.kind, en.e.Outcome)
	}
	if en.failed == nil {
		return
	}
	e := en.e
	ev := log.Info()
	if e.Outcome == OutcomeDiscarded {
		ev = log.Warn()
	}
	ev.Err(en.failed).Str("kind", k.kind).Str("job", en.job.ID).Int("attempt", e.Attempt).Int("max_attempts", en.maxAttempts).
		Str("outcome", cmp.Or(e.Outcome, "retrying")).Msg("fdbjobs: runtime: attempt failed")
}

// endBatch writes ends in one transaction, bounded by the earliest of
// their holds.
func (c *Client) endBatch(ends []*ending) ([]error, error) {
	first := earliestHold(len(ends), func(i int) *Job { return ends[i].job })
	ctx, cancel := first.HoldContext(context.Background())
	defer cancel()
	return c.endBatchIn(ctx, nil, ends)
}

// endBatchIn writes ends in tx (a transaction of its own when nil), and
// marks the jobs it finished for their retention, one entry per outcome
// (retainAll) at the latest of their finish times.
func (c *Client) endBatchIn(ctx context.Context, tx kv.Transactor, ends []*ending) ([]error, error) {
	items := make([]Completion, len(ends))
	byJob := make(map[*Job]*ending, len(ends))
	for i, en := range ends {
		items[i] = Completion{Job: en.job, Data: en.data}
		byJob[en.job] = en
	}
	apply := func(tr kv.Transaction, j *Job, r *row, data []byte, seen *tuple.Versionstamp) (*row, bool, error) {
		en := byJob[j]
		if en.stime >= 0 && r != nil && r.lock.equal(j.lock) {
			r.resubmit, r.stime = true, en.stime // FinishAt
		}
		after, renewed, err := c.finishRow(tr, j, r, data, seen)
		if err == nil && after != nil && en.e != nil && !en.leased && c.partLimited(j.Type, en.e.Partition) {
			err = c.leavePartition(tr, j.Type, en.e.Partition, j.ID)
		}
		return after, renewed, err
	}
	retain := func(tr kv.Transaction, after []*row) {
		type group struct{ typ, outcome string }
		var order []group
		ids, at := map[group][]string{}, map[group]int64{}
		for i, r := range after {
			e := ends[i].e
			if r == nil || r.state != Finished || e.Outcome == "" || e.FinishedAt == 0 {
				continue
			}
			g := group{ends[i].job.Type, e.Outcome}
			if ids[g] == nil {
				order = append(order, g)
			}
			ids[g], at[g] = append(ids[g], ends[i].job.ID), max(at[g], e.FinishedAt)
		}
		for _, g := range order {
			c.k.retainAll(tr, g.typ, g.outcome, at[g], ids[g])
		}
	}
	return c.end(ctx, tx, items, apply, retain)
}
