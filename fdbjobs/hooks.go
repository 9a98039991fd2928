package fdbjobs

import (
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ReenqueuedJob is one running job the job layer is about to make pending
// again by itself, as a ReenqueueHook sees it.
type ReenqueuedJob struct {
	ID string
	// Data is the job's data. The hook may replace it: the job is
	// re-enqueued with the new value (valid JSON of at most MaxDataSize
	// bytes, else the transaction fails with ErrInvalidData or
	// ErrDataTooLarge).
	Data json.RawMessage
}

// ReenqueueHook keeps a job type's owner in step with the two transitions
// the job layer makes without the owner's code running: the activity
// monitor re-enqueuing the jobs of a worker that stopped heartbeating, and
// Reenqueue. It runs inside the transaction that re-enqueues them (once
// per transaction, with every job of that transaction), after their rows
// were read and before they are written, so whatever it writes in tr
// (an index of the owner's, for example) commits with the re-enqueue or
// not at all. It follows the kv rules: no I/O, small, and a function of
// what it reads, because the transaction may run again, also after
// commit_unknown_result (the activity monitor then finds the jobs already
// pending and does not call it for them again). An error fails the
// transaction; a kv error is retried as any other.
type ReenqueueHook func(tr kv.Transaction, jobs []ReenqueuedJob) error

// SetReenqueueHook installs h as the re-enqueue hook of typ on this Client
// (nil removes it). The hook runs only in this Client's transactions:
// every Client that runs activity monitors or calls Reenqueue for the type
// needs it.
func (c *Client) SetReenqueueHook(typ string, h ReenqueueHook) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == nil {
		delete(c.reenqueueHooks, typ)
		return
	}
	if c.reenqueueHooks == nil {
		c.reenqueueHooks = map[string]ReenqueueHook{}
	}
	c.reenqueueHooks[typ] = h
}

// reenqueueRows re-enqueues running rows of typ at their scheduled times,
// in tr, after the type's hook (if any) has seen them and possibly
// replaced their data. The caller has checked that each row is running.
func (c *Client) reenqueueRows(tr kv.Transaction, typ string, ids []string, rows []*row) error {
	if len(ids) == 0 {
		return nil
	}
	c.mu.Lock()
	h := c.reenqueueHooks[typ]
	c.mu.Unlock()
	if h != nil {
		jobs := make([]ReenqueuedJob, len(ids))
		for i, id := range ids {
			jobs[i] = ReenqueuedJob{ID: id, Data: rows[i].data}
		}
		if err := h(tr, jobs); err != nil {
			return fmt.Errorf("fdbjobs: re-enqueue hook of type %q: %w", typ, err)
		}
		for i, j := range jobs {
			d, err := checkData(j.Data)
			if err != nil {
				return fmt.Errorf("fdbjobs: re-enqueue hook of type %q, job %q: %w", typ, j.ID, err)
			}
			rows[i].data = d
		}
	}
	tr, flush := coalesceAdds(tr) // the hook's transaction is the caller's
	defer flush()
	for i, id := range ids {
		r := rows[i]
		c.k.enqueue(tr, typ, id, r, r.stime)
	}
	c.k.bumpPending(tr, typ)
	return nil
}
