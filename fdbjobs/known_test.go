package fdbjobs

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// rowReads counts the reads of job rows (DATA keys) in the transactions
// run through it.
type rowReads struct {
	kv.Database
	prefix []byte
	n      atomic.Int64
}

func (d *rowReads) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return f(&rowReadsTx{Transaction: tr, d: d})
	})
}

type rowReadsTx struct {
	kv.Transaction
	d *rowReads
}

func (t *rowReadsTx) Get(key kv.KeyConvertible) kv.FutureByteSlice {
	if bytes.HasPrefix(key.FDBKey(), t.d.prefix) {
		t.d.n.Add(1)
	}
	return t.Transaction.Get(key)
}

// An end takes the rows of a lease nobody else touched as its Accept
// wrote them, and reads none; any other write of a row the lease holds
// (another caller's, or its holder's Update) makes the ends of all its
// jobs read their rows, with the outcome reading them always had.
func TestEndsTakeKnownRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		// touch runs between the Accept of jobs j0, j1, j2 (one lease) and
		// their ends, on j0.
		touch func(t *testing.T, b *bundle, j *Job)
		reads int64 // rows the ends read
		err   error // j0's end
		state State // j0's state after it (0: removed)
		mates State // j1's and j2's (0: Finished)
	}{
		{name: "untouched", reads: 0, state: Finished},
		{name: "resubmitted", touch: func(t *testing.T, b *bundle, j *Job) {
			require.NoError(t, b.c.Resubmit(b.ctx, nil, &Job{Type: j.Type, ID: j.ID}, 0, nil))
		}, reads: 3, state: Pending},
		{name: "removed", touch: func(t *testing.T, b *bundle, j *Job) {
			require.NoError(t, b.c.Remove(b.ctx, nil, j.Type, j.ID))
		}, reads: 3, err: ErrHalt},
		{name: "re-enqueued", touch: func(t *testing.T, b *bundle, j *Job) {
			ok, err := b.c.Reenqueue(b.ctx, nil, j.Type, j.ID)
			require.NoError(t, err)
			require.True(t, ok)
		}, reads: 3, err: ErrHalt, state: Pending},
		{name: "updated by its holder", touch: func(t *testing.T, b *bundle, j *Job) {
			require.NoError(t, b.c.Update(b.ctx, nil, j, raw(`{"step":2}`)))
		}, reads: 4, state: Finished}, // the Update's read, then three
		{name: "taken back by the activity monitor", touch: func(t *testing.T, b *bundle, j *Job) {
			m := b.c.NewActivityMonitor(j.Type)
			_, _, err := m.Check(b.ctx)
			require.NoError(t, err)
			n, _, err := m.Check(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 3, n)
		}, reads: 3, err: ErrHalt, state: Pending, mates: Pending},
		{name: "sent back by its claim to wait for a place", touch: func(t *testing.T, b *bundle, j *Job) {
			// A limit of 1 per partition, taken by x (a lease of its own).
			require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, t1, Limit{Running: 1}))
			require.NoError(t, b.c.Add(b.ctx, nil, t1, "x", raw(`{}`), 0))
			x, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
			require.NoError(t, err)
			wait := func(int64) int64 { return b.c.cfg.now() + 1000 }
			claims := []*claim{{job: x, part: "p"}}
			_, err = b.c.claimPartitions(b.ctx, claims, wait, nil)
			require.NoError(t, err)
			require.True(t, claims[0].granted)
			claims = []*claim{{job: j, part: "p"}}
			_, err = b.c.claimPartitions(b.ctx, claims, wait, nil)
			require.NoError(t, err)
			require.False(t, claims[0].granted, "the partition is full")
			require.NoError(t, b.c.Finish(b.ctx, nil, x, nil))
		}, reads: 1, state: Pending}, // j0's end reads its row, its mates' take theirs as known
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, reads := setupRowReads(t)
			ids := []string{"j0", "j1", "j2"}
			for _, id := range ids {
				require.NoError(t, b.c.Add(b.ctx, nil, t1, id, raw(`{}`), 0))
			}
			jobs, err := b.c.AcceptBatch(b.ctx, t1, len(ids), AcceptOptions{})
			require.NoError(t, err)
			require.Len(t, jobs, len(ids))
			byID := map[string]*Job{}
			for _, j := range jobs {
				byID[j.ID] = j
			}
			if tc.touch != nil {
				tc.touch(t, b, byID["j0"])
			}
			reads.n.Store(0)
			mates, mateErr := cmp.Or(tc.mates, Finished), error(nil)
			if mates != Finished {
				mateErr = ErrHalt
			}
			// Two ends: j1 alone, then j0 and j2.
			require.ErrorIs(t, b.c.Finish(b.ctx, nil, byID["j1"], nil), mateErr)
			errs, err := b.c.FinishBatch(b.ctx, nil, []Completion{{Job: byID["j0"]}, {Job: byID["j2"]}})
			require.NoError(t, err)
			require.ErrorIs(t, errs[0], tc.err)
			require.ErrorIs(t, errs[1], mateErr)
			if tc.name == "updated by its holder" {
				tc.reads-- // the Update ran before the count
			}
			require.Equal(t, tc.reads, reads.n.Load(), "rows read by the ends")
			if tc.state == 0 {
				_, err := b.c.JobState(b.ctx, nil, t1, "j0")
				require.ErrorIs(t, err, ErrNotFound)
			} else {
				require.Equal(t, tc.state, b.state(t, t1, "j0"))
			}
			require.Equal(t, mates, b.state(t, t1, "j1"))
			require.Equal(t, mates, b.state(t, t1, "j2"))
			// The lease went with its last job, and its touch key with it.
			require.Zero(t, b.count(t, keyLeases), "leases left")
			require.Zero(t, b.count(t, keyLeaseTouched), "touch keys left")
			// Ended once, an end's retry reads the row: it finds it ended.
			require.ErrorIs(t, b.c.Finish(b.ctx, nil, byID["j2"], nil), mateErr)
		})
	}
}

// setupRowReads is setup on a store that counts the reads of job rows,
// without injected faults (an attempt after a failed one reads the rows).
func setupRowReads(t *testing.T) (*bundle, *rowReads) {
	reads := &rowReads{Database: kvtest.OpenEmbedded(t, embedded.Options{InMemory: true})}
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
	c, err := New(reads, Config{Clock: clock, NotifierHoldoff: time.Millisecond})
	require.NoError(t, err)
	reads.prefix = c.k.data.Bytes()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	t.Cleanup(c.Stop)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, t1, 2*time.Second))
	return &bundle{c: c, db: reads, clock: clock, ctx: ctx}, reads
}

// A store of layout 3 may hold leases whose rows a Client of that layout
// wrote without marking them touched: CheckLayout refuses it until
// Migrate, which only records the version (its counts are kept already).
func TestMigrateLayout3(t *testing.T) {
	b := setup(t)
	b.add(t, t1, "p", "", 0)
	b.add(t, t1, "r", "", 0)
	b.accept(t, t1)
	// Counts that a recount would change: Migrate from layout 3 keeps them.
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(b.c.k.countKey(t1, StatePending, 5), kv.Int64(7))
		tr.Set(b.c.k.layout(), layoutValue(3))
		return nil, nil
	})
	require.NoError(t, err)
	before, err := b.c.Counts(b.ctx, nil, t1)
	require.NoError(t, err)

	c, err := New(b.db, Config{Clock: b.clock})
	require.NoError(t, err)
	err = c.CheckLayout(b.ctx)
	require.ErrorIs(t, err, ErrLayout)
	require.ErrorContains(t, err, "key layout 3")
	require.NoError(t, c.Migrate(b.ctx))
	require.NoError(t, c.CheckLayout(b.ctx))
	after, err := c.Counts(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// An end that took its rows as known conflicts with any later write of
// them, which touches their lease: here one made between its reads and its
// commit, as by another end of the same job after a ctx that ended left
// this one's commit behind. It then reads the rows and does what reading
// them says.
func TestKnownEndConflictsWithALaterWrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(t *testing.T, b *bundle, j *Job)
		err     error     // the late end's
		state   State     // j0's after it
		counts  JobCounts // after it
	}{
		{name: "ended again by its holder", between: func(t *testing.T, b *bundle, j *Job) {
			require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
		}, state: Finished, counts: JobCounts{Running: 1, Completed: 1}},
		{name: "resubmitted and taken by another worker", between: func(t *testing.T, b *bundle, j *Job) {
			require.NoError(t, b.c.Resubmit(b.ctx, nil, &Job{Type: j.Type, ID: j.ID}, 0, nil))
			ok, err := b.c.Reenqueue(b.ctx, nil, j.Type, j.ID)
			require.NoError(t, err)
			require.True(t, ok)
			taken, err := b.c.Accept(b.ctx, j.Type, AcceptOptions{})
			require.NoError(t, err)
			require.Equal(t, j.ID, taken.ID)
		}, err: ErrHalt, state: Running, counts: JobCounts{Running: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := setupRowReads(t) // no injected faults: the interleaving is the first attempt's
			b.add(t, t1, "j0", "", 0)
			b.add(t, t1, "j1", "", 0)
			jobs, err := b.c.AcceptBatch(b.ctx, t1, 2, AcceptOptions{})
			require.NoError(t, err)
			require.Len(t, jobs, 2)
			j := jobs[0]
			idb := &interleaveDB{Database: b.db, beforeCommit: true}
			idb.between = func() { tc.between(t, b, j) }
			late, err := New(idb, Config{Clock: b.clock})
			require.NoError(t, err)
			require.ErrorIs(t, late.Finish(b.ctx, nil, j, nil), tc.err)
			require.Equal(t, tc.state, b.state(t, t1, j.ID))
			n, err := b.c.Counts(b.ctx, nil, t1)
			require.NoError(t, err)
			require.Equal(t, tc.counts, n)
		})
	}
}

// The activity monitor takes back the job of a worker that died after a
// heartbeat, whatever the job's lane: the heartbeat's lease is in its base
// shard, as an Accept's. A lease that a release before wrote in the job's
// lane is found too.
func TestMonitorFindsHeartbeatLeasesInEveryLane(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease in the lane=%v", legacy), func(t *testing.T) {
			b := setup(t)
			require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: "low", Priority: PriorityLowest}}))
			j := b.accept(t, t1)
			require.NoError(t, b.c.Update(b.ctx, nil, j, nil))
			leases := prefixRange(b.c.k.leases, tuple.Tuple{t1})
			kvs, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
				return tr.GetRange(leases, kv.RangeOptions{}).GetSliceWithError()
			})
			require.NoError(t, err)
			require.Len(t, kvs, 1, "the heartbeat's lease")
			vs, token, _, err := b.c.k.decodeLease(kvs[0].Key, kvs[0].Value)
			require.NoError(t, err)
			r, err := b.c.k.leases.Unpack(kvs[0].Key)
			require.NoError(t, err)
			shard := r[1].(int64)
			require.Less(t, shard, int64(laneStride), "in a base shard")
			if legacy {
				lane := b.c.k.leaseKey(t1, queueShard(shard, PriorityLowest), vs, token)
				_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
					tr.Clear(kvs[0].Key)
					tr.Set(lane, kvs[0].Value)
					return nil, nil
				})
				require.NoError(t, err)
			}
			m := b.c.NewActivityMonitor(t1)
			_, _, err = m.Check(b.ctx)
			require.NoError(t, err)
			_, _, err = m.Check(b.ctx)
			require.NoError(t, err)
			require.Equal(t, Pending, b.state(t, t1, "low"), "the dead worker's job taken back")
			require.Zero(t, b.count(t, keyLeases), "leases left")
			require.Zero(t, b.count(t, keyLeaseTouched), "touch keys left")
		})
	}
}
