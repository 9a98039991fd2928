package control_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// ParseDoc is the write-time check of replication documents: what it
// refuses, with which reason, and what it lets through. (Owner rules are
// the HTTP API's, see frontend/owner_test.go.)
func TestParseDoc(t *testing.T) {
	db := kvtest.NewDB(t)
	p, err := control.New(replicator.NewStore(db, replicatortest.JobsClient(t, db), nil), replicator.Config{})
	require.NoError(t, err)
	good := `{"source":"http://h/a","target":"http://h/b"}`
	for _, tc := range []struct {
		name, db, id, doc string
		reason            string // "" = accepted
	}{
		{"valid", "_replicator", "d", good, ""},
		{"not a replicator db", "foo_replicator", "d", `{}`, ""},
		{"design doc", "_replicator", "_design/x", `{}`, ""},
		{"local doc", "a/_replicator", "_local/x", `{}`, ""},
		{"source only", "_replicator", "d", `{"source":"http://h/a"}`, "Missing `target` field"},
		{"neither", "_replicator", "d", `{}`, "Missing `source` field"},
		{"not an object", "_replicator", "d", `[1]`, "a replication document must be a JSON object"},
		{"marked failed: checked all the same (M2)", "_replicator", "d", `{"_replication_state":"failed","source":"http://h/a"}`, "Missing `target` field"},
		{"marked failed and valid", "_replicator", "d", `{"_replication_state":"failed","source":"http://h/a","target":"http://h/b"}`, ""},
		{"bogus state", "_replicator", "d", `{"_replication_state":"done","source":"http://h/a","target":"http://h/b"}`,
			"`_replication_state` is written by the replicator; \"done\" is not one of its states"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.ParseDoc(tc.db, tc.id, json.RawMessage(tc.doc), api.Admin())
			require.NotNil(t, d, "the parsed document is returned either way")
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, replicator.ErrForbidden)
			require.Equal(t, tc.reason, replicator.Reason(err))
		})
	}
	d, err := p.ParseDoc("_replicator", "d", json.RawMessage(good), api.Admin())
	require.NoError(t, err)
	require.Equal(t, "http://h/a/", d.(*control.Doc).Spec.Source.URL)
}

// L1: the longest document id the HTTP API accepts gives a job id the job
// layer accepts.
func TestLongestDocIDFitsAJobID(t *testing.T) {
	id := replicator.DocJobID(replicator.NewDBUUID(), strings.Repeat("z", repdb.MaxDocIDLength))
	require.LessOrEqual(t, len(id), fdbjobs.MaxNameSize)
}

// What DocWritten does with a document's job, step by step, and whether
// it reports the job restarted (the frontend then clears the
// document's stale _replication_* fields).
func TestDocWrittenOutcomes(t *testing.T) {
	c := replicatortest.NewCluster(t, 0, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	write := func(id string, doc map[string]any) bool {
		t.Helper()
		parsed, _ := c.Plane.ParseDoc("_replicator", id, replicateBody(t, doc), api.Admin())
		restarted, err := kv.Transact(ctx, c.DB, func(tr kv.Transaction) (bool, error) {
			return c.Plane.DocWritten(ctx, tr, parsed)
		})
		require.NoError(t, err)
		return restarted
	}
	withState := func(doc map[string]any, state string) map[string]any {
		out := map[string]any{"_replication_state": state}
		for k, v := range doc {
			out[k] = v
		}
		return out
	}
	jobs := func() int {
		t.Helper()
		l, err := c.Plane.SchedulerDocs(ctx, "_replicator", nil, api.PageQuery{Limit: -1})
		require.NoError(t, err)
		return l.TotalRows
	}
	a := replicatortest.RepDoc("http://h/a", "http://h/b", true)
	b := replicatortest.RepDoc("http://h/a", "http://h/other", true)
	for _, step := range []struct {
		name      string
		id        string
		doc       map[string]any
		restarted bool
		jobs      int
	}{
		{"a new document runs", "d", a, true, 1},
		{"the same replication again: nothing", "d", a, false, 1},
		{"the replicator's own result: nothing", "d", withState(a, "completed"), false, 1},
		{"another replication runs again", "d", withState(b, "completed"), true, 1},
		{"completed, never run here: an ended job", "done", withState(a, "completed"), false, 2},
		{"failed, never run here: an ended job", "failed", withState(b, "failed"), false, 3},
		{"the same again: nothing", "done", withState(a, "completed"), false, 3},
		{"a revision with another replication, still completed (a conflict replicated in): recorded, not run", "done",
			withState(b, "completed"), false, 3},
		{"a 2.x triggered document runs", "old", withState(replicatortest.RepDoc("http://h/t", "http://h/u", true), "triggered"), true, 4},
		{"a document that does not parse: a failed job", "bad", map[string]any{"source": "http://h/a"}, false, 5},
	} {
		require.Equal(t, step.restarted, write(step.id, step.doc), step.name)
		require.Equal(t, step.jobs, jobs(), step.name)
	}
	// The ended ones are shown as they ended, and never queued.
	for id, state := range map[string]string{"done": "completed", "failed": "failed"} {
		d, err := c.Plane.SchedulerDoc(ctx, "_replicator", id)
		require.NoError(t, err)
		require.Equal(t, state, d.State, id)
		u, err := c.Store.ReadRegisteredDB(ctx, "_replicator")
		require.NoError(t, err)
		st, err := c.Jobs.JobState(ctx, nil, replicator.JobType, replicator.DocJobID(u, id))
		require.NoError(t, err)
		require.Equal(t, fdbjobs.Finished, st, id)
	}
	// Without the state it runs.
	require.True(t, write("done", a))
	d, err := c.Plane.SchedulerDoc(ctx, "_replicator", "done")
	require.NoError(t, err)
	require.Equal(t, "pending", d.State)
}

// SetConfig validates what it is given, as New does.
func TestPlaneSetConfig(t *testing.T) {
	db := kvtest.NewDB(t)
	p, err := control.New(replicator.NewStore(db, replicatortest.JobsClient(t, db), nil), replicator.Config{})
	require.NoError(t, err)
	require.ErrorIs(t, p.SetConfig(replicator.Config{Shares: map[string]int{"_replicator": 0}}), replicator.ErrInvalidConfig)
	require.NoError(t, p.SetConfig(replicator.Config{Shares: map[string]int{"_replicator": 500}, MaxHistory: 3}))
}

// The views take the viewer: the anonymous user sees nothing (CouchDB's
// 401), so that no caller can reach every job by passing no user.
func TestViewsRefuseTheAnonymousViewer(t *testing.T) {
	db := kvtest.NewDB(t)
	p, err := control.New(replicator.NewStore(db, replicatortest.JobsClient(t, db), nil), replicator.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	anonymous := api.User{Roles: []string{}}
	for name, call := range map[string]func() error{
		"SchedulerJobs": func() error { _, err := p.SchedulerJobs(ctx, anonymous, api.PageQuery{Limit: -1}); return err },
		"SchedulerJob":  func() error { _, err := p.SchedulerJob(ctx, anonymous, "x"); return err },
		"ActiveTasks":   func() error { _, err := p.ActiveTasks(ctx, anonymous); return err },
		"RetryJob":      func() error { _, err := p.RetryJob(ctx, anonymous, "x"); return err },
	} {
		require.ErrorIs(t, call(), replicator.ErrUnauthorized, name)
	}
	list, err := p.SchedulerJobs(ctx, api.User{Name: "bob"}, api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Empty(t, list.Jobs)
	tasks, err := p.ActiveTasks(ctx, api.Admin())
	require.NoError(t, err)
	require.Empty(t, tasks)
}
