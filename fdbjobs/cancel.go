package fdbjobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// OutcomeCancelled is the outcome of a runtime job that Cancel ended.
const OutcomeCancelled = "cancelled"

// ErrCancelled is the context.Cause of a Work's ctx when its job was
// cancelled (Cancel).
var ErrCancelled = errors.New("fdbjobs: job cancelled")

// Cancel ends the runtime job id of kind (one inserted with Insert), in
// tx (nil for a transaction of its own, or the caller's), and returns the
// outcome it has then:
//   - pending (due, or waiting for a retry): finished, OutcomeCancelled;
//   - running: finished, OutcomeCancelled, and its worker's lock taken
//     away: its Runtime hears of it within the watch's latency (the Work's
//     ctx ends, cause ErrCancelled) and can write nothing more for the job,
//     so a cancelled job never ends completed;
//   - finished: left as it is (its outcome returned).
//
// A missing job is ErrNotFound; a job whose data is not a Runtime's
// envelope ErrInvalidData. Run again after commit_unknown_result, it finds
// the job cancelled and returns that.
func (c *Client) Cancel(ctx context.Context, tx kv.Transactor, kind, id string) (string, error) {
	if err := checkName("kind", kind); err != nil {
		return "", err
	}
	if err := checkName("job id", id); err != nil {
		return "", err
	}
	cancelled := false // by the attempt that ran last
	outcome, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (string, error) {
		cancelled = false
		r, e, err := c.readEnvelope(tr, kind, id)
		if err != nil {
			return "", err
		}
		if r.state == Finished {
			return e.Outcome, nil
		}
		cancelled = true
		e.Outcome, e.FinishedAt = OutcomeCancelled, c.cfg.Clock.Now().UnixMilli()
		data, err := e.encode()
		if err != nil {
			return "", err
		}
		if r.state == Pending {
			tr.Clear(c.k.pendingKey(kind, r.shard, r.stime, id))
		}
		// A running job's lease still lists it: its worker's next write
		// finds another lock (ErrHalt), and the activity monitor skips a
		// row that its lease's lock no longer holds.
		r.state, r.lock, r.resubmit, r.data = Finished, lock{}, false, data
		c.k.writeRow(tr, kind, id, r)
		c.k.retainSet(tr, kind, id, e)
		return OutcomeCancelled, nil
	})
	if err == nil && cancelled {
		c.metrics.Load().count(metricCancelled, kind, 1)
	}
	return outcome, err
}

// RetryNow makes the runtime job id of kind pending now, in tx: a job
// finished (discarded, cancelled, or completed) or pending for later (a
// retry, a snooze, a job inserted for later). Its attempts and errors are
// kept and its outcome cleared; a job that had used up its attempts gets
// one more. A running job is ErrRunning, a missing one ErrNotFound. Run
// again after commit_unknown_result, it recognises its own commit (the
// row's add token) and does nothing more, though the job may have run.
func (c *Client) RetryNow(ctx context.Context, tx kv.Transactor, kind, id string) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if err := checkName("job id", id); err != nil {
		return err
	}
	token, err := c.addToken(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (struct{}, error) {
		r, e, err := c.readEnvelope(tr, kind, id)
		if err != nil {
			return struct{}{}, err
		}
		now := c.cfg.now()
		switch {
		case bytes.Equal(r.addToken, token):
			// An earlier attempt of this call committed
			// (commit_unknown_result); the job may have run since.
			return struct{}{}, nil
		case r.state == Running:
			return struct{}{}, fmt.Errorf("job %q of kind %q: %w", id, kind, ErrRunning)
		case r.state == Pending && r.stime <= now:
			return struct{}{}, nil // due already
		case r.state == Pending:
			tr.Clear(c.k.pendingKey(kind, r.shard, r.stime, id))
		}
		// Its retention mark stays (it may be an entry of many jobs): the
		// sweeper clears it alone, as the row no longer says it finished.
		e.Outcome, e.FinishedAt = "", 0
		r.addToken = token
		if r.data, err = e.encode(); err != nil {
			return struct{}{}, err
		}
		c.k.enqueue(tr, kind, id, r, now)
		c.k.bumpPending(tr, kind)
		return struct{}{}, nil
	})
	if err == nil {
		c.committed(tx, kind)
	}
	return err
}

// readEnvelope reads the row of a runtime job and its envelope.
func (c *Client) readEnvelope(tr kv.ReadTransaction, kind, id string) (*row, *envelope, error) {
	r, err := c.k.readRow(tr, kind, id)
	if err != nil {
		return nil, nil, err
	}
	if r == nil {
		return nil, nil, fmt.Errorf("job %q of kind %q: %w", id, kind, ErrNotFound)
	}
	e, err := decodeEnvelope(r.data)
	if err != nil {
		return nil, nil, fmt.Errorf("job %q of kind %q: %w: %v", id, kind, ErrInvalidData, err)
	}
	return r, e, nil
}
