package fdbjobs

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFairShareModel: partitions of random weights insert due jobs at
// random rates, together several times what the acceptors start, over
// simulated seconds, each more than the acceptors start. Each partition's
// share of the starts over the window is its weight's share, within 10%
// of it whatever its rate; jobs start in the order of their scheduled
// times; and a partition that comes late starts its jobs at once, behind
// none of the backlog the others built, and has its share from then on.
// Without fair shares, the same inserts start in the order they came,
// and the shares follow the rates.
func TestFairShareModel(t *testing.T) {
	seed := testSeed(t)
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 45))
			b := setup(t)
			if fair {
				require.NoError(t, b.c.SetFairShare(b.ctx, nil, t1, true))
			}
			on, err := b.c.GetFairShare(b.ctx, nil, t1)
			require.NoError(t, err)
			require.Equal(t, fair, on)
			// One shard: the queue's order is the one order (with more, the
			// acceptors take from one shard at a time, and the shares hold
			// over many accepts: make bench-jobs -fair measures them).
			require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
			const accepts, batch = 2, 50 // starts per simulated second: 100
			n := 3 + rng.IntN(3)
			weights, rates := make([]int, n), make([]int, n)
			for p := range n {
				weights[p] = 1 + rng.IntN(4)
				rates[p] = accepts*batch + rng.IntN(200) // each partition more than the acceptors start
				if p > 0 && rng.IntN(3) == 0 {
					rates[p] = rates[0] // some partitions at one rate
				}
				if weights[p] != PartitionWeightDefault || rng.IntN(2) == 0 {
					require.NoError(t, b.c.SetPartitionWeight(b.ctx, nil, t1, part(p), weights[p]))
				}
				w, err := b.c.GetPartitionWeight(b.ctx, nil, t1, part(p))
				require.NoError(t, err)
				require.Equal(t, weights[p], w)
			}
			// The last partition comes late, in the window.
			late := n - 1
			const seconds, window, lateAt = 30, 20, 20
			starts := make([]int, n)
			lastStime := map[int64]int64{} // by queue shard, for the order
			lateWaited := -1
			next := 0
			for s := range seconds {
				var jobs []InsertJob
				for p := range n {
					if p == late && s < lateAt {
						continue
					}
					for range rates[p] {
						jobs = append(jobs, InsertJob{Args: fairArgs{N: next}, Opts: InsertOptions{Partition: part(p)}})
						next++
					}
				}
				rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
				for len(jobs) > 0 { // as several inserters would
					k := min(len(jobs), 50+rng.IntN(450))
					_, err := b.c.InsertMany(b.ctx, nil, jobs[:k])
					require.NoError(t, err)
					jobs = jobs[k:]
				}
				for range accepts {
					got, err := b.c.AcceptBatch(b.ctx, t1, batch, AcceptOptions{})
					require.NoError(t, err)
					for _, j := range got {
						p := partOf(t, j)
						if s >= seconds-window {
							starts[p]++
						}
						if p == late && lateWaited < 0 {
							lateWaited = s - lateAt
						}
						q := b.shard(t, j)
						require.GreaterOrEqual(t, j.ScheduledTime, lastStime[q], "a job started before one of an earlier time in its shard")
						lastStime[q] = j.ScheduledTime
					}
				}
				b.clock.Advance(time.Second)
			}
			total := 0
			for _, c := range starts {
				total += c
			}
			t.Logf("weights %v, rates %v/s, starts in the last %d s %v, the late partition's first start after %d s", weights, rates, window, starts, lateWaited)
			if !fair {
				require.NotEqual(t, 0, lateWaited, "without fair shares the late partition waits behind the backlog")
				return
			}
			require.Equal(t, 0, lateWaited, "the late partition starts in the second it came")
			// The late partition has jobs waiting for the last 10 s of
			// the window, the others for all of it.
			for p := range n {
				share := float64(starts[p]) / float64(total)
				require.InDelta(t, 1, share/expectedShare(weights, p, late, window, seconds-lateAt), 0.1,
					"partition %d: weight %d, rate %d/s, share %.3f", p, weights[p], rates[p], share)
			}
		})
	}
}

// expectedShare is partition p's share of the starts over the window when
// the late partition had jobs waiting for its last lateFor seconds.
func expectedShare(weights []int, p, late, window, lateFor int) float64 {
	all, early := 0, 0
	for q, w := range weights {
		all += w
		if q != late {
			early += w
		}
	}
	w := float64(weights[p])
	before := float64(window-lateFor) * w / float64(early)
	if p == late {
		before = 0
	}
	return (before + float64(lateFor)*w/float64(all)) / float64(window)
}

func part(p int) string { return fmt.Sprintf("p%d", p) }

type fairArgs struct{ N int }

func (fairArgs) Kind() string { return t1 }

func partOf(t *testing.T, j *Job) int {
	t.Helper()
	e, err := decodeEnvelope(j.Data)
	require.NoError(t, err)
	var p int
	_, err = fmt.Sscanf(e.Partition, "p%d", &p)
	require.NoError(t, err)
	return p
}

// shard is the queue shard job j was taken from.
func (b *bundle) shard(t *testing.T, j *Job) int64 {
	t.Helper()
	r, err := b.c.readJob(b.ctx, nil, j.Type, j.ID)
	require.NoError(t, err)
	return r.shard
}

// Bad weights and kinds are refused, nothing written.
func TestFairShareBadInput(t *testing.T) {
	b := setup(t)
	for _, w := range []int{-1, PartitionWeightMax + 1} {
		require.ErrorIs(t, b.c.SetPartitionWeight(b.ctx, nil, t1, "p", w), ErrInvalidArgument)
	}
	require.ErrorIs(t, b.c.SetPartitionWeight(b.ctx, nil, t1, "", 2), ErrInvalidArgument)
	require.ErrorIs(t, b.c.SetPartitionWeight(b.ctx, nil, t1, strings.Repeat("x", PartitionMaxBytes+1), 2), ErrInvalidArgument)
	require.ErrorIs(t, b.c.SetFairShare(b.ctx, nil, "", true), ErrInvalidArgument)
	w, err := b.c.GetPartitionWeight(b.ctx, nil, t1, "p")
	require.NoError(t, err)
	require.Equal(t, PartitionWeightDefault, w)
	require.NoError(t, b.c.SetPartitionWeight(b.ctx, nil, t1, "p", 7))
	require.NoError(t, b.c.SetPartitionWeight(b.ctx, nil, t1, "p", 0))
	w, err = b.c.GetPartitionWeight(b.ctx, nil, t1, "p")
	require.NoError(t, err)
	require.Equal(t, PartitionWeightDefault, w, "0 gives the default back")
}

// Insert's drawn ids carry a fair kind's order (unique inserts too: the
// duplicate found is the job inserted); ids of the caller's, AddBatch's
// jobs and jobs scheduled later keep their ids and times.
func TestFairShareIDs(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetFairShare(b.ctx, nil, t1, true))
	now := b.c.cfg.now()
	first, err := b.c.Insert(b.ctx, nil, fairArgs{N: 1}, InsertOptions{Partition: "a"})
	require.NoError(t, err)
	u := InsertOptions{Partition: "a", Unique: UniqueOpts{ByArgs: true}}
	unique, err := b.c.Insert(b.ctx, nil, fairArgs{N: 2}, u)
	require.NoError(t, err)
	again, err := b.c.Insert(b.ctx, nil, fairArgs{N: 2}, u)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, unique.ID, again.ID)
	for _, id := range []string{first.ID, unique.ID} {
		st := b.stime(t, t1, id)
		tag, ok := tagOf(id, st, int64(b.c.cfg.TimeUnit))
		require.True(t, ok, id)
		require.Equal(t, st, tag/int64(b.c.cfg.TimeUnit))
	}
	require.Less(t, first.ID, unique.ID, "the later job of a partition has the later tag")

	own, err := b.c.Insert(b.ctx, nil, fairArgs{N: 3}, InsertOptions{Partition: "a", ID: "mine"})
	require.NoError(t, err)
	require.Equal(t, "mine", own.ID)
	require.Equal(t, now, b.stime(t, t1, "mine"))
	later, err := b.c.Insert(b.ctx, nil, fairArgs{N: 4}, InsertOptions{Partition: "a", ScheduledAt: b.clock.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, now+3600, b.stime(t, t1, later.ID))
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: "batch", Partition: "a", ScheduledTime: now}}))
	require.Equal(t, now, b.stime(t, t1, "batch"))
}

// Jobs outside the fair order go first once due, whatever the fair
// backlog: a job without a partition, one with an id of the caller's, one
// scheduled later, and a fair job retried (FinishAt) or handed back, which
// leaves its fair place for its time.
func TestFairShareLeavesOthersFirst(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetFairShare(b.ctx, nil, t1, true))
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
	backlog := make([]InsertJob, 500)
	for i := range backlog {
		backlog[i] = InsertJob{Args: fairArgs{N: i}, Opts: InsertOptions{Partition: part(i % 2)}}
	}
	_, err := b.c.InsertMany(b.ctx, nil, backlog)
	require.NoError(t, err)
	got, err := b.c.AcceptBatch(b.ctx, t1, 1, AcceptOptions{})
	require.NoError(t, err)
	retried := got[0]
	b.clock.Advance(time.Second)
	require.NoError(t, b.c.FinishAt(b.ctx, nil, retried, b.c.cfg.now(), nil))
	others := map[string]bool{retried.ID: true}
	for _, opts := range []InsertOptions{{}, {Partition: "p0", ID: "mine"}, {Partition: "p1", ScheduledAt: b.clock.Now().Add(time.Second)}} {
		r, err := b.c.Insert(b.ctx, nil, fairArgs{N: -1}, opts)
		require.NoError(t, err)
		others[r.ID] = true
	}
	// More fair jobs after them: the backlog keeps growing.
	_, err = b.c.InsertMany(b.ctx, nil, backlog)
	require.NoError(t, err)
	b.clock.Advance(2 * time.Second)
	got, err = b.c.AcceptBatch(b.ctx, t1, len(others), AcceptOptions{})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, j := range got {
		ids[j.ID] = true
	}
	require.Equal(t, others, ids, "the jobs due by the clock go before the fair backlog")
}

// A ScheduledAt past what a time in ns holds is refused, not wrapped into
// the past; a retry that far waits until the latest time there is.
func TestScheduledAtMax(t *testing.T) {
	b := setup(t)
	far := time.Date(2600, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := b.c.Insert(b.ctx, nil, fairArgs{}, InsertOptions{ScheduledAt: far})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, b.c.cfg.stime(ScheduledAtMax), b.c.cfg.stime(far))
	require.Greater(t, b.c.cfg.stime(far), b.c.cfg.now())
	r, err := b.c.Insert(b.ctx, nil, fairArgs{}, InsertOptions{ScheduledAt: ScheduledAtMax})
	require.NoError(t, err)
	require.Equal(t, b.c.cfg.stime(ScheduledAtMax), b.stime(t, t1, r.ID))
}
