package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

func TestCrashBackoffHeal(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	cfg := testConfig()
	cfg.Clock = clk
	cfg.MinBackoff, cfg.MaxBackoff, cfg.HealthThreshold = 10*time.Second, 35*time.Second, time.Minute
	cfg.JobTimeout, cfg.StatsUpdateInterval = time.Hour, 20*time.Second
	eng := simengine.New()
	eng.Clock = clk
	src := "http://h/s/"
	eng.SetFail(src, fmt.Errorf("%w: could not open http://h/s/", engine.ErrDBNotFound))
	c := newCluster(t, 1, eng, cfg)
	c.PutDoc("_replicator", "d", repDoc("http://h/s", "http://h/t", true))
	jobID := c.DocJobID("_replicator", "d")

	// The node and its job layer client run on clk: a fetcher that met an
	// injected store fault backs off on it, and waits for clk to move.
	// nudging moves it a millisecond every 5 ms while f waits for the
	// node (never near a job's due time: each wait ends a second or more
	// before it).
	nudging := func(f func()) {
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
					clk.Advance(time.Millisecond)
				}
			}
		}()
		defer func() { close(done); <-stopped }()
		f()
	}
	wantBackoff := []time.Duration{10 * time.Second, 20 * time.Second, 35 * time.Second}
	for i, want := range wantBackoff {
		crashed := clk.Now()
		nudging(func() {
			c.WaitJob(fmt.Sprintf("crash %d", i+1), jobID, func(_ fdbjobs.State, d *replicator.JobData) bool {
				return d != nil && d.State == replicator.StateCrashing && d.ErrorCount == i+1
			})
		})
		nudged := clk.Since(crashed)
		d := c.DocState("_replicator", "d")
		var info struct {
			Error, Reason string
			CaughtUp      bool `json:"caught_up"`
			Stall         struct{ Reason, Detail, Since, Until string }
		}
		require.NoError(t, json.Unmarshal(d.Info, &info))
		require.Equal(t, "db_not_found", info.Error)
		require.Equal(t, "could not open http://h/s/", info.Reason)
		require.False(t, info.CaughtUp)
		stime, st := c.JobSTime(jobID)
		require.Equal(t, fdbjobs.Pending, st)
		// Its stall says it backs off, why, and until its scheduled time.
		require.Equal(t, engine.StallBackingOff, info.Stall.Reason)
		require.Equal(t, info.Reason, info.Stall.Detail)
		require.Equal(t, replicator.FormatMillis(stime), info.Stall.Until)
		wait := time.Duration(stime-clk.Now().UnixMilli()) * time.Millisecond
		require.GreaterOrEqual(t, wait, want-want/4-time.Millisecond-nudged, "crash %d", i+1)
		require.LessOrEqual(t, wait, want, "crash %d", i+1)
		// Not started before its time: an acceptor looks at the queue at
		// the advanced time, finds nothing due, and the job has not run.
		starts := eng.Starts(src)
		clk.Advance(wait - time.Second)
		looked := clk.Now().UnixMilli()
		c.Nodes[0].Reschedule()
		nudging(func() {
			testutil.Eventually(t, "an acceptor idle at the advanced time",
				func() bool { return c.Nodes[0].Stats().Idle >= looked })
		})
		require.Equal(t, starts, eng.Starts(src), "started before its backoff ended")
		if i < len(wantBackoff)-1 {
			clk.Advance(2 * time.Second)
		}
	}
	// Heal: the next run succeeds and runs longer than the health threshold.
	eng.SetFail(src, nil)
	clk.Advance(2 * time.Second)
	nudging(func() { c.WaitDocState("_replicator", "d", replicator.StateRunning) })
	require.Equal(t, 3, c.DocState("_replicator", "d").ErrorCount)
	clk.Advance(cfg.HealthThreshold + time.Second)
	// A heartbeat heals it; one that an injected fault failed leaves it
	// to the next.
	testutil.Eventually(t, "healed", func() bool {
		clk.Advance(cfg.Interval)
		return c.DocState("_replicator", "d").ErrorCount == 0
	})
	require.Equal(t, replicator.StateRunning, c.DocState("_replicator", "d").State)
}

func replicate(t *testing.T, p *control.Plane, body string, user replicator.UserCtx) (api.ReplicateResult, error) {
	t.Helper()
	return p.Replicate(context.Background(), json.RawMessage(body), user)
}

func TestCollisions(t *testing.T) {
	eng := simengine.New()
	eng.OneShot = 20 * time.Millisecond
	c := newCluster(t, 1, eng, testConfig())
	ctx := context.Background()

	t.Run("persistent vs persistent", func(t *testing.T) {
		c.PutDoc("_replicator", "p1", repDoc("http://h/a", "http://h/b", true))
		c.WaitDocState("_replicator", "p1", replicator.StateRunning)
		c.PutDoc("_replicator", "p2", repDoc("http://h/a", "http://h/b", true))
		d := c.WaitDocState("_replicator", "p2", replicator.StateFailed)
		require.Contains(t, string(d.Info), "specified by document `p2` already started, triggered by document `p1` from db `_replicator`")
		require.Contains(t, string(d.Info), `"error":"duplicate_job"`, "the info names the error")
		u, ok := c.Docs.Get("_replicator", "p2")
		require.True(t, ok)
		require.Equal(t, replicator.StateFailed, u.State)
		require.Equal(t, replicator.StateRunning, c.DocState("_replicator", "p1").State)
		c.PutDoc("_replicator", "p1", nil)
		c.PutDoc("_replicator", "p2", nil)
	})

	t.Run("transient holder makes a document job crash until cancelled", func(t *testing.T) {
		bob := replicator.UserCtx{Name: "bob"}
		o, err := replicate(t, c.Plane, `{"source":"http://h/c","target":"http://h/d","continuous":true}`, bob)
		require.NoError(t, err)
		require.Equal(t, api.Running, o.Outcome)
		c.PutDoc("_replicator", "q", repDoc("http://h/c", "http://h/d", true))
		d := c.WaitDocState("_replicator", "q", replicator.StateCrashing)
		require.Contains(t, string(d.Info), "transient")
		o, err = replicate(t, c.Plane, `{"source":"http://h/c","target":"http://h/d","continuous":true,"cancel":true}`, bob)
		require.NoError(t, err)
		require.Equal(t, api.Cancelled, o.Outcome)
		c.WaitDocState("_replicator", "q", replicator.StateRunning)
		c.PutDoc("_replicator", "q", nil)
	})

	t.Run("a finished holder is usurped", func(t *testing.T) {
		c.PutDoc("_replicator", "o1", repDoc("http://h/e", "http://h/f", false))
		c.WaitDocState("_replicator", "o1", replicator.StateCompleted)
		c.PutDoc("_replicator", "o2", repDoc("http://h/e", "http://h/f", false))
		c.WaitDocState("_replicator", "o2", replicator.StateCompleted)
	})

	t.Run("an orphan mapping is taken over", func(t *testing.T) {
		spec, err := replicator.ParseSpec(json.RawMessage(`{"source":"http://h/g","target":"http://h/i","continuous":true}`))
		require.NoError(t, err)
		rep, err := spec.Engine()
		require.NoError(t, err)
		uuid, err := c.Store.Setup(ctx, c.Config.JobTimeout, 0)
		require.NoError(t, err)
		id, _, err := eng.ReplicationID(ctx, rep, uuid)
		require.NoError(t, err)
		_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
			c.Store.ClaimRepID(tr, id, "no-such-job")
			return nil, nil
		})
		require.NoError(t, err)
		c.PutDoc("_replicator", "g", repDoc("http://h/g", "http://h/i", true))
		d := c.WaitDocState("_replicator", "g", replicator.StateRunning)
		require.Equal(t, id, *d.ID)
	})
}

func TestFilterChange(t *testing.T) {
	eng := simengine.New()
	eng.CheckpointEvery = 5 * time.Millisecond
	c := newCluster(t, 1, eng, testConfig())
	eng.SetFilterCode("http://h/s/", "function(doc){return true}")
	doc := repDoc("http://h/s", "http://h/t", true)
	doc["filter"] = "ddoc/f"
	c.PutDoc("_replicator", "d", doc)
	d1 := c.WaitDocState("_replicator", "d", replicator.StateRunning)
	require.NotNil(t, d1.ID)
	eng.SetFilterCode("http://h/s/", "function(doc){return false}")
	c.WaitJob("new replication id", c.DocJobID("_replicator", "d"), func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && d.State == replicator.StateRunning && d.RepID != "" && d.RepID != *d1.ID
	})
	// The old id no longer resolves to the job; the new one does.
	j, err := c.Plane.SchedulerJob(context.Background(), api.Admin(), *c.DocState("_replicator", "d").ID)
	require.NoError(t, err)
	require.Equal(t, "d", *j.DocID)
	_, err = c.Plane.SchedulerJob(context.Background(), api.Admin(), *d1.ID)
	require.ErrorIs(t, err, replicator.ErrNotFound)
}

func TestTransientJobs(t *testing.T) {
	c, eng := simCluster(t, 1, testConfig(), 0, 20*time.Millisecond)
	ctx := context.Background()
	bob := replicator.UserCtx{Name: "bob"}

	o, err := replicate(t, c.Plane, `{"source":"http://u:secret@h/a","target":"http://h/b"}`, bob)
	require.NoError(t, err)
	require.Equal(t, api.Completed, o.Outcome, "%+v", o)
	var res map[string]any
	require.NoError(t, json.Unmarshal(o.Checkpoint, &res))
	require.Equal(t, true, res["ok"])
	require.Equal(t, "sim", res["session_id"])

	// Finished transient jobs are not listed but can be read by id.
	list, err := c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Zero(t, list.TotalRows)
	spec, err := replicator.ParseSpec(json.RawMessage(`{"source":"http://u:secret@h/a","target":"http://h/b"}`))
	require.NoError(t, err)
	uuid, err := c.Store.Setup(ctx, c.Config.JobTimeout, 0)
	require.NoError(t, err)
	jobID := replicator.TransientJobID(uuid, spec, "bob")
	j, err := c.Plane.SchedulerJob(ctx, api.Admin(), jobID)
	require.NoError(t, err)
	require.Equal(t, replicator.StateCompleted, j.State)
	require.Equal(t, "http://u:*****@h/a/", *j.Source)
	b, _ := json.Marshal(j)
	require.NotContains(t, string(b), "secret")

	// Continuous: running once a node runs it; re-posting is a no-op.
	cont := `{"source":"http://h/c","target":"http://h/d","continuous":true}`
	o, err = replicate(t, c.Plane, cont, bob)
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)
	require.True(t, strings.HasSuffix(o.LocalID, "+continuous"), o.LocalID)
	waitStarts(t, eng, "engine started", func() bool { return eng.Starts("http://h/c/") == 1 })
	localID := o.LocalID
	o, err = replicate(t, c.Plane, cont, bob)
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)
	require.Equal(t, 1, eng.Starts("http://h/c/"))
	list, err = c.Plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Equal(t, 1, list.TotalRows)
	require.Equal(t, localID, *list.Jobs[0].ID)

	// Cancel: only bob or an admin; by replication id. Another user is
	// told the job does not exist.
	_, err = replicate(t, c.Plane, `{"replication_id":"`+localID+`","cancel":true}`, replicator.UserCtx{Name: "eve"})
	require.ErrorIs(t, err, replicator.ErrNotFound)
	o, err = replicate(t, c.Plane, `{"replication_id":"`+localID+`","cancel":true}`, replicator.UserCtx{Name: "root", Roles: []string{"_admin"}})
	require.NoError(t, err)
	require.Equal(t, api.Cancelled, o.Outcome)
	_, err = c.Plane.SchedulerJob(ctx, api.Admin(), localID)
	require.ErrorIs(t, err, replicator.ErrNotFound)
	_, err = replicate(t, c.Plane, `{"replication_id":"nope","cancel":true}`, bob)
	require.ErrorIs(t, err, replicator.ErrNotFound)

	// A transient job that crashes fails; its error is the outcome.
	eng.SetFail("http://h/x/", fmt.Errorf("%w: could not open http://h/x/", engine.ErrDBNotFound))
	o, err = replicate(t, c.Plane, `{"source":"http://h/x","target":"http://h/y"}`, bob)
	require.NoError(t, err)
	require.Equal(t, api.ReplicateResult{Outcome: api.Failed, Tag: "db_not_found", Reason: "could not open http://h/x/"}, o)

	// Bad bodies are bad requests with the parser's reason.
	_, err = replicate(t, c.Plane, `{"source":"http://h/x"}`, bob)
	require.ErrorIs(t, err, replicator.ErrBadRequest)
	require.Equal(t, "Missing `target` field", replicator.Reason(err))

	// Retention: after transient_job_max_age the cleanup removes them.
	require.NoError(t, c.Nodes[0].SetConfig(withMaxAge(c.Nodes[0].Config(), time.Millisecond)))
	c.WaitJob("transient job removed", jobID, func(_ fdbjobs.State, d *replicator.JobData) bool { return d == nil })
}

func withMaxAge(cfg scheduler.Config, d time.Duration) scheduler.Config {
	cfg.TransientJobMaxAge = d
	return cfg
}

// M1: a user cannot make another user's replication fail by creating the
// same replication first (the replication id leaves out passwords and
// proxies): the second user's job waits, crashing with a reason that names
// no other user's document, and runs once the squatter's job stops.
func TestCollisionAcrossOwnersNeverFails(t *testing.T) {
	eng := simengine.New()
	c := newCluster(t, 1, eng, testConfig())
	squat := repDoc("http://h/sq", "http://h/t", true)
	squat["owner"] = "bob"
	c.PutDoc("_replicator", "bob_squat", squat)
	c.WaitDocState("_replicator", "bob_squat", replicator.StateRunning)

	real := repDoc("http://h/sq", "http://h/t", true)
	real["owner"] = "alice"
	c.PutDoc("_replicator", "alice_rep", real)
	d := c.WaitDocState("_replicator", "alice_rep", replicator.StateCrashing)
	require.Contains(t, string(d.Info), "already running as another user's replication")
	require.Contains(t, string(d.Info), `"error":"duplicate_job"`)
	require.NotContains(t, string(d.Info), "bob")
	_, failed := c.Docs.Get("_replicator", "alice_rep")
	require.False(t, failed, "no failed state written into alice's document")

	// The same owner keeps CouchDB's rule: the second document fails.
	dup := repDoc("http://h/sq", "http://h/t", true)
	dup["owner"] = "bob"
	c.PutDoc("_replicator", "bob_dup", dup)
	c.WaitDocState("_replicator", "bob_dup", replicator.StateFailed)

	c.PutDoc("_replicator", "bob_squat", nil)
	c.WaitDocState("_replicator", "alice_rep", replicator.StateRunning)
}
