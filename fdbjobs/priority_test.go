package fdbjobs

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// addPrio adds job id of t1 at stime with priority prio (0: the default).
func (b *bundle) addPrio(t *testing.T, id string, stime int64, prio int) {
	t.Helper()
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: id, ScheduledTime: stime, Priority: prio}}))
}

// acceptIDs accepts up to n due jobs of t1 and returns their ids, in the
// order the batch has them, and their priorities.
func (b *bundle) acceptIDs(t *testing.T, n int) (ids []string, prios []int) {
	t.Helper()
	jobs, err := b.c.AcceptBatch(b.ctx, t1, n, AcceptOptions{})
	require.NoError(t, err)
	for _, j := range jobs {
		ids, prios = append(ids, j.ID), append(prios, j.Priority)
	}
	return ids, prios
}

// Among due jobs of one shard, the higher priorities are taken first,
// whatever their due times, until a lower one's wait makes up its
// handicap.
func TestPriorityOrder(t *testing.T) {
	b := setup(t, func(c *Config) { c.PriorityAging = 10 * time.Second })
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
	b.addPrio(t, "p4", 100, 4)
	b.addPrio(t, "p3", 101, 3)
	b.addPrio(t, "p2", 102, 2)
	b.addPrio(t, "p1", 103, 0)
	ids, prios := b.acceptIDs(t, 10)
	require.Equal(t, []string{"p1", "p2", "p3", "p4"}, ids)
	require.Equal(t, []int{1, 2, 3, 4}, prios)

	// The bound: q4, due at 200, goes before the priority-1 jobs due more
	// than 3 × 10 s after it, and after those due less.
	b.addPrio(t, "q4", 200, 4)
	b.addPrio(t, "early", 229, 1)
	b.addPrio(t, "late", 231, 1)
	b.addPrio(t, "q2", 215, 2) // 215 + 10: before early (229) and q4 (230)
	var got []string
	for range 4 {
		ids, _ := b.acceptIDs(t, 1)
		got = append(got, ids...)
	}
	require.Equal(t, []string{"q2", "early", "q4", "late"}, got)
}

// A job's priority goes with it through retries and resubmits; an Add with
// a priority changes it, one with 0 keeps it; listing and counting see
// every lane.
func TestPriorityKeptAndChanged(t *testing.T) {
	b := setup(t)
	b.addPrio(t, "j", 10, 3)
	info := func() JobInfo {
		infos, err := b.c.ReadJobs(b.ctx, nil, t1, []string{"j"})
		require.NoError(t, err)
		return infos[0]
	}
	require.Equal(t, 3, info().Priority)
	n, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	page, err := b.c.List(b.ctx, nil, ListParams{Kind: t1, State: StateAvailable, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, 3, page.Jobs[0].Priority)
	st, count, err := b.c.DueTime(b.ctx, nil, t1, 0, 5)
	require.NoError(t, err)
	require.Equal(t, []int64{10, 1}, []int64{st, int64(count)})

	b.addPrio(t, "j", 20, 0) // moves, keeps its priority
	require.Equal(t, 3, info().Priority)
	b.addPrio(t, "j", 20, 2)
	require.Equal(t, 2, info().Priority)
	b.requirePendingKeys(t)
	require.Equal(t, 1, b.count(t, keyPending))

	j := b.accept(t, t1)
	require.Equal(t, 2, j.Priority)
	require.NoError(t, b.c.Resubmit(b.ctx, nil, j, 30, nil)) // while running
	require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
	require.Equal(t, Pending, info().State)
	require.Equal(t, 2, info().Priority)
	b.requirePendingKeys(t)
}

// Bad priorities are refused before anything is written.
func TestPriorityBadInput(t *testing.T) {
	b := setup(t)
	for _, p := range []int{-1, PriorityLowest + 1, 100} {
		err := b.c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: "ok", ScheduledTime: 1}, {ID: "bad", ScheduledTime: 1, Priority: p}})
		require.ErrorIs(t, err, ErrInvalidArgument, p)
		require.ErrorContains(t, err, fmt.Sprintf("priority %d outside [1, 4]", p))
		_, err = b.c.Insert(b.ctx, nil, cntArgs{}, InsertOptions{Priority: p})
		require.ErrorIs(t, err, ErrInvalidArgument, p)
	}
	require.Equal(t, 0, b.count(t, keyData))
	require.Equal(t, 0, b.count(t, keyLanes))
	_, err := New(b.db, Config{PriorityAging: -time.Second})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = New(b.db, Config{TimeUnit: time.Nanosecond, PriorityAging: 1 << 62})
	require.ErrorIs(t, err, ErrInvalidConfig, "a handicap that overflows")
}

// The first job of a new lane reaches an acceptor that was waiting with a
// copy of the type's lanes taken before it: the type-check loop reads the
// new lane (its watch on the types version) and wakes it.
func TestPriorityNewLaneWakesAcceptors(t *testing.T) {
	b := setup(t)
	loop := b.followTypeLoop()
	waiting := make(chan struct{}, 1)
	b.c.hooks.acceptWaiting = func(string) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	b.start(t)
	<-loop.synced
	release := loop.hold()
	// Another Client adds it, so that no local wake-up helps; the loop
	// reads the new lane and is held before it keeps it.
	other, err := New(b.db, Config{Clock: b.clock})
	require.NoError(t, err)
	require.NoError(t, other.AddBatch(b.ctx, nil, t1, []NewJob{{ID: "low", ScheduledTime: 1, Priority: 4}}))
	<-loop.reading
	// The acceptor looks with the old copy, finds nothing and waits: its
	// watch on the pending counter was set after the add.
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	got := make(chan *Job, 1)
	go func() {
		defer close(got)
		j, err := b.c.Accept(ctx, t1, AcceptOptions{Timeout: WaitForever})
		if err == nil {
			got <- j
		}
	}()
	<-waiting
	release()
	j := <-got
	require.NotNil(t, j, "the acceptor never saw the new lane's job")
	require.Equal(t, "low", j.ID)
	require.Equal(t, 4, j.Priority)
}

// TestPriorityModel adds jobs of random priorities and due times to a
// type of one or three shards, over simulated time, and accepts batches
// of random sizes: every batch takes, from each shard it takes from, due
// jobs whose handicapped due times (due time + (priority-1) × aging) are
// no later than those of any due job it leaves there. So no due job waits
// behind one of a higher priority that came due more than the difference
// of their handicaps after it. Replay: FDBJOBS_SEED.
func TestPriorityModel(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			seed := testSeed(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			const aging = 5
			b := setup(t, func(c *Config) { c.PriorityAging = aging * time.Second })
			require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, shards))
			type job struct {
				stime int64
				prio  int
			}
			pending := map[string]job{}
			key := func(j job) int64 { return j.stime + int64(j.prio-1)*aging }
			now := b.c.cfg.now()
			next := 0
			for step := range 300 {
				switch op := rng.IntN(3); {
				case op < 2:
					var batch []NewJob
					for range 1 + rng.IntN(6) {
						id := fmt.Sprintf("j%04d", next)
						next++
						j := job{stime: now - 20 + rng.Int64N(30), prio: 1 + rng.IntN(PriorityLowest)}
						pending[id] = j
						batch = append(batch, NewJob{ID: id, ScheduledTime: j.stime, Priority: j.prio})
					}
					require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, batch))
				default:
					jobs, err := b.c.AcceptBatch(b.ctx, t1, 1+rng.IntN(5), AcceptOptions{})
					if err != nil {
						require.ErrorIs(t, err, ErrNotFound)
					}
					taken := map[int64]int64{} // the latest key taken, by shard
					for _, j := range jobs {
						m, ok := pending[j.ID]
						require.True(t, ok, "step %d: %s taken twice", step, j.ID)
						require.LessOrEqual(t, m.stime, now, "step %d: %s taken before its time", step, j.ID)
						require.Equal(t, m.prio, j.Priority)
						s := shardOf(j.ID, int64(shards))
						if k, ok := taken[s]; !ok || key(m) > k {
							taken[s] = key(m)
						}
						delete(pending, j.ID)
						require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
					}
					for id, m := range pending {
						if k, ok := taken[shardOf(id, int64(shards))]; ok && m.stime <= now {
							require.GreaterOrEqual(t, key(m), k, "step %d: %s (due %d, priority %d) left behind", step, id, m.stime, m.prio)
						}
					}
				}
				if rng.IntN(4) == 0 {
					b.clock.Advance(time.Duration(1+rng.IntN(3)) * time.Second)
					now = b.c.cfg.now()
				}
			}
			// Nothing lost: every job left is taken once it is due.
			b.clock.Advance(time.Minute)
			var left []string
			for {
				jobs, err := b.c.AcceptBatch(b.ctx, t1, 50, AcceptOptions{})
				if err != nil {
					require.ErrorIs(t, err, ErrNotFound)
					break
				}
				for _, j := range jobs {
					left = append(left, j.ID)
				}
			}
			want := make([]string, 0, len(pending))
			for id := range pending {
				want = append(want, id)
			}
			slices.Sort(want)
			slices.SortFunc(left, cmp.Compare)
			require.Equal(t, want, left)
		})
	}
}

// Across shards, an OldestFirst fetch takes jobs in priority and due
// order: dueHandicapped finds how far the n first reach, handicaps
// included, and the accept takes those from whichever shards hold them.
func TestPriorityAcrossShards(t *testing.T) {
	b := setup(t)
	for i := range 16 {
		b.addPrio(t, fmt.Sprintf("low-%02d", i), 100, 4) // handicapped: 100 + 3 min
	}
	for i := range 3 {
		b.addPrio(t, fmt.Sprintf("high-%d", i), 150, 1)
	}
	h, n, err := b.c.dueHandicapped(b.ctx, t1, b.c.cfg.now(), 3)
	require.NoError(t, err)
	require.Equal(t, []int64{150, 3}, []int64{h, int64(n)})
	jobs, err := b.c.AcceptBatch(b.ctx, t1, 3, AcceptOptions{MaxScheduledTime: b.c.cfg.now(), handicapped: true, handicap: h})
	require.NoError(t, err)
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	require.Equal(t, []string{"high-0", "high-1", "high-2"}, ids)
	// Ties at the n-th time: the earlier jobs alone, so that a tied job
	// of one shard does not take an earlier one's place.
	for i := range 3 {
		b.addPrio(t, fmt.Sprintf("urgent-%d", i), 170, 1)
	}
	h, n, err = b.c.dueHandicapped(b.ctx, t1, b.c.cfg.now(), 10)
	require.NoError(t, err)
	require.Equal(t, []int64{100 + 3*60 - 1, 3}, []int64{h, int64(n)}, "the urgent ones before the low ones")
	jobs, err = b.c.AcceptBatch(b.ctx, t1, 10, AcceptOptions{MaxScheduledTime: b.c.cfg.now(), handicapped: true, handicap: h})
	require.NoError(t, err)
	ids = nil
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	require.Equal(t, []string{"urgent-0", "urgent-1", "urgent-2"}, ids)
	for i := range 4 {
		b.addPrio(t, fmt.Sprintf("tie-%d", i), 100+3*60, 1) // as the low ones, handicapped
	}
	b.addPrio(t, "first", 200, 1)
	h, n, err = b.c.dueHandicapped(b.ctx, t1, b.c.cfg.now(), 10)
	require.NoError(t, err)
	require.Equal(t, []int64{100 + 3*60 - 1, 1}, []int64{h, int64(n)}, "the one before the tie")
}
