package fdbjobs

// How an accept picks the pending keys it takes: the order of the
// shards it reads, its sweep across transactions, and the picks.

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// shardsToTry orders the shards [0, high) of typ for an accept: this
// node's own first, then the others, then those in avoid; mine tells the
// node's own.
func (c *Client) shardsToTry(typ string, high int64, avoid map[int64]bool) (order []int64, mine map[int64]bool) {
	own, others := c.shardOrder(typ, high)
	order = make([]int64, 0, high)
	mine = make(map[int64]bool, len(own))
	var last []int64
	for _, s := range own {
		mine[s] = true
	}
	for _, s := range append(own, others...) {
		if avoid[s] {
			last = append(last, s)
		} else {
			order = append(order, s)
		}
	}
	return append(order, last...), mine
}

// sweepShards is the most shards an accept reads in one transaction: a
// look over more (a type with more shards, when the node's own run short)
// goes on in the next transactions of the same Accept, so that no accept
// transaction grows with the type's shards, and so with the cluster.
const sweepShards = 32

// fairestReadMax bounds the jobs pickFairest reads of each lane, over
// all the shards it reads (at least 32 a shard: sweepShards).
const fairestReadMax = 1024

// sweep is where one look over a type's shards is, across the accept
// transactions of one Accept call: the shards in the order it reads them
// (this node's own first), how many it has read, and the type's pending
// counter as its first transaction read it, and whether it skipped shards
// this node's other acceptors were claiming. A look that ends with
// nothing found compares the counter as its last transaction reads it,
// where it sets its watch: a job enqueued during the look changed it, and
// the look starts over instead of waiting (an enqueue after that read
// fires the watch).
type sweep struct {
	order   []int64
	mine    map[int64]bool
	pos     int
	counter []byte
	skipped bool
}

// advance moves the sweep past the shards look read, or back to the
// start.
func (sw *sweep) advance(look pick) {
	if look.next == 0 {
		sw.pos, sw.counter, sw.skipped = 0, nil, false
		return
	}
	if sw.pos == 0 {
		sw.counter = look.counter
	}
	sw.pos, sw.skipped = look.next, sw.skipped || look.busy
}

// pick is what pickScheduled found.
type pick struct {
	runs   [][]kv.KeyValue // pending keys and their values, by shard
	shards []int64         // marked in c.claiming, to be released by the caller
	// busy reports that nothing was found but shards being claimed by this
	// node's other acceptors were skipped.
	busy bool
	// more reports that nothing was found and the look goes on at next
	// (0: it starts over, its counter having changed) in another
	// transaction; counter is the pending counter this one read.
	more    bool
	next    int
	counter []byte
}

// pickScheduled finds up to n pending keys of typ due by d, read as a
// snapshot, as runs of consecutive keys of a shard (see
// doc.go, "Accepting"): the head of the first of the node's own shards
// that no other acceptor of the node is claiming from; when that has fewer
// than n due, the other shards not being claimed on the node, read at
// once, sweepShards at a time (sw), the node's own from their head, then
// other nodes' from the end of what is due, when none of its own has
// anything more. With scan, or past the sweep's first transaction, it
// reads the shards at once from the start (an Accept woken after it found
// nothing: one round trip, not two). The shards it took runs from stay
// marked in c.claiming until the caller releases them.
func (c *Client) pickScheduled(tr kv.Transaction, typ string, n int, d dueBound, ti typeInfo, avoid map[int64]bool, scan bool, sw *sweep) (p pick, err error) {
	high, aging := ti.high, c.cfg.agingUnits()
	snap := tr.Snapshot()
	if int64(len(sw.order)) != high {
		order, mine := c.shardsToTry(typ, high, nil)
		*sw = sweep{order: order, mine: mine}
	}
	order, mine := sw.order, sw.mine
	paged := len(order) > sweepShards
	var counter kv.FutureByteSlice
	if paged {
		counter = snap.Get(c.k.watchesPending(typ))
	}
	got := 0
	add := func(s int64, runs [][]kv.KeyValue, k int) {
		p.runs, p.shards, got = append(p.runs, runs...), append(p.shards, s), got+k
	}
	skipped := false
	first := int64(-1)
	if ti.fairRunTime && sw.pos == 0 {
		if p, err = c.pickFairest(snap, typ, n, d, ti, order, mine, avoid); err != nil || len(p.runs) > 0 {
			return p, err
		}
	}
	if !scan && sw.pos == 0 {
		for _, s := range order {
			if !mine[s] || avoid[s] {
				continue
			}
			if !c.claiming.take(typ, s) {
				skipped = true
				continue
			}
			first = s
			runs, k, err := c.readLanes(snap, typ, s, ti.lanes, d, n, false).get(c.k, n, aging)
			if err != nil {
				c.claiming.release(typ, s)
				return p, err
			}
			if k == 0 {
				c.claiming.release(typ, s)
			} else {
				add(s, runs, k)
			}
			break
		}
		if got == n {
			return p, nil
		}
	}
	// This transaction's part of the look, shards a conflict made the
	// caller avoid last.
	window := order[sw.pos:min(len(order), sw.pos+sweepShards)]
	p.next = sw.pos + len(window)
	var rest, last []int64
	for _, s := range window {
		switch {
		case s == first:
		case avoid[s]:
			last = append(last, s)
		default:
			rest = append(rest, s)
		}
	}
	rest = append(rest, last...)
	// The other shards, read at once: the node's own from their head,
	// other nodes' from the end of what is due, so that a node helping
	// with another's shard does not take the keys its owner is taking
	// (their runs meet only when the shard is nearly empty).
	var parts, theirs []laneRead
	var claimed []laneRead // the heads of its own shards other acceptors have
	for _, s := range rest {
		if c.claiming.marked(typ, s) {
			skipped = true
			if mine[s] {
				claimed = append(claimed, c.readLanes(snap, typ, s, ti.lanes, d, 1, false))
			}
			continue
		}
		pt := c.readLanes(snap, typ, s, ti.lanes, d, n-got, !mine[s])
		if pt.tail {
			theirs = append(theirs, pt)
		} else {
			parts = append(parts, pt)
		}
	}
	// A node helps with other nodes' shards only once its own have nothing
	// due: while one of them, being claimed by another of its acceptors,
	// still has jobs, that acceptor takes them next, and this one had
	// better wait (busy) than meet another node's acceptors. Helpers
	// spread over the other nodes' shards at random.
	for _, f := range claimed {
		_, k, err := f.get(c.k, 1, aging)
		if err != nil {
			return p, err
		}
		if k > 0 {
			theirs = nil
			break
		}
	}
	mrand.Shuffle(len(theirs), func(i, j int) { theirs[i], theirs[j] = theirs[j], theirs[i] })
	for _, pt := range append(parts, theirs...) {
		runs, k, err := pt.get(c.k, n-got, aging)
		if err != nil {
			return p, err
		}
		if k == 0 || got == n {
			continue
		}
		if !c.claiming.take(typ, pt.shard) {
			skipped = true
			continue
		}
		add(pt.shard, runs, k)
	}
	if got > 0 {
		return p, nil
	}
	p.busy = skipped || sw.skipped
	if !paged {
		return p, nil
	}
	if p.counter, err = counter.Get(); err != nil {
		return p, err
	}
	switch {
	case p.next < len(order):
		p.more = true
	case sw.pos > 0 && !bytes.Equal(p.counter, sw.counter):
		p.more, p.next = true, 0 // jobs were enqueued during the look
	}
	return p, nil
}

// pickNoSchedule picks up to n pending keys scheduled at 0 of one lane of
// one shard, the highest priority's that has any, each the nearest one
// after or before a random point (couch_jobs' no_schedule), trying the
// shards in shardsToTry's order. The shard stays marked, as in
// pickScheduled.
func (c *Client) pickNoSchedule(tr kv.Transaction, typ string, n int, ti typeInfo, avoid map[int64]bool) ([]kv.Key, []int64, error) {
	snap := tr.Snapshot()
	order, _ := c.shardsToTry(typ, ti.high, avoid)
	for _, shard := range order {
		if !c.claiming.take(typ, shard) {
			continue
		}
		for _, q := range ti.lanes.of(shard) {
			out, err := c.pickNoScheduleIn(snap, typ, n, q)
			if err != nil || len(out) > 0 {
				return out, []int64{shard}, err
			}
		}
		c.claiming.release(typ, shard)
	}
	return nil, nil, nil
}

// pickNoScheduleIn is pickNoSchedule's look in queue shard q.
func (c *Client) pickNoScheduleIn(snap kv.ReadTransaction, typ string, n int, q int64) ([]kv.Key, error) {
	r := prefixRange(c.k.pending, tuple.Tuple{typ, q, int64(0)})
	begin, end := r.Begin.FDBKey(), r.End.FDBKey()
	seen := map[string]bool{}
	var out []kv.Key
	inRange := func(k kv.Key) bool {
		return bytes.Compare(k, begin) >= 0 && bytes.Compare(k, end) < 0 && !seen[string(k)]
	}
	for attempt := 0; attempt < 2*n && len(out) < n; attempt++ {
		point := c.k.pending.Pack(tuple.Tuple{typ, q, int64(0), randomHex()})
		sels := []kv.KeySelector{kv.FirstGreaterOrEqual(point), kv.LastLessOrEqual(point)}
		if mrand.IntN(2) == 0 {
			sels[0], sels[1] = sels[1], sels[0]
		}
		found := false
		for _, sel := range sels {
			k, err := snap.GetKey(sel).Get()
			if err != nil {
				return nil, err
			}
			if inRange(k) {
				seen[string(k)] = true
				out = append(out, k)
				found = true
				break
			}
		}
		if !found {
			break // both directions hit the range ends: nothing (else) pending
		}
	}
	return out, nil
}

// pickFairest takes, for a kind whose fair shares are by run time, the n
// due jobs that come first in the order of all the node's own shards
// together (not avoided nor being claimed by its other acceptors): by
// handicapped due time, then by id (a fair job's id starts with its tag),
// each shard's part a prefix of each of its lanes. One snapshot read of
// each such shard's first n per lane (fewer with many shards:
// fairestReadMax), of sweepShards shards at most. Any look of an accept begins with
// it. It marks every shard it takes from, so that the node's other
// fetchers of the kind wait (busy) until its claim is done: such kinds'
// jobs run long, and their accepts are few. Such a kind's partitions' tags
// advance at rates that differ as their jobs' run times, so that the head
// of one shard taken at random, as other kinds' accepts take, would
// favour the partitions of long jobs in every shard where the others have
// no job waiting. The shards it takes from are marked in c.claiming.
func (c *Client) pickFairest(snap kv.ReadTransaction, typ string, n int, d dueBound, ti typeInfo, order []int64, mine, avoid map[int64]bool) (p pick, err error) {
	aging := c.cfg.agingUnits()
	type lane struct {
		shard int64
		kvs   []kv.KeyValue
		ranks []int64
		ids   []string
		taken int
	}
	var cands []int64
	for _, s := range order {
		if len(cands) < sweepShards && mine[s] && !avoid[s] && !c.claiming.marked(typ, s) {
			cands = append(cands, s)
		}
	}
	// Each shard's first n, or fewer with many shards (fairestReadMax in
	// all): the merge then ends where a shard's read does, and the next
	// fetch takes more.
	per := min(n, max(1, fairestReadMax/max(1, len(cands))))
	reads := make([]laneRead, len(cands))
	for i, s := range cands {
		reads[i] = c.readLanes(snap, typ, s, ti.lanes, d, per, false)
	}
	var lanes []*lane
	for _, lr := range reads {
		for i, f := range lr.fs {
			kvs, err := f.GetSliceWithError()
			if err != nil {
				return p, err
			}
			l := &lane{shard: lr.shard, kvs: kvs}
			handicap := int64(shardPriority(lr.qs[i])-PriorityHighest) * aging
			if isFairLane(lr.qs[i]) {
				handicap += fairAfter
			}
			for _, e := range kvs {
				t, err := c.k.pending.Unpack(e.Key)
				if err != nil || len(t) != 4 {
					return p, fmt.Errorf("fdbjobs: bad pending key %s", e.Key)
				}
				st, _ := intElem(t[2])
				id, _ := t[3].(string)
				l.ranks, l.ids = append(l.ranks, st+handicap), append(l.ids, id)
			}
			lanes = append(lanes, l)
		}
	}
	for got := 0; got < n; got++ {
		var best *lane
		for _, l := range lanes {
			if l.taken == len(l.kvs) {
				if l.taken == per {
					// The lane's next, not read, may come before every
					// other: the merge ends here.
					best = nil
					break
				}
				continue
			}
			if best == nil || l.ranks[l.taken] < best.ranks[best.taken] ||
				l.ranks[l.taken] == best.ranks[best.taken] && l.ids[l.taken] < best.ids[best.taken] {
				best = l
			}
		}
		if best == nil {
			break
		}
		best.taken++
	}
	byShard := map[int64][][]kv.KeyValue{}
	var shards []int64
	for _, l := range lanes {
		if l.taken == 0 {
			continue
		}
		if _, ok := byShard[l.shard]; !ok {
			shards = append(shards, l.shard)
		}
		byShard[l.shard] = append(byShard[l.shard], l.kvs[:l.taken])
	}
	for _, s := range shards {
		if c.claiming.take(typ, s) { // else another acceptor of the node has just begun
			p.runs, p.shards = append(p.runs, byShard[s]...), append(p.shards, s)
		}
	}
	return p, nil
}
