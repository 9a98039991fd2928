package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// docCount returns the number of documents of a database on srv.
func docCount(t *testing.T, srv *couchtest.Server, db string) int {
	t.Helper()
	info := srv.DBInfo(t, db)
	n, _ := info["doc_count"].(float64)
	return int(n)
}

// Continuous document replications on two nodes with room for one job
// each: the jobs rotate and all make progress; a node killed without its
// shutdown path hands its job over after the job timeout; every target
// ends identical to its source.
func TestPouchRotationAndKilledNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pouchdb-server")
	}
	srv := couchtest.StartPouchDB(t)
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn, cfg.MaxAcceptors = 1, 1, 1
	cfg.Interval = 150 * time.Millisecond
	cfg.JobTimeout = 1500 * time.Millisecond
	cfg.StatsUpdateInterval = 100 * time.Millisecond
	c := newCluster(t, 2, nil, cfg)
	const reps = 4
	for i := 0; i < reps; i++ {
		srv.CreateDB(t, fmt.Sprintf("src%d", i))
		srv.AddDocs(t, fmt.Sprintf("src%d", i), 0, 50)
		doc := repDoc(srv.DBURL(fmt.Sprintf("src%d", i)), srv.DBURL(fmt.Sprintf("tgt%d", i)), true)
		doc["create_target"] = true
		doc["checkpoint_interval"] = 100
		doc["worker_batch_size"] = 10
		c.PutDoc("_replicator", fmt.Sprintf("r%d", i), doc)
	}
	synced := func(n int) {
		for i := 0; i < reps; i++ {
			testutil.Eventually(t, fmt.Sprintf("tgt%d has %d docs", i, n), func() bool {
				return srv.Request(t, http.MethodGet, "/"+fmt.Sprintf("tgt%d", i), nil, nil) == 200 &&
					docCount(t, srv, fmt.Sprintf("tgt%d", i)) == n
			})
		}
	}
	synced(50)
	var rotations int
	for _, n := range c.Nodes {
		for _, r := range n.Stats().Rotations {
			rotations += r
		}
	}
	t.Logf("rotations so far: %d", rotations)

	// Kill node0 abruptly; node1 (and a new node) take over its jobs.
	c.Kill(0)
	c.AddNode("node2")
	for i := 0; i < reps; i++ {
		srv.AddDocs(t, fmt.Sprintf("src%d", i), 50, 20)
	}
	synced(70)
	for i := 0; i < reps; i++ {
		enginetest.RequireSame(t, srv.DBURL(fmt.Sprintf("src%d", i)), srv.DBURL(fmt.Sprintf("tgt%d", i)))
	}
	list, err := c.Plane.SchedulerDocs(context.Background(), "_replicator", nil, api.PageQuery{Limit: -1})
	require.NoError(t, err)
	require.Equal(t, reps, list.TotalRows)
	for _, d := range list.Docs {
		require.Contains(t, []string{replicator.StateRunning, replicator.StatePending}, d.State)
		if d.Node != nil {
			require.NotEqual(t, "node0", *d.Node)
		}
	}
}

// POST /_replicate one-shot against pouchdb-server: the reply is the final
// checkpoint and the target matches the source.
func TestPouchReplicateOneShot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pouchdb-server")
	}
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "a")
	srv.AddDocs(t, "a", 0, 30)
	c := newCluster(t, 1, nil, testConfig())
	body, _ := json.Marshal(map[string]any{"source": srv.DBURL("a"), "target": srv.DBURL("b"), "create_target": true})
	o, err := c.Plane.Replicate(context.Background(), body, replicator.UserCtx{Name: "bob"})
	require.NoError(t, err)
	require.Equal(t, api.Completed, o.Outcome, "%+v", o)
	var res struct {
		OK        bool              `json:"ok"`
		SessionID string            `json:"session_id"`
		History   []json.RawMessage `json:"history"`
	}
	require.NoError(t, json.Unmarshal(o.Checkpoint, &res))
	require.True(t, res.OK)
	require.NotEmpty(t, res.SessionID)
	require.NotEmpty(t, res.History)
	enginetest.RequireSame(t, srv.DBURL("a"), srv.DBURL("b"))

	// A missing source fails the transient job with db_not_found.
	body, _ = json.Marshal(map[string]any{"source": srv.DBURL("missing"), "target": srv.DBURL("b")})
	o, err = c.Plane.Replicate(context.Background(), body, replicator.UserCtx{Name: "bob"})
	require.NoError(t, err)
	require.Equal(t, api.Failed, o.Outcome)
	require.Equal(t, "db_not_found", o.Tag)
}
