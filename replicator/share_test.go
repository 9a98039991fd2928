package replicator

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestEnqueueTime(t *testing.T) {
	now := time.UnixMilli(10_000_000_000)
	base := Millis(now) - 2000 - time.Hour.Milliseconds() // margin 2 s, window 1 h
	interval := time.Minute
	ahead := func(p, k2 float64) int64 { // ms until p × k2^(t/interval) is 1
		return int64(float64(interval.Milliseconds()) * math.Log(p) / math.Log(1/k2))
	}
	for _, tc := range []struct {
		name     string
		coeff    float64
		window   time.Duration
		p        float64
		interval time.Duration
		want     int64
	}{
		{"priority 0: the front", 0.98, time.Hour, 0, interval, base},
		{"priority under 1 counts as 0", 0.98, time.Hour, 0.9, interval, base},
		{"priority 6000", 0.98, time.Hour, 6000, interval, base + min(time.Hour.Milliseconds(), ahead(6000, 0.98))},
		{"priority 1.5", 0.98, time.Hour, 1.5, interval, base + ahead(1.5, 0.98)},
		{"beyond the window", 0.98, time.Hour, 1e30, interval, base + time.Hour.Milliseconds()},
		{"no decay: beyond the window", 1, time.Hour, 20, interval, base + time.Hour.Milliseconds()},
		{"no interval known yet", 0.98, time.Hour, 20, 0, base},
		{"fair share off", 0.98, -1, 20, interval, Millis(now) - 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{FairShareWindow: tc.window, StartupJitter: time.Second, PriorityCoeff: tc.coeff}.WithDefaults()
			require.Equal(t, tc.want, cfg.EnqueueTime(now, tc.p, tc.interval))
		})
	}
}

// The order of enqueue times is the order of the priorities the jobs will
// have at any later time: a job enqueued later with a higher priority
// comes first once the other's priority decayed below it.
func TestEnqueueTimeOrdersByDecayedPriority(t *testing.T) {
	cfg := Config{StartupJitter: time.Second}.WithDefaults()
	t0 := time.UnixMilli(10_000_000_000)
	for _, tc := range []struct {
		name   string
		p1, p2 float64
		later  time.Duration // the second is enqueued this much later
	}{
		{"same time", 1000, 2000, 0},
		{"later, lower", 1000, 500, time.Hour},
		{"later, decayed past", 1000, 900, 10 * time.Minute},
		{"later, higher", 1000, 1e6, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t1, t2 := t0, t0.Add(tc.later)
			at := t2.Add(time.Minute)
			d1 := cfg.Decay(tc.p1, at.Sub(t1), time.Minute)
			d2 := cfg.Decay(tc.p2, at.Sub(t2), time.Minute)
			s1, s2 := cfg.EnqueueTime(t1, tc.p1, time.Minute), cfg.EnqueueTime(t2, tc.p2, time.Minute)
			require.Equal(t, d1 < d2, s1 < s2, "priorities %.1f, %.1f; times %d, %d", d1, d2, s1, s2)
		})
	}
}

func TestPriority(t *testing.T) {
	cfg := Config{Shares: map[string]int{"a/_replicator": 200}}.WithDefaults()
	table := ShareTable{Usage: Usage{"a/_replicator": 60_000, "b/_replicator": 60_000}, Jobs: map[string]int64{"a/_replicator": 4}}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		// usage in µs × jobs / shares²
		{"increment, 200 shares, 4 jobs", cfg.Increment("a/_replicator", table), 60_000_000 * 4 / (200 * 200.0)},
		{"increment, jobs not counted yet: 1", cfg.Increment("b/_replicator", table), 60_000_000 / (100 * 100.0)},
		{"increment, idle", cfg.Increment("c/_replicator", table), 0},
		{"decay one interval", cfg.Decay(6000, time.Minute, time.Minute), 6000 * 0.98},
		{"decay half an interval", cfg.Decay(6000, 30*time.Second, time.Minute), 6000 * math.Sqrt(0.98)},
		{"decay under 1 is 0", cfg.Decay(1.01, time.Minute, time.Minute), 0},
		{"decay 431 intervals (CouchDB's 7 h)", cfg.Decay(6000, 431*time.Minute, time.Minute), 0},
		{"decay 430 intervals", math.Round(cfg.Decay(6000, 430*time.Minute, time.Minute)), 1},
		{"adjust: decayed plus the part of the increment it ran", cfg.Adjust(6000, "b/_replicator", table, 30*time.Second, time.Minute, time.Minute),
			6000*0.98 + 6000.0/2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, tc.got, 1e-6)
		})
	}
}

func TestUsageRollUp(t *testing.T) {
	u := Usage{"a": 1000, "b": 1.5, "c": 10}
	require.Equal(t, Usage{"a": 500 + 200, "c": 5, "d": 30}, u.RollUp(map[string]int64{"a": 200, "d": 30}, 0.5, 1))
	require.Equal(t, Usage{"a": 250, "c": 2.5}, u.RollUp(nil, 0.5, 2))
}

// The share table round trip through the store: charges rolled up once
// per period whatever the number of nodes asking, the interval recorded,
// and jobs(Db) from the view index's counters for the keys with usage.
func TestShareTableStore(t *testing.T) {
	ctx := context.Background()
	db := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	_, err = s.Setup(ctx, time.Hour, 0)
	require.NoError(t, err)
	now := time.UnixMilli(10_000_000_000)
	a, b := "a/_replicator", "b/_replicator"
	require.NoError(t, s.shares.Charge(ctx, map[string]int64{a: 1000, "": 10}))
	table, err := s.shares.RollUp(ctx, now, time.Minute, 0.5)
	require.NoError(t, err)
	require.Equal(t, Usage{a: 1000, "": 10}, table.Usage)
	require.Equal(t, time.Minute, table.Interval)
	again, err := s.shares.RollUp(ctx, now, time.Minute, 0.5) // another node, same period
	require.NoError(t, err)
	require.Equal(t, table.Usage, again.Usage)
	table, err = s.shares.RollUp(ctx, now.Add(time.Minute), time.Minute, 0.5)
	require.NoError(t, err)
	require.Equal(t, Usage{a: 500, "": 5}, table.Usage)

	add := func(dbName, docID, state string) {
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			d := &JobData{DBName: dbName, DocID: docID, State: state, LastUpdated: Millis(now)}
			id := "transient-" + docID
			if dbName != "" {
				u, err := s.DBUUID(tr, dbName)
				if err != nil {
					return nil, err
				}
				d.DBUUID, id = u, DocJobID(u, docID)
			}
			return nil, s.AddJob(ctx, tr, id, nil, d, 0, time.Hour)
		})
		require.NoError(t, err)
	}
	for _, j := range []struct{ db, doc, state string }{
		{a, "1", StatePending}, {a, "2", StatePending}, {a, "3", StatePending}, {a, "bad", StateFailed},
		{b, "1", StatePending}, {"", "t1", StatePending},
	} {
		add(j.db, j.doc, j.state)
	}
	table, err = kv.ReadTransact(ctx, db, s.shares.Table)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{a: 3, "": 1}, table.Jobs, "b has no usage; a's failed document does not count")
	require.Equal(t, time.Minute, table.Interval)
}
