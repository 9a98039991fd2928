package fdbjobs

// The pending jobs of a type due by a time: how many, and by when the
// first n are due.

import (
	"context"
	"fmt"
	"slices"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// PendingCount counts the pending jobs of typ scheduled at or before
// maxSTime (0 means now, in Config.TimeUnit, as in AcceptOptions), up to
// limit (0 means PendingCountLimitDefault). It reads every shard of the
// queue at once, each up to limit keys, as a snapshot: it never makes a
// caller's transaction conflict.
func (c *Client) PendingCount(ctx context.Context, tx kv.ReadTransactor, typ string, maxSTime int64, limit int) (int, error) {
	if maxSTime == 0 {
		maxSTime = c.cfg.now()
	}
	if err := checkSTime(maxSTime); err != nil {
		return 0, err
	}
	if limit < 0 {
		return 0, fmt.Errorf("%w: negative limit %d", ErrInvalidArgument, limit)
	}
	if limit == 0 {
		limit = PendingCountLimitDefault
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (int, error) {
		snap := tr.Snapshot()
		qs, err := c.queueShards(snap, typ)
		if err != nil {
			return 0, err
		}
		futs := make([]kv.RangeResult, len(qs))
		for i, s := range qs {
			futs[i] = snap.GetRange(c.k.pendingRange(typ, s, maxSTime), kv.RangeOptions{Limit: limit})
		}
		n := 0
		for _, f := range futs {
			kvs, err := f.GetSliceWithError()
			if err != nil {
				return 0, err
			}
			n += len(kvs)
		}
		return min(n, limit), nil
	})
}

// DueTime finds the n pending jobs of typ due earliest, scheduled at or
// before maxSTime (0 means now, as in PendingCount), across every shard:
// it returns the latest of their scheduled times and how many there are
// (at most n; 0, with stime 0, when none is due). An AcceptBatch of n
// jobs with that time as its MaxScheduledTime takes due jobs of no later
// time than those, the oldest first within a shard. It reads each shard's
// first n due keys at once, as a snapshot, in one round trip: it never
// makes a caller's transaction conflict.
func (c *Client) DueTime(ctx context.Context, tx kv.ReadTransactor, typ string, maxSTime int64, n int) (stime int64, count int, err error) {
	if maxSTime == 0 {
		maxSTime = c.cfg.now()
	}
	if err := checkSTime(maxSTime); err != nil {
		return 0, 0, err
	}
	if n < 1 || n > MaxBatch {
		return 0, 0, fmt.Errorf("%w: count %d outside [1, %d]", ErrInvalidArgument, n, MaxBatch)
	}
	stime, count, _, err = c.nthDue(ctx, tx, typ, maxSTime, n, 0, false)
	return stime, count, err
}

// nthDue finds the n pending jobs of typ scheduled at or before maxSTime
// of least scheduled time plus, with aging (in TimeUnits per priority
// level; 0: none), their priority's handicap, across every shard and
// lane (but the fair lanes with skipFair), and returns the latest of
// those times, how many there are (at most n; 0 when none is due) and how
// many of them are earlier than it.
// One snapshot read of each queue shard's first n keys.
func (c *Client) nthDue(ctx context.Context, tx kv.ReadTransactor, typ string, maxSTime int64, n int, aging int64, skipFair bool) (int64, int, int, error) {
	type due struct {
		stime        int64
		count, below int
	}
	d, err := kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (due, error) {
		snap := tr.Snapshot()
		qs, err := c.queueShards(snap, typ)
		if err != nil {
			return due{}, err
		}
		if skipFair {
			qs = slices.DeleteFunc(qs, isFairLane)
		}
		futs := make([]kv.RangeResult, len(qs))
		for i, s := range qs {
			futs[i] = snap.GetRange(c.k.pendingRange(typ, s, maxSTime), kv.RangeOptions{Limit: n})
		}
		var stimes []int64
		for i, f := range futs {
			kvs, err := f.GetSliceWithError()
			if err != nil {
				return due{}, err
			}
			handicap := int64(shardPriority(qs[i])-PriorityHighest) * aging
			for _, e := range kvs {
				t, err := c.k.pending.Unpack(e.Key)
				if err != nil || len(t) != 4 {
					return due{}, fmt.Errorf("fdbjobs: bad pending key %s", e.Key)
				}
				st, _ := intElem(t[2])
				stimes = append(stimes, st+handicap)
			}
		}
		if len(stimes) == 0 {
			return due{}, nil
		}
		slices.Sort(stimes)
		k := min(n, len(stimes))
		below, _ := slices.BinarySearch(stimes, stimes[k-1])
		return due{stime: stimes[k-1], count: k, below: below}, nil
	})
	return d.stime, d.count, d.below, err
}
