package fdbjobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

func TestSetTypeShards(t *testing.T) {
	b := setup(t)
	n, err := b.c.TypeShards(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, ShardsDefault, n)
	for _, bad := range []int{0, -1, ShardsMax + 1} {
		require.ErrorIs(t, b.c.SetTypeShards(b.ctx, nil, t1, bad), ErrInvalidArgument, bad)
	}
	require.ErrorIs(t, b.c.SetTypeShards(b.ctx, nil, "", 4), ErrInvalidArgument)
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 64))
	n, err = b.c.TypeShards(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, 64, n)
}

// Jobs keep their shard when the count changes: after it is lowered, the
// jobs of the shards above it are still counted and taken.
func TestLoweredShardsLoseNoJob(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 32))
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("job-%02d", i)
		ids = append(ids, id)
		b.add(t, t1, id, "", 0)
	}
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 2))
	b.add(t, t1, "late", "", 0)
	ids = append(ids, "late")
	n, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	var got []string
	for {
		jobs, err := b.c.AcceptBatch(b.ctx, t1, 7, AcceptOptions{})
		if err != nil {
			require.ErrorIs(t, err, ErrNotFound)
			break
		}
		for _, j := range jobs {
			got = append(got, j.ID)
		}
	}
	slices.Sort(got)
	slices.Sort(ids)
	require.Equal(t, ids, got)
}

// Within a shard, jobs are taken in scheduled-time order.
func TestShardOrder(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
	for i, st := range []int64{50, 10, 40, 20, 30} {
		b.add(t, t1, fmt.Sprintf("j%d", i), "", st)
	}
	var stimes []int64
	for range 5 {
		stimes = append(stimes, b.accept(t, t1).ScheduledTime)
	}
	require.Equal(t, []int64{10, 20, 30, 40, 50}, stimes)
}

// DueTime reaches across every shard: the n earliest due jobs' latest
// scheduled time, how many are due (at most n), nothing for a queue with
// none due, and an AcceptBatch bounded by that time takes exactly those.
func TestDueTime(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 8))
	stimes := []int64{70, 10, 60, 20, 50, 30, 40, 5000}
	for i, st := range stimes {
		b.add(t, t1, fmt.Sprintf("job-%02d", i), "", st)
	}
	for _, tc := range []struct {
		n, max       int64
		stime, count int64
	}{
		{n: 1, max: 100, stime: 10, count: 1},
		{n: 3, max: 100, stime: 30, count: 3},
		{n: 7, max: 100, stime: 70, count: 7},
		{n: 20, max: 100, stime: 70, count: 7},
		{n: 20, max: 45, stime: 40, count: 4},
		{n: 5, max: 9, stime: 0, count: 0},
	} {
		st, c, err := b.c.DueTime(b.ctx, nil, t1, tc.max, int(tc.n))
		require.NoError(t, err)
		require.Equal(t, tc.stime, st, "n %d, max %d", tc.n, tc.max)
		require.Equal(t, int(tc.count), c, "n %d, max %d", tc.n, tc.max)
	}
	_, _, err := b.c.DueTime(b.ctx, nil, t1, 100, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)

	st, c, err := b.c.DueTime(b.ctx, nil, t1, 100, 3)
	require.NoError(t, err)
	jobs, err := b.c.AcceptBatch(b.ctx, t1, c, AcceptOptions{MaxScheduledTime: st})
	require.NoError(t, err)
	var got []int64
	for _, j := range jobs {
		got = append(got, j.ScheduledTime)
	}
	require.ElementsMatch(t, []int64{10, 20, 30}, got)
}

// A started Client's accepts take the type's timeout and shard counts from
// what its type-check loop read: its own changes drop that copy at once
// (even one made while the loop was reading), and the loop reads them again.
func TestTypeInfoCache(t *testing.T) {
	b := setup(t)
	loop := b.followTypeLoop()
	reading := loop.reading
	waitSync := func() {
		select {
		case <-loop.synced:
		case <-b.ctx.Done():
			t.Fatal("the type-check loop never synced")
		}
	}
	b.start(t)
	waitSync()
	infos := b.c.infos.Load()
	require.NotNil(t, infos)
	require.Equal(t, typeInfo{timeout: 2 * time.Second, hasTimeout: true, shards: ShardsDefault, high: ShardsDefault, known: true, lanes: laneHighest}, (*infos)[t1])

	// The loop is held after a read, so that it cannot read the change
	// again before the copy is looked at (it watches TYPES_VERSION).
	release := loop.hold()
	b.c.forceTypeCheck()
	<-reading
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 4))
	require.Nil(t, b.c.infos.Load(), "the Client's own change drops the copy")
	release()
	for b.c.infos.Load() == nil {
		waitSync()
	}
	require.Equal(t, typeInfo{timeout: 2 * time.Second, hasTimeout: true, shards: 4, high: ShardsDefault, known: true, lanes: laneHighest}, (*b.c.infos.Load())[t1])

	// A change committed while the loop read: its read is not kept.
	release = loop.hold()
	b.c.forceTypeCheck()
	<-reading
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, t1, time.Minute))
	release()
	for {
		waitSync()
		if m := b.c.infos.Load(); m != nil {
			require.Equal(t, time.Minute, (*m)[t1].timeout)
			break
		}
	}

	// Accepts use the copy: the hold follows its timeout (the loop held
	// after a read, so that it does not replace the copy meanwhile).
	release = loop.hold()
	b.c.forceTypeCheck()
	<-reading
	m := map[string]typeInfo{t1: {timeout: time.Hour, hasTimeout: true, shards: 4, high: ShardsDefault, known: true}}
	b.c.infos.Store(&m)
	b.add(t, t1, j1, "", 0)
	require.Equal(t, time.Hour, b.accept(t, t1).hold.timeout)
	release()
}

// Ownership splits the shards among the members: each shard has exactly
// one owner, every member sees the same split and owns as many shards as
// another give or take one, and a member that leaves moves few shards
// besides its own.
func TestShardOwnership(t *testing.T) {
	owners := func(members []string, high int64) map[int64]string {
		out := map[int64]string{}
		for _, self := range members {
			b := setup(t, func(c *Config) {
				c.Members = func() (string, []string) { return self, members }
			})
			own, others := b.c.shardOrder(t1, high)
			require.Len(t, append(own, others...), int(high))
			for _, s := range own {
				require.Empty(t, out[s], "shard %d owned twice", s)
				out[s] = self
			}
		}
		require.Len(t, out, int(high), "every shard has an owner")
		perMember := map[string]int{}
		for _, m := range out {
			perMember[m]++
		}
		lo, hi := int(high), 0
		for _, m := range members {
			lo, hi = min(lo, perMember[m]), max(hi, perMember[m])
		}
		require.LessOrEqual(t, hi-lo, 1, "unbalanced: %v", perMember)
		return out
	}
	for _, tc := range []struct {
		members int
		high    int64
	}{{4, 64}, {8, 16}, {3, 16}, {20, 16}} {
		var members []string
		for i := range tc.members {
			members = append(members, fmt.Sprintf("node-%d", i))
		}
		before := owners(members, tc.high)
		after := owners(members[:len(members)-1], tc.high)
		moved := 0
		for s, m := range before {
			if m != members[len(members)-1] && after[s] != m {
				moved++
			}
		}
		require.LessOrEqual(t, moved, int(tc.high)/4, "%d members, %d shards: %d shards of staying members moved", tc.members, tc.high, moved)
	}
	// Not a member: every shard is its own.
	members := []string{"a", "b"}
	b := setup(t, func(c *Config) { c.Members = func() (string, []string) { return "x", members } })
	own, others := b.c.shardOrder(t1, 8)
	require.Len(t, own, 8)
	require.Empty(t, others)
}

// A store whose jobs were written in another layout is refused, with the
// layout named; a new store gets the current one.
func TestLayout(t *testing.T) {
	t.Run("new store", func(t *testing.T) {
		b := setup(t)
		b.add(t, t1, j1, "", 0)
		v, err := b.db.ReadTransact(b.ctx, func(tr kv.ReadTransaction) (any, error) { return tr.Get(b.c.k.layout()).Get() })
		require.NoError(t, err)
		require.Equal(t, tuple.Tuple{int64(LayoutVersion)}.Pack(), v)
	})
	t.Run("layout 1", func(t *testing.T) {
		b := setup(t)
		_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
			tr.Set(b.c.k.dataKey(t1, j1), []byte("a layout 1 row"))
			return nil, nil
		})
		require.NoError(t, err)
		err = b.c.Add(b.ctx, nil, t1, j2, nil, 0)
		require.ErrorIs(t, err, ErrLayout)
		require.ErrorContains(t, err, "key layout 1")
		_, err = b.c.Accept(b.ctx, t1, AcceptOptions{})
		require.ErrorIs(t, err, ErrLayout)
		require.ErrorIs(t, b.c.Start(b.ctx), ErrLayout)
	})
	t.Run("a later layout", func(t *testing.T) {
		b := setup(t)
		_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
			tr.Set(b.c.k.layout(), tuple.Tuple{int64(LayoutVersion + 1)}.Pack())
			return nil, nil
		})
		require.NoError(t, err)
		require.ErrorContains(t, b.c.Add(b.ctx, nil, t1, j1, nil, 0), fmt.Sprintf("key layout %d", LayoutVersion+1))
	})
}

// A new job with a partition goes to its partition's shard where its
// kind has a limit per partition (Insert's jobs too), else to its id's.
func TestPartitionShard(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "part", time.Minute))
	batch := func(prefix string) []NewJob {
		jobs := make([]NewJob, 40)
		for i := range jobs {
			jobs[i] = NewJob{ID: fmt.Sprintf("%s%02d", prefix, i), Data: []byte(`{}`), Partition: "tenant-a"}
		}
		return append(jobs, NewJob{ID: prefix + "-none", Data: []byte(`{}`)})
	}
	insert := func() string {
		res, err := b.c.Insert(b.ctx, nil, partArgs{N: 1}, InsertOptions{Partition: "tenant-b"})
		require.NoError(t, err)
		return res.ID
	}
	shard := func(typ, id string) int64 {
		r, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) (*row, error) { return b.c.k.readRow(tr, typ, id) })
		require.NoError(t, err)
		require.NotNil(t, r, id)
		return r.shard
	}
	spread := batch("s")
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, spread))
	spreadIns := insert()
	for _, j := range spread {
		require.Equal(t, shardOf(j.ID, ShardsDefault), shard(t1, j.ID), "no limit: by id")
	}
	require.Equal(t, shardOf(spreadIns, ShardsDefault), shard("part", spreadIns))

	for _, kind := range []string{t1, "part"} {
		require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, kind, Limit{PerSecond: 5}))
	}
	together := batch("t")
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, together))
	ins := insert()
	for _, j := range together[:40] {
		require.Equal(t, shardOf("tenant-a", ShardsDefault), shard(t1, j.ID), j.ID)
	}
	require.Equal(t, shardOf("t-none", ShardsDefault), shard(t1, "t-none"))
	require.Equal(t, shardOf("tenant-b", ShardsDefault), shard("part", ins))

	long := NewJob{ID: "long", Data: []byte(`{}`), Partition: strings.Repeat("x", PartitionMaxBytes+1)}
	require.ErrorIs(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{long}), ErrInvalidArgument)
}

// A Runtime's Start raises its kinds' shards to the nodes Members names,
// and never lowers them; a node Members does not name leaves them.
func TestRuntimeRaisesShards(t *testing.T) {
	b := setup(t)
	members := func(self string, n int) func() (string, []string) {
		all := make([]string, n)
		for i := range all {
			all[i] = fmt.Sprintf("node-%d", i)
		}
		return func() (string, []string) { return self, all }
	}
	start := func(m func() (string, []string)) {
		c, err := New(b.db, Config{Members: m})
		require.NoError(t, err)
		require.NoError(t, c.Start(b.ctx))
		t.Cleanup(c.Stop)
		ws := NewWorkers()
		require.NoError(t, AddWorker(ws, WorkFunc[partArgs](func(context.Context, *Work[partArgs]) error { return nil }), WorkerOptions{Timeout: time.Minute}))
		rt, err := NewRuntime(c, ws, RuntimeOptions{})
		require.NoError(t, err)
		require.NoError(t, rt.Start(b.ctx))
		require.NoError(t, rt.Stop(b.ctx))
	}
	shards := func() int {
		n, err := b.c.TypeShards(b.ctx, nil, "part")
		require.NoError(t, err)
		return n
	}
	start(members("stranger", 40))
	require.Equal(t, ShardsDefault, shards(), "a node not among the members")
	start(members("node-3", 40))
	require.Equal(t, 40, shards())
	start(members("node-3", 20))
	require.Equal(t, 40, shards(), "never lowered")
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, "part", 8))
	start(members("node-0", 6))
	require.Equal(t, 8, shards(), "a count set above the members stays")
}
