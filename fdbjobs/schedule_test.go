package fdbjobs

import (
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// tickArgs are the arguments of the schedules' jobs in these tests (kind
// t1, which setup registers).
type tickArgs struct {
	N int `json:"n"`
}

func (tickArgs) Kind() string { return t1 }

// scheduled is a job a schedule inserted.
type scheduled struct {
	id       string
	schedule string
	period   int64
	state    string
}

// scheduledJobs reads every job of t1 that a schedule inserted.
func (b *bundle) scheduledJobs(t *testing.T) []scheduled {
	t.Helper()
	var out []scheduled
	for _, e := range b.scan(t, b.c.k.data.Sub(t1)) {
		r, err := decodeRow(e.Value)
		require.NoError(t, err)
		en, err := decodeEnvelope(r.data)
		require.NoError(t, err)
		tup, err := b.c.k.data.Unpack(e.Key)
		require.NoError(t, err)
		if en.Schedule != "" {
			out = append(out, scheduled{tup[1].(string), en.Schedule, en.Period, countState(r.state, r.data)})
		}
	}
	return out
}

// fire fires the due schedules of t1 at now.
func (b *bundle) fire(t *testing.T, c *Client, now time.Time) int {
	t.Helper()
	n, _, err := c.fireDue(b.ctx, t1, now)
	require.NoError(t, err)
	return n
}

func TestScheduleBadInput(t *testing.T) {
	b := setup(t)
	ok := Schedule{Name: "s", Args: tickArgs{}, Every: time.Minute}
	for _, tc := range []struct {
		name string
		edit func(*Schedule)
		msg  string
	}{
		{"no name", func(s *Schedule) { s.Name = "" }, "empty schedule name"},
		{"long name", func(s *Schedule) { s.Name = string(make([]byte, MaxNameSize+1)) }, "schedule name of 1001 bytes"},
		{"no args", func(s *Schedule) { s.Args = nil }, "nil Args"},
		{"neither Every nor Cron", func(s *Schedule) { s.Every = 0 }, "neither Every nor Cron"},
		{"both", func(s *Schedule) { s.Cron = "* * * * *" }, "both Every and Cron"},
		{"Every not in whole TimeUnits", func(s *Schedule) { s.Every = 1500 * time.Millisecond }, "in whole 1s (the Client's TimeUnit)"},
		{"cron that never matches", func(s *Schedule) { s.Every, s.Cron = 0, "0 0 30 2 *" }, "matches no time in the next five years"},
		{"Every too short", func(s *Schedule) { s.Every = time.Millisecond * 999 }, "at least 1s"},
		{"negative Every", func(s *Schedule) { s.Every = -time.Minute }, "at least 1s"},
		{"zone with Every", func(s *Schedule) { s.TimeZone = "UTC" }, "TimeZone is Cron's"},
		{"cron that does not parse", func(s *Schedule) { s.Every, s.Cron = 0, "61 * * * *" }, `Cron "61 * * * *"`},
		{"cron of six fields", func(s *Schedule) { s.Every, s.Cron = 0, "0 0 * * * *" }, "Cron"},
		{"@every", func(s *Schedule) { s.Every, s.Cron = 0, "@every 1m" }, "a fixed period is Schedule.Every"},
		{"zone in the expression", func(s *Schedule) { s.Every, s.Cron = 0, "CRON_TZ=UTC * * * * *" }, "TimeZone"},
		{"unknown zone", func(s *Schedule) { s.Every, s.Cron, s.TimeZone = 0, "@daily", "Mars/Olympus" }, `TimeZone "Mars/Olympus"`},
		{"Local", func(s *Schedule) { s.Every, s.Cron, s.TimeZone = 0, "@daily", "Local" }, `TimeZone "Local"`},
		{"bad overlap", func(s *Schedule) { s.Overlap = "sometimes" }, `Overlap "sometimes"`},
		{"bad catch-up", func(s *Schedule) { s.CatchUp = "some" }, `CatchUp "some"`},
		{"negative window", func(s *Schedule) { s.CatchUpWindow = -time.Hour }, "negative CatchUpWindow"},
		{"negative attempts", func(s *Schedule) { s.MaxAttempts = -1 }, "MaxAttempts -1"},
		{"priority out of range", func(s *Schedule) { s.Priority = 5 }, "priority 5 outside [1, 4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			_, err := b.c.PutSchedule(b.ctx, nil, s)
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	list, err := b.c.ListSchedules(b.ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, list, "nothing stored")
	require.Empty(t, b.scan(t, b.c.k.root.Sub(keyScheduleDue)))
	_, err = b.c.ListSchedules(b.ctx, "", 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	for _, f := range []func() error{
		func() error { _, err := b.c.GetSchedule(b.ctx, nil, "none"); return err },
		func() error { return b.c.DeleteSchedule(b.ctx, nil, "none") },
		func() error { return b.c.PauseSchedule(b.ctx, nil, "none") },
		func() error { return b.c.ResumeSchedule(b.ctx, nil, "none") },
	} {
		require.ErrorIs(t, f(), ErrNotFound)
	}
	for _, name := range []string{"", string(make([]byte, MaxNameSize+1))} {
		_, err := b.c.GetSchedule(b.ctx, nil, name)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorIs(t, b.c.DeleteSchedule(b.ctx, nil, name), ErrInvalidArgument)
		require.ErrorIs(t, b.c.PauseSchedule(b.ctx, nil, name), ErrInvalidArgument)
		require.ErrorIs(t, b.c.ResumeSchedule(b.ctx, nil, name), ErrInvalidArgument)
	}
}

// TestScheduleLifecycle: a schedule is stored, listed, fires once per
// period at its time, pauses (no job, its index entry gone) and resumes
// from its next period, changes, and is deleted.
func TestScheduleLifecycle(t *testing.T) {
	b := setup(t)
	t0 := b.clock.Now() // 1,000,000 s: a whole minute plus 40 s
	info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "m", Args: tickArgs{N: 1}, Every: time.Minute})
	require.NoError(t, err)
	first := t0.Truncate(time.Minute).Add(time.Minute)
	require.Equal(t, first, info.Next)
	require.Equal(t, OverlapAllow, info.Overlap)
	require.Equal(t, CatchUpOne, info.CatchUp)
	require.Equal(t, ScheduleCatchUpWindowDefault, info.CatchUpWindow)
	require.Equal(t, t1, info.Kind)
	require.JSONEq(t, `{"n":1}`, string(info.Args))

	// (Counted in the store: under injected faults a commit can succeed
	// unseen, and fire counts the jobs it saw inserted.)
	b.fire(t, b.c, first.Add(-time.Millisecond))
	require.Empty(t, b.scheduledJobs(t), "not yet")
	b.fire(t, b.c, first)
	b.fire(t, b.c, first.Add(30*time.Second))
	jobs := b.scheduledJobs(t)
	require.Len(t, jobs, 1)
	require.Equal(t, scheduled{jobs[0].id, "m", first.UnixMilli(), StatePending}, jobs[0])
	got, err := b.c.GetSchedule(b.ctx, nil, "m")
	require.NoError(t, err)
	require.Equal(t, first, got.Last)
	require.Equal(t, jobs[0].id, got.LastJob)
	require.Equal(t, first.Add(time.Minute), got.Next)

	// Paused: no jobs; resumed: from its first period after then.
	require.NoError(t, b.c.PauseSchedule(b.ctx, nil, "m"))
	require.Empty(t, b.scan(t, b.c.k.root.Sub(keyScheduleDue)))
	got, err = b.c.GetSchedule(b.ctx, nil, "m")
	require.NoError(t, err)
	require.True(t, got.Paused)
	require.Zero(t, got.Next, "no next period while paused")
	b.fire(t, b.c, first.Add(10*time.Minute))
	require.Len(t, b.scheduledJobs(t), 1)
	b.clock.Advance(10 * time.Minute)
	require.NoError(t, b.c.ResumeSchedule(b.ctx, nil, "m"))
	got, err = b.c.GetSchedule(b.ctx, nil, "m")
	require.NoError(t, err)
	require.False(t, got.Paused)
	require.Equal(t, b.clock.Now().Truncate(time.Minute).Add(time.Minute), got.Next, "the periods while paused are not missed")

	// Changed: a cron expression in a zone of its own.
	_, err = b.c.PutSchedule(b.ctx, nil, Schedule{Name: "m", Args: tickArgs{N: 2}, Cron: "0 9 * * *", TimeZone: "Asia/Tokyo"})
	require.NoError(t, err)
	got, err = b.c.GetSchedule(b.ctx, nil, "m")
	require.NoError(t, err)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	require.Equal(t, 9, got.Next.In(tokyo).Hour())
	require.Equal(t, info.Created, got.Created)
	require.Equal(t, first, got.Last, "its history stays")
	list, err := b.c.ListSchedules(b.ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Len(t, b.scan(t, b.c.k.root.Sub(keyScheduleDue)), 1, "one index entry")

	require.NoError(t, b.c.DeleteSchedule(b.ctx, nil, "m"))
	require.Empty(t, b.scan(t, b.c.k.root.Sub(keyScheduleDue)))
	b.fire(t, b.c, got.Next.Add(time.Hour))
	require.Len(t, b.scheduledJobs(t), 1, "its jobs stay, and no more")
}

// TestScheduleNextAfterStaleEntry: a pass that finds its due entry stale
// (an earlier commit moved the schedule on unseen, as a
// commit_unknown_result does) still reports the schedule's next period,
// so that a Runtime's loop wakes for it rather than sleeping its whole
// SchedulePoll (found by the faults pass: TestRuntimeRunsSchedules, with
// SchedulePoll an hour, waited out its minute).
func TestScheduleNextAfterStaleEntry(t *testing.T) {
	b := setup(t)
	info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "m", Args: tickArgs{N: 1}, Every: time.Minute})
	require.NoError(t, err)
	first := info.Next
	b.fire(t, b.c, first)
	require.Len(t, b.scheduledJobs(t), 1)
	// The index as a pass read it before the unseen commit: the entry that
	// commit cleared, not yet the one it wrote.
	_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
		tr.Set(b.c.k.dueKey(t1, first.UnixMilli(), "m"), nil)
		tr.Clear(b.c.k.dueKey(t1, first.Add(time.Minute).UnixMilli(), "m"))
		return struct{}{}, nil
	})
	require.NoError(t, err)
	n, next, err := b.c.fireDue(b.ctx, t1, first)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, first.Add(time.Minute).UnixMilli(), next, "the schedule's next period, from its record")
	require.Len(t, b.scheduledJobs(t), 1, "the period once")
	require.Empty(t, b.scan(t, b.c.k.root.Sub(keyScheduleDue)), "the stale entry gone")
}

// TestScheduleCatchUpAndOverlap: after 10 periods without a node, each
// catch-up policy inserts what it says; each overlap policy, what it says
// while the last job is unfinished.
func TestScheduleCatchUpAndOverlap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       Schedule
		periods []int // the periods (minutes after the first) with a job, after 10 minutes and 30 s without a node
	}{
		{"one", Schedule{CatchUp: CatchUpOne}, []int{10}},
		{"none", Schedule{CatchUp: CatchUpNone}, []int{10}},
		{"all", Schedule{CatchUp: CatchUpAll}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"all within a window", Schedule{CatchUp: CatchUpAll, CatchUpWindow: 3 * time.Minute}, []int{8, 9, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			s := tc.s
			s.Name, s.Args, s.Every = "m", tickArgs{}, time.Minute
			info, err := b.c.PutSchedule(b.ctx, nil, s)
			require.NoError(t, err)
			b.fire(t, b.c, info.Next.Add(10*time.Minute+30*time.Second))
			var got []int
			for _, j := range b.scheduledJobs(t) {
				got = append(got, int(time.UnixMilli(j.period).Sub(info.Next)/time.Minute))
			}
			slices.Sort(got)
			require.Equal(t, tc.periods, got)
		})
	}
	t.Run("none skips a period more than a minute late", func(t *testing.T) {
		b := setup(t)
		info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "h", Args: tickArgs{}, Every: time.Hour, CatchUp: CatchUpNone})
		require.NoError(t, err)
		b.fire(t, b.c, info.Next.Add(2*time.Minute))
		require.Empty(t, b.scheduledJobs(t))
		b.fire(t, b.c, info.Next.Add(time.Hour+time.Second))
		require.Len(t, b.scheduledJobs(t), 1)
	})

	t.Run("a queue does not fall behind", func(t *testing.T) {
		// Every minute, a job that runs 2.5 minutes: with CatchUpOne, each
		// job is for the latest period when the one before ends, not for
		// ever older ones.
		b := setup(t)
		info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "q", Args: tickArgs{}, Every: time.Minute, Overlap: OverlapQueue})
		require.NoError(t, err)
		b.clock.Advance(info.Next.Sub(b.clock.Now()))
		for range 6 {
			b.fire(t, b.c, b.clock.Now())
			jobs := b.scheduledJobs(t)
			var newest int64
			for _, j := range jobs {
				newest = max(newest, j.period)
			}
			require.LessOrEqual(t, b.clock.Now().UnixMilli()-newest, (time.Minute).Milliseconds(), "the newest job is for the latest period")
			job := b.accept(t, t1)
			for range 5 {
				b.clock.Advance(30 * time.Second)
				b.fire(t, b.c, b.clock.Now())
			}
			require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
		}
	})

	for _, tc := range []struct {
		overlap Overlap
		// jobs after the first period, then after the second while the
		// first job runs, then after the first job finished
		jobs [3]int
	}{
		{OverlapAllow, [3]int{1, 2, 2}},
		{OverlapSkip, [3]int{1, 1, 1}},
		{OverlapQueue, [3]int{1, 1, 2}},
	} {
		t.Run("overlap "+string(tc.overlap), func(t *testing.T) {
			b := setup(t)
			info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "m", Args: tickArgs{}, Every: time.Minute, Overlap: tc.overlap})
			require.NoError(t, err)
			b.clock.Advance(info.Next.Sub(b.clock.Now()))
			b.fire(t, b.c, b.clock.Now())
			require.Len(t, b.scheduledJobs(t), tc.jobs[0])
			job := b.accept(t, t1)
			b.clock.Advance(time.Minute)
			b.fire(t, b.c, b.clock.Now())
			require.Len(t, b.scheduledJobs(t), tc.jobs[1])
			require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
			b.fire(t, b.c, b.clock.Now().Add(time.Second))
			jobs := b.scheduledJobs(t)
			require.Len(t, jobs, tc.jobs[2])
			if tc.overlap == OverlapQueue {
				periods := []int64{jobs[0].period, jobs[1].period}
				slices.Sort(periods)
				require.Equal(t, []int64{info.Next.UnixMilli(), b.clock.Now().UnixMilli()}, periods, "the queued period")
			}
		})
	}
}

// TestScheduleCronInZone: a daily cron in a zone follows its daylight
// saving time changes.
func TestScheduleCronInZone(t *testing.T) {
	b := setup(t)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	// 2026-03-28 in Paris, the day before the clocks go forward.
	b.clock = clockwork.NewFakeClockAt(time.Date(2026, 3, 28, 12, 0, 0, 0, paris))
	b.c.cfg.Clock = b.clock
	info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "d", Args: tickArgs{}, Cron: "30 2 * * *", TimeZone: "Europe/Paris"})
	require.NoError(t, err)
	// 02:30 does not exist on the 29th in Paris: the next is on the 30th.
	require.Equal(t, time.Date(2026, 3, 30, 2, 30, 0, 0, paris), info.Next.In(paris))
	p, err := parsePeriod("0 9 * * *", "Europe/Paris")
	require.NoError(t, err)
	at := time.Date(2026, 3, 28, 9, 0, 0, 0, paris).UnixMilli()
	for range 3 {
		nx := p.next(at)
		require.Equal(t, 9, time.UnixMilli(nx).In(paris).Hour())
		at = nx
	}
}

// TestScheduleModel runs nodes with skewed clocks, that die and come back,
// firing schedules of every policy that are created, changed, paused,
// resumed and deleted at random, over a simulated day, with jobs
// accepted and finished at random; it checks that no period gets two
// jobs, that no job is for a time that is not one of its schedule's
// periods or that no node's clock had reached, that a node that fired
// leaves no period due at its clock (but one an Overlap queue holds),
// that a CatchUpAll schedule left alone has a job for every period, and
// that an Overlap skip or queue schedule never has two unfinished jobs.
// Replay with FDBJOBS_SEED.
func TestScheduleModel(t *testing.T) {
	t.Parallel()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	b := setup(t)
	// Over Europe's change to summer time (01:00 UTC on the 29th): a day,
	// or 8 hours where each transaction waits as over a network.
	start, span := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), 24*time.Hour
	if os.Getenv(kv.EnvLatency) != "" || os.Getenv("FDBREP_KV_BACKEND") != "" {
		start, span = time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC), 8*time.Hour
	}
	b.clock.Advance(start.Sub(b.clock.Now()))
	type node struct {
		c     *Client
		skew  time.Duration
		alive bool
	}
	nodes := []*node{{c: b.c}}
	for range 2 {
		c, err := New(b.db, Config{Clock: b.clock})
		require.NoError(t, err)
		nodes = append(nodes, &node{c: c})
	}
	for _, n := range nodes {
		n.skew, n.alive = time.Duration(rng.Int64N(int64(2*time.Second)))-time.Second, true
	}
	specs := []Schedule{
		{Every: time.Minute}, {Every: 7 * time.Minute}, {Every: time.Hour}, {Cron: "*/5 * * * *"},
		{Cron: "30 2 * * *", TimeZone: "Europe/Paris"}, {Cron: "0 * * * *", TimeZone: "America/New_York"},
	}
	overlaps := []Overlap{OverlapAllow, OverlapSkip, OverlapQueue}
	catchUps := []CatchUp{CatchUpOne, CatchUpNone, CatchUpAll}
	// touched: schedules changed, paused or deleted since created (the
	// contiguity check is for the others).
	live, touched := map[string]Schedule{}, map[string]bool{}
	names := 0
	// A schedule of each period that catches up on everything and is
	// never changed, for the liveness check at the end.
	// And of three periods for each other catch-up, for the check of what
	// a node's pass inserted: the latest period at its clock (CatchUpOne),
	// or that unless it is missed (CatchUpNone).
	fixed, firsts := map[string]Schedule{}, map[string]int64{}
	fix := func(name string, s Schedule) {
		s.Name, s.Args, s.Overlap = name, tickArgs{N: -1}, OverlapAllow
		info, err := b.c.PutSchedule(b.ctx, nil, s)
		require.NoError(t, err)
		fixed[s.Name], firsts[s.Name] = s, info.Next.UnixMilli()
	}
	for i, spec := range specs {
		spec.CatchUp = CatchUpAll
		fix("fixed-all-"+strconv.Itoa(i), spec)
		if i < 3 {
			spec.CatchUp = CatchUpOne
			fix("fixed-one-"+strconv.Itoa(i), spec)
			spec.CatchUp = CatchUpNone
			fix("fixed-none-"+strconv.Itoa(i), spec)
		}
	}
	var running []*Job
	steps, latestFire := 0, int64(0)
	end := start.Add(span)
	for now := start; now.Before(end); {
		step := time.Duration(rng.Int64N(int64(3*time.Minute))) + time.Second
		if rng.IntN(100) == 0 {
			step = time.Duration(rng.Int64N(int64(3 * time.Hour))) // every node down
		}
		now = now.Add(step)
		b.clock.Advance(step)
		switch r := rng.IntN(100); {
		case r < 4 || len(live) == 0:
			s := specs[rng.IntN(len(specs))]
			s.Name, s.Args = "s"+string(rune('a'+names%26))+time.Duration(names).String(), tickArgs{N: names}
			s.Overlap, s.CatchUp = overlaps[rng.IntN(3)], catchUps[rng.IntN(3)]
			names++
			_, err := b.c.PutSchedule(b.ctx, nil, s)
			require.NoError(t, err)
			live[s.Name] = s
		case r < 6:
			name := randomKey(rng, live)
			touched[name] = true
			require.NoError(t, b.c.PauseSchedule(b.ctx, nil, name))
		case r < 8:
			name := randomKey(rng, live)
			require.NoError(t, b.c.ResumeSchedule(b.ctx, nil, name))
		case r < 9:
			name := randomKey(rng, live)
			touched[name] = true
			s := live[name]
			s.Every, s.Cron, s.TimeZone = 0, "*/10 * * * *", ""
			_, err := b.c.PutSchedule(b.ctx, nil, s)
			require.NoError(t, err)
			live[name] = s
		case r < 10 && len(live) > 1:
			name := randomKey(rng, live)
			touched[name] = true
			require.NoError(t, b.c.DeleteSchedule(b.ctx, nil, name))
			delete(live, name)
		}
		for _, n := range nodes {
			if rng.IntN(20) == 0 {
				n.alive = !n.alive
			}
		}
		// Jobs start and end at random.
		jobs, err := b.c.AcceptBatch(b.ctx, t1, 20, AcceptOptions{})
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		require.NoError(t, err)
		running = append(running, jobs...)
		rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
		k := rng.IntN(len(running) + 1)
		for _, j := range running[:k] {
			require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
		}
		running = running[k:]

		for _, i := range rng.Perm(len(nodes)) {
			n := nodes[i]
			if !n.alive {
				continue
			}
			at := now.Add(n.skew)
			b.fire(t, n.c, at)
			latestFire = max(latestFire, at.UnixMilli())
			infos, err := b.c.ListSchedules(b.ctx, "", MaxBatch)
			require.NoError(t, err)
			require.Len(t, infos, len(live)+len(fixed))
			for _, info := range infos {
				name := info.Name
				if info.Paused {
					continue
				}
				due := info.Next.UnixMilli() <= at.UnixMilli()
				queued := info.Overlap == OverlapQueue && due
				require.True(t, !due || queued, "seed %d: schedule %s due at %v after a node fired at %v", seed, name, info.Next, at)
				if f, ok := fixed[name]; ok && f.CatchUp != CatchUpAll && firsts[name] <= at.UnixMilli() {
					r := &scheduleRecord{EveryMs: f.Every.Milliseconds(), Cron: f.Cron, TimeZone: f.TimeZone}
					p, err := r.period()
					require.NoError(t, err)
					latest := latestDue(p, firsts[name], at.UnixMilli())
					// (Missed by the clock of the node that fired it last,
					// which may be ahead of this one's.)
					missed := latestFire-latest > ScheduleMisfire.Milliseconds()
					require.True(t, info.Last.UnixMilli() >= latest || (f.CatchUp == CatchUpNone && missed),
						"seed %d: %s (%s) has its last job for %v after a node fired at %v", seed, name, f.CatchUp, info.Last.UTC(), at.UTC())
				}
			}
		}
		// Safety, every few steps (jobs stay: a period's second job
		// would stay too; an overlap lasts at least till the next step
		// finishes a job at random).
		if steps++; steps%4 != 0 && now.Before(end) {
			continue
		}
		seen := map[string]int64{}
		unfinished := map[string]int{}
		latest := now.Add(time.Second).UnixMilli()
		for _, j := range b.scheduledJobs(t) {
			key := j.schedule + "@" + time.UnixMilli(j.period).UTC().String()
			_, dup := seen[key]
			require.False(t, dup, "seed %d: period %s has two jobs", seed, key)
			seen[key] = j.period
			require.LessOrEqual(t, j.period, latest, "seed %d: %s inserted before any clock reached it", seed, key)
			if j.state == StatePending || j.state == StateRunning {
				unfinished[j.schedule]++
			}
		}
		for name, s := range live {
			if s.Overlap != OverlapAllow && !touched[name] {
				require.LessOrEqual(t, unfinished[name], 1, "seed %d: %s (%s) has two unfinished jobs", seed, name, s.Overlap)
			}
		}
	}
	// Liveness of CatchUpAll schedules left alone: a job for every period
	// from the first to the last.
	jobs := b.scheduledJobs(t)
	checked := 0
	for name, s := range all(live, fixed) {
		if s.CatchUp != CatchUpAll || s.Overlap != OverlapAllow || touched[name] {
			continue
		}
		r := &scheduleRecord{EveryMs: s.Every.Milliseconds(), Cron: s.Cron, TimeZone: s.TimeZone}
		p, err := r.period()
		require.NoError(t, err)
		var periods []int64
		for _, j := range jobs {
			if j.schedule == name {
				periods = append(periods, j.period)
			}
		}
		slices.Sort(periods)
		for i := 1; i < len(periods); i++ {
			require.Equal(t, p.next(periods[i-1]), periods[i], "seed %d: %s: a period missed after %v", seed, name, time.UnixMilli(periods[i-1]).UTC())
		}
		checked++
	}
	require.GreaterOrEqual(t, checked, len(specs))
	t.Logf("%d schedules (%d live, %d CatchUpAll left alone), %d jobs", names+len(fixed), len(live)+len(fixed), checked, len(jobs))
}

func all(a, b map[string]Schedule) map[string]Schedule {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

func randomKey[V any](rng *rand.Rand, m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[rng.IntN(len(keys))]
}

// TestScheduleCatchUpBounded: CatchUpAll over many missed periods of
// several schedules inserts them all, once each, in transactions of a
// bounded number of jobs.
func TestScheduleCatchUpBounded(t *testing.T) {
	b := setup(t)
	var first time.Time
	for i := range 5 {
		info, err := b.c.PutSchedule(b.ctx, nil, Schedule{Name: "c" + string(rune('a'+i)), Args: tickArgs{N: i}, Every: time.Second, CatchUp: CatchUpAll})
		require.NoError(t, err)
		first = info.Next
	}
	b.fire(t, b.c, first.Add(10*time.Minute))
	per := map[string][]int64{}
	for _, j := range b.scheduledJobs(t) {
		per[j.schedule] = append(per[j.schedule], j.period)
	}
	require.Len(t, per, 5)
	for name, ps := range per {
		slices.Sort(ps)
		require.Len(t, ps, 601, name)
		require.Equal(t, first.UnixMilli(), ps[0], name)
		require.Equal(t, first.Add(10*time.Minute).UnixMilli(), ps[600], name)
		require.Len(t, slices.Compact(ps), 601, "%s: once each", name)
	}
}
