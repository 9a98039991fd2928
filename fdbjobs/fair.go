package fdbjobs

// Fair shares (see doc.go, "Fair shares"): a kind's starts shared between
// its partitions in proportion to their weights, by start-time fair
// queueing of each due job's scheduled time when it is inserted.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

const (
	// PartitionWeightDefault is the weight of a partition no
	// SetPartitionWeight named.
	PartitionWeightDefault = 1
	// PartitionWeightMax bounds SetPartitionWeight's weight.
	PartitionWeightMax = 1000
	// fairStep is how far one due job of a partition of weight 1 moves its
	// partition's tag, in ns (weight w: fairStep / w): a partition whose
	// due jobs come faster than a million per second and weight has its
	// tags run ahead of the clock, and its jobs then queue at now, in the
	// order they came (see fairTags).
	fairStep = 1000
	// RunTimeRatioMax bounds a partition's cost of a start by run time
	// (FairShareRunTime) against the kind's mean, both ways: a partition
	// whose jobs run more than RunTimeRatioMax times the kind's mean counts
	// as RunTimeRatioMax times.
	RunTimeRatioMax = 100.0
	// fairCreditMax bounds how far behind the median of its lanes' heads a
	// kind by run time starts a partition that comes back (queueHeads), in
	// ns of tag: a thousand starts of weight 1 at the kind's mean.
	fairCreditMax = 1000 * fairStep
	// ChargeIntervalDefault is RuntimeOptions.ChargeInterval's default:
	// how often a Runtime charges the run time of a FairShareRunTime
	// kind's jobs, and rolls the kind's usage up (decaying it by
	// UsageCoeffDefault): the unit of the decay of the partitions' means.
	// Runtimes of one kind with different intervals roll up at the
	// interval of whichever takes the period.
	ChargeIntervalDefault = 10 * time.Second
)

func (k keys) fairKey(kind string) kv.Key { return k.root.Pack(tuple.Tuple{keyFair, kind}) }

func (k keys) partWeightKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartWeight, kind, part})
}

func (k keys) partTagKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartTag, kind, part})
}

// FairShare is what a kind's fair shares share between its partitions
// (SetFairShareMode).
type FairShare int

const (
	// FairShareOff: jobs queue by their time, whatever their partition.
	FairShareOff FairShare = iota
	// FairShareStarts shares the starts: each start of a partition's job
	// moves the partition along the fair order as much as any other.
	FairShareStarts
	// FairShareRunTime shares the run time: each start of a partition's
	// job moves the partition as far as its jobs' mean run time (decayed
	// as the fair-share RFC's usage, which Runtimes charge) against the
	// kind's, so that a partition whose jobs run ten times longer starts a
	// tenth as many.
	FairShareRunTime
)

// String names the mode as the job layer's web page does.
func (m FairShare) String() string {
	switch m {
	case FairShareOff:
		return "off"
	case FairShareStarts:
		return "starts"
	case FairShareRunTime:
		return "run time"
	}
	return fmt.Sprintf("FairShare(%d)", int(m))
}

// fairRunTime is FAIR's value for FairShareRunTime (FairShareStarts': empty).
var fairRunTime = tuple.Tuple{"run_time"}.Pack()

func decodeFairShare(v []byte) FairShare {
	switch {
	case v == nil:
		return FairShareOff
	case bytes.Equal(v, fairRunTime):
		return FairShareRunTime
	}
	return FairShareStarts
}

// SetFairShare turns kind's fair shares between partitions on, sharing
// the starts (FairShareStarts), or off: SetFairShareMode.
func (c *Client) SetFairShare(ctx context.Context, tx kv.Transactor, kind string, on bool) error {
	m := FairShareOff
	if on {
		m = FairShareStarts
	}
	return c.SetFairShareMode(ctx, tx, kind, m)
}

// GetFairShare reports whether kind's fair shares are on, in either mode.
func (c *Client) GetFairShare(ctx context.Context, tx kv.ReadTransactor, kind string) (bool, error) {
	m, err := c.GetFairShareMode(ctx, tx, kind)
	return m != FairShareOff, err
}

// SetFairShareMode sets kind's fair shares between partitions. With them
// on, the jobs Insert adds due now with a partition
// (InsertOptions.Partition) are queued so that, while the kind has more
// due jobs than its Runtimes start, each partition with jobs waiting gets
// a share of the starts (FairShareStarts) or of the run time
// (FairShareRunTime) in proportion to its weight (SetPartitionWeight; 1
// by default), whatever the rates at which the partitions insert: a
// partition that inserts a thousand jobs does not make the next
// partition's job wait behind them. Such a job waits in a fair lane of
// the queue; its ScheduledTime is its place in that order, at or before
// the time it was inserted, and its id starts with that place. Jobs
// without a partition, jobs scheduled later, jobs with ids of the
// caller's and jobs enqueued again (retried, snoozed, handed back) are
// queued by their time, and go before the fair lanes' jobs once due. Off
// by default: each insert page with partitioned jobs then reads the head
// of every fair lane of the kind and each partition's weight and tag (and
// its usage, by run time), and writes the tag. By run time, each Runtime
// charges the run time of the kind's partitioned jobs it ran and rolls
// the kind's usage up every RuntimeOptions.ChargeInterval (ChargeRunTime,
// RollUpUsage); a partition's cost of a start is its mean run time
// against the kind's, within [1/RunTimeRatioMax, RunTimeRatioMax], and a
// partition not yet charged costs the kind's mean. Changes apply to the
// jobs inserted after them; the kind need not exist yet. tx may be nil, a
// Database or a caller's Transaction.
func (c *Client) SetFairShareMode(ctx context.Context, tx kv.Transactor, kind string, m FairShare) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if m < FairShareOff || m > FairShareRunTime {
		return fmt.Errorf("%w: fair share mode %d", ErrInvalidArgument, int(m))
	}
	// The types version's bump tells the type-check loops (accepts of a
	// kind by run time take the first jobs of all shards: pickFairest).
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		switch m {
		case FairShareOff:
			tr.Clear(c.k.fairKey(kind))
		case FairShareStarts:
			tr.Set(c.k.fairKey(kind), nil)
		case FairShareRunTime:
			tr.Set(c.k.fairKey(kind), fairRunTime)
		}
		return nil
	})
}

// GetFairShareMode returns kind's fair share mode.
func (c *Client) GetFairShareMode(ctx context.Context, tx kv.ReadTransactor, kind string) (FairShare, error) {
	if err := checkName("kind", kind); err != nil {
		return FairShareOff, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (FairShare, error) {
		v, err := tr.Get(c.k.fairKey(kind)).Get()
		return decodeFairShare(v), err
	})
}

// SetPartitionWeight sets partition's weight in kind's fair shares (see
// SetFairShare), from 1 to PartitionWeightMax; 0 gives it back the
// default, PartitionWeightDefault. It applies to the jobs inserted after
// it. tx may be nil, a Database or a caller's Transaction.
func (c *Client) SetPartitionWeight(ctx context.Context, tx kv.Transactor, kind, partition string, weight int) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if err := checkPartition(partition); err != nil {
		return err
	}
	if partition == "" {
		return fmt.Errorf("%w: a weight for the empty partition (jobs without a partition have no share)", ErrInvalidArgument)
	}
	if weight < 0 || weight > PartitionWeightMax {
		return fmt.Errorf("%w: weight %d outside [1, %d] (0: the default, %d)", ErrInvalidArgument, weight, PartitionWeightMax, PartitionWeightDefault)
	}
	_, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (struct{}, error) {
		if weight == 0 {
			tr.Clear(c.k.partWeightKey(kind, partition))
		} else {
			tr.Set(c.k.partWeightKey(kind, partition), tuple.Tuple{int64(weight)}.Pack())
		}
		return struct{}{}, nil
	})
	return err
}

// GetPartitionWeight returns partition's weight in kind's fair shares.
func (c *Client) GetPartitionWeight(ctx context.Context, tx kv.ReadTransactor, kind, partition string) (int, error) {
	if err := checkName("kind", kind); err != nil {
		return 0, err
	}
	if err := checkPartition(partition); err != nil {
		return 0, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (int, error) {
		v, err := tr.Get(c.k.partWeightKey(kind, partition)).Get()
		if err != nil {
			return 0, err
		}
		return decodeWeight(v), nil
	})
}

// decodeWeight reads a WEIGHT value; absent or not understood is the
// default.
func decodeWeight(v []byte) int {
	if t, err := tuple.Unpack(v); err == nil && len(t) == 1 {
		if w, ok := intElem(t[0]); ok && w >= 1 && w <= PartitionWeightMax {
			return int(w)
		}
	}
	return PartitionWeightDefault
}

// fairQueue places the new due partitioned jobs of an insert page of a
// kind whose fair shares are on in its fair order (start-time fair
// queueing, Goyal et al.): a partition's tag moves by fairStep / weight
// per job from the later of its last tag and where the queue is being
// served (queueHead), so that among the partitions with jobs waiting each
// one's jobs lie as densely in the queue's order as its weight, and a
// partition that had none starts where the queue is. The tags are ns; a
// job's scheduled time is its tag in TimeUnits, rounded down, and its id
// (when Insert drew it) starts with the tag, so that the queue's order,
// by scheduled time and then id, is the tags' (tags run ahead of the
// clock, where now bounds the scheduled time, only when a partition has
// over a million due jobs per unit of weight waiting). The reads are
// snapshots (two inserts of one partition at once may share tags, which
// only ties their jobs), the tags' writes atomic maxima: it adds no
// conflict.
type fairQueue struct {
	kind  string
	now   int64 // in TimeUnits
	unit  int64 // ns
	parts map[string]*fairPartition
	// floors are where the fair lanes of each priority are served, ns
	// (queueHeads): a partition's next tag is at least its priority's.
	floors [PriorityLowest + 1]int64
}

type fairPartition struct {
	weight int64
	tag    int64 // the last, ns
	step   int64 // a start's move of tag, ns: fairStep / weight, by run time × its cost
	moved  bool
}

// fairShares returns the fairQueue of an insert page of jobs of kind
// (whose type information ti holds its lanes), nil when kind's fair
// shares are off or no job is partitioned, due and of a drawn id.
func (c *Client) fairShares(tr kv.Transaction, kind string, jobs []NewJob, ti typeInfo) (*fairQueue, error) {
	snap := tr.Snapshot()
	now := c.cfg.now()
	type reads struct{ weight, tag kv.FutureByteSlice }
	rs := map[string]reads{}
	for _, j := range jobs {
		if _, ok := rs[j.Partition]; !ok && j.Partition != "" && j.ScheduledTime <= now && (j.drawnID || j.tag != 0) {
			rs[j.Partition] = reads{snap.Get(c.k.partWeightKey(kind, j.Partition)), snap.Get(c.k.partTagKey(kind, j.Partition))}
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	fv, err := snap.Get(c.k.fairKey(kind)).Get()
	mode := decodeFairShare(fv)
	if err != nil || mode == FairShareOff {
		return nil, err
	}
	// By run time, each partition's cost of a start: its usage, and the
	// kind's mean, read once the mode is known.
	var usageF map[string]kv.FutureByteSlice
	var periodF kv.FutureByteSlice
	if mode == FairShareRunTime {
		usageF = make(map[string]kv.FutureByteSlice, len(rs))
		for name := range rs {
			usageF[name] = snap.Get(c.k.usageKey(kind, name))
		}
		periodF = snap.Get(c.k.usagePeriodKey(kind))
	}
	q := &fairQueue{kind: kind, now: now, unit: int64(c.cfg.TimeUnit), parts: map[string]*fairPartition{}}
	if q.floors, err = c.queueHeads(snap, kind, ti.lanes.fair(ti.high), now, q.unit, mode == FairShareRunTime); err != nil {
		return nil, err
	}
	mean := 0.0
	if periodF != nil {
		pv, err := periodF.Get()
		if err != nil {
			return nil, err
		}
		mean = decodeUsageRecord(pv).mean()
	}
	for name, r := range rs {
		wv, err := r.weight.Get()
		if err != nil {
			return nil, err
		}
		tv, err := r.tag.Get()
		if err != nil {
			return nil, err
		}
		w := int64(decodeWeight(wv))
		p := &fairPartition{weight: w, tag: kv.DecodeInt64(tv), step: fairStep / w}
		if f, ok := usageF[name]; ok {
			uv, err := f.Get()
			if err != nil {
				return nil, err
			}
			u, _ := decodeUsage(uv)
			p.step = runTimeStep(u, mean, w)
		}
		q.parts[name] = p
	}
	return q, nil
}

// runTimeStep is how far a start moves a partition of weight w, whose
// usage is u, in a kind whose mean run time of a run is mean (ms): fairStep
// × its mean against the kind's, within [1/RunTimeRatioMax,
// RunTimeRatioMax] (1 when either is not known), over w; at least 1 ns.
func runTimeStep(u usage, mean float64, w int64) int64 {
	ratio := 1.0
	if u.runs >= 1 && mean > 0 {
		ratio = min(RunTimeRatioMax, max(1/RunTimeRatioMax, u.ms/u.runs/mean))
	}
	return max(1, int64(fairStep*ratio/float64(w)))
}

// place returns the scheduled time of new job j, whether it goes to a
// fair lane, and the id to give it instead of the one Insert drew: its tag
// in 16 hex digits, then 16 random ones, so that the jobs of one scheduled
// time, which the queue orders by id, start in the order of their tags
// too. A job that is not partitioned, not due, or whose id is the
// caller's keeps stime and id; a job an earlier attempt placed keeps its
// place (tag).
func (q *fairQueue) place(j NewJob, stime int64) (int64, bool, string) {
	p := q.parts[j.Partition]
	if p == nil || stime > q.now || !j.drawnID && j.tag == 0 {
		return stime, false, ""
	}
	p.moved = true
	p.tag = max(p.tag, q.floors[cmp.Or(j.Priority, PriorityHighest)])
	if j.tag != 0 {
		p.tag = max(p.tag, j.tag)
		return min(q.now, j.tag/q.unit), true, ""
	}
	if p.tag <= math.MaxInt64-p.step {
		p.tag += p.step
	}
	return min(q.now, p.tag/q.unit), true, fmt.Sprintf("%016x", p.tag) + randomHex()[:16]
}

// tagOf reads the tag a fair job's id carries (place), given the job's
// scheduled time: ok is false for an id that does not carry one.
func tagOf(id string, stime, unit int64) (tag int64, ok bool) {
	if len(id) != 32 {
		return 0, false
	}
	t, err := strconv.ParseUint(id[:16], 16, 63)
	if err != nil || int64(t) < stime*unit { // a scheduled time at or before its tag's
		return 0, false
	}
	return int64(t), true
}

// write records the partitions' tags the page moved.
func (q *fairQueue) write(tr kv.Transaction, k keys) {
	for name, p := range q.parts {
		if p.moved {
			tr.Max(k.partTagKey(q.kind, name), binary.LittleEndian.AppendUint64(nil, uint64(p.tag)))
		}
	}
}

// queueHeads is where kind's fair lanes are being served, in ns, for each
// priority: from the first due job of each fair lane of every queue shard
// (read as snapshots), its tag (its id carries it; ahead of now when the
// partitions' tags ran ahead of the clock), or else its scheduled time's;
// now's for a priority with no job due.
//
// By starts (least false), every priority's is the median of all those
// heads: the acceptors serve the shards one at a time, so that their heads
// spread, and a shard left behind a while must not put a partition that
// comes back in front of every other shard's jobs, nor one served ahead
// put it behind them. By run time (least), each priority's is the least
// of its own lanes' heads, as its accepts take the first jobs of the
// node's shards together (pickFairest), but no further behind their
// median than fairCreditMax, so that a lane left behind (another node's,
// one that does not run the kind) gives a partition that comes back at
// most that much ahead of the others; a priority with none due takes the
// least head of all.
func (c *Client) queueHeads(snap kv.ReadTransaction, kind string, qs []int64, now, unit int64, least bool) (floors [PriorityLowest + 1]int64, err error) {
	futs := make([]kv.RangeResult, len(qs))
	for i, q := range qs {
		futs[i] = snap.GetRange(prefixRange(c.k.pending, tuple.Tuple{kind, q}), kv.RangeOptions{Limit: 1})
	}
	var all []int64
	var byPrio [PriorityLowest + 1][]int64
	for i, f := range futs {
		kvs, err := f.GetSliceWithError()
		if err != nil {
			return floors, err
		}
		if len(kvs) == 0 {
			continue
		}
		t, err := c.k.pending.Unpack(kvs[0].Key)
		if err != nil || len(t) != 4 {
			return floors, fmt.Errorf("fdbjobs: bad pending key %s", kvs[0].Key)
		}
		st, _ := intElem(t[2])
		id, _ := t[3].(string)
		if st > now {
			continue
		}
		head := st * unit
		if tag, ok := tagOf(id, st, unit); ok {
			head = tag // ahead of now when tags ran ahead of the clock
		}
		all = append(all, head)
		prio := shardPriority(qs[i])
		byPrio[prio] = append(byPrio[prio], head)
	}
	median := func(hs []int64) int64 {
		slices.Sort(hs)
		return hs[(len(hs)-1)/2]
	}
	for p := range floors {
		floors[p] = now * unit
	}
	if !least {
		if len(all) > 0 {
			m := median(all)
			for p := range floors {
				floors[p] = m
			}
		}
		return floors, nil
	}
	if len(all) == 0 {
		return floors, nil
	}
	slices.Sort(all)
	for p, hs := range byPrio {
		if len(hs) > 0 {
			m := median(hs)
			floors[p] = max(hs[0], m-fairCreditMax)
		} else {
			// No job waits at this priority: where the others are
			// (tags lag the clock under a backlog, and a floor of now
			// would put a newcomer behind a lower priority's backlog).
			floors[p] = all[0]
		}
	}
	return floors, nil
}
