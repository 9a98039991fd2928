package fdbjobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

type reportArgs struct {
	Team string `json:"team"`
}

func (reportArgs) Kind() string { return "report" }

// TestRuntimeRunsSchedules: a Runtime inserts the jobs of its kinds'
// schedules at their periods, once each, and its worker sees the schedule
// and the period.
func TestRuntimeRunsSchedules(t *testing.T) {
	type run struct {
		schedule, team string
		period         time.Time
		at             time.Time
	}
	runs := make(chan run, 16)
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[reportArgs](func(ctx context.Context, w *fdbjobs.Work[reportArgs]) error {
		runs <- run{w.Schedule, w.Args.Team, w.Period, time.Now()}
		return nil
	}), fdbjobs.WorkerOptions{}))
	// Polling once an hour: a schedule made on this Client wakes its
	// Runtime's loop at once, and the loop then wakes at each period.
	b := startClient(t)
	rt, err := fdbjobs.NewRuntime(b.c, ws, fdbjobs.RuntimeOptions{SchedulePoll: time.Hour})
	require.NoError(t, err)
	require.NoError(t, rt.Start(b.ctx))
	t.Cleanup(rt.StopAndCancel)
	info, err := b.c.PutSchedule(b.ctx, nil, fdbjobs.Schedule{Name: "nightly", Args: reportArgs{Team: "a"}, Every: time.Second})
	require.NoError(t, err)
	require.Zero(t, info.Next.Nanosecond(), "a whole second")
	require.True(t, info.Next.After(info.Created))
	// (Not necessarily consecutive: a Runtime slowed down, as by injected
	// faults, inserts one job for the periods it missed, CatchUpOne.)
	seen := map[time.Time]bool{}
	for range 3 {
		r := testutil.Recv(t, runs)
		require.Equal(t, "nightly", r.schedule)
		require.Equal(t, "a", r.team)
		require.Zero(t, r.period.Nanosecond(), "a whole second")
		require.Equal(t, time.UTC, r.period.Location())
		require.False(t, r.at.Before(r.period), "not before its period")
		require.False(t, r.period.Before(info.Next), "not before the first period")
		require.False(t, seen[r.period], "once each")
		seen[r.period] = true
	}

	require.NoError(t, b.c.PauseSchedule(b.ctx, nil, "nightly"))
	list, err := b.c.ListSchedules(b.ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.True(t, list[0].Paused)
	require.NoError(t, b.c.DeleteSchedule(b.ctx, nil, "nightly"))
}
