package fdbjobs

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// placeNode is a simulated Runtime of TestPlaceLeaseModel: its lease of
// the kind's capacity, its places, and the jobs it runs.
type placeNode struct {
	r       *Runtime
	k       *kindWorker
	cp      *capacity
	dead    bool
	until   time.Time // its lease's end, by its clock
	running []task
}

func newPlaceNode(t *testing.T, b *bundle, kind string, timeout time.Duration, opts ...bundleOpt) *placeNode {
	t.Helper()
	cfg := Config{Clock: b.clock, TimeUnit: time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(b.db, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(c.Stop)
	r := &Runtime{c: c}
	k := &kindWorker{kind: kind, opts: WorkerOptions{Timeout: timeout}, slots: newSlots(100), stats: &kindStats{},
		claims: &sync.Mutex{}, claimGroup: &claimGroup{}, ends: make(chan *ending, 1000)}
	cp, err := newCapacity(r, k)
	require.NoError(t, err)
	k.capacity = cp
	return &placeNode{r: r, k: k, cp: cp}
}

// TestPlaceLeaseModel drives the places of five simulated Runtimes in the
// partitions of one kind with a limit of running jobs per partition, over
// simulated time, in a seeded random order: renewals of their leases,
// fetches (a place of their own reused, or a claim that leases one), jobs
// ending, sweeps (periodic, with the hints, or asked for), the clock
// moving, a raised limit, Runtimes dying (their places left in the store)
// and leases lapsing (their jobs stopped). At no step do more jobs of a
// partition run on the live Runtimes than the limit. Then, every job
// ended, a Timeout and more on, with the live Runtimes renewing and
// sweeping, a claim in each partition gets a place: places left by the
// dead are found, and the count of places comes back to what runs.
// Replay: FDBJOBS_SEED.
func TestPlaceLeaseModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 41))
	b := setup(t)
	const kind, timeout = "pl", 8 * time.Second
	limit := 2
	parts := []string{"a", "b", "c"}
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, kind, timeout))
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, kind, Limit{Running: limit}))
	var nodes []*placeNode
	for range 5 {
		nodes = append(nodes, newPlaceNode(t, b, kind, timeout))
	}
	seen := func(l int) {
		t.Helper()
		testutil.Eventually(t, "every node read the limit", func() bool {
			for _, nd := range nodes {
				if m := nd.r.c.infos.Load(); m == nil || (*m)[kind].partLimit != l {
					return false
				}
			}
			return true
		})
	}
	seen(limit)
	ids := 0
	add := func(part string) {
		ids++
		b.add(t, kind, fmt.Sprintf("j%05d-%s", ids, part), `{"args":{}}`, 0)
	}
	partOf := map[string]string{}
	renew := func(nd *placeNode) {
		start := b.clock.Now()
		_, err := nd.cp.renew(b.ctx)
		require.NoError(t, err)
		nd.cp.leased.Store(true)
		nd.until = start.Add(timeout / HoldFraction)
	}
	for _, nd := range nodes {
		renew(nd)
	}
	end := func(nd *placeNode, i int) {
		tk := nd.running[i]
		nd.running = append(nd.running[:i], nd.running[i+1:]...)
		if tk.leased {
			nd.cp.places.release(tk.e.Partition)
		}
		// (A job a monitor took back while the clock moved ends with
		// ErrHalt.)
		_, err := nd.r.c.endBatchIn(b.ctx, nil, []*ending{{job: tk.job, stime: -1, e: tk.e, leased: tk.leased}})
		require.NoError(t, err)
	}
	fetched, started := 0, 0
	for step := range 600 {
		nd := nodes[rng.IntN(len(nodes))]
		live := !nd.dead && b.clock.Now().Before(nd.until)
		switch op := rng.IntN(20); {
		case op < 3 && !nd.dead:
			renew(nd)
		case op < 8 && live:
			for range 1 + rng.IntN(3) {
				add(parts[rng.IntN(len(parts))])
			}
			jobs, err := nd.r.c.AcceptBatch(b.ctx, kind, 1+rng.IntN(4), AcceptOptions{})
			if err != nil {
				require.ErrorIs(t, err, ErrNotFound)
				break
			}
			tasks := make([]task, len(jobs))
			for i, j := range jobs {
				part := j.ID[len(j.ID)-1:]
				partOf[j.ID] = part
				tasks[i] = task{job: j, e: &envelope{Partition: part}}
			}
			kept := nd.r.claimPartitions(b.ctx, b.ctx, nd.k, tasks, nil)
			fetched, started = fetched+len(tasks), started+len(kept)
			nd.running = append(nd.running, kept...)
		case op < 13 && len(nd.running) > 0 && !nd.dead:
			end(nd, rng.IntN(len(nd.running)))
		case op < 16 && !nd.dead:
			nd.cp.places.sweep(b.ctx, false, rng.IntN(2) == 0, rng.IntN(2) == 0)
		case op < 18:
			b.clock.Advance(time.Duration(rng.Int64N(int64(timeout / 4))))
		default:
			switch {
			case rng.IntN(30) == 0 && !nd.dead:
				nd.dead, nd.running = true, nil // its jobs stop with it; its places stay in the store
			case rng.IntN(8) == 0 && limit < 4:
				limit++
				require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, kind, Limit{Running: limit}))
				seen(limit)
			}
		}
		// A lease that lapsed stops its Runtime's jobs and forgets its
		// places.
		for _, n := range nodes {
			if !n.dead && !b.clock.Now().Before(n.until) && len(n.running) > 0 {
				n.cp.places.lapsed()
				for len(n.running) > 0 {
					end(n, 0)
				}
			}
		}
		runs := map[string]int{}
		for _, n := range nodes {
			for _, tk := range n.running {
				runs[tk.e.Partition]++
			}
		}
		for p, n := range runs {
			require.LessOrEqual(t, n, limit, "step %d (seed %d): %d jobs of %q running, limit %d", step, seed, n, p, limit)
		}
	}

	handedBack := 0
	for _, nd := range nodes {
		handedBack += len(nd.k.ends)
	}
	t.Logf("%d jobs fetched, %d started, %d handed back (the others waited)", fetched, started, handedBack)

	// Liveness: every job ended, two Timeouts on with the live Runtimes
	// renewing and sweeping, a claim in each partition gets a place.
	var live []*placeNode
	for _, nd := range nodes {
		for len(nd.running) > 0 {
			end(nd, 0)
		}
		if !nd.dead {
			live = append(live, nd)
		}
	}
	if len(live) == 0 {
		return
	}
	for range 4 {
		b.clock.Advance(timeout / 2)
		for _, nd := range live {
			renew(nd)
			nd.cp.places.sweep(b.ctx, false, true, true)
		}
	}
	nd := live[0]
	for _, p := range parts {
		for range limit {
			add(p)
		}
	}
	// The claims get every place within a few sweeps: with injected
	// faults, a claim may commit unseen and fail (its places counted in
	// the store, not by the Runtime, until a sweep writes them down and
	// wakes the jobs that waited), and a renewal that would clear a dead
	// Runtime's lease may fail.
	got := map[string]int{}
	full := func() bool {
		for _, p := range parts {
			if got[p] < limit {
				return false
			}
		}
		return true
	}
	for round := 0; round < 10 && !full(); round++ {
		for {
			jobs, err := nd.r.c.AcceptBatch(b.ctx, kind, 10, AcceptOptions{})
			if err != nil {
				require.ErrorIs(t, err, ErrNotFound)
				break
			}
			tasks := make([]task, len(jobs))
			for i, j := range jobs {
				tasks[i] = task{job: j, e: &envelope{Partition: j.ID[len(j.ID)-1:]}}
			}
			for _, tk := range nd.r.claimPartitions(b.ctx, b.ctx, nd.k, tasks, nil) {
				got[tk.e.Partition]++
			}
		}
		b.clock.Advance(timeout / 2)
		for _, nd := range live {
			renew(nd)
			nd.cp.places.sweep(b.ctx, false, true, true)
		}
	}
	for _, p := range parts {
		require.Equal(t, limit, got[p], "seed %d: places in %q once the dead's are found", seed, p)
	}
}

// TestPlacesOfAClaimThatCommitsLate: a claim of places fails (its hold
// lapsed mid-commit, say) and its commit lands later, after a sweep has
// read the partition: the Runtime keeps sweeping the partition for
// placeUnsure, so that the places the late commit counted in the store go
// back, and forgets it only then. (Forgotten at once, the place stayed
// counted for as long as the Runtime lived: one fewer in the partition.)
func TestPlacesOfAClaimThatCommitsLate(t *testing.T) {
	b := setup(t)
	const kind, timeout = "pl", 8 * time.Second
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, kind, timeout))
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, kind, Limit{Running: 2}))
	nd := newPlaceNode(t, b, kind, timeout)
	_, err := nd.cp.renew(b.ctx)
	require.NoError(t, err)
	nd.cp.leased.Store(true)
	c, pl := nd.r.c, nd.cp.places
	stored := func() (leased, count int64) {
		t.Helper()
		type pair struct{ l, n int64 }
		p, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) (pair, error) {
			l, err := tr.Get(c.k.partLeasedKey(kind, "c", nd.cp.node)).Get()
			if err != nil {
				return pair{}, err
			}
			n, err := tr.Get(c.k.partCountKey(kind, "c")).Get()
			return pair{kv.DecodeInt64(l), kv.DecodeInt64(n)}, err
		})
		require.NoError(t, err)
		return p.l, p.n
	}

	// The claim failed: its partition tracked, and unsure.
	cls := []*claim{{part: "c"}}
	pl.track(cls)
	pl.failed(cls)
	pl.sweep(b.ctx, false, true, true) // reads the store before the commit lands
	// The commit lands: one place of the Runtime's counted.
	// (Reading what is stored keeps it idempotent under commit_unknown_result.)
	_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		v, err := tr.Get(c.k.partLeasedKey(kind, "c", nd.cp.node)).Get()
		if err != nil {
			return struct{}{}, err
		}
		c.writeLeased(tr, kind, "c", nd.cp.node, int(kv.DecodeInt64(v)), 1)
		return struct{}{}, nil
	})
	require.NoError(t, err)
	l, n := stored()
	require.Equal(t, []int64{1, 1}, []int64{l, n})
	pl.sweep(b.ctx, false, true, true)
	l, n = stored()
	require.Equal(t, []int64{0, 0}, []int64{l, n}, "the late commit's place given back")
	require.True(t, pl.holding(), "kept while a commit may land")
	b.clock.Advance(placeUnsure)
	pl.sweep(b.ctx, false, true, true)
	require.False(t, pl.holding(), "forgotten once no commit may land")
}

// TestHelpingJobsLeaseNoPlace: a Runtime leases the places its jobs of its
// own shards of the queue take, and keeps them once the jobs end; a job it
// takes from another node's shard (helping, its own shards empty) holds an
// entry of its own, freed by its end, so that no place sits idle with a
// Runtime gone back to its own shards.
func TestHelpingJobsLeaseNoPlace(t *testing.T) {
	b := setup(t)
	const kind, timeout = "part", 8 * time.Second
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, kind, timeout))
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, kind, 2))
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, kind, Limit{Running: 2}))
	members := func(cfg *Config) {
		cfg.Members = func() (string, []string) { return "n1", []string{"n1", "n2"} }
	}
	nd := newPlaceNode(t, b, kind, timeout, members)
	c := nd.r.c
	testutil.Eventually(t, "the node read the kind", func() bool {
		m := c.infos.Load()
		return m != nil && (*m)[kind].partLimit == 2 && (*m)[kind].shards == 2
	})
	_, err := nd.cp.renew(b.ctx)
	require.NoError(t, err)
	nd.cp.leased.Store(true)
	// A partition of each shard: the node owns one of the two.
	byShard := map[bool]string{}
	owns := c.shardOwner(kind)
	for i := 0; len(byShard) < 2; i++ {
		p := fmt.Sprintf("p%d", i)
		if _, ok := byShard[owns(shardOf(p, 2))]; !ok {
			byShard[owns(shardOf(p, 2))] = p
		}
	}
	own, other := byShard[true], byShard[false]
	_, err = c.InsertMany(b.ctx, nil, []InsertJob{
		{Args: partArgs{N: 1, Part: own}, Opts: InsertOptions{Partition: own}},
		{Args: partArgs{N: 2, Part: other}, Opts: InsertOptions{Partition: other}},
	})
	require.NoError(t, err)
	var tasks []task
	for len(tasks) < 2 {
		jobs, err := c.AcceptBatch(b.ctx, kind, 2, AcceptOptions{})
		require.NoError(t, err)
		for _, j := range jobs {
			var e envelope
			require.NoError(t, json.Unmarshal(j.Data, &e))
			tasks = append(tasks, task{job: j, e: &e})
		}
	}
	kept := nd.r.claimPartitions(b.ctx, b.ctx, nd.k, tasks, nil)
	require.Len(t, kept, 2)
	byPart := map[string]task{}
	for _, tk := range kept {
		byPart[tk.e.Partition] = tk
	}
	require.True(t, byPart[own].leased, "a job of the node's own shard: a place leased")
	require.False(t, byPart[other].leased, "a job the node helps with: an entry of its own")
	// The places held in a partition: its entries and leased places. (Its
	// count is at least that: a claim retried after commit_unknown_result,
	// under the store's faults, may add twice until it is counted again.)
	count := func(part string) int64 {
		t.Helper()
		type pair struct{ held, count int64 }
		p, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) (pair, error) {
			var p pair
			for _, sub := range []tuple.Tuple{{keyPartRunning, kind, part}, {keyPartLeased, kind, part}} {
				kvs, err := tr.GetRange(prefixRange(c.k.root, sub), kv.RangeOptions{}).GetSliceWithError()
				if err != nil {
					return p, err
				}
				for _, e := range kvs {
					if sub[0] == keyPartRunning {
						p.held++
					} else {
						p.held += kv.DecodeInt64(e.Value)
					}
				}
			}
			v, err := tr.Get(c.k.partCountKey(kind, part)).Get()
			p.count = kv.DecodeInt64(v)
			return p, err
		})
		require.NoError(t, err)
		require.GreaterOrEqual(t, p.count, p.held, "the count of %q covers its places", part)
		return p.held
	}
	require.Equal(t, []int64{1, 1}, []int64{count(own), count(other)})
	for _, tk := range kept {
		if tk.leased {
			nd.cp.places.release(tk.e.Partition)
		}
		_, err := c.endBatchIn(b.ctx, nil, []*ending{{job: tk.job, stime: -1, e: tk.e, leased: tk.leased}})
		require.NoError(t, err)
	}
	require.Equal(t, []int64{1, 0}, []int64{count(own), count(other)}, "the leased place kept, the entry freed")
	require.Equal(t, 1, nd.cp.places.leasedOf(own))
	require.Zero(t, nd.cp.places.leasedOf(other))
}
