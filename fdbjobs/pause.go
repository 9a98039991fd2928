package fdbjobs

import (
	"context"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Pause stops every node from accepting jobs of typ, in tx (nil for a
// transaction of its own, or the caller's), until Resume: Accept and
// AcceptBatch return ErrPaused (a Runtime's fetcher waits and looks again
// every FetchPoll). Running jobs go on, and jobs are still added; no
// accept that commits after Pause takes a job. Pausing a paused type, or
// one without jobs, is allowed.
func (c *Client) Pause(ctx context.Context, tx kv.Transactor, typ string) error {
	return c.setPaused(ctx, tx, typ, true)
}

// Resume lets typ's jobs be accepted again after Pause. A Runtime starts
// them within its FetchPoll; an Accept waiting elsewhere is not woken.
func (c *Client) Resume(ctx context.Context, tx kv.Transactor, typ string) error {
	return c.setPaused(ctx, tx, typ, false)
}

// Paused reports whether typ is paused.
func (c *Client) Paused(ctx context.Context, tx kv.ReadTransactor, typ string) (bool, error) {
	if err := checkName("type", typ); err != nil {
		return false, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (bool, error) {
		v, err := tr.Get(c.k.pausedKey(typ)).Get()
		return v != nil, err
	})
}

func (c *Client) setPaused(ctx context.Context, tx kv.Transactor, typ string, paused bool) error {
	if err := checkName("type", typ); err != nil {
		return err
	}
	_, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (struct{}, error) {
		if paused {
			tr.Set(c.k.pausedKey(typ), []byte{1})
		} else {
			tr.Clear(c.k.pausedKey(typ))
		}
		return struct{}{}, nil
	})
	return err
}
