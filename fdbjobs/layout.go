package fdbjobs

import (
	"context"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// LayoutVersion is the version of the key layout this package writes (see
// doc.go, "Key layout"). Layout 1, before the sharded queue, kept a job's
// pending key without a shard and its row without the shard's number.
// Layout 2 kept no counts per state (COUNTS, Counts): Migrate counts its
// jobs once, and Clients keep the counts from then on. Layout 3's Clients
// did not mark a lease touched when they wrote a row it holds (touchKey),
// on which a Client of layout 4 ends its own jobs without reading their
// rows: its rows and keys are layout 4's, and Migrate records the version
// once no Client of layout 3 runs.
const LayoutVersion = 4

// layoutValue is the LAYOUT key's value for version.
func layoutValue(version int64) []byte { return tuple.Tuple{version}.Pack() }

// CheckLayout makes sure the store's jobs are in this package's key
// layout: on a store without jobs it records LayoutVersion; on one whose
// jobs were written in another layout it returns ErrLayout, saying which,
// and the Client must not be used on it. Start, Add, AddBatch and Accept
// call it once per Client (until it succeeds).
func (c *Client) CheckLayout(ctx context.Context) error {
	if c.layoutOK.Load() {
		return nil
	}
	_, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (any, error) {
		v, err := tr.Get(c.k.layout()).Get()
		if err != nil {
			return nil, err
		}
		if v != nil {
			t, err := tuple.Unpack(v)
			if err != nil || len(t) != 1 {
				return nil, fmt.Errorf("fdbjobs: bad layout version %x", v)
			}
			if n, _ := intElem(t[0]); n < LayoutVersion {
				return nil, fmt.Errorf("%w: the store's jobs are in key layout %d, this version reads layout %d only (Migrate brings them to it)", ErrLayout, n, LayoutVersion)
			} else if n != LayoutVersion {
				return nil, fmt.Errorf("%w: the store's jobs are in key layout %d, this version reads layout %d only", ErrLayout, n, LayoutVersion)
			}
			return nil, nil
		}
		// No version: a new store, or one written by layout 1, which had
		// no version key; its jobs' rows are under the same subspace.
		kvs, err := tr.GetRange(c.k.data, kv.RangeOptions{Limit: 1}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		if len(kvs) > 0 {
			return nil, fmt.Errorf("%w: the store's jobs are in key layout 1, this version reads layout %d only (Migrate brings them to it)", ErrLayout, LayoutVersion)
		}
		tr.Set(c.k.layout(), layoutValue(LayoutVersion))
		return nil, nil
	})
	if err == nil {
		c.layoutOK.Store(true)
	}
	return err
}
