package fdbjobstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/fdbjobs/fdbjobstest"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

func TestRequireInserted(t *testing.T) {
	c := fdbjobstest.NewClient(t)
	ctx := context.Background()
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "email", fdbjobs.TimeoutDefault))
	r, err := c.Insert(ctx, nil, emailArgs{To: "ada@example.com"}, fdbjobs.InsertOptions{})
	require.NoError(t, err)
	j := fdbjobstest.RequireInserted(t, c, emailArgs{To: "ada@example.com"})
	require.Equal(t, r.ID, j.ID)
	require.Equal(t, fdbjobs.Pending, j.State)
	require.Equal(t, "ada@example.com", j.Args.To)
	fdbjobstest.RequireNotInserted(t, c, emailArgs{To: "bob@example.com"})
	require.Len(t, fdbjobstest.Jobs[emailArgs](t, c), 1)
}

func TestFireSchedules(t *testing.T) {
	c := fdbjobstest.NewClient(t)
	ctx := context.Background()
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "email", fdbjobs.TimeoutDefault))
	info, err := c.PutSchedule(ctx, nil, fdbjobs.Schedule{Name: "digest", Args: emailArgs{To: "list@example.com"}, Cron: "0 7 * * 1-5", TimeZone: "Europe/Paris"})
	require.NoError(t, err)
	require.Zero(t, fdbjobstest.FireSchedules[emailArgs](t, c, info.Next.Add(-time.Second)), "not yet")
	require.Equal(t, 1, fdbjobstest.FireSchedules[emailArgs](t, c, info.Next))
	j := fdbjobstest.RequireInserted(t, c, emailArgs{To: "list@example.com"})
	require.Equal(t, fdbjobs.Pending, j.State)
	require.Zero(t, fdbjobstest.FireSchedules[emailArgs](t, c, info.Next.Add(time.Minute)), "once per period")
}

func TestWork(t *testing.T) {
	ok := fdbjobs.WorkFunc[emailArgs](func(ctx context.Context, w *fdbjobs.Work[emailArgs]) error { return nil })
	res := fdbjobstest.Work(t, ok, emailArgs{To: "ada@example.com"}, fdbjobstest.WorkOptions{})
	require.NoError(t, res.Err)
	require.Equal(t, fdbjobs.Finished, res.Job.State)
	require.Equal(t, fdbjobs.OutcomeCompleted, res.Job.Outcome)
	require.Equal(t, 1, res.Job.Attempts)

	// A failed attempt: the job waits for its retry, and no second attempt
	// ran, though the policy would have it at once.
	fails := fdbjobs.WorkFunc[emailArgs](func(ctx context.Context, w *fdbjobs.Work[emailArgs]) error { return errors.New("smtp down") })
	res = fdbjobstest.Work(t, fails, emailArgs{To: "bob@example.com"}, fdbjobstest.WorkOptions{
		Worker: fdbjobs.WorkerOptions{RetryPolicy: fdbjobs.RetryFunc(func(int, error) time.Duration { return 0 })}})
	require.EqualError(t, res.Err, "smtp down")
	require.Equal(t, fdbjobs.Pending, res.Job.State)
	require.Equal(t, 1, res.Job.Attempts)
	require.Equal(t, "smtp down", res.Job.Errors[0].Error)

	res = fdbjobstest.Work(t, fails, emailArgs{To: "carol@example.com"}, fdbjobstest.WorkOptions{
		Insert: fdbjobs.InsertOptions{MaxAttempts: 1}})
	require.Equal(t, fdbjobs.OutcomeDiscarded, res.Job.Outcome)
}
