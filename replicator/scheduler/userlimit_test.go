package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
)

// The per-user limit on running replications (doc.go, "Per-user limits"):
// with max_jobs 4 a user who is not a server admin runs one replication
// at a time (25%), in the whole cluster; the user's other jobs are held
// back, pending with the stall user_limit, while another user's job runs
// at once; the held-back continuous jobs take turns with the running one,
// so that each runs; a server admin's replications are not limited.
func TestUserLimitHoldsBackAUsersJobs(t *testing.T) {
	c, eng := simCluster(t, 2, testConfig(), 0, 0)
	ctx := context.Background()
	bob, alice := api.User{Name: "bob", Roles: []string{}}, api.User{Name: "alice", Roles: []string{}}
	doc := func(owner, src string) map[string]any {
		d := repDoc("http://h/"+src, "http://h/tgt", true)
		d["owner"] = owner
		return d
	}
	for i := range 3 {
		require.NoError(t, c.PutDocAs(bob, "_replicator", fmt.Sprintf("bob%d", i), doc("bob", fmt.Sprintf("bob%d", i))))
	}
	require.NoError(t, c.PutDocAs(alice, "alice/_replicator", "a", doc("alice", "alice")))

	// Alice's job runs; one of bob's runs, the others are held back.
	c.WaitJob("alice's job running", c.DocJobID("alice/_replicator", "a"), func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && d.State == replicator.StateRunning
	})
	held := 0
	for i := range 3 {
		id := c.DocJobID("_replicator", fmt.Sprintf("bob%d", i))
		c.WaitJob(fmt.Sprintf("bob%d running or held back", i), id, func(_ fdbjobs.State, d *replicator.JobData) bool {
			return d != nil && (d.State == replicator.StateRunning || d.HeldUntil != 0)
		})
		info, err := c.Plane.SchedulerDoc(ctx, "_replicator", fmt.Sprintf("bob%d", i))
		require.NoError(t, err)
		if info.State == replicator.StatePending {
			held++
		}
	}
	require.GreaterOrEqual(t, held, 1, "bob's jobs beyond the limit are held back")

	// Every one of bob's continuous jobs gets its turn, never two at once.
	waitStarts(t, eng, "each of bob's jobs ran", func() bool {
		running, err := c.Store.Views().OwnerRunningJobs(ctx, "bob")
		require.NoError(t, err)
		require.LessOrEqual(t, len(running), 1, "bob runs more than the limit")
		for i := range 3 {
			if eng.Starts(fmt.Sprintf("http://h/bob%d/", i)) == 0 {
				return false
			}
		}
		return true
	})

	// A server admin's are not limited: all of them run.
	for i := range 3 {
		c.PutDoc("_replicator", fmt.Sprintf("admin%d", i), doc("admin", fmt.Sprintf("admin%d", i)))
	}
	for i := range 3 {
		c.WaitDocState("_replicator", fmt.Sprintf("admin%d", i), replicator.StateRunning)
	}
}

// A held-back job's view says why: pending, with the stall user_limit
// until its turn.
func TestHeldBackJobShowsUserLimit(t *testing.T) {
	cfg := testConfig()
	cfg.Interval = time.Hour // no turns: the held job stays held
	c, _ := simCluster(t, 1, cfg, 0, 0)
	bob := api.User{Name: "bob", Roles: []string{}}
	for i := range 2 {
		d := repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/tgt", true)
		d["owner"] = "bob"
		require.NoError(t, c.PutDocAs(bob, "_replicator", fmt.Sprintf("d%d", i), d))
	}
	var heldID string
	for i := range 2 {
		id := fmt.Sprintf("d%d", i)
		c.WaitJob(id+" running or held", c.DocJobID("_replicator", id), func(_ fdbjobs.State, d *replicator.JobData) bool {
			if d != nil && d.HeldUntil != 0 {
				heldID = id
			}
			return d != nil && (d.State == replicator.StateRunning || d.HeldUntil != 0)
		})
	}
	require.NotEmpty(t, heldID)
	info := c.DocState("_replicator", heldID)
	require.Equal(t, replicator.StatePending, info.State)
	var add struct {
		Stall struct {
			Reason, Until string
		} `json:"stall"`
	}
	require.NoError(t, json.Unmarshal(info.Info, &add), string(info.Info))
	require.Equal(t, replicator.StallUserLimit, add.Stall.Reason)
	require.NotEmpty(t, add.Stall.Until)
}

// A one-shot run that makes no progress while another job waits for a
// slot is stopped after one_shot_stall_preempt_sec and queued behind the
// waiting job, which takes its slot (doc.go, "Stalled one-shot runs"); a
// POST /_replicate that started it goes on waiting, and answers once its
// source answers again and the run completes. Server admins' jobs: the
// per-user limit plays no part.
func TestStalledOneShotRunGivesWay(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobs = 2
	cfg.OneShotStallPreempt = 300 * time.Millisecond
	cfg.ProgressInterval = 20 * time.Millisecond
	c, eng := simCluster(t, 1, cfg, 20*time.Millisecond, 200*time.Millisecond)
	ctx := context.Background()
	const stalled = "http://h/stalled"
	eng.SetStalled(stalled+"/", true)

	// A POST /_replicate and a document, both at the stalled source, fill
	// the node.
	post := make(chan error, 1)
	go func() {
		res, err := c.Plane.Replicate(ctx, []byte(`{"source":"`+stalled+`","target":"http://h/t1"}`), api.Admin())
		if err == nil && res.Outcome != api.Completed {
			err = fmt.Errorf("outcome %v %s %s", res.Outcome, res.Tag, res.Reason)
		}
		post <- err
	}()
	waitStarts(t, eng, "the POST's run", func() bool { return eng.Starts(stalled+"/") == 1 })
	c.PutDoc("_replicator", "once", repDoc(stalled, "http://h/t2", false))
	waitStarts(t, eng, "the document's run", func() bool { return eng.Starts(stalled+"/") == 2 })

	// A third job waits, and runs once a stalled run gives way.
	c.PutDoc("_replicator", "other", repDoc("http://h/other", "http://h/t3", true))
	c.WaitDocState("_replicator", "other", replicator.StateRunning)
	select {
	case err := <-post:
		t.Fatalf("the POST answered while its replication's source did not: %v", err)
	default:
	}

	// The source answers again: the stalled runs go on and complete, and
	// the POST answers.
	eng.SetStalled(stalled+"/", false)
	c.WaitDocState("_replicator", "once", replicator.StateCompleted)
	select {
	case err := <-post:
		require.NoError(t, err)
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("the POST did not answer")
	}
}
