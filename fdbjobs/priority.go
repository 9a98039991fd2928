package fdbjobs

// Priorities (see doc.go, "Priorities"): each priority of a type has a
// lane of its own in every shard of the pending queue, and an accept
// merges the lanes of a shard by a job's due time plus its priority's
// handicap.

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Priorities, River's: 1 is the highest and the default.
const (
	// PriorityHighest is the highest priority a job may have, and the
	// default (InsertOptions.Priority and NewJob.Priority 0).
	PriorityHighest = 1
	// PriorityLowest is the lowest.
	PriorityLowest = 4
	// PriorityAgingDefault is Config.PriorityAging: the handicap of each
	// priority level below the highest. Within a shard of the queue, a due
	// job of priority p is taken no later than any job of a higher
	// priority q that became due more than (p-q) × PriorityAging after
	// it, so under a steady stream of higher priority jobs a lower one
	// waits at most (p-q) × PriorityAging more than it would among jobs
	// of its own priority.
	PriorityAgingDefault = time.Minute
)

// priorityAgingMaxUnits bounds Config.PriorityAging in TimeUnits, so that
// a scheduled time plus the lowest priority's handicap fits an int64.
const priorityAgingMaxUnits = 1 << 59

// laneStride separates the lanes of a shard: the queue shard of a job of
// priority p in shard s is s + (p-1) × laneStride (the row's shard), so a
// lane is a shard of its own to every key that names one, and a shard's
// base (s) is what ownership, claiming, leases and counts go by. It is
// part of the store's layout: ShardsMax may not grow past it.
const laneStride = 4096

// queueShard is the shard of the pending keys of a job of priority prio
// in base shard s.
func queueShard(s int64, prio int) int64 { return s + int64(prio-PriorityHighest)*laneStride }

// shardBase is the base shard of queue shard q.
func shardBase(q int64) int64 { return q % laneStride }

// shardPriority is the priority of queue shard q's lane.
func shardPriority(q int64) int { return int(q/laneStride)%fairLanes + PriorityHighest }

// fairLanes is where a shard's fair lanes start: a job that fair shares
// placed (fair.go) waits in lane fairLanes + p-1 for priority p, apart
// from the jobs due by the clock, which go first.
const fairLanes = 4

// fairQueueShard is the queue shard of a fair job of priority prio in
// base shard s.
func fairQueueShard(s int64, prio int) int64 {
	return s + int64(fairLanes+prio-PriorityHighest)*laneStride
}

// isFairLane reports whether queue shard q is a fair lane.
func isFairLane(q int64) bool { return q/laneStride >= fairLanes }

// checkPriority returns prio, with 0 as PriorityHighest, or
// ErrInvalidArgument.
func checkPriority(prio int) (int, error) {
	if prio == 0 {
		return PriorityHighest, nil
	}
	if prio < PriorityHighest || prio > PriorityLowest {
		return 0, fmt.Errorf("%w: priority %d outside [%d, %d] (%d is the highest)", ErrInvalidArgument, prio,
			PriorityHighest, PriorityLowest, PriorityHighest)
	}
	return prio, nil
}

// lanes is the set of priorities a type's jobs have had (bit p-1 for
// priority p), as the LANES key keeps it: the lanes an accept reads. The
// highest priority's lane is always read.
type lanes uint8

const laneHighest lanes = 1

func (l lanes) has(prio int) bool { return l&(1<<(prio-PriorityHighest)) != 0 }

// hasFair reports whether l holds the fair lane of priority prio.
func (l lanes) hasFair(prio int) bool { return l&(1<<(fairLanes+prio-PriorityHighest)) != 0 }

// of returns the queue shards of base shard s, the highest priority
// first, then its fair lanes, the highest priority first.
func (l lanes) of(s int64) []int64 {
	l |= laneHighest
	out := make([]int64, 0, bits.OnesCount8(uint8(l)))
	for bit := range 2 * fairLanes {
		if l&(1<<bit) != 0 {
			out = append(out, s+int64(bit)*laneStride)
		}
	}
	return out
}

// fair returns the fair lanes of base shards [0, high).
func (l lanes) fair(high int64) []int64 {
	var out []int64
	for s := range high {
		for p := PriorityHighest; p <= PriorityLowest; p++ {
			if l.hasFair(p) {
				out = append(out, fairQueueShard(s, p))
			}
		}
	}
	return out
}

// all returns the queue shards of base shards [0, high).
func (l lanes) all(high int64) []int64 {
	var out []int64
	for s := range high {
		out = append(out, l.of(s)...)
	}
	return out
}

func decodeLanes(v []byte) lanes {
	if len(v) == 0 {
		return laneHighest
	}
	return lanes(v[0]) | laneHighest
}

// useLane records in tr that typ has jobs of priority prio, unless ti
// (read in tr) says so already: an atomic or of the LANES key, and a bump
// of the types version, whose watch makes every started Client read the
// new lane and wake its acceptors (so the first job of a lane waits a
// watch's delay, and the others nothing). It writes nothing for the
// highest priority, whose lane is always read.
func (k keys) useLane(tr kv.Transaction, typ string, ti typeInfo, prio int) {
	if ti.lanes.has(prio) {
		return
	}
	tr.BitOr(k.lanesKey(typ), []byte{1 << (prio - PriorityHighest)})
	tr.Add(k.typesVersion(), one)
}

// useFairLane is useLane for the fair lane of priority prio.
func (k keys) useFairLane(tr kv.Transaction, typ string, ti typeInfo, prio int) {
	if ti.lanes.hasFair(prio) {
		return
	}
	tr.BitOr(k.lanesKey(typ), []byte{1 << (fairLanes + prio - PriorityHighest)})
	tr.Add(k.typesVersion(), one)
}

func (k keys) lanesKey(typ string) kv.Key { return k.root.Pack(tuple.Tuple{keyLanes, typ}) }

// agingUnits is Config.PriorityAging in scheduled-time units.
func (c Config) agingUnits() int64 { return max(1, int64(c.PriorityAging/c.TimeUnit)) }

// fairAfter orders a fair lane's jobs after those of the other lanes in
// an accept's merge: their scheduled times are their places in the fair
// order, behind the clock when the kind has a backlog.
const fairAfter = MaxScheduledTimeMax / 2

// laneRead is the reads of the lanes of one base shard, each up to a
// limit, from the head of what is due or (tail) from its end.
type laneRead struct {
	shard int64 // the base shard
	tail  bool
	qs    []int64 // the queue shards read, the highest priority first
	fs    []kv.RangeResult
}

// readLanes issues the reads of the due pending keys of typ's base shard s
// in each of ls, up to limit each.
func (c *Client) readLanes(snap kv.ReadTransaction, typ string, s int64, ls lanes, d dueBound, limit int, tail bool) laneRead {
	lr := laneRead{shard: s, tail: tail}
	for _, q := range ls.of(s) {
		max := d.laneMax(shardPriority(q), c.cfg.agingUnits())
		if isFairLane(q) {
			if d.handicapped {
				continue // OldestFirst takes the fair jobs once no other is due
			}
			max = d.max
		}
		if max < 0 {
			continue
		}
		lr.qs = append(lr.qs, q)
		lr.fs = append(lr.fs, snap.GetRange(c.k.pendingRange(typ, q, max), kv.RangeOptions{Limit: limit, Reverse: tail}))
	}
	return lr
}

// dueBound bounds the jobs an accept takes: scheduled at or before max and,
// with handicapped, whose handicapped due times are at or before
// handicap (an OldestFirst fetch's: see Client.dueHandicapped).
type dueBound struct {
	max         int64
	handicapped bool
	handicap    int64
}

// laneMax is the latest scheduled time d takes in a lane of priority
// prio (-1: none).
func (d dueBound) laneMax(prio int, aging int64) int64 {
	if !d.handicapped {
		return d.max
	}
	return min(d.max, d.handicap-int64(prio-PriorityHighest)*aging)
}

// dueHandicapped finds the n pending jobs of typ, due at or before max,
// of least handicapped due time across every shard and lane, and returns
// the latest of their handicapped times h and how many there are (at most
// n; 0 when none is due). When some of those are earlier than h and
// others are at h, it returns h-1 and the earlier ones alone: a job at h
// in one shard must not take the place of an earlier one in another. An
// accept bounded by it takes due jobs of the kind in priority and due
// order across its shards (WorkerOptions.OldestFirst); the fair lanes'
// jobs come after the others (0 due here: a plain accept takes them). One
// snapshot read of each queue shard's first n.
func (c *Client) dueHandicapped(ctx context.Context, typ string, max int64, n int) (int64, int, error) {
	h, count, below, err := c.nthDue(ctx, nil, typ, max, n, c.cfg.agingUnits(), true)
	if below > 0 && below < count {
		return h - 1, below, err
	}
	return h, count, err
}

// get waits for the reads and returns up to n keys as runs of consecutive
// keys of a lane, each run in key order, and how many keys they hold. From
// the head, the keys are those of least due time plus handicap
// ((priority-1) × aging units), ties to the higher priority: each lane's
// part is a prefix of it. From the tail (a node helping with another's
// shard, which takes from the end of what is due so as not to meet the
// owner), the lanes are taken in priority order, each from its end.
func (lr laneRead) get(k keys, n int, aging int64) (runs [][]kv.KeyValue, got int, err error) {
	all := make([][]kv.KeyValue, len(lr.fs))
	for i, f := range lr.fs {
		if all[i], err = f.GetSliceWithError(); err != nil {
			return nil, 0, err
		}
	}
	if lr.tail {
		for _, kvs := range all {
			if got == n {
				break
			}
			if len(kvs) == 0 {
				continue
			}
			run := slices.Clone(kvs[:min(len(kvs), n-got)])
			slices.Reverse(run)
			runs, got = append(runs, run), got+len(run)
		}
		return runs, got, nil
	}
	if len(all) == 1 {
		run := all[0][:min(len(all[0]), n)]
		if len(run) == 0 {
			return nil, 0, nil
		}
		return [][]kv.KeyValue{run}, len(run), nil
	}
	// Each lane's keys, handicapped: its due times plus its priority's.
	times := make([][]int64, len(all))
	for i, kvs := range all {
		handicap := int64(shardPriority(lr.qs[i])-PriorityHighest) * aging
		if isFairLane(lr.qs[i]) {
			handicap += fairAfter // after every job due by the clock
		}
		for _, e := range kvs {
			t, err := k.pending.Unpack(e.Key)
			if err != nil || len(t) != 4 {
				return nil, 0, fmt.Errorf("fdbjobs: bad pending key %s", e.Key)
			}
			st, _ := intElem(t[2])
			times[i] = append(times[i], st+handicap)
		}
	}
	taken := make([]int, len(all))
	for got < n {
		best := -1
		for i := range all {
			if taken[i] < len(times[i]) && (best < 0 || times[i][taken[i]] < times[best][taken[best]]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		taken[best]++
		got++
	}
	for i, kvs := range all {
		if taken[i] > 0 {
			runs = append(runs, kvs[:taken[i]])
		}
	}
	return runs, got, nil
}
