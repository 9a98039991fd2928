package fdbjobs

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestUsageRollUp(t *testing.T) {
	u := Usage{"a": 1000, "b": 1.5, "c": 10}
	require.Equal(t, Usage{"a": 500 + 200, "c": 5, "d": 30}, u.RollUp(map[string]int64{"a": 200, "d": 30}, 0.5, 1))
	require.Equal(t, Usage{"a": 250, "c": 2.5}, u.RollUp(nil, 0.5, 2))
}

// Charges reach the usage once each, whatever the retries (the faults pass
// injects commit_unknown_result), once per period whatever the number of
// nodes rolling up; usage decays per interval and is the kind's own.
func TestRunTimeUsageStore(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	now := time.UnixMilli(10_000_000_000)
	long := strings.Repeat("d", 200) // wider than a job's partition: a CouchDB database name fits
	for range 20 {
		require.NoError(t, b.c.ChargeRunTime(ctx, "k", map[string]int64{"a": 50, "": 1, long: 5}, nil))
	}
	require.NoError(t, b.c.ChargeRunTime(ctx, "other", map[string]int64{"a": 7}, nil))
	require.NoError(t, b.c.ChargeRunTime(ctx, "k", nil, nil), "nothing to charge")

	u, err := b.c.RollUpUsage(ctx, "k", now, time.Minute, 0.5)
	require.NoError(t, err)
	require.Equal(t, KindUsage{Usage: Usage{"a": 1000, "": 20, long: 100}, Interval: time.Minute}, u)
	again, err := b.c.RollUpUsage(ctx, "k", now.Add(time.Second), time.Minute, 0.5) // another node, same period
	require.NoError(t, err)
	require.Equal(t, u, again)
	got, err := b.c.GetUsage(ctx, nil, "k")
	require.NoError(t, err)
	require.Equal(t, u, got)

	require.NoError(t, b.c.ChargeRunTime(ctx, "k", map[string]int64{"a": 100}, nil))
	u, err = b.c.RollUpUsage(ctx, "k", now.Add(2*time.Minute), time.Minute, 0.5)
	require.NoError(t, err)
	require.Equal(t, Usage{"a": 1000*0.25 + 100, "": 5, long: 25}, u.Usage, "two intervals decayed, the new charge added")

	other, err := b.c.RollUpUsage(ctx, "other", now, time.Minute, 0.5)
	require.NoError(t, err)
	require.Equal(t, Usage{"a": 7}, other.Usage)

	u, err = b.c.RollUpUsage(ctx, "k", now.Add(time.Hour), time.Minute, 0.5)
	require.NoError(t, err)
	require.Empty(t, u.Usage, "an idle partition is forgotten")
	require.Equal(t, 1, b.count(t, keyUsage), "only other's usage is left")
	require.Zero(t, b.count(t, keyChargeToken), "tokens cleared")
}

func TestRunTimeUsageBadInput(t *testing.T) {
	b := setup(t)
	for name, err := range map[string]error{
		"empty kind":        b.c.ChargeRunTime(b.ctx, "", map[string]int64{"a": 1}, nil),
		"partition too big": b.c.ChargeRunTime(b.ctx, "k", nil, map[string]int64{strings.Repeat("p", MaxNameSize+1): 1}),
		"no interval": func() error {
			_, err := b.c.RollUpUsage(b.ctx, "k", time.Now(), 0, 0.5)
			return err
		}(),
		"coefficient over 1": func() error {
			_, err := b.c.RollUpUsage(b.ctx, "k", time.Now(), time.Minute, 1.5)
			return err
		}(),
		"usage coefficient":    RunTimeShares{UsageCoeff: -1}.Validate(),
		"priority coefficient": RunTimeShares{PriorityCoeff: 2}.Validate(),
		"negative margin":      RunTimeShares{Margin: -time.Second}.Validate(),
		"fair share mode":      b.c.SetFairShareMode(b.ctx, nil, "k", FairShare(9)),
		"fair share mode < 0":  b.c.SetFairShareMode(b.ctx, nil, "k", FairShare(-1)),
	} {
		require.ErrorIs(t, err, ErrInvalidArgument, name)
	}
	require.NoError(t, RunTimeShares{}.Validate())
	require.Zero(t, b.count(t, keyCharge), "nothing written")
	require.Zero(t, b.count(t, keyUsagePeriod))
	require.Zero(t, b.count(t, keyFair))
}

func TestRunTimeSharesPriority(t *testing.T) {
	s := RunTimeShares{}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		// usage in µs × jobs / weight²
		{"increment, weight 200, 4 jobs", s.Increment(60_000, 4, 200), 60_000_000 * 4 / (200 * 200.0)},
		{"increment, no job counted: 1", s.Increment(60_000, 0, 100), 60_000_000 / (100 * 100.0)},
		{"increment, idle", s.Increment(0, 3, 100), 0},
		{"decay one interval", s.Decay(6000, time.Minute, time.Minute), 6000 * 0.98},
		{"decay half an interval", s.Decay(6000, 30*time.Second, time.Minute), 6000 * math.Sqrt(0.98)},
		{"decay under 1 is 0", s.Decay(1.01, time.Minute, time.Minute), 0},
		{"decay 431 intervals (CouchDB's 7 h)", s.Decay(6000, 431*time.Minute, time.Minute), 0},
		{"decay 430 intervals", math.Round(s.Decay(6000, 430*time.Minute, time.Minute)), 1},
		{"adjust: decayed plus the part of the increment it ran", s.Adjust(6000, 6000, 30*time.Second, time.Minute, time.Minute), 6000*0.98 + 6000.0/2},
	} {
		t.Run(tc.name, func(t *testing.T) { require.InDelta(t, tc.want, tc.got, 1e-6) })
	}
}

func TestRunTimeSharesScheduledTime(t *testing.T) {
	now := time.UnixMilli(10_000_000_000)
	base := now.Add(-2*time.Second - time.Hour) // margin 2 s, window 1 h
	interval := time.Minute
	ahead := func(p, k2 float64) time.Duration { // until p × k2^(t/interval) is 1, in whole ms
		return time.Duration(float64(interval.Milliseconds())*math.Log(p)/math.Log(1/k2)) * time.Millisecond
	}
	for _, tc := range []struct {
		name     string
		coeff    float64
		window   time.Duration
		p        float64
		interval time.Duration
		want     time.Time
	}{
		{"priority 0: the front", 0.98, time.Hour, 0, interval, base},
		{"priority under 1 counts as 0", 0.98, time.Hour, 0.9, interval, base},
		{"priority 1.5", 0.98, time.Hour, 1.5, interval, base.Add(ahead(1.5, 0.98))},
		{"beyond the window", 0.98, time.Hour, 1e30, interval, base.Add(time.Hour)},
		{"no decay: beyond the window", 1, time.Hour, 20, interval, base.Add(time.Hour)},
		{"no interval known yet", 0.98, time.Hour, 20, 0, base},
		{"order off", 0.98, -1, 20, interval, now.Add(-2 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := RunTimeShares{PriorityCoeff: tc.coeff, Window: tc.window, Margin: 2 * time.Second}
			require.Equal(t, tc.want, s.ScheduledTime(now, tc.p, tc.interval))
		})
	}
}

// The order of scheduled times is the order of the priorities the jobs
// will have at any later time, within the window: a job enqueued later
// with a higher priority comes first once the other's decayed below it.
// Seeded random pairs; the seed is in the failure's message.
func TestRunTimeSharesOrderIsDecayedPriorities(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	s := RunTimeShares{Window: 365 * 24 * time.Hour}
	t0 := time.UnixMilli(10_000_000_000)
	checked := 0
	for range 2000 {
		p1, p2 := math.Exp(rng.Float64()*20), math.Exp(rng.Float64()*20)
		later := time.Duration(rng.Int64N(int64(10 * time.Hour)))
		t1, t2 := t0, t0.Add(later)
		at := t2.Add(time.Minute)
		d1, d2 := s.Decay(p1, at.Sub(t1), time.Minute), s.Decay(p2, at.Sub(t2), time.Minute)
		if d1 < 1 || d2 < 1 || math.Abs(d1-d2) < 1e-6*max(d1, d2) {
			continue // both at the front, or tied within rounding
		}
		s1, s2 := s.ScheduledTime(t1, p1, time.Minute), s.ScheduledTime(t2, p2, time.Minute)
		if s1.Sub(s2).Abs() <= time.Millisecond {
			continue // within the times' resolution
		}
		require.Equal(t, d1 < d2, s1.Before(s2), "seed %d: priorities %.3f, %.3f; times %v, %v", seed, d1, d2, s1, s2)
		checked++
	}
	require.Greater(t, checked, 500, "seed %d: pairs compared", seed)
}

// A roll-up folds the charges of any number of partitions in pages, and
// each one clears a page of idle partitions' entries, from where the last
// left off; the kind's mean run time of a run comes from the runs charged.
func TestRunTimeUsagePages(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	now := time.UnixMilli(10_000_000_000)
	const n = 2*usagePage + 50
	ms, runs := map[string]int64{}, map[string]int64{}
	for i := range n {
		p := fmt.Sprintf("p%03d", i)
		ms[p], runs[p] = int64(10*(i%3+1)), 1
	}
	require.NoError(t, b.c.ChargeRunTime(ctx, "k", ms, runs))
	u, err := b.c.RollUpUsage(ctx, "k", now, time.Minute, 0.5)
	require.NoError(t, err)
	require.Len(t, u.Usage, n)
	for p, v := range ms {
		require.Equal(t, float64(v), u.Usage[p], "partition %s charged once", p)
	}
	require.Zero(t, b.count(t, keyCharge), "every page folded")
	require.Zero(t, b.count(t, keyChargeRuns))
	rec, err := kv.ReadTransact(ctx, b.db, func(tr kv.ReadTransaction) (usageRecord, error) {
		v, err := tr.Get(b.c.k.usagePeriodKey("k")).Get()
		return decodeUsageRecord(v), err
	})
	require.NoError(t, err)
	require.InDelta(t, 20, rec.mean(), 0.1, "runs of 10, 20 and 30 ms")

	// The roll-up above looked at the first page: the next ones go on
	// from there, and back to the start.
	later := now.Add(time.Hour)
	for i, left := range []int{n - usagePage, usagePage, 0} {
		_, err := b.c.RollUpUsage(ctx, "k", later.Add(time.Duration(i)*time.Minute), time.Minute, 0.5)
		require.NoError(t, err)
		require.Equal(t, left, b.count(t, keyUsage), "idle entries cleared a page a roll-up")
	}
}

// A node whose clock is behind takes no period and dates no entry back;
// a node rolling up with another interval decays by it and loses nothing.
func TestRunTimeUsageSkewAndIntervals(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	p := time.UnixMilli(10_000_000_000).Truncate(time.Minute)
	rollUp := func(at time.Time, interval time.Duration) Usage {
		t.Helper()
		u, err := b.c.RollUpUsage(ctx, "k", at, interval, 0.5)
		require.NoError(t, err)
		return u.Usage
	}
	require.NoError(t, b.c.ChargeRunTime(ctx, "k", map[string]int64{"a": 1000}, nil))
	require.Equal(t, Usage{"a": 1000}, rollUp(p.Add(time.Minute), time.Minute))
	require.NoError(t, b.c.ChargeRunTime(ctx, "k", map[string]int64{"a": 100}, nil))
	require.Equal(t, Usage{"a": 1000}, rollUp(p.Add(time.Minute-time.Millisecond), time.Minute),
		"a node behind takes no period: the charge waits")
	require.Equal(t, Usage{"a": 500 + 100}, rollUp(p.Add(2*time.Minute), time.Minute), "and is folded once, by the next")

	// Another interval: 10 s, then a minute again. An entry decays from
	// its own time by the interval of the kind's last roll-up.
	require.Equal(t, Usage{"a": 600 * 0.5}, rollUp(p.Add(2*time.Minute+10*time.Second), 10*time.Second))
	require.NoError(t, b.c.ChargeRunTime(ctx, "k", map[string]int64{"a": 100}, nil))
	require.Equal(t, Usage{"a": 600*0.5 + 100}, rollUp(p.Add(3*time.Minute), time.Minute))
	require.Equal(t, Usage{"a": 200}, rollUp(p.Add(4*time.Minute+30*time.Second), time.Minute),
		"a minute and a half later, read as of its period's start: one interval")
}

// A Runtime's charger keeps a page it could not write with its token, and
// writes it once: an earlier write that committed unseen is not doubled.
func TestChargerKeepsPagesUntilWritten(t *testing.T) {
	b := setup(t)
	r := &Runtime{c: b.c}
	k := &kindWorker{kind: "k", runTime: newRunTimeCharges()}
	k.runTime.on.Store(true)
	k.runTime.add("a", 50*time.Millisecond)
	k.runTime.add("", time.Second) // no partition: not charged
	cancelled, cancel := context.WithCancel(b.ctx)
	cancel()
	require.Error(t, r.flushCharges(cancelled, k))
	require.Len(t, k.runTime.pending, 1, "kept")
	page := k.runTime.pending[0]
	require.NoError(t, b.c.charge(b.ctx, "k", page), "as if the failed write had committed unseen")
	k.runTime.add("a", 100*time.Millisecond)
	require.NoError(t, r.flushCharges(b.ctx, k))
	require.Empty(t, k.runTime.pending)
	u, err := b.c.RollUpUsage(b.ctx, "k", time.UnixMilli(10_000_000_000), time.Minute, 0.5)
	require.NoError(t, err)
	require.Equal(t, Usage{"a": 150}, u.Usage, "each attempt charged once")

	k.runTime.add("a", time.Second)
	k.runTime.on.Store(false)
	k.runTime.add("a", time.Second) // off: not charged
	k.runTime.drop()
	require.NoError(t, r.flushCharges(b.ctx, k))
	require.Zero(t, b.count(t, keyCharge))
}
