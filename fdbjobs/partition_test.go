package fdbjobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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

type partArgs struct {
	N    int    `json:"n"`
	Part string `json:"part"`
}

func (partArgs) Kind() string { return "part" }

// Eight nodes work one kind with a partition limit far below their
// Concurrency: at no moment do more jobs of one partition run than the
// limit, a partition's backlog holds back no other partition nor the jobs
// without one, a job that waited for a place ran once with one attempt
// (waiting is not an attempt), and the jobs waiting are woken by the ends
// of their partition's jobs: the kind's Timeout, an hour, would otherwise
// hold them past the test's bounds. A lowered limit holds for the jobs
// that start after it.
func TestPartitionLimitAcrossNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := &attemptsDB{Database: kvtest.NewDB(t)}
	var limit atomic.Int64
	var mu sync.Mutex
	running, peak, over := map[string]int{}, map[string]int{}, map[string]int{}
	done := map[int]int{}
	ws := NewWorkers()
	require.NoError(t, AddWorker(ws, WorkFunc[partArgs](func(ctx context.Context, w *Work[partArgs]) error {
		mu.Lock()
		running[w.Args.Part]++
		n := running[w.Args.Part]
		peak[w.Args.Part] = max(peak[w.Args.Part], n)
		if w.Args.Part != "" && n > int(limit.Load()) {
			over[w.Args.Part]++
		}
		mu.Unlock()
		// A job's work: long enough for jobs to overlap, and a's long
		// enough that its backlog (300 jobs, 3 at a time) takes seconds.
		work := 3 * time.Millisecond
		if w.Args.Part == "a" {
			work = 20 * time.Millisecond
		}
		select {
		case <-time.After(work):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		running[w.Args.Part]--
		done[w.Args.N]++
		mu.Unlock()
		return nil
	}), WorkerOptions{Concurrency: 8, Timeout: heldTimeout(t), FetchBatch: 4}))

	nodes := startMembers(ctx, t, db, 8)
	require.NoError(t, nodes[0].SetTypeShards(ctx, nil, "part", 64))
	limit.Store(3)
	require.NoError(t, nodes[0].SetPartitionLimit(ctx, nil, "part", Limit{Running: 3}))
	n, err := nodes[5].GetPartitionLimit(ctx, nil, "part")
	require.NoError(t, err)
	require.Equal(t, Limit{Running: 3}, n)
	// The limit is in force for the jobs a Runtime starts once its Client
	// has read it (SetPartitionLimit); under injected faults a Client's
	// watch may fail, and its next look come a poll later.
	everyNodeRead := func(n int) {
		t.Helper()
		testutil.Eventually(t, "every node read the limit", func() bool {
			for _, c := range nodes {
				if m := c.infos.Load(); m == nil || (*m)["part"].partLimit != n {
					return false
				}
			}
			return true
		})
	}
	everyNodeRead(3)
	for _, c := range nodes {
		rt, err := NewRuntime(c, ws, RuntimeOptions{FetchPoll: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		t.Cleanup(rt.StopAndCancel)
	}
	// A backlog of partition a, then a few jobs of b, c and none.
	var ids []string
	insert := func(from, count int, part string) {
		t.Helper()
		jobs := make([]InsertJob, count)
		for i := range jobs {
			jobs[i] = InsertJob{Args: partArgs{N: from + i, Part: part}, Opts: InsertOptions{Partition: part}}
		}
		got, err := nodes[i2n(from)].InsertMany(ctx, nil, jobs)
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	waitDone := func(count int) {
		t.Helper()
		testutil.Eventually(t, fmt.Sprintf("%d jobs done", count), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == count
		})
	}
	insert(0, 300, "a")
	insert(300, 20, "b")
	insert(320, 20, "c")
	insert(340, 20, "")
	testutil.Eventually(t, "b, c and the jobs without a partition done before a's backlog", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := 300; i < 360; i++ {
			if done[i] == 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	aDone := 0
	for i := range 300 {
		aDone += done[i]
	}
	mu.Unlock()
	require.Less(t, aDone, 300, "a's backlog held back no one")
	waitDone(360)
	mu.Lock()
	require.Empty(t, over, "more than 3 jobs of one partition at once (peaks %v)", peak)
	mu.Unlock()

	// Lowered at run time: the jobs that start after it keep to it.
	require.NoError(t, nodes[2].SetPartitionLimit(ctx, nil, "part", Limit{Running: 1}))
	everyNodeRead(1)
	limit.Store(1)
	insert(360, 100, "a")
	insert(460, 40, "d")
	waitDone(500)
	mu.Lock()
	require.Empty(t, over, "more than 1 job of one partition at once (peaks %v)", peak)
	again := 0
	for _, runs := range done {
		again += runs - 1
	}
	mu.Unlock()
	// Nothing left in the partitions' sets once every job ended, and the
	// places the Runtimes leased given back once unused for a sweep.
	var left []kv.KeyValue
	defer func() {
		if t.Failed() { // what was left, to see which set kept it
			for _, e := range left {
				k, _ := nodes[0].k.root.Unpack(e.Key)
				t.Logf("left: %v = %q", k, e.Value)
			}
		}
	}()
	testutil.Eventually(t, "the partitions' sets empty", func() bool {
		left = scanRoot(t, db, nodes[0], keyPartRunning, keyPartWaiting, keyPartQueue, keyPartLeased)
		return len(left) == 0
	})
	if plainStore(t) { // (a claim retried after commit_unknown_result counts its place twice)
		testutil.Eventually(t, "every count of places 0 once every job ended", func() bool {
			for _, e := range scanRoot(t, db, nodes[0], keyPartCount) {
				if kv.DecodeInt64(e.Value) != 0 {
					return false
				}
			}
			return true
		})
	}

	// Every job ran once with one attempt, on the embedded store as it
	// is. Under injected faults or latency, the race detector or a real
	// FoundationDB, a hold may lapse (a job runs again: at least once) and
	// more transactions overlap: those figures are logged.
	plain := plainStore(t)
	ratio := float64(db.attempts.Load()) / float64(db.commits.Load())
	t.Logf("peaks %v; %d jobs ran again; %d transactions, %.3f attempts per committed transaction", peak, again,
		db.commits.Load(), ratio)
	if plain {
		require.Zero(t, again)
		for _, id := range ids {
			row, err := nodes[0].GetJob(ctx, nil, "part", id)
			require.NoError(t, err)
			require.Equal(t, OutcomeCompleted, row.State)
			require.Equal(t, 1, row.Attempt, "waiting for a place is not an attempt")
		}
	}
}

// i2n spreads the inserts over the nodes.
func i2n(from int) int { return from / 100 % 8 }

// scanRoot reads every key of c's store under the given first elements.
func scanRoot(t *testing.T, db kv.Database, c *Client, firsts ...int) []kv.KeyValue {
	t.Helper()
	var out []kv.KeyValue
	for _, f := range firsts {
		kvs, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
			return tr.GetRange(prefixRange(c.k.root, tuple.Tuple{f}), kv.RangeOptions{}).GetSliceWithError()
		})
		require.NoError(t, err)
		out = append(out, kvs...)
	}
	return out
}

// A job cancelled while it runs gives its place back at once: the job
// waiting for it starts, though the kind's Timeout (an hour) would hold
// it for that long otherwise.
func TestPartitionPlaceOfCancelledJob(t *testing.T) {
	b := setup(t)
	c, started, release := startHeldParts(t, b)
	first, err := c.Insert(b.ctx, nil, partArgs{N: 1, Part: "t"}, InsertOptions{Partition: "t"})
	require.NoError(t, err)
	require.Equal(t, first.ID, testutil.Recv(t, started).ID)
	second, err := c.Insert(b.ctx, nil, partArgs{N: 2, Part: "t"}, InsertOptions{Partition: "t"})
	require.NoError(t, err)
	testutil.Eventually(t, "the second job waits for the place", func() bool {
		return len(scanRoot(t, b.db, c, keyPartWaiting)) == 1
	})
	_, err = c.Cancel(b.ctx, nil, "part", first.ID)
	require.NoError(t, err)
	require.Equal(t, second.ID, testutil.Recv(t, started).ID)
	close(release)
	testutil.Eventually(t, "both ended, the sets empty", func() bool {
		row, err := c.GetJob(b.ctx, nil, "part", second.ID)
		require.NoError(t, err)
		return row.State == OutcomeCompleted && len(scanRoot(t, b.db, c, keyPartRunning, keyPartWaiting, keyPartQueue)) == 0
	})
}

// Partitions and partition limits are bounded.
func TestPartitionBadInput(t *testing.T) {
	b := setup(t)
	for _, l := range []Limit{{}, {Running: -1}, {Running: LimitMax + 1}, {PerSecond: -1}, {PerSecond: LimitRateMin / 2},
		{Running: 2, PerSecond: LimitMax + 1}} {
		err := b.c.SetPartitionLimit(b.ctx, nil, "part", l)
		require.ErrorIs(t, err, ErrInvalidArgument, "%+v", l)
	}
	require.ErrorIs(t, b.c.SetPartitionLimit(b.ctx, nil, "", Limit{Running: 2}), ErrInvalidArgument)
	n, err := b.c.GetPartitionLimit(b.ctx, nil, "part")
	require.NoError(t, err)
	require.Zero(t, n, "none set")
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "part", time.Minute))
	for _, p := range []string{strings.Repeat("x", PartitionMaxBytes+1), "\xff"} {
		_, err := b.c.Insert(b.ctx, nil, partArgs{}, InsertOptions{Partition: p})
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
	_, err = b.c.Insert(b.ctx, nil, partArgs{}, InsertOptions{Partition: strings.Repeat("x", PartitionMaxBytes)})
	require.NoError(t, err)
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, "part", Limit{Running: 2}))
	require.NoError(t, b.c.ClearPartitionLimit(b.ctx, nil, "part"))
	n, err = b.c.GetPartitionLimit(b.ctx, nil, "part")
	require.NoError(t, err)
	require.Zero(t, n)
}

// A raised limit and a cleared one start the jobs waiting for a place at
// once (the kind's Timeout, an hour, would hold them that long otherwise),
// and partitions whose names extend one another ("p", "p\x00") are apart.
func TestPartitionLimitRaisedWakesWaiters(t *testing.T) {
	b := setup(t)
	c, started, release := startHeldParts(t, b)
	t.Cleanup(func() { close(release) })
	insert := func(part string) {
		t.Helper()
		_, err := c.Insert(b.ctx, nil, partArgs{Part: part}, InsertOptions{Partition: part})
		require.NoError(t, err)
	}
	insert("p\x00")
	require.Equal(t, "p\x00", testutil.Recv(t, started).Part)
	insert("p")
	require.Equal(t, "p", testutil.Recv(t, started).Part, "a partition apart from the one its name extends")
	for range 4 {
		insert("p")
	}
	testutil.Eventually(t, "four jobs wait for p's place", func() bool {
		return len(scanRoot(t, b.db, c, keyPartWaiting)) == 4
	})
	require.NoError(t, c.SetPartitionLimit(b.ctx, nil, "part", Limit{Running: 3}))
	require.Equal(t, "p", testutil.Recv(t, started).Part)
	require.Equal(t, "p", testutil.Recv(t, started).Part)
	if plainStore(t) { // (under injected faults a hold may lapse, and a job run again)
		testutil.Eventually(t, "two jobs wait again", func() bool {
			return len(scanRoot(t, b.db, c, keyPartWaiting)) == 2
		})
	}
	require.NoError(t, c.ClearPartitionLimit(b.ctx, nil, "part"))
	require.Equal(t, "p", testutil.Recv(t, started).Part)
	require.Equal(t, "p", testutil.Recv(t, started).Part)
}

// heldStart is a job of startHeldParts' worker as it starts.
type heldStart struct{ ID, Part string }

// startHeldParts starts a Client (scheduled times in milliseconds) and a
// Runtime on b's store whose worker reports each job it starts and holds
// it until release closes, with a partition limit of 1 and a Timeout of
// an hour (longer than any test: a waiting job that starts was woken).
// (heldTimeout: 3 s under injected faults.)
func startHeldParts(t *testing.T, b *bundle) (*Client, chan heldStart, chan struct{}) {
	t.Helper()
	timeout := heldTimeout(t)
	started := make(chan heldStart, 16)
	release := make(chan struct{})
	ws := NewWorkers()
	require.NoError(t, AddWorker(ws, WorkFunc[partArgs](func(ctx context.Context, w *Work[partArgs]) error {
		started <- heldStart{w.Job.ID, w.Args.Part}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), WorkerOptions{Concurrency: 16, Timeout: timeout}))
	c, err := New(b.db, Config{TimeUnit: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(c.Stop)
	require.NoError(t, c.SetPartitionLimit(b.ctx, nil, "part", Limit{Running: 1}))
	rt, err := NewRuntime(c, ws, RuntimeOptions{FetchPoll: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, rt.Start(b.ctx))
	t.Cleanup(rt.StopAndCancel)
	return c, started, release
}

// heldTimeout is the Timeout of the partition tests' kinds: an hour, so
// that a waiting job that starts was woken (its look would come an hour
// later); under injected faults or latency, the race detector or
// FoundationDB, where a hold may be lost and its job come back only a
// Timeout later, 3 s: there the tests check that nothing is lost or run
// beyond the limit, not how soon.
func heldTimeout(t *testing.T) time.Duration {
	if plainStore(t) {
		return time.Hour
	}
	return 3 * time.Second
}

// A limit raised while jobs wait wakes every one of them, also those
// that, woken by one page of the raise's wakes, claimed, found their
// partition full again and waited anew before a later page passed them
// (a newcomer's trial: with the wakes under the raise's one token, such a
// job's entry was cleared and its row left as it was, its next look a
// Timeout away with nothing running in its partition).
func TestPartitionLimitRaisedWakesEveryWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := kvtest.NewDB(t)
	var mu sync.Mutex
	done := map[int]bool{}
	ws := NewWorkers()
	require.NoError(t, AddWorker(ws, WorkFunc[partArgs](func(ctx context.Context, w *Work[partArgs]) error {
		select {
		case <-time.After(15 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		done[w.Args.N] = true
		mu.Unlock()
		return nil
	}), WorkerOptions{Concurrency: 10, Timeout: heldTimeout(t)}))
	nodes := startMembers(ctx, t, db, 4)
	require.NoError(t, nodes[0].SetPartitionLimit(ctx, nil, "part", Limit{Running: 2}))
	for _, c := range nodes {
		rt, err := NewRuntime(c, ws, RuntimeOptions{})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		t.Cleanup(rt.StopAndCancel)
	}
	const total = 800
	jobs := make([]InsertJob, total)
	for i := range jobs {
		p := fmt.Sprintf("p%d", i%8)
		jobs[i] = InsertJob{Args: partArgs{N: i, Part: p}, Opts: InsertOptions{Partition: p}}
	}
	_, err := nodes[0].InsertMany(ctx, nil, jobs)
	require.NoError(t, err)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(done)
	}
	testutil.Eventually(t, "jobs waiting behind the first", func() bool { return count() >= 100 })
	require.NoError(t, nodes[2].SetPartitionLimit(ctx, nil, "part", Limit{Running: 3}))
	testutil.Eventually(t, "every job done", func() bool { return count() == total })
}

// A claim whose Client's copy of the limit lags a raise reads on past the
// entries it first read: a partition with 40 jobs running and a limit
// raised from 1 to 100 (not yet seen by the Client) has room.
func TestPartitionClaimReadsPastALaggingLimit(t *testing.T) {
	b := setup(t)
	b.start(t)
	setPartLimit(t, b, 1)
	// Raised behind the Client's back: no types version bump.
	_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		tr.Set(b.c.k.partLimitKey(t1), tuple.Tuple{int64(100)}.Pack())
		return struct{}{}, nil
	})
	require.NoError(t, err)
	claims := acceptClaims(t, b, 41)
	wait := func(int64) int64 { return b.c.cfg.now() + 1000 }
	_, err = b.c.claimPartitions(b.ctx, claims[:40], wait, nil)
	require.NoError(t, err)
	for _, cl := range claims[:40] {
		require.True(t, cl.granted)
	}
	last := claims[40:]
	_, err = b.c.claimPartitions(b.ctx, last, wait, nil)
	require.NoError(t, err)
	require.True(t, last[0].granted, "41 of 100")
}

// A partition's count of places decides claims with point reads, and the
// running set decides them when the count cannot: a count missing (a
// store whose entries were written before counts were kept) is taken from
// the entries, so the limit holds; a count above its entries (a claim
// retried after commit_unknown_result counts its place twice) is set
// right once it reaches the limit; an end takes its place off the count
// (and wakes a job waiting for it).
func TestPartitionCountRepaired(t *testing.T) {
	b := setup(t)
	b.start(t)
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, t1, Limit{Running: 2}))
	count := func(part string) (int64, bool) {
		v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) {
			return tr.Get(b.c.k.partCountKey(t1, part)).Get()
		})
		require.NoError(t, err)
		return kv.DecodeInt64(v), v != nil
	}
	setCount := func(part string, n int64, present bool) {
		_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
			if present {
				tr.Set(b.c.k.partCountKey(t1, part), kv.Int64(n))
			} else {
				tr.Clear(b.c.k.partCountKey(t1, part))
			}
			return struct{}{}, nil
		})
		require.NoError(t, err)
	}
	// Under injected faults a claim retried after commit_unknown_result
	// may count its place twice: the count is at least the places then.
	requireCount := func(part string, want int64) {
		t.Helper()
		n, ok := count(part)
		require.True(t, ok)
		if plainStore(t) {
			require.Equal(t, want, n)
		} else {
			require.GreaterOrEqual(t, n, want)
		}
	}
	wait := func(int64) int64 { return b.c.cfg.now() + 60_000 }
	claimOne := func(id, part string) *claim {
		t.Helper()
		b.add(t, t1, id, `{"args":{}}`, 0)
		cl := &claim{job: b.accept(t, t1), part: part}
		require.Equal(t, id, cl.job.ID)
		_, err := b.c.claimPartitions(b.ctx, []*claim{cl}, wait, nil)
		require.NoError(t, err)
		require.NoError(t, cl.err)
		return cl
	}

	// Two places taken and counted; the count lost: the third waits.
	require.True(t, claimOne("a1", "a").granted)
	a2 := claimOne("a2", "a")
	require.True(t, a2.granted)
	requireCount("a", 2)
	setCount("a", 0, false)
	require.False(t, claimOne("a3", "a").granted, "two entries, limit 2: the missing count was taken from them")
	requireCount("a", 2) // counted again

	// An end takes its place off the count.
	_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		return struct{}{}, b.c.leavePartition(tr, t1, "a", a2.job.ID)
	})
	require.NoError(t, err)
	requireCount("a", 1)
	// and wakes a3, which takes the place.
	a3 := &claim{job: b.accept(t, t1), part: "a"}
	require.Equal(t, "a3", a3.job.ID)
	_, err = b.c.claimPartitions(b.ctx, []*claim{a3}, wait, nil)
	require.NoError(t, err)
	require.True(t, a3.granted)
	requireCount("a", 2)

	// A count above its entries: set right when it reaches the limit.
	setCount("b", 2, true)
	require.True(t, claimOne("b1", "b").granted, "no entries: a place, though the count said full")
	requireCount("b", 1)
	// A negative count is no count.
	setCount("c", -3, true)
	require.True(t, claimOne("c1", "c").granted)
	require.True(t, claimOne("c2", "c").granted)
	require.False(t, claimOne("c3", "c").granted)
	requireCount("c", 2)
}

// TestPartitionStartsModel runs a seeded stream of claims over simulated
// time (the Client's fake clock): jobs of three partitions arrive at random
// moments and rates, are accepted once due and claimed in batches of
// random size, and end at random moments, under a limit per partition of
// starts per second drawn from the seed, with or without a limit of
// running jobs. Safety: over any window of W seconds a partition starts at
// most PerSecond × W + max(1, PerSecond) jobs, and never runs more than
// Running at once. Liveness: once arrivals stop, every job starts within
// 1.5 times its partition's backlog at the rate, and a few seconds more.
// FDBREP_PARTITION_SEED replays a seed.
func TestPartitionStartsModel(t *testing.T) {
	seed := testutil.SeedFrom(t, "FDBREP_PARTITION_SEED")
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	b := setup(t, func(cfg *Config) { cfg.TimeUnit = time.Millisecond })
	b.start(t)
	lim := Limit{PerSecond: []float64{0.7, 3, 10, 40}[rng.IntN(4)], Running: []int{0, 2, 5}[rng.IntN(3)]}
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, t1, lim))
	t.Logf("limit %+v", lim)
	parts := []string{"p0", "p1", "p2"}
	partOf := map[string]string{}
	starts := map[string][]time.Time{}
	running := map[string]int{}
	type end struct {
		at   time.Time
		job  *Job
		part string
	}
	var ends []end
	wait := func(int64) int64 { return b.c.cfg.stime(b.clock.Now().Add(time.Second)) }
	n := 0
	step := func(arrive bool, advance time.Duration) {
		t.Helper()
		b.clock.Advance(time.Duration(rng.Int64N(int64(advance))))
		now := b.clock.Now()
		if arrive && rng.IntN(3) == 0 {
			part := parts[rng.IntN(len(parts))]
			for range 1 + rng.IntN(4) {
				id := fmt.Sprintf("j%04d", n)
				n++
				b.add(t, t1, id, `{"args":{}}`, 0)
				partOf[id] = part
			}
		}
		kept := ends[:0]
		for _, e := range ends {
			if e.at.After(now) {
				kept = append(kept, e)
				continue
			}
			_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
				if err := b.c.leavePartition(tr, t1, e.part, e.job.ID); err != nil {
					return struct{}{}, err
				}
				return struct{}{}, b.c.Finish(b.ctx, tr, e.job, nil)
			})
			require.NoError(t, err)
			running[e.part]--
		}
		ends = kept
		jobs, err := b.c.AcceptBatch(b.ctx, t1, 1+rng.IntN(12), AcceptOptions{})
		if errors.Is(err, ErrNotFound) {
			return
		}
		require.NoError(t, err)
		claims := make([]*claim, len(jobs))
		for i, j := range jobs {
			claims[i] = &claim{job: j, part: partOf[j.ID]}
		}
		_, err = b.c.claimPartitions(b.ctx, claims, wait, nil)
		require.NoError(t, err)
		for _, cl := range claims {
			require.NoError(t, cl.err)
			if !cl.granted {
				continue
			}
			starts[cl.part] = append(starts[cl.part], now)
			running[cl.part]++
			if lim.Running > 0 {
				require.LessOrEqual(t, running[cl.part], lim.Running, "%s runs more than its limit (seed %d)", cl.part, seed)
			}
			ends = append(ends, end{now.Add(time.Duration(rng.IntN(400)) * time.Millisecond), cl.job, cl.part})
		}
	}
	for range 600 {
		step(true, 60*time.Millisecond)
	}
	// Every job starts: its partition's backlog at the rate, and a few
	// seconds more (the claims' looks, the ends that free places), give
	// or take half: a due job taken late (here by up to a step, 300 ms)
	// leaves the bucket's start unused for that time when the bucket holds
	// one.
	stop := b.clock.Now()
	backlog := 0
	for _, p := range parts {
		backlog = max(backlog, countOf(partOf, p)-len(starts[p]))
	}
	bound := stop.Add(time.Duration(1.5*float64(backlog)/lim.PerSecond*float64(time.Second)) + 10*time.Second)
	for done := 0; done < len(partOf); {
		require.False(t, b.clock.Now().After(bound), "%d of %d jobs started by %v after the arrivals (seed %d)",
			done, len(partOf), bound.Sub(stop), seed)
		step(false, 300*time.Millisecond)
		done = 0
		for _, p := range parts {
			done += len(starts[p])
		}
	}
	// No window of W seconds holds more starts than PerSecond × W +
	// max(1, PerSecond).
	depth := max(1, math.Floor(lim.PerSecond))
	for _, p := range parts {
		s := starts[p]
		for i := range s {
			for j := i; j < len(s); j++ {
				w := s[j].Sub(s[i]).Seconds()
				require.LessOrEqual(t, float64(j-i+1), lim.PerSecond*w+depth+1e-9,
					"%s started %d jobs in %.3fs (seed %d)", p, j-i+1, w, seed)
			}
		}
	}
	t.Logf("%d jobs; starts per partition %d %d %d", len(partOf), len(starts["p0"]), len(starts["p1"]), len(starts["p2"]))
}

// countOf counts the values of m equal to v.
func countOf(m map[string]string, v string) int {
	n := 0
	for _, x := range m {
		if x == v {
			n++
		}
	}
	return n
}

// Starts taken as fast as a partition's rate allows, at the very moment
// each comes, are never more than PerSecond × W + max(1, PerSecond) in a
// window of W seconds, to the microsecond, whatever the rate's fraction.
func TestPartitionStartsExact(t *testing.T) {
	b := setup(t)
	for _, rate := range []float64{3, 7, 0.7, 1000 / 3.0, 9999} {
		lim := Limit{PerSecond: rate}
		pc := &partClaims{}
		now := b.clock.Now()
		var starts []time.Time
		for len(starts) < 300 {
			_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
				p := *pc
				due, ok, err := b.c.takeStart(tr, t1, fmt.Sprint(rate), &p, lim, now)
				if err != nil {
					return struct{}{}, err
				}
				*pc = p
				if ok {
					starts = append(starts, now)
				} else {
					now = due
				}
				return struct{}{}, nil
			})
			require.NoError(t, err)
		}
		depth := max(1, math.Floor(rate))
		for i := range starts {
			for j := i; j < len(starts); j++ {
				w := starts[j].Sub(starts[i]).Seconds()
				require.LessOrEqual(t, float64(j-i+1), rate*w+depth+1e-9, "%v/s: %d starts in %.6fs", rate, j-i+1, w)
			}
		}
	}
}

// A Runtime stopped while its fetchers claim places hands back the jobs
// those claims were for: once Stop returns, no job is left running (a
// claim that Stop cut short dropped its jobs, running until the activity
// monitor took them back a Timeout later).
func TestStopDuringClaimsHandsBack(t *testing.T) {
	for round := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		db := kvtest.NewDB(t)
		c, err := New(db, Config{TimeUnit: time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.SetPartitionLimit(ctx, nil, "part", Limit{Running: 3}))
		var worked atomic.Int64
		ws := NewWorkers()
		require.NoError(t, AddWorker(ws, WorkFunc[partArgs](func(ctx context.Context, w *Work[partArgs]) error {
			worked.Add(1)
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}), WorkerOptions{Concurrency: 10, Timeout: time.Hour}))
		rt, err := NewRuntime(c, ws, RuntimeOptions{FetchPoll: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		jobs := make([]InsertJob, 400)
		for i := range jobs {
			part := fmt.Sprintf("t%d", i%10)
			jobs[i] = InsertJob{Args: partArgs{N: i, Part: part}, Opts: InsertOptions{Partition: part}}
		}
		_, err = c.InsertMany(ctx, nil, jobs)
		require.NoError(t, err)
		testutil.Eventually(t, "jobs worked", func() bool { return worked.Load() >= 30 })
		require.NoError(t, rt.Stop(ctx))
		n, err := c.Counts(ctx, nil, "part")
		require.NoError(t, err)
		require.Zero(t, n.Running, "round %d: jobs left running after Stop (%+v)", round, n)
		c.Stop()
		cancel()
	}
}

// One claim of several jobs of a partition whose count reaches the limit
// on the way counts the entries it wrote before it: the running set read
// then (on FoundationDB sent ahead, with the partition's other reads)
// holds them. A limit of 2 with one job running grants one of two.
func TestPartitionClaimCountsItsOwnEntries(t *testing.T) {
	b := setup(t)
	b.start(t)
	setPartLimit(t, b, 2)
	claims := acceptClaims(t, b, 3)
	wait := func(int64) int64 { return b.c.cfg.now() + 1000 }
	_, err := b.c.claimPartitions(b.ctx, claims[:1], wait, nil) // the count: 1
	require.NoError(t, err)
	require.True(t, claims[0].granted)
	_, err = b.c.claimPartitions(b.ctx, claims[1:], wait, nil)
	require.NoError(t, err)
	require.Equal(t, 1, countGranted(claims[1:]), "2 places, 3 jobs")
	n, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (int64, error) {
		v, err := tr.Get(b.c.k.partCountKey(t1, "p")).Get()
		return kv.DecodeInt64(v), err
	})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// A job resubmitted while it ran (Resubmit) that its claim sends back
// before its run began (its partition full) is pending at the later of the
// time asked and its next look: resubmitted to an hour on, it waits for no
// place, and the end that frees one moves it no earlier; resubmitted to
// now, it waits for a place as any job does.
func TestPartitionSendBackKeepsResubmit(t *testing.T) {
	b := setup(t)
	b.start(t)
	setPartLimit(t, b, 1)
	claims := acceptClaims(t, b, 3)
	wait := func(int64) int64 { return b.c.cfg.now() + 1000 }
	_, err := b.c.claimPartitions(b.ctx, claims[:1], wait, nil)
	require.NoError(t, err)
	require.True(t, claims[0].granted)
	later := b.c.cfg.stime(b.c.cfg.Clock.Now().Add(time.Hour))
	require.NoError(t, b.c.Resubmit(b.ctx, nil, claims[1].job, later, nil))
	require.NoError(t, b.c.Resubmit(b.ctx, nil, claims[2].job, b.c.cfg.now(), nil))
	_, err = b.c.claimPartitions(b.ctx, claims[1:], wait, nil)
	require.NoError(t, err)
	require.Zero(t, countGranted(claims[1:]), "1 place, taken")
	type look struct {
		state   State
		stime   int64
		waiting bool
	}
	at := func(cl *claim) look {
		t.Helper()
		l, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) (look, error) {
			w, err := tr.Get(b.c.k.partWaitingKey(t1, "p", cl.job.ID)).Get()
			if err != nil {
				return look{}, err
			}
			r, err := b.c.k.readRow(tr, t1, cl.job.ID)
			if err != nil || r == nil {
				return look{}, err
			}
			return look{r.state, r.stime, w != nil}, nil
		})
		require.NoError(t, err)
		return l
	}
	require.Equal(t, look{Pending, later, false}, at(claims[1]), "at the time asked, waiting for no place")
	now := at(claims[2])
	require.Equal(t, Pending, now.state)
	require.True(t, now.waiting, "resubmitted to now: waits for a place")
	_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		return struct{}{}, b.c.leavePartition(tr, t1, "p", claims[0].job.ID)
	})
	require.NoError(t, err)
	require.Equal(t, later, at(claims[1]).stime, "the end that frees the place moves it no earlier")
	require.LessOrEqual(t, at(claims[2]).stime, b.c.cfg.now(), "the job waiting is woken")
}

func countGranted(claims []*claim) int {
	n := 0
	for _, cl := range claims {
		if cl.granted {
			n++
		}
	}
	return n
}

// setPartLimit sets t1's partition limit to n running jobs and waits until
// b's Client read it.
func setPartLimit(t *testing.T, b *bundle, n int) {
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, t1, Limit{Running: n}))
	testutil.Eventually(t, "the Client read the limit", func() bool {
		m := b.c.infos.Load()
		return m != nil && (*m)[t1].partLimit == n
	})
}

// acceptClaims adds n jobs of t1 and accepts them, as claims in partition p.
func acceptClaims(t *testing.T, b *bundle, n int) []*claim {
	for i := range n {
		b.add(t, t1, fmt.Sprintf("j%02d", i), `{"args":{}}`, 0)
	}
	var claims []*claim
	for range n {
		claims = append(claims, &claim{job: b.accept(t, t1), part: "p"})
	}
	return claims
}
