package fdbjobs

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Fair shares by run time, over simulated time: partitions of random
// weights (1-4) whose jobs run a random 1 to 8 s each, every one with jobs
// waiting all along, share 20 slots. The slots' charges of run time go to
// the store every 10 s, as a Runtime's charger writes them. Over the last
// 80 of 240 s, each partition's share of the run time is its weight's,
// within 15%, with one queue shard and with the default 16; by starts
// (FairShareStarts), the partitions of long jobs take more than their
// weight's (their share of the starts is the weight's, each start worth
// its run time). The seed is in the log and in each failure's message.
func TestFairShareRunTimeModel(t *testing.T) {
	seed := testSeed(t)
	for _, tc := range []struct {
		mode   FairShare
		shards int
	}{{FairShareRunTime, 1}, {FairShareRunTime, ShardsDefault}, {FairShareStarts, 1}} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%v, %d shards", mode, tc.shards), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 46))
			b := setup(t)
			require.NoError(t, b.c.SetFairShareMode(b.ctx, nil, t1, mode))
			got, err := b.c.GetFairShareMode(b.ctx, nil, t1)
			require.NoError(t, err)
			require.Equal(t, mode, got)
			require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, tc.shards))
			const slots, interval, waiting = 20, 10, 20
			seconds, window := 240, 80
			if mode == FairShareStarts {
				seconds, window = 80, 40 // enough to tell
			}
			n := 3 + rng.IntN(3)
			weights, durations := make([]int, n), make([]int, n)
			for p := range n {
				weights[p], durations[p] = 1+rng.IntN(4), 1+rng.IntN(8)
				require.NoError(t, b.c.SetPartitionWeight(b.ctx, nil, t1, part(p), weights[p]))
			}
			durations[0], durations[n-1] = 1, 8 // at least one ratio of 8
			queued := make([]int, n)            // jobs waiting per partition
			var busy []int                      // seconds left per slot taken
			var busyPart []int
			ran := make([]int, n) // slot-seconds in the window
			ms, runs := map[string]int64{}, map[string]int64{}
			next := 0
			for s := range seconds {
				// Every partition has jobs waiting all along, a few more
				// than it could start (not a backlog of minutes: a start's
				// cost is the partition's mean as of its insert).
				var jobs []InsertJob
				for p := range n {
					for ; queued[p] < waiting; queued[p]++ {
						jobs = append(jobs, InsertJob{Args: fairArgs{N: next}, Opts: InsertOptions{Partition: part(p)}})
						next++
					}
				}
				rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
				if len(jobs) > 0 {
					_, err := b.c.InsertMany(b.ctx, nil, jobs)
					require.NoError(t, err)
				}
				if free := slots - len(busy); free > 0 {
					got, err := b.c.AcceptBatch(b.ctx, t1, free, AcceptOptions{})
					require.NoError(t, err)
					for _, j := range got {
						p := partOf(t, j)
						queued[p]--
						busy, busyPart = append(busy, durations[p]), append(busyPart, p)
					}
				}
				// A second of work.
				for i := 0; i < len(busy); i++ {
					p := busyPart[i]
					if s >= seconds-window {
						ran[p]++
					}
					if busy[i]--; busy[i] == 0 {
						ms[part(p)] += int64(durations[p]) * 1000
						runs[part(p)]++
						busy, busyPart = append(busy[:i], busy[i+1:]...), append(busyPart[:i], busyPart[i+1:]...)
						i--
					}
				}
				b.clock.Advance(time.Second)
				if (s+1)%interval == 0 {
					require.NoError(t, b.c.ChargeRunTime(b.ctx, t1, ms, runs))
					require.NoError(t, b.c.rollUpUsage(b.ctx, t1, b.clock.Now(), interval*time.Second, UsageCoeffDefault))
					ms, runs = map[string]int64{}, map[string]int64{}
				}
			}
			all, total := 0, 0
			for p := range n {
				all += weights[p]
				total += ran[p]
			}
			t.Logf("seed %d: weights %v, run times %v s, slot-seconds in the last %d s %v", seed, weights, durations, window, ran)
			worst := 0.0
			for p := range n {
				ratio := float64(ran[p]) / float64(total) / (float64(weights[p]) / float64(all))
				worst = max(worst, abs(ratio-1))
				if mode == FairShareRunTime {
					require.InDelta(t, 1, ratio, 0.15, "seed %d: partition %d: weight %d, jobs of %d s: %d of %d slot-seconds",
						seed, p, weights[p], durations[p], ran[p], total)
				}
			}
			if mode == FairShareStarts {
				require.Greater(t, worst, 0.15, "seed %d: by starts, run time does not follow the weights", seed)
			}
		})
	}
}

func abs(f float64) float64 { return max(f, -f) }

// By run time, a partition that comes back starts where the lanes of its
// own priority are served: a lower priority's fair lane, left behind (it
// is served after a minute's aging), gives it no credit over the
// partitions waiting at its priority.
func TestFairShareRunTimeFloorByPriority(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetFairShareMode(b.ctx, nil, t1, FairShareRunTime))
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
	insert := func(p string, prio, n int) {
		jobs := make([]InsertJob, n)
		for i := range jobs {
			jobs[i] = InsertJob{Args: fairArgs{N: i}, Opts: InsertOptions{Partition: p, Priority: prio}}
		}
		_, err := b.c.InsertMany(b.ctx, nil, jobs)
		require.NoError(t, err)
	}
	accept := func(n int) map[string]int {
		by := map[string]int{}
		for n > 0 { // (an accept may take fewer)
			got, err := b.c.AcceptBatch(b.ctx, t1, n, AcceptOptions{})
			require.NoError(t, err)
			require.NotEmpty(t, got)
			for _, j := range got {
				by[part(partOf(t, j))]++
			}
			n -= len(got)
		}
		return by
	}
	insert(part(2), PriorityLowest, 10) // a lane left behind
	insert(part(0), PriorityHighest, 3000)
	require.Equal(t, map[string]int{part(0): 1000}, accept(1000))
	insert(part(1), PriorityHighest, 200)
	by := accept(200)
	require.InDelta(t, 100, by[part(1)], 2, "the newcomer shares the starts with the partition waiting: %v", by)
}

// By run time, a partition of a priority with no job waiting starts where
// the other priorities' jobs are served, not at the clock: under a
// backlog, tags lag the clock, and a priority-1 newcomer placed at now
// would wait behind a lower priority's backlog once it aged.
func TestFairShareRunTimeNewPriority(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetFairShareMode(b.ctx, nil, t1, FairShareRunTime))
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
	jobs := make([]InsertJob, 50)
	for i := range jobs {
		jobs[i] = InsertJob{Args: fairArgs{N: i}, Opts: InsertOptions{Partition: part(4), Priority: PriorityLowest}}
	}
	_, err := b.c.InsertMany(b.ctx, nil, jobs)
	require.NoError(t, err)
	b.clock.Advance(time.Hour) // the backlog ages past every handicap
	_, err = b.c.Insert(b.ctx, nil, fairArgs{N: -1}, InsertOptions{Partition: part(1), Priority: PriorityHighest})
	require.NoError(t, err)
	got, err := b.c.AcceptBatch(b.ctx, t1, 1, AcceptOptions{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 1, partOf(t, got[0]), "the priority-1 job first")
}
