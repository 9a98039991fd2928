package fdbjobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// A store of layout 1 (as the previous fdbjobs wrote it) is refused, then
// migrated in place: pending jobs are taken from their shard, running ones
// keep their lock under a lease the activity monitor finds, finished ones
// stay finished, and layout 1's keys are gone.
func TestMigrateLayout1(t *testing.T) {
	b := setup(t)
	const gone = "gone" // a type whose timeout was cleared, with a job left
	old := tuple.Versionstamp{TransactionVersion: [10]byte{7: 1}}
	token := []byte("0123456789abcdef")
	row1 := func(seq tuple.TupleElement, tok []byte, index, stime int64, prev []byte, data string) []byte {
		var tk, pv tuple.TupleElement
		if tok != nil {
			tk = tok
		}
		if prev != nil {
			pv = prev
		}
		return tuple.Tuple{seq, tk, index, stime, false, pv, int64(0), []byte(data), nil}.Pack()
	}
	root := b.c.k.root
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(b.c.k.dataKey(t1, "p1"), row1(int64(0), nil, 0, 5, nil, `{"p":1}`))
		tr.Set(root.Pack(tuple.Tuple{keyPending, t1, int64(5), "p1"}), nil)
		for i, id := range []string{"r1", "r2"} {
			tr.Set(b.c.k.dataKey(t1, id), row1(old, token, int64(i), 7, nil, `{"r":1}`))
			tr.Set(root.Pack(tuple.Tuple{keyLeases, t1, old, id}), nil) // layout 1's ACTIVITY
		}
		tr.Set(root.Pack(tuple.Tuple{keyClaims1, t1, token}), tuple.Tuple{"r1", "r2"}.Pack())
		tr.Set(root.Pack(tuple.Tuple{keyWatchesActivity1, t1}), tuple.Tuple{old}.Pack())
		tr.Set(b.c.k.dataKey(t1, "f1"), row1(nil, nil, 0, 3, token, `{"f":1}`))
		tr.Set(b.c.k.dataKey(gone, "g1"), row1(int64(0), nil, 0, 0, nil, `{}`))
		tr.Set(root.Pack(tuple.Tuple{keyPending, gone, int64(0), "g1"}), nil)
		return nil, nil
	})
	require.NoError(t, err)

	err = b.c.Add(b.ctx, nil, t1, "new", nil, 0)
	require.ErrorIs(t, err, ErrLayout)
	require.ErrorContains(t, err, "key layout 1")

	require.NoError(t, b.c.Migrate(b.ctx))
	require.NoError(t, b.c.Migrate(b.ctx), "again: nothing to do")
	require.NoError(t, b.c.CheckLayout(b.ctx))
	require.Zero(t, b.count(t, keyClaims1))
	require.Zero(t, b.count(t, keyWatchesActivity1))
	leases := 1
	if shardOf("r1", ShardsDefault) != shardOf("r2", ShardsDefault) {
		leases = 2
	}
	require.Equal(t, leases, b.count(t, keyLeases), "a lease per shard for the jobs of one Accept with one seq")

	require.Equal(t, Finished, b.state(t, t1, "f1"))
	require.Equal(t, Running, b.state(t, t1, "r1"))
	active, err := b.c.ActiveJobIDs(b.ctx, nil, t1)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"r1", "r2"}, active)
	n, err := b.c.PendingCount(b.ctx, nil, t1, 10, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	j, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 10})
	require.NoError(t, err)
	require.Equal(t, "p1", j.ID)
	require.JSONEq(t, `{"p":1}`, string(j.Data))
	require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))

	// Their workers (of the earlier version) are gone: the monitor takes
	// the running jobs back through their lease.
	m := b.c.NewActivityMonitor(t1)
	_, _, err = m.Check(b.ctx)
	require.NoError(t, err)
	// Under storage faults a batch that committed may report
	// commit_unknown_result and go uncounted: the accepts check the outcome.
	back, _, err := m.Check(b.ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, back, 2)
	active, err = b.c.ActiveJobIDs(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Empty(t, active)
	for range 2 {
		j, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 10})
		require.NoError(t, err)
		require.Contains(t, []string{"r1", "r2"}, j.ID)
		require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
	}

	// The job of a type without a timeout moved too.
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, gone, time.Second))
	require.Equal(t, "g1", b.accept(t, gone).ID)
	require.NoError(t, b.c.Add(b.ctx, nil, t1, "new", nil, 0))
}
