package fdbjobs

import (
	"context"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Shards of a type's pending queue (see doc.go, "Shards").
const (
	// ShardsDefault is the number of shards of a type's pending queue
	// until SetTypeShards sets another, or a Runtime's Start raises it to
	// the nodes Config.Members names. Nodes take from different shards,
	// so a type needs about as many shards as the nodes that take from
	// it at once, or more.
	ShardsDefault = 16
	// ShardsMax is the most shards a type may have (at most laneStride).
	ShardsMax = 4096
)

// typeInfo is what an accept or an add reads of its type: the activity
// timeout (0 without one) and the shard counts.
type typeInfo struct {
	timeout    time.Duration
	hasTimeout bool
	// shards is the number of shards new jobs are spread over; high is
	// the highest it has been, so that shards [shards, high) may still
	// hold jobs created before it was lowered.
	shards, high int64
	// feed: the type's event feed is on (SetFeed). known: the type-check
	// loop read the type (its copy says whether the feed is on).
	feed, known bool
	// lanes: the priorities the type's jobs have had (priority.go).
	lanes lanes
	// limit: the kind's cluster-wide limit (zero: none; limits.go), as
	// the type-check loop read it (readTypeInfo does not read it).
	limit Limit
	// partLimit and partRate: the kind's limit per partition, its Running
	// and its PerSecond in millionths (0: none; partition.go), as the
	// type-check loop read them.
	partLimit int
	partRate  int64
	// fairRunTime: the kind's fair shares are by run time (its accepts
	// take the first jobs of all its shards: pickFairest), as the
	// type-check loop read it.
	fairRunTime bool
}

// cachedTypeInfo is readTypeInfo for accepts: a started Client takes
// typ's timeout and shard counts from what its type-check loop last read
// (it watches the types version, which SetTypeTimeout, ClearTypeTimeout
// and SetTypeShards bump, so the copy lags a change by about a watch's
// delay), and reads them in tr only when it has no copy: not started, or
// the type not seen yet. An accept thus reads no key that every accept of
// the type reads. A copy that lags a lowered timeout gives the jobs the
// hold of the timeout before, as an Accept just before the change would
// have (see doc.go, "Holding a job").
func (c *Client) cachedTypeInfo(tr kv.ReadTransaction, typ string) func() (typeInfo, error) {
	if m := c.infos.Load(); m != nil {
		if ti, ok := (*m)[typ]; ok {
			return func() (typeInfo, error) { return ti, nil }
		}
	}
	return c.readTypeInfo(tr, typ, true)
}

// readTypeInfo issues the reads of typ's timeout, shard counts, feed
// setting and, with withLanes, priority lanes (else the highest alone) and
// fair share mode in tr, and returns a function that waits for them.
func (c *Client) readTypeInfo(tr kv.ReadTransaction, typ string, withLanes bool) func() (typeInfo, error) {
	tf, sf, ff := tr.Get(c.k.timeoutKey(typ)), tr.Snapshot().Get(c.k.shardsKey(typ)), tr.Snapshot().Get(c.k.feedKey(typ))
	var lf, fairF kv.FutureByteSlice
	if withLanes {
		lf, fairF = tr.Snapshot().Get(c.k.lanesKey(typ)), tr.Snapshot().Get(c.k.fairKey(typ))
	}
	return func() (typeInfo, error) {
		ti := typeInfo{known: true, lanes: laneHighest}
		if lf != nil {
			lv, err := lf.Get()
			if err != nil {
				return ti, err
			}
			ti.lanes = decodeLanes(lv)
			fv, err := fairF.Get()
			if err != nil {
				return ti, err
			}
			ti.fairRunTime = decodeFairShare(fv) == FairShareRunTime
		}
		fv, err := ff.Get()
		if err != nil {
			return ti, err
		}
		ti.feed = fv != nil
		tv, err := tf.Get()
		if err != nil {
			return ti, err
		}
		if tv != nil {
			if ti.timeout, err = decodeTimeout(tv); err != nil {
				return ti, err
			}
			ti.hasTimeout = true
		}
		sv, err := sf.Get()
		if err != nil {
			return ti, err
		}
		ti.shards, ti.high, err = decodeShards(sv)
		return ti, err
	}
}

func decodeShards(v []byte) (shards, high int64, err error) {
	if v == nil {
		return ShardsDefault, ShardsDefault, nil
	}
	t, err := tuple.Unpack(v)
	if err == nil && len(t) == 2 {
		s, ok1 := intElem(t[0])
		h, ok2 := intElem(t[1])
		if ok1 && ok2 && s >= 1 && h >= s && h <= ShardsMax {
			return s, h, nil
		}
	}
	return 0, 0, fmt.Errorf("fdbjobs: bad shard counts %x", v)
}

// SetTypeShards sets the number of shards of typ's pending queue, in
// [1, ShardsMax] (ShardsDefault until set). Jobs keep the shard they were
// created in: after a lowered count, acceptors still take from the shards
// above it, and nothing is lost. tx may be nil, a Database or a caller's
// Transaction.
func (c *Client) SetTypeShards(ctx context.Context, tx kv.Transactor, typ string, n int) error {
	if err := checkName("type", typ); err != nil {
		return err
	}
	if n < 1 || n > ShardsMax {
		return fmt.Errorf("%w: %d shards outside [1, %d]", ErrInvalidArgument, n, ShardsMax)
	}
	return c.writeShards(ctx, tx, typ, func(int64) bool { return true }, int64(n))
}

// raiseTypeShards raises typ's shard count to n when it has fewer (a
// Runtime's start: as many shards as the members it sees), and leaves
// it as it is otherwise: it never lowers a count set by SetTypeShards.
func (c *Client) raiseTypeShards(ctx context.Context, typ string, n int64) error {
	n = min(n, ShardsMax)
	return c.writeShards(ctx, nil, typ, func(cur int64) bool { return cur < n }, n)
}

// writeShards sets typ's shard count to n in tx when change(the count
// now) says so, keeping the highest it has had, and bumps the types'
// version so that started Clients read it again.
func (c *Client) writeShards(ctx context.Context, tx kv.Transactor, typ string, change func(cur int64) bool, n int64) error {
	changed, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (bool, error) {
		v, err := tr.Get(c.k.shardsKey(typ)).Get()
		if err != nil {
			return false, err
		}
		s, high, err := decodeShards(v)
		if err != nil || !change(s) {
			return false, err
		}
		tr.Set(c.k.shardsKey(typ), tuple.Tuple{n, max(high, n)}.Pack())
		tr.Add(c.k.typesVersion(), one)
		return true, nil
	})
	if changed {
		c.typesChanged()
	}
	return err
}

// memberCount is how many members Config.Members names, this node among
// them (0 without Members, or when it does not name this node).
func (c *Client) memberCount() int64 {
	if c.cfg.Members == nil {
		return 0
	}
	self, members := c.cfg.Members()
	if !slices.Contains(members, self) {
		return 0
	}
	return int64(len(members))
}

// TypeShards returns the number of shards new jobs of typ are spread
// over.
func (c *Client) TypeShards(ctx context.Context, tx kv.ReadTransactor, typ string) (int, error) {
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (int, error) {
		v, err := tr.Get(c.k.shardsKey(typ)).Get()
		if err != nil {
			return 0, err
		}
		s, _, err := decodeShards(v)
		return int(s), err
	})
}

// shardOf is the shard a new job id goes to among n.
func shardOf(id string, n int64) int64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int64(h.Sum64() % uint64(n))
}

// shardOrder returns the shards [0, high) of typ in the order this node's
// accepts try them: the ones it owns first, then the others, each group
// from a random place on. Without Config.Members (or when this node is not
// among them) every shard is this node's.
func (c *Client) shardOrder(typ string, high int64) (own, others []int64) {
	var self string
	var members []string
	if c.cfg.Members != nil {
		self, members = c.cfg.Members()
	}
	if !slices.Contains(members, self) {
		own = make([]int64, high)
		for i := range own {
			own[i] = int64(i)
		}
		return rotate(own), nil
	}
	owners := c.owners.of(typ, high, members)
	for s, o := range owners {
		if members[o] == self {
			own = append(own, int64(s))
		} else {
			others = append(others, int64(s))
		}
	}
	return rotate(own), rotate(others)
}

// shardOwner returns whether this node owns base shard s of typ's pending
// queue (see shardOrder; every shard, without Config.Members), for as many
// shards as the caller asks about: it asks Config.Members once, as a claim
// of a batch of jobs does.
func (c *Client) shardOwner(typ string) func(s int64) bool {
	all := func(int64) bool { return true }
	if c.cfg.Members == nil {
		return all
	}
	self, members := c.cfg.Members()
	i := slices.Index(members, self)
	m := c.infos.Load()
	if i < 0 || m == nil {
		return all
	}
	high := (*m)[typ].high
	if high <= 0 {
		return all
	}
	owners := c.owners.of(typ, high, members)
	return func(s int64) bool { return s >= high || owners[s] == i }
}

// ownership caches the owners of each type's shards for the latest member
// list, which changes rarely.
type ownership struct {
	mu      sync.Mutex
	members []string
	byType  map[shardsOf][]int // owner of each shard, as an index in members
}

type shardsOf struct {
	typ  string
	high int64
}

func (o *ownership) of(typ string, high int64, members []string) []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !slices.Equal(o.members, members) {
		o.members, o.byType = slices.Clone(members), map[shardsOf][]int{}
	}
	k := shardsOf{typ, high}
	if owners, ok := o.byType[k]; ok {
		return owners
	}
	owners := assignShards(typ, high, members)
	o.byType[k] = owners
	return owners
}

// assignShards gives each shard of typ an owner among members, by
// rendezvous hashing with bounded load: shard by shard, the member with the
// highest hash of (member, type, shard) that may own one more, each member
// owning high/len(members) shards, and the first high%len(members) to
// fill up one more. Every member thus owns as many shards as another, give
// or take one (none when there are more members than shards), so that no
// node is left to take only from others' shards while another has several;
// every node computes the same owners from the same list, and a member
// that comes or goes moves few shards besides its own.
func assignShards(typ string, high int64, members []string) []int {
	base, extra := int(high)/len(members), int(high)%len(members)
	load := make([]int, len(members))
	owners := make([]int, high)
	rank := make([]int, len(members))
	weights := make([]uint64, len(members))
	for s := range high {
		for i, m := range members {
			rank[i], weights[i] = i, rendezvous(m, typ, s)
		}
		slices.SortFunc(rank, func(a, b int) int {
			if weights[a] != weights[b] {
				if weights[a] > weights[b] {
					return -1
				}
				return 1
			}
			return strings.Compare(members[a], members[b])
		})
		for _, i := range rank {
			if load[i] < base || (load[i] == base && extra > 0) {
				if load[i] == base {
					extra--
				}
				owners[s], load[i] = i, load[i]+1
				break
			}
		}
	}
	return owners
}

func rendezvous(member, typ string, shard int64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(typ))
	h.Write([]byte{0, byte(shard >> 8), byte(shard)})
	// fnv's low bits mix poorly for inputs that differ in their last
	// bytes: finish with a multiplicative mix (splitmix64's).
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// rotate starts s at a random element, keeping its cyclic order.
func rotate(s []int64) []int64 {
	if len(s) < 2 {
		return s
	}
	i := mrand.IntN(len(s))
	return append(s[i:len(s):len(s)], s[:i]...)
}
