package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

func TestCrashBackoffHeal(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	cfg := testConfig()
	cfg.Clock = clk
	cfg.MinBackoff, cfg.MaxBackoff, cfg.HealthThreshold = 10*time.Second, 35*time.Second, time.Minute
	cfg.JobTimeout, cfg.StatsUpdateInterval = time.Hour, 20*time.Second
	eng := newFakeEngine()
	src := "http://h/s/"
	eng.setFail(src, fmt.Errorf("%w: could not open http://h/s/", engine.ErrDBNotFound))
	c := newCluster(t, 1, eng, cfg)
	c.putDoc("_replicator", "d", repDoc("http://h/s", "http://h/t", true))
	jobID := c.docJobID("_replicator", "d")

	wantBackoff := []time.Duration{10 * time.Second, 20 * time.Second, 35 * time.Second}
	for i, want := range wantBackoff {
		var d DocInfo
		waitFor(t, fmt.Sprintf("crash %d", i+1), func() bool {
			d = c.docState("_replicator", "d")
			return d.State == StateCrashing && d.ErrorCount == i+1
		})
		require.JSONEq(t, `{"error":"db_not_found","reason":"could not open http://h/s/"}`, string(d.Info))
		stime, st := c.jobSTime(jobID)
		require.Equal(t, fdbjobs.Pending, st)
		wait := time.Duration(stime-clk.Now().UnixMilli()) * time.Millisecond
		require.GreaterOrEqual(t, wait, want-want/4-time.Millisecond, "crash %d", i+1)
		require.LessOrEqual(t, wait, want, "crash %d", i+1)
		// Not started before its time.
		starts := eng.startsOf(src)
		clk.Advance(wait - time.Second)
		c.nodes[0].Reschedule()
		time.Sleep(50 * time.Millisecond)
		require.Equal(t, starts, eng.startsOf(src), "started before its backoff ended")
		if i < len(wantBackoff)-1 {
			clk.Advance(2 * time.Second)
		}
	}
	// Heal: the next run succeeds and runs longer than the health threshold.
	eng.setFail(src, nil)
	clk.Advance(2 * time.Second)
	c.waitDocState("_replicator", "d", StateRunning)
	require.Equal(t, 3, c.docState("_replicator", "d").ErrorCount)
	clk.Advance(cfg.HealthThreshold + time.Second)
	waitFor(t, "healed", func() bool { return c.docState("_replicator", "d").ErrorCount == 0 })
	require.Equal(t, StateRunning, c.docState("_replicator", "d").State)
}

func TestCollisions(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	ctx := context.Background()

	t.Run("persistent vs persistent", func(t *testing.T) {
		c.putDoc("_replicator", "p1", repDoc("http://h/a", "http://h/b", true))
		c.waitDocState("_replicator", "p1", StateRunning)
		c.putDoc("_replicator", "p2", repDoc("http://h/a", "http://h/b", true))
		d := c.waitDocState("_replicator", "p2", StateFailed)
		require.Contains(t, string(d.Info), "specified by document `p2` already started, triggered by document `p1` from db `_replicator`")
		u, ok := c.docs.get("_replicator", "p2")
		require.True(t, ok)
		require.Equal(t, StateFailed, u.State)
		require.Equal(t, StateRunning, c.docState("_replicator", "p1").State)
		c.putDoc("_replicator", "p1", nil)
		c.putDoc("_replicator", "p2", nil)
	})

	t.Run("transient holder makes a document job crash until cancelled", func(t *testing.T) {
		body := `{"source":"http://h/c","target":"http://h/d","continuous":true}`
		status, resp, err := c.fe.Replicate(ctx, json.RawMessage(body), UserCtx{Name: "bob"})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, status, string(resp))
		c.putDoc("_replicator", "q", repDoc("http://h/c", "http://h/d", true))
		d := c.waitDocState("_replicator", "q", StateCrashing)
		require.Contains(t, string(d.Info), "transient")
		status, resp, err = c.fe.Replicate(ctx, json.RawMessage(`{"source":"http://h/c","target":"http://h/d","continuous":true,"cancel":true}`), UserCtx{Name: "bob"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, string(resp))
		c.waitDocState("_replicator", "q", StateRunning)
		c.putDoc("_replicator", "q", nil)
	})

	t.Run("a finished holder is usurped", func(t *testing.T) {
		c.putDoc("_replicator", "o1", repDoc("http://h/e", "http://h/f", false))
		c.waitDocState("_replicator", "o1", StateCompleted)
		c.putDoc("_replicator", "o2", repDoc("http://h/e", "http://h/f", false))
		c.waitDocState("_replicator", "o2", StateCompleted)
	})

	t.Run("an orphan mapping is taken over", func(t *testing.T) {
		spec, err := ParseSpec(json.RawMessage(`{"source":"http://h/g","target":"http://h/i","continuous":true}`))
		require.NoError(t, err)
		rep, err := spec.Engine()
		require.NoError(t, err)
		id, _, err := eng.ReplicationID(ctx, rep, c.fe.serverUUID)
		require.NoError(t, err)
		_, err = c.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			tr.Set(c.fe.k.repIDKey(id), []byte("no-such-job"))
			return nil, nil
		})
		require.NoError(t, err)
		c.putDoc("_replicator", "g", repDoc("http://h/g", "http://h/i", true))
		d := c.waitDocState("_replicator", "g", StateRunning)
		require.Equal(t, id, *d.ID)
	})
}

func TestFilterChange(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	eng.setCode("http://h/s/", "function(doc){return true}")
	doc := repDoc("http://h/s", "http://h/t", true)
	doc["filter"] = "ddoc/f"
	c.putDoc("_replicator", "d", doc)
	d1 := c.waitDocState("_replicator", "d", StateRunning)
	require.NotNil(t, d1.ID)
	eng.setCode("http://h/s/", "function(doc){return false}")
	waitFor(t, "new replication id", func() bool {
		d := c.docState("_replicator", "d")
		return d.State == StateRunning && d.ID != nil && *d.ID != *d1.ID
	})
	// The old id no longer resolves to the job; the new one does.
	j, err := c.fe.SchedulerJob(context.Background(), *c.docState("_replicator", "d").ID)
	require.NoError(t, err)
	require.Equal(t, "d", *j.DocID)
	_, err = c.fe.SchedulerJob(context.Background(), *d1.ID)
	require.ErrorIs(t, err, ErrNotFound)
}

func TestTransientJobs(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	ctx := context.Background()
	bob := UserCtx{Name: "bob"}

	status, resp, err := c.fe.Replicate(ctx, json.RawMessage(`{"source":"http://u:secret@h/a","target":"http://h/b"}`), bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, string(resp))
	var res map[string]any
	require.NoError(t, json.Unmarshal(resp, &res))
	require.Equal(t, true, res["ok"])
	require.Equal(t, "s1", res["session_id"])

	// Finished transient jobs are not listed but can be read by id.
	list, err := c.fe.SchedulerJobs(ctx, -1, 0)
	require.NoError(t, err)
	require.Zero(t, list.TotalRows)
	spec, err := ParseSpec(json.RawMessage(`{"source":"http://u:secret@h/a","target":"http://h/b"}`))
	require.NoError(t, err)
	jobID := transientJobID(c.fe.serverUUID, spec, "bob")
	j, err := c.fe.SchedulerJob(ctx, jobID)
	require.NoError(t, err)
	require.Equal(t, StateCompleted, j.State)
	require.Equal(t, "http://u:*****@h/a/", *j.Source)
	b, _ := json.Marshal(j)
	require.NotContains(t, string(b), "secret")

	// Continuous: 202 once running; re-posting is a no-op.
	cont := json.RawMessage(`{"source":"http://h/c","target":"http://h/d","continuous":true}`)
	status, resp, err = c.fe.Replicate(ctx, cont, bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status, string(resp))
	var acc struct {
		OK      bool   `json:"ok"`
		LocalID string `json:"_local_id"`
	}
	require.NoError(t, json.Unmarshal(resp, &acc))
	require.True(t, strings.HasSuffix(acc.LocalID, "+continuous"))
	waitFor(t, "engine started", func() bool { return eng.startsOf("http://h/c/") == 1 })
	status, _, err = c.fe.Replicate(ctx, cont, bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, 1, eng.startsOf("http://h/c/"))
	list, err = c.fe.SchedulerJobs(ctx, -1, 0)
	require.NoError(t, err)
	require.Equal(t, 1, list.TotalRows)
	require.Equal(t, acc.LocalID, *list.Jobs[0].ID)

	// Cancel: only bob or an admin; by replication id.
	status, _, err = c.fe.Replicate(ctx, json.RawMessage(`{"replication_id":"`+acc.LocalID+`","cancel":true}`), UserCtx{Name: "eve"})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, status)
	status, resp, err = c.fe.Replicate(ctx, json.RawMessage(`{"replication_id":"`+acc.LocalID+`","cancel":true}`), UserCtx{Name: "root", Roles: []string{"_admin"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, string(resp))
	_, err = c.fe.SchedulerJob(ctx, acc.LocalID)
	require.ErrorIs(t, err, ErrNotFound)
	status, _, err = c.fe.Replicate(ctx, json.RawMessage(`{"replication_id":"nope","cancel":true}`), bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, status)

	// A transient job that crashes fails; its error is the reply.
	eng.setFail("http://h/x/", fmt.Errorf("%w: could not open http://h/x/", engine.ErrDBNotFound))
	status, resp, err = c.fe.Replicate(ctx, json.RawMessage(`{"source":"http://h/x","target":"http://h/y"}`), bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, status)
	require.JSONEq(t, `{"error":"db_not_found","reason":"could not open http://h/x/"}`, string(resp))

	// Bad bodies are 400 with the parser's reason.
	status, resp, err = c.fe.Replicate(ctx, json.RawMessage(`{"source":"http://h/x"}`), bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	require.JSONEq(t, `{"error":"bad_request","reason":"Missing `+"`target`"+` field"}`, string(resp))

	// Retention: after transient_job_max_age the cleanup removes them.
	require.NoError(t, c.nodes[0].SetConfig(withMaxAge(c.nodes[0].Config(), time.Millisecond)))
	waitFor(t, "transient job removed", func() bool {
		_, err := c.fe.SchedulerJob(ctx, jobID)
		return errors.Is(err, ErrNotFound)
	})
}

func withMaxAge(cfg Config, d time.Duration) Config {
	cfg.TransientJobMaxAge = d
	return cfg
}
