package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// A user who cancels another user's replication by its id (a POST
// /_replicate job or a document's) gets the answer of an id nothing
// holds, whichever form of the id: nothing of whose the job is, nor of the
// document and database that define it; the job runs on. Admins, and the
// owner of a document's job, still hear which document defines it.
func TestCancelTellsNothingOfOthersJobs(t *testing.T) {
	c := replicatortest.NewCluster(t, 1, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	alice, bob := replicator.UserCtx{Name: "alice"}, replicator.UserCtx{Name: "bob"}
	admin := replicator.UserCtx{Name: "adm", Roles: []string{"_admin"}}
	cancel := func(id string, u replicator.UserCtx) (api.ReplicateResult, error) {
		return c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"replication_id": id, "cancel": true}), u)
	}

	o, err := c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"source": "http://h/s1", "target": "http://h/t1", "continuous": true}), alice)
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)
	transient := o.LocalID
	doc := replicatortest.RepDoc("http://h/s2", "http://h/t2", true)
	doc["owner"] = "alice"
	c.PutDoc("_replicator", "alice_doc", doc)
	persistent := c.WaitDocState("_replicator", "alice_doc", replicator.StateRunning)
	require.NotNil(t, persistent.ID)

	_, nothing := cancel("0123456789abcdef0123456789abcdef+continuous", bob)
	require.ErrorIs(t, nothing, replicator.ErrNotFound)
	for _, id := range []string{transient, *persistent.ID, c.DocJobID("_replicator", "alice_doc")} {
		_, err := cancel(id, bob)
		require.ErrorIs(t, err, replicator.ErrNotFound, id)
		require.Equal(t, nothing.Error(), err.Error(), id)
	}
	jobs, err := c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Equal(t, 2, jobs.TotalRows, "bob cancelled nothing")

	// The owner and an admin hear which document defines a document's job.
	for _, u := range []replicator.UserCtx{alice, admin} {
		_, err := cancel(*persistent.ID, u)
		require.ErrorIs(t, err, replicator.ErrUnauthorized, u.Name)
		require.ErrorContains(t, err, "defined by document `alice_doc` in `_replicator`", u.Name)
	}
	o, err = cancel(transient, alice)
	require.NoError(t, err)
	require.Equal(t, api.Cancelled, o.Outcome)
}

// records is a membership that gives fixed records.
type records []cluster.Member

func (r records) Records(context.Context) ([]cluster.Member, error) { return r, nil }

// A cancel of a job whose node restarted since its run started (the run
// died with the node's previous process) answers at once, saying so, not
// after waiting for final counters no run will store.
func TestCancelAfterNodeRestartAnswersAtOnce(t *testing.T) {
	c := replicatortest.NewCluster(t, 1, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	o, err := c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"source": "http://h/s", "target": "http://h/t", "continuous": true}), api.Admin())
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)
	now := time.Now()
	c.Plane.SetMembership(records{{Name: "node0", Roles: []string{config.RoleReplication},
		Started: now.Add(time.Hour).UnixMilli(), Seen: now.UnixMilli(), Expires: now.Add(2 * time.Hour).UnixMilli()}})
	o, err = c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"replication_id": o.LocalID, "cancel": true}), api.Admin())
	require.NoError(t, err)
	require.Equal(t, api.Cancelled, o.Outcome)
	require.Contains(t, o.Unconfirmed, "restarted")
	require.Nil(t, o.Stopped, "no wait for the counters of a run that is gone (this node's live one would store them)")
}

// A replication resumed right after a pause that stopped its run waits,
// pending, until that run has surely ended (its hold lapsed: the job
// timeout after the pause), so two runs of it never overlap.
func TestResumeWaitsForThePausedRun(t *testing.T) {
	c := replicatortest.NewCluster(t, 1, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	o, err := c.Plane.Replicate(ctx, replicateBody(t, map[string]any{"source": "http://h/s", "target": "http://h/t", "continuous": true}), api.Admin())
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)
	job, err := c.Plane.SchedulerJob(ctx, api.Admin(), o.LocalID)
	require.NoError(t, err)
	res, err := c.Plane.PauseJob(ctx, api.Admin(), job.JobID)
	require.NoError(t, err)
	require.Equal(t, replicator.StatePaused, res.State)
	d, _, err := c.Store.Job(ctx, nil, job.JobID)
	require.NoError(t, err)
	require.NotNil(t, d)
	res, err = c.Plane.ResumeJob(ctx, api.Admin(), job.JobID)
	require.NoError(t, err)
	require.Equal(t, replicator.StatePending, res.State)
	row, err := c.Jobs.GetJob(ctx, nil, replicator.JobType, job.JobID)
	require.NoError(t, err)
	require.GreaterOrEqual(t, row.ScheduledAt.UnixMilli(), d.LastUpdated+c.Config.JobTimeout.Milliseconds(),
		"due once the stopped run's hold has lapsed")
}
