package fdbjobs

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

type limArgs struct{ N int }

func (limArgs) Kind() string { return "lim" }

// limNode is one simulated node of TestLimitAcrossNodes: a Client and a
// Runtime on the shared store.
type limNode struct {
	c  *Client
	rt *Runtime
}

// Eight nodes work one kind whose limit is far below their Concurrency:
// at no moment do more jobs run than the limit in effect, whether it is
// raised at run time or a node dies holding part of it (the others take
// that part a Timeout later, and every job ends); transactions rarely run
// twice (at most 1.05 attempts per commit on the embedded store).
func TestLimitAcrossNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := &attemptsDB{Database: kvtest.NewDB(t)}
	var running, peak, over atomic.Int64
	var limit atomic.Int64
	var mu sync.Mutex
	done := map[int]int{}
	var started []time.Time // by the job's N, from rateFrom on
	const rateFrom = 1800
	ws := NewWorkers()
	require.NoError(t, AddWorker(ws, WorkFunc[limArgs](func(ctx context.Context, w *Work[limArgs]) error {
		if w.Args.N >= rateFrom {
			mu.Lock()
			started = append(started, time.Now())
			mu.Unlock()
		}
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n > limit.Load() {
			over.Add(1)
		}
		select { // a job's work: long enough for jobs to overlap
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		done[w.Args.N]++
		mu.Unlock()
		return nil
	}), WorkerOptions{Concurrency: 8, Timeout: 3 * time.Second, FetchBatch: 4}))

	var nodes []*limNode
	for _, c := range startMembers(ctx, t, db, 8) {
		nodes = append(nodes, &limNode{c: c})
	}
	// Shards for every node's acceptors, and more (see ShardsDefault).
	require.NoError(t, nodes[0].c.SetTypeShards(ctx, nil, "lim", 64))
	limit.Store(5)
	require.NoError(t, nodes[0].c.SetLimit(ctx, nil, "lim", Limit{Running: 5}))
	for _, n := range nodes {
		rt, err := NewRuntime(n.c, ws, RuntimeOptions{FetchPoll: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		t.Cleanup(rt.StopAndCancel)
		n.rt = rt
	}
	insert := func(from, count int) {
		t.Helper()
		jobs := make([]InsertJob, count)
		for i := range jobs {
			jobs[i] = InsertJob{Args: limArgs{N: from + i}}
		}
		_, err := nodes[0].c.InsertMany(ctx, nil, jobs)
		require.NoError(t, err)
	}
	waitDone := func(count int) {
		t.Helper()
		testutil.Eventually(t, fmt.Sprintf("%d jobs done", count), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == count
		})
	}

	insert(0, 600)
	waitDone(600)
	require.Zero(t, over.Load(), "more than 5 jobs ran at once (peak %d)", peak.Load())

	// Raised at run time: the nodes take their shares of the new limit.
	require.NoError(t, nodes[3].c.SetLimit(ctx, nil, "lim", Limit{Running: 12}))
	limit.Store(12)
	insert(600, 600)
	waitDone(1200)
	require.Zero(t, over.Load(), "more than 12 jobs ran at once (peak %d)", peak.Load())

	// A node dies holding part of it: its jobs and its part come back a
	// Timeout later, and the limit holds meanwhile.
	nodes[1].rt.leaveLease = true
	nodes[1].rt.StopAndCancel()
	nodes[1].c.Stop()
	insert(1200, 600)
	waitDone(1800)
	testutil.Eventually(t, "the dead node's lease taken back", func() bool {
		kvs, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
			leases, err := tr.GetRange(prefixRange(nodes[0].c.k.root, tuple.Tuple{keyCapacity, "lim"}), kv.RangeOptions{}).GetSliceWithError()
			if err != nil {
				return nil, err
			}
			fences, err := tr.GetRange(prefixRange(nodes[0].c.k.root, tuple.Tuple{keyCapacityFence, "lim"}), kv.RangeOptions{}).GetSliceWithError()
			return append(leases, fences...), err
		})
		require.NoError(t, err)
		return len(kvs) == 2*(len(nodes)-1)
	})
	require.Zero(t, over.Load(), "more than 12 jobs ran at once (peak %d)", peak.Load())

	// A limit of starts instead: over any two seconds, at most three
	// seconds' worth, and one more per node (their buckets).
	require.NoError(t, nodes[0].c.SetLimit(ctx, nil, "lim", Limit{PerSecond: 400}))
	limit.Store(1000)
	insert(rateFrom, 600)
	waitDone(rateFrom + 600)
	mu.Lock()
	for i, from := range started {
		n := 0
		for _, at := range started[i:] {
			if at.Sub(from) >= 0 && at.Sub(from) < 2*time.Second {
				n++
			}
		}
		require.LessOrEqual(t, n, 3*400+len(nodes), "starts in the two seconds from %v", from)
	}
	mu.Unlock()

	// Every job ran once, and transactions rarely ran twice: on the
	// embedded store as it is. Under injected faults or latency, on a
	// real FoundationDB or the race detector on this machine's cores,
	// holds may lapse (a job runs again: at least once) and more
	// transactions overlap: the figures are logged, not bounded.
	plain := plainStore(t)
	mu.Lock()
	again := 0
	for _, runs := range done {
		again += runs - 1
	}
	mu.Unlock()
	ratio := float64(db.attempts.Load()) / float64(db.commits.Load())
	t.Logf("peak %d running; %d jobs ran again; %d transactions, %.3f attempts per committed transaction", peak.Load(), again,
		db.commits.Load(), ratio)
	if plain {
		require.Zero(t, again)
		require.LessOrEqual(t, ratio, 1.05)
	}
}

// Limits are bounded, and a kind's limit reads back as it was set.
// A limit set on a kind its Runtime already works without one stalls
// none of its jobs: the fetchers, which take no job until the Runtime's
// first lease of the kind's capacity, bring its renewal forward rather
// than wait for the next look (with an hour's Timeout, minutes: a
// newcomer's trial saw the kind stop for a twelfth of its Timeout).
func TestLimitSetWhileRunningStallsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(ctx context.Context, c *Client) error
	}{
		{"limit", func(ctx context.Context, c *Client) error { return c.SetLimit(ctx, nil, "lim", Limit{Running: 4}) }},
		{"partition limit", func(ctx context.Context, c *Client) error {
			return c.SetPartitionLimit(ctx, nil, "lim", Limit{Running: 2})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var mu sync.Mutex
			done := map[int]bool{} // (a set: a run may repeat under the store's faults)
			ws := NewWorkers()
			require.NoError(t, AddWorker(ws, WorkFunc[limArgs](func(_ context.Context, w *Work[limArgs]) error {
				mu.Lock()
				done[w.Args.N] = true
				mu.Unlock()
				return nil
			}), WorkerOptions{Concurrency: 8, Timeout: time.Hour}))
			count := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(done)
			}
			c := startMembers(ctx, t, kvtest.NewDB(t), 1)[0]
			rt, err := NewRuntime(c, ws, RuntimeOptions{})
			require.NoError(t, err)
			require.NoError(t, rt.Start(ctx))
			t.Cleanup(rt.StopAndCancel)
			insert := func(from int) {
				t.Helper()
				jobs := make([]InsertJob, 20)
				for i := range jobs {
					jobs[i] = InsertJob{Args: limArgs{N: from + i}, Opts: InsertOptions{Partition: fmt.Sprintf("p%d", i%4)}}
				}
				_, err := c.InsertMany(ctx, nil, jobs)
				require.NoError(t, err)
			}
			insert(0)
			testutil.Eventually(t, "the jobs without a limit done", func() bool { return count() == 20 })
			require.NoError(t, tc.set(ctx, c))
			testutil.Eventually(t, "the Client read the limit", func() bool {
				limited, _ := rt.kinds[0].capacity.limited()
				return limited
			})
			insert(20)
			testutil.Eventually(t, "the jobs after the limit done", func() bool { return count() == 40 })
		})
	}
}

func TestLimitBadInput(t *testing.T) {
	b := setup(t)
	for _, l := range []Limit{{}, {Running: -1}, {Running: LimitMax + 1}, {PerSecond: -1}, {PerSecond: 0.0001},
		{PerSecond: LimitMax + 1}, {Running: 3, PerSecond: math.NaN()}, {PerSecond: math.Inf(1)}} {
		require.ErrorIs(t, b.c.SetLimit(b.ctx, nil, t1, l), ErrInvalidArgument, l)
	}
	require.ErrorIs(t, b.c.SetLimit(b.ctx, nil, "", Limit{Running: 1}), ErrInvalidArgument)
	_, ok, err := b.c.GetLimit(b.ctx, nil, t1)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, b.c.SetLimit(b.ctx, nil, t1, Limit{Running: 3}))
	l, ok, err := b.c.GetLimit(b.ctx, nil, t1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Limit{Running: 3}, l)
	require.NoError(t, b.c.SetLimit(b.ctx, nil, t1, Limit{PerSecond: 2.5}))
	l, _, err = b.c.GetLimit(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, Limit{PerSecond: 2.5}, l)
	require.NoError(t, b.c.ClearLimit(b.ctx, nil, t1))
	_, ok, err = b.c.GetLimit(b.ctx, nil, t1)
	require.NoError(t, err)
	require.False(t, ok)
}

// The share of each node: no more than is free, its max-min fair part of
// the limit among the wants, never less than it runs.
func TestGrantOf(t *testing.T) {
	for _, tc := range []struct {
		limit, others int64
		wants         []int64
		running, want int64
		g             int64
	}{
		{10, 0, nil, 0, 8, 8},                 // alone: what it wants
		{10, 0, nil, 0, 20, 10},               // alone: the limit at most
		{10, 10, []int64{8}, 0, 8, 0},         // nothing free
		{10, 4, []int64{8}, 0, 8, 5},          // fair: half each
		{10, 1, []int64{1}, 0, 8, 8},          // the other wants little: the rest
		{10, 2, []int64{8}, 7, 8, 7},          // runs more than its fair part: keeps it
		{10, 8, []int64{8, 8, 8}, 0, 8, 2},    // what is free
		{10, 0, []int64{1, 1, 1, 8}, 0, 1, 1}, // idle: one
		{10, 0, []int64{1, 1, 8}, 0, 8, 4},    // 1 + 1 + 4 + 4
	} {
		share, held := grantOf(tc.limit, tc.others, tc.wants, tc.running, tc.want)
		require.Equal(t, tc.g, held, "%+v", tc)
		require.Equal(t, max(tc.running, share), held, "%+v: the lease holds what runs", tc)
	}
}

// TestLimitModel drives the leases of eight simulated Runtimes over
// simulated time, in a seeded random order: renewals, jobs taken within
// each Runtime's slots while its lease is valid, jobs ending, the clock
// moving, Runtimes dying (they stop renewing; their jobs end when their
// lease lapses, as ErrCapacityLapsed makes them), and the limit raised.
// At every step the jobs running across the Runtimes are at most the
// limit; at the end, the live Runtimes that want more than they have
// hold the whole limit between them once the dead ones' leases are
// taken back. Replay: FDBJOBS_SEED.
func TestLimitModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	b := setup(t)
	const timeout = 8 * time.Second
	limit := 6
	require.NoError(t, b.c.SetLimit(b.ctx, nil, "lim", Limit{Running: limit}))
	type node struct {
		cp    *capacity
		dead  bool
		until time.Time // its lease's end, by its clock
	}
	var nodes []*node
	for range 8 {
		c, err := New(b.db, Config{Clock: b.clock})
		require.NoError(t, err)
		r := &Runtime{c: c}
		k := &kindWorker{kind: "lim", opts: WorkerOptions{Timeout: timeout}, slots: newSlots(2 + rng.IntN(7))}
		cp, err := newCapacity(r, k)
		require.NoError(t, err)
		k.capacity = cp
		nodes = append(nodes, &node{cp: cp})
	}
	running := func() (n int) {
		for _, nd := range nodes {
			n += nd.cp.k.slots.taken()
		}
		return n
	}
	for step := range 2000 {
		nd := nodes[rng.IntN(len(nodes))]
		s := nd.cp.k.slots
		switch op := rng.IntN(10); {
		case op < 3 && !nd.dead:
			start := b.clock.Now()
			rn, err := nd.cp.renew(b.ctx)
			require.NoError(t, err)
			s.setGrant(int(rn.grant))
			nd.until = start.Add(timeout / HoldFraction)
		case op < 6 && !nd.dead && b.clock.Now().Before(nd.until):
			s.mu.Lock()
			free := s.cap() - s.held
			s.mu.Unlock()
			if free > 0 {
				s.take(b.ctx, 1+rng.IntN(free))
			}
		case op < 8:
			if h := s.taken(); h > 0 {
				s.give(1 + rng.IntN(h))
			}
		case op < 9:
			b.clock.Advance(time.Duration(rng.Int64N(int64(timeout / 4))))
		default:
			switch {
			case rng.IntN(40) == 0:
				nd.dead = true
			case rng.IntN(8) == 0 && limit < 12:
				limit++
				require.NoError(t, b.c.SetLimit(b.ctx, nil, "lim", Limit{Running: limit}))
			}
		}
		// A lease that lapsed ends its Runtime's jobs.
		for _, n := range nodes {
			if !b.clock.Now().Before(n.until) {
				if h := n.cp.k.slots.taken(); h > 0 {
					n.cp.k.slots.give(h)
				}
				n.cp.k.slots.setGrant(0)
			}
		}
		require.LessOrEqual(t, running(), limit, "step %d: more jobs running than the limit", step)
	}
	// Liveness: a Timeout on, the live Runtimes (as many as the limit
	// running a job and wanting their Concurrency, the others idle and
	// wanting one) share the whole limit, or all they want.
	var live []*node
	wantAll := 0
	for _, nd := range nodes {
		if !nd.dead {
			live = append(live, nd)
			s := nd.cp.k.slots
			s.mu.Lock()
			s.held = 0
			if len(live) <= limit {
				s.held = 1 // it runs a job: it wants its Concurrency
				wantAll += s.limit
			} else {
				wantAll++ // idle: it wants one
			}
			s.mu.Unlock()
		}
	}
	if len(live) == 0 {
		return
	}
	for range 3 {
		b.clock.Advance(timeout)
		for _, nd := range live {
			rn, err := nd.cp.renew(b.ctx)
			require.NoError(t, err)
			nd.cp.k.slots.setGrant(int(rn.grant))
		}
	}
	total := 0
	for _, nd := range live {
		total += nd.cp.k.slots.cap()
	}
	require.Equal(t, min(limit, wantAll), total, "the live Runtimes' grants")
}

// TestLimitRateModel drives the rate leases of four simulated Runtimes
// over simulated time, in a seeded random order: renewals, starts as a
// fetcher makes them (up to what its bucket holds, taken from it once its
// accept took them), jobs ending, the clock moving. Over every window of two
// seconds the Runtimes start at most PerSecond × 3 jobs plus one per
// Runtime (each bucket holds a second's worth, at least one). Replay:
// FDBJOBS_SEED.
func TestLimitRateModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 13))
	b := setup(t)
	const perSecond = 20
	require.NoError(t, b.c.SetLimit(b.ctx, nil, "lim", Limit{PerSecond: perSecond}))
	var nodes []*capacity
	for range 4 {
		c, err := New(b.db, Config{Clock: b.clock})
		require.NoError(t, err)
		k := &kindWorker{kind: "lim", opts: WorkerOptions{Timeout: 8 * time.Second}, slots: newSlots(50)}
		cp, err := newCapacity(&Runtime{c: c}, k)
		require.NoError(t, err)
		k.capacity = cp
		nodes = append(nodes, cp)
	}
	var starts []time.Time
	for range 3000 {
		cp := nodes[rng.IntN(len(nodes))]
		s := cp.k.slots
		switch op := rng.IntN(10); {
		case op < 2:
			rn, err := cp.renew(b.ctx)
			require.NoError(t, err)
			cp.setRate(rn.rate)
		case op < 6 && cp.rated.Load():
			// A fetcher's look: as many starts as the bucket holds, at
			// most its batch; the accept takes some of them.
			now := b.clock.Now()
			lim := cp.limiter.Load()
			tokens := lim.TokensAt(now)
			if tokens < 1 {
				continue
			}
			m := min(1+rng.IntN(10), int(tokens))
			got := rng.IntN(m + 1)
			if got > 0 {
				require.True(t, lim.ReserveN(now, got).OK())
			}
			for range got {
				starts = append(starts, now)
			}
			s.mu.Lock()
			s.held += got
			s.mu.Unlock()
		case op < 8:
			if h := s.taken(); h > 0 {
				s.give(1 + rng.IntN(h))
			}
		default:
			b.clock.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
	}
	require.NotEmpty(t, starts)
	for i, from := range starts {
		n := 0
		for _, at := range starts[i:] {
			if at.Sub(from) < 2*time.Second {
				n++
			}
		}
		require.LessOrEqual(t, n, perSecond*3+len(nodes), "starts in the two seconds from %v", from)
	}
	t.Logf("%d starts over %v", len(starts), starts[len(starts)-1].Sub(starts[0]))
}
