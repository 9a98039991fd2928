package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator"
)

// simJob is a continuous job of the fair-share model.
type simJob struct {
	key         string
	priority    float64   // running: as of prioritized; pending: as of enqueued
	prioritized time.Time // running jobs
	started     time.Time // zero when pending
	charged     time.Time
	stime, seq  int64 // pending: scheduled time, enqueue order
	enqueued    time.Time
}

// shareModel runs a node's interval step, as Node.reschedule does it, on
// a fake clock without goroutines or a store: charge, roll up usage,
// adjust running priorities, stop the excess least deserving first,
// re-enqueue them at their fair-share time, start up to MaxChurn pending
// jobs oldest scheduled time first. It returns run time per share key over
// the measured intervals.
func shareModel(t *testing.T, cfg Config, shares, jobs []int, warmup, measured int) map[string]time.Duration {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.UnixMilli(1_700_000_000_000))
	cfg.Shares = map[string]int{}
	var pending, running []*simJob
	var seq int64
	table := replicator.ShareTable{Usage: replicator.Usage{}, Jobs: map[string]int64{}, Interval: cfg.Interval}
	for i, s := range shares {
		key := fmt.Sprintf("db%d/_replicator", i)
		cfg.Shares[key] = s
		table.Jobs[key] = int64(jobs[i])
		for j := 0; j < jobs[i]; j++ {
			// Added as the control plane adds them, interleaved.
			seq++
			now := clock.Now()
			p := cfg.Increment(key, table)
			pending = append(pending, &simJob{key: key, priority: p, enqueued: now,
				stime: cfg.EnqueueTime(now, p, cfg.Interval), seq: int64(j*len(shares) + i)})
		}
	}
	runTime := map[string]time.Duration{}
	for step := 0; step < warmup+measured; step++ {
		now := clock.Now()
		charges := map[string]int64{}
		for _, j := range running {
			from := maxTime(j.started, j.charged)
			d := now.Sub(from)
			charges[j.key] += d.Milliseconds()
			if step >= warmup {
				runTime[j.key] += d
			}
			j.charged = now
		}
		table.Usage = table.Usage.RollUp(charges, cfg.UsageCoeff, 1)
		for _, j := range running {
			j.priority = cfg.Adjust(j.priority, j.key, table, now.Sub(maxTime(j.started, j.prioritized)), now.Sub(j.prioritized), cfg.Interval)
			j.prioritized = now
		}
		slices.SortFunc(running, func(a, b *simJob) int { return stopOrder(a.priority, a.started, b.priority, b.started) })
		for len(running) > cfg.MaxJobs && now.Sub(running[0].started) >= cfg.MinRunTime {
			j := running[0]
			running = running[1:]
			seq++
			j.started, j.enqueued, j.seq = time.Time{}, now, seq
			j.stime = cfg.EnqueueTime(now, j.priority, cfg.Interval)
			pending = append(pending, j)
		}
		slices.SortFunc(pending, func(a, b *simJob) int { return cmp.Or(cmp.Compare(a.stime, b.stime), cmp.Compare(a.seq, b.seq)) })
		for i := 0; i < cfg.MaxChurn && len(pending) > 0; i++ {
			j := pending[0]
			pending = pending[1:]
			j.priority = cfg.Decay(j.priority, now.Sub(j.enqueued), cfg.Interval)
			j.started, j.charged, j.prioritized = now, now, now
			running = append(running, j)
		}
		clock.Advance(cfg.Interval)
	}
	return runTime
}

// Shares 100:200:400 with more continuous jobs than a node runs: over
// enough intervals each database's run time is within 10% of its part of
// 1:2:4, whatever the number of jobs per database or the coefficients
// (200 intervals of warm-up, 2,000 measured).
func TestFairShareModel(t *testing.T) {
	for _, tc := range []struct {
		name        string
		jobs        []int
		maxJobs     int
		churn       int
		usage, prio float64
	}{
		{"defaults", []int{20, 20, 20}, 12, 4, 0, 0},
		{"many jobs", []int{100, 100, 100}, 40, 10, 0, 0},
		// pending(Db) in the priority: more jobs do not mean more run time.
		{"unequal jobs", []int{60, 30, 12}, 12, 4, 0, 0},
		{"slow usage decay", []int{20, 20, 20}, 12, 4, 0.9, 0},
		{"fast priority decay", []int{20, 20, 20}, 12, 4, 0, 0.8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{MaxJobs: tc.maxJobs, MaxChurn: tc.churn, Interval: time.Minute, MinRunTime: time.Minute}
			cfg.UsageCoeff, cfg.PriorityCoeff = tc.usage, tc.prio
			cfg = cfg.withDefaults()
			shares := []int{100, 200, 400}
			rt := shareModel(t, cfg, shares, tc.jobs, 200, 2000)
			var total time.Duration
			for _, d := range rt {
				total += d
			}
			for i, s := range shares {
				key := fmt.Sprintf("db%d/_replicator", i)
				got, want := float64(rt[key])/float64(total), float64(s)/700
				t.Logf("%s: shares %d, run time %.3f of the total (ideal %.3f, ratio %.3f)", key, s, got, want, got/want)
				require.InDelta(t, 1, got/want, 0.10, "%s: run time fraction %.3f, ideal %.3f", key, got, want)
			}
		})
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Running jobs are stopped the least deserving first: the highest
// priority, then the one that started first.
func TestStopOrder(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	type job struct {
		name     string
		priority float64
		started  time.Time
	}
	for _, tc := range []struct {
		name string
		jobs []job
		want []string
	}{
		{"by priority", []job{{"low", 10, t0}, {"high", 1000, t0.Add(time.Minute)}, {"mid", 100, t0}}, []string{"high", "mid", "low"}},
		{"equal priorities: the oldest first", []job{{"new", 5, t0.Add(time.Minute)}, {"old", 5, t0}}, []string{"old", "new"}},
		{"priority before age", []job{{"old idle", 0, t0}, {"new busy", 1, t0.Add(time.Hour)}}, []string{"new busy", "old idle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := slices.Clone(tc.jobs)
			slices.SortFunc(js, func(a, b job) int { return stopOrder(a.priority, a.started, b.priority, b.started) })
			var got []string
			for _, j := range js {
				got = append(got, j.name)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
