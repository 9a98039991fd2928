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
	b := startRuntime(t, ws)
	info, err := b.c.PutSchedule(b.ctx, nil, fdbjobs.Schedule{Name: "nightly", Args: reportArgs{Team: "a"}, Every: time.Second})
	require.NoError(t, err)
	require.Zero(t, info.Next.Nanosecond(), "a whole second")
	require.True(t, info.Next.After(info.Created))
	first := testutil.Recv(t, runs)
	second := testutil.Recv(t, runs)
	require.Equal(t, "nightly", first.schedule)
	require.Equal(t, "a", first.team)
	require.Equal(t, time.Second, second.period.Sub(first.period), "consecutive periods, once each")
	require.Zero(t, first.period.Nanosecond())
	require.False(t, first.at.Before(first.period), "not before its period")

	require.NoError(t, b.c.PauseSchedule(b.ctx, nil, "nightly"))
	list, err := b.c.ListSchedules(b.ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.True(t, list[0].Paused)
	require.NoError(t, b.c.DeleteSchedule(b.ctx, nil, "nightly"))
}
