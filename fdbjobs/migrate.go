package fdbjobs

import (
	"context"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Layout 1's keys that layout 2 no longer has.
const (
	keyWatchesActivity1 = 4 // (4, Type) -> (Versionstamp)
	keyClaims1          = 7 // (7, Type, Token) -> (JobID, ...)
)

// migratePage is how many job rows a Migrate transaction rewrites.
const migratePage = 200

// Migrate brings a store of an earlier key layout to LayoutVersion in
// place, and records the new layout. From layout 1 it rewrites the rows,
// in transactions of migratePage rows: it gives every job a shard (its
// pending key moves into it), a lease to every running job (under the
// lock and seq it has, so that the activity monitor takes it back if its
// worker is gone), and clears the keys layout 2 no longer has. From layout
// 1 or 2 it then counts each type's jobs per state (Counts), reading them
// in pages of migratePage rows. From layout 3 it only records the version.
// No Client of the earlier version may run meanwhile: it reads neither
// the new rows nor the leases, its activity monitor would clear them, it
// keeps no counts, and it does not mark the leases it writes under
// (touchKey). Migrate is idempotent,
// and safe to run from several nodes at once or again after an error; on
// a store already in this layout it does nothing.
func (c *Client) Migrate(ctx context.Context) error {
	v, err := kv.ReadTransact(ctx, c.db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(c.k.layout()).Get()
	})
	if err != nil {
		return err
	}
	from := int64(1) // no version key: layout 1, or a store without jobs
	if v != nil {
		t, err := tuple.Unpack(v)
		if err != nil || len(t) != 1 {
			return fmt.Errorf("fdbjobs: bad layout version %x", v)
		}
		if from, _ = intElem(t[0]); from >= LayoutVersion {
			return nil // this layout, or a later one: CheckLayout tells
		}
	}
	types, err := c.jobTypes(ctx)
	if err != nil {
		return err
	}
	for _, typ := range types {
		if from == 1 {
			if err := c.migrateType(ctx, typ); err != nil {
				return fmt.Errorf("fdbjobs: migrating the jobs of type %q: %w", typ, err)
			}
		}
		if from >= 3 {
			continue // counted already
		}
		if err := c.countType(ctx, typ); err != nil {
			return fmt.Errorf("fdbjobs: counting the jobs of type %q: %w", typ, err)
		}
	}
	_, err = kv.Transact(ctx, c.db, func(tr kv.Transaction) (any, error) {
		tr.ClearRange(prefixRange(c.k.root, tuple.Tuple{keyWatchesActivity1}))
		tr.ClearRange(prefixRange(c.k.root, tuple.Tuple{keyClaims1}))
		tr.Set(c.k.layout(), layoutValue(LayoutVersion))
		return nil, nil
	})
	if err == nil {
		c.layoutOK.Store(true)
	}
	return err
}

// jobTypes returns every type that has jobs, with a timeout or not, a
// read per type.
func (c *Client) jobTypes(ctx context.Context) ([]string, error) {
	var types []string
	begin := c.k.data.FDBKey()
	for {
		kvs, err := kv.ReadTransact(ctx, c.db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
			r := prefixRange(c.k.data, nil)
			r.Begin = begin
			return tr.GetRange(r, kv.RangeOptions{Limit: 1}).GetSliceWithError()
		})
		if err != nil {
			return nil, err
		}
		if len(kvs) == 0 {
			return types, nil
		}
		t, err := c.k.data.Unpack(kvs[0].Key)
		typ, ok := "", len(t) == 2
		if ok {
			typ, ok = t[0].(string)
		}
		if err != nil || !ok {
			return nil, fmt.Errorf("fdbjobs: bad job key %s", kvs[0].Key)
		}
		types = append(types, typ)
		begin = prefixRange(c.k.data, tuple.Tuple{typ}).End.FDBKey()
	}
}

// migrateType rewrites the rows of typ, a page per transaction, then
// clears its layout 1 activity keys.
func (c *Client) migrateType(ctx context.Context, typ string) error {
	err := kv.Pages(ctx, c.db, prefixRange(c.k.data, tuple.Tuple{typ}), migratePage, func(tr kv.Transaction, page []kv.KeyValue) (bool, error) {
		shards, err := c.TypeShards(ctx, tr, typ)
		if err != nil {
			return false, err
		}
		for _, e := range page {
			t, err := c.k.data.Unpack(e.Key)
			if err != nil || len(t) != 2 {
				return false, fmt.Errorf("bad job key %s", e.Key)
			}
			id, _ := t[1].(string)
			if err := c.migrateRow(tr, typ, id, e.Value, int64(shards)); err != nil {
				return false, fmt.Errorf("job %q: %w", id, err)
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	// Layout 1's ACTIVITY keys, (6, Type, Versionstamp, JobID), share the
	// leases' subspace, where leases have a shard too; and a stale pending key of layout 1 would have no
	// shard.
	if err := c.sweep(ctx, prefixRange(c.k.leases, tuple.Tuple{typ}), func(t tuple.Tuple) bool { return len(t) == 3 }); err != nil {
		return err
	}
	return c.sweep(ctx, prefixRange(c.k.pending, tuple.Tuple{typ}), func(t tuple.Tuple) bool { return len(t) == 3 })
}

// sweep clears the keys of r (under the root subspace) whose tuple, after
// the subspace's, old reports as layout 1's, a page per transaction.
func (c *Client) sweep(ctx context.Context, r kv.KeyRange, old func(tuple.Tuple) bool) error {
	return kv.Pages(ctx, c.db, r, migratePage, func(tr kv.Transaction, page []kv.KeyValue) (bool, error) {
		for _, e := range page {
			if t, err := c.k.root.Unpack(e.Key); err == nil && len(t) > 1 && old(t[1:]) {
				tr.Clear(e.Key)
			}
		}
		return false, nil
	})
}

// migrateRow rewrites one row of layout 1 (a row already rewritten is left
// alone).
func (c *Client) migrateRow(tr kv.Transaction, typ, id string, v []byte, shards int64) error {
	t, err := tuple.Unpack(v)
	if err != nil {
		return fmt.Errorf("bad job row: %w", err)
	}
	if len(t) != 9 {
		return nil // layout 2 already
	}
	r, err := decodeRow(append(t, int64(0)).Pack())
	if err != nil {
		return err
	}
	r.shard = shardOf(id, shards)
	switch r.state {
	case Pending:
		tr.Clear(c.k.root.Pack(tuple.Tuple{keyPending, typ, r.stime, id})) // writeRow writes its new key
	case Running:
		// Its lease: the jobs of one Accept share a token, and those not
		// updated since their seq, so the entry is added to what the
		// lease holds already.
		key := c.k.leaseKey(typ, shardBase(r.shard), r.seq, r.lock.token)
		old, err := tr.Get(key).Get()
		if err != nil {
			return err
		}
		entries := tuple.Tuple{}
		if old != nil {
			if entries, err = tuple.Unpack(old); err != nil {
				return fmt.Errorf("bad lease: %w", err)
			}
		}
		tr.Set(key, append(entries, r.lock.index, id).Pack())
	}
	c.k.writeRow(tr, typ, id, r)
	return nil
}
