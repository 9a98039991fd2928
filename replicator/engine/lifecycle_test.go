package engine_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// countLeavesAfter counts the leaf revisions the source's feed lists after
// seq.
func countLeavesAfter(t *testing.T, srv *couchtest.Server, db string, seq json.RawMessage) int64 {
	t.Helper()
	rows, _ := srv.Changes(t, db, string(seq))
	n := int64(0)
	for _, r := range rows {
		n += int64(len(r.Changes))
	}
	return n
}

// TestResumeFromCheckpoint stops a run after its first checkpoint and checks
// that the next run starts there and transfers only what followed.
func TestResumeFromCheckpoint(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 3000)
	srv.CreateDB(t, "tgt")
	rep := srcTo(t, srv, "tgt", engine.Replication{WorkerProcesses: 1, WorkerBatchSize: 50, CheckpointInterval: time.Millisecond})
	run := start(t, rep, engine.Options{})
	for !run.next().Written { // until the first checkpoint written
	}
	require.NoError(t, run.Stop(run.ctx))
	require.NoError(t, run.Stop(run.ctx), "Stop twice")
	first, err := run.Wait()
	require.NoError(t, err)
	require.False(t, first.Completed)
	checkpointed := first.SourceLastSeq
	require.Equal(t, seqText(checkpointed), first.Stats.CheckpointedSourceSeq, "the final checkpoint covers everything written")
	require.Less(t, first.Stats.DocsWritten, int64(3000), "stopped mid-way")
	tgtDocs := int64(srv.DBInfo(t, "tgt")["doc_count"].(float64))
	require.Equal(t, first.Stats.DocsWritten, tgtDocs)

	after := countLeavesAfter(t, srv, "src", checkpointed)
	second := runOnce(t, rep, engine.Options{})
	require.True(t, second.Completed)
	require.JSONEq(t, string(checkpointed), string(second.StartSeq))
	require.Equal(t, after, second.Stats.RevisionsChecked-first.Stats.RevisionsChecked)
	require.Equal(t, after, second.Stats.DocsWritten-first.Stats.DocsWritten, "no document transferred twice")
	require.Equal(t, int64(3000), second.Stats.DocsWritten)
	require.Len(t, second.History, 2)
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("tgt"))
}

// TestCheckpointsOnClock runs a continuous replication on a fake clock: a
// checkpoint happens at each tick of the clock and at Stop, and
// Checkpoint.Time and the history's timestamps are the clock's.
func TestCheckpointsOnClock(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 20)
	began := time.Date(2013, 8, 11, 20, 38, 50, 0, time.UTC)
	clk := clockwork.NewFakeClockAt(began)
	const interval = time.Minute
	rep := srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true, Continuous: true, CheckpointInterval: interval})
	run := start(t, rep, engine.Options{Clock: clk})

	// Tick until a checkpoint has recorded every document.
	for ticks := 1; ; ticks++ {
		// Without failures, the ticker is the run's one timer.
		require.NoError(t, clk.BlockUntilContext(run.ctx, 1))
		clk.Advance(interval)
		c := run.next()
		require.Equal(t, began.Add(time.Duration(ticks)*interval), c.Time, "tick %d", ticks)
		if c.Written && c.Stats.DocsWritten == 20 {
			break
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- run.Stop(run.ctx) }()
	require.Equal(t, clk.Now(), run.next().Time, "the final checkpoint")
	require.NoError(t, <-stopped)
	res, err := run.Wait()
	require.NoError(t, err)
	require.Len(t, res.History, 1)
	require.Equal(t, "Sun, 11 Aug 2013 20:38:50 GMT", res.History[0].StartTime)
	require.Equal(t, clk.Now().Format(http.TimeFormat), res.History[0].EndTime)
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("tgt"))
}

func TestContinuous(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 200)
	run := start(t, srcTo(t, srv, "tgt", engine.Replication{Continuous: true, CreateTarget: true,
		CheckpointInterval: 20 * time.Millisecond}), engine.Options{})
	run.waitWritten(200)
	_, full, ok := run.ID()
	require.True(t, ok)
	require.Contains(t, full, "+continuous+create_target")

	srv.AddDocs(t, "src", 200, 100)
	doc := srv.GetDoc(t, "src", "doc-00000001")
	doc["changed"] = true
	srv.PutDoc(t, "src", doc)
	doc = srv.GetDoc(t, "src", "doc-00000002")
	doc["_deleted"] = true
	srv.PutDoc(t, "src", doc)
	run.waitWritten(302)

	require.NoError(t, run.Stop(run.ctx))
	res, err := run.Wait()
	require.NoError(t, err)
	require.Equal(t, int64(302), res.Stats.DocsWritten)
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("tgt"))
	require.False(t, srv.Exited())
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t, couchtest.WithAdmin("admin", "secret"))
	srv.CreateDB(t, "closed")
	srv.SetSecurity(t, "closed", map[string]any{"members": map[string]any{"names": []string{"admin"}}})
	srv.CreateDB(t, "open")
	authed := func(db, user, pass string) couch.Endpoint {
		ep := endpoint(t, srv.AuthDBURL(db))
		ep.Username, ep.Password = user, pass
		return ep
	}
	tests := []struct {
		name string
		rep  engine.Replication
		want error
	}{
		{"missing source", engine.Replication{Source: authed("nope", "admin", "secret"), Target: authed("open", "admin", "secret")}, engine.ErrDBNotFound},
		{"missing target", engine.Replication{Source: authed("open", "admin", "secret"), Target: authed("nope", "admin", "secret")}, engine.ErrDBNotFound},
		{"wrong password", engine.Replication{Source: authed("closed", "admin", "wrong"), Target: authed("open", "admin", "secret")}, engine.ErrUnauthorized},
		{"anonymous", engine.Replication{Source: authed("closed", "", ""), Target: authed("open", "admin", "secret")}, engine.ErrUnauthorized},
		{"bad spec", engine.Replication{Source: authed("open", "", ""), Target: authed("open", "", ""), Filter: "nofilter"}, engine.ErrInvalidSpec},
		{"missing filter", engine.Replication{Source: authed("open", "admin", "secret"), Target: authed("open", "admin", "secret"), Filter: "d/f"}, engine.ErrFilterFetch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := start(t, tt.rep, engine.Options{}).Wait()
			require.ErrorIs(t, err, tt.want)
			require.NotContains(t, err.Error(), "secret")
			require.NotContains(t, err.Error(), "wrong")
		})
	}

	// create_target with credentials works; a wrong password does not.
	rep := engine.Replication{Source: authed("open", "admin", "secret"), Target: authed("created", "admin", "secret"), CreateTarget: true}
	runOnce(t, rep, engine.Options{})
	rep.Target = authed("created2", "admin", "wrong")
	_, err := start(t, rep, engine.Options{}).Wait()
	require.ErrorIs(t, err, engine.ErrUnauthorized)
	// Anonymous: pouchdb-server would crash on the PUT, so it is not sent.
	rep.Target = authed("created3", "", "")
	_, err = start(t, rep, engine.Options{}).Wait()
	require.ErrorIs(t, err, engine.ErrUnauthorized)
	require.False(t, srv.Exited())
}

// throughFaults returns rep replicating the database src of srv into its
// database tgt through a proxy that injects the faults of cfg, seeded from
// the clock (the seed is logged), and the proxy.
func throughFaults(t *testing.T, srv *couchtest.Server, cfg couchtest.FaultConfig, rep engine.Replication) (engine.Replication, *couchtest.FaultProxy) {
	t.Helper()
	cfg.Seed = uint64(time.Now().UnixNano())
	t.Logf("seed %d", cfg.Seed)
	proxy := couchtest.NewFaultProxy(t, srv.URL(), cfg)
	rep.Source, rep.Target = endpoint(t, authURL(srv, proxy.URL()+"/src")), endpoint(t, authURL(srv, proxy.URL()+"/tgt"))
	return rep, proxy
}

// TestFaults replicates through fault-injecting proxies on both sides and
// requires the same outcome as without faults.
func TestFaults(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	srv.CreateDB(t, "tgt")
	fixture(t, srv, "src", 400, 3)
	rep, proxy := throughFaults(t, srv, couchtest.FaultConfig{Rate500: 0.04, Rate429: 0.04, RateDrop: 0.03, RateReset: 0.03,
		RateStall: 0.02, Stall: 300 * time.Millisecond},
		engine.Replication{WorkerBatchSize: 10, CheckpointInterval: 50 * time.Millisecond, RetriesPerRequest: 8})
	// A run may still fail when one request exhausts its retries; the
	// next run resumes from its checkpoint, as the scheduler would do.
	var res engine.Result
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 10, "too many failed runs")
		var err error
		res, err = start(t, rep, engine.Options{}).Wait()
		if err == nil {
			break
		}
		t.Logf("run %d failed: %v", attempt, err)
		require.False(t, errors.Is(err, engine.ErrInvalidSpec))
	}
	counts := proxy.Counts()
	t.Logf("faults: %+v", counts)
	require.Positive(t, counts.Total())
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("tgt"))
	require.Zero(t, res.Stats.DocWriteFailures)
	require.False(t, srv.Exited())
}

// TestFaultsContinuous runs a continuous replication through fault-injecting
// proxies while the source keeps changing.
func TestFaultsContinuous(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 100)
	srv.CreateDB(t, "tgt")
	rep, proxy := throughFaults(t, srv, couchtest.FaultConfig{Rate500: 0.05, Rate429: 0.05, RateDrop: 0.04, RateReset: 0.04,
		RateStall: 0.02, Stall: 200 * time.Millisecond},
		engine.Replication{Continuous: true, WorkerBatchSize: 10, CheckpointInterval: 20 * time.Millisecond, RetriesPerRequest: 10})
	run := start(t, rep, engine.Options{})
	for i := 1; i <= 3; i++ {
		srv.AddDocs(t, "src", 100*i, 100)
	}
	run.waitWritten(400)
	require.NoError(t, run.Stop(run.ctx))
	t.Logf("faults: %+v", proxy.Counts())
	enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL("tgt"))
}

// TestMaxBackoff checks that a peer answering nothing but 429 ends the run
// with ErrMaxBackoff once the shared limiter reaches its ceiling.
func TestMaxBackoff(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 10)
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{Seed: 1, Rate429: 1})
	limiter, err := couch.NewRateLimiter(couch.RateLimiterConfig{MaxInterval: 200 * time.Millisecond, MinUpdateInterval: time.Millisecond})
	require.NoError(t, err)
	rep := engine.Replication{Source: endpoint(t, srv.AuthDBURL("src")), Target: endpoint(t, authURL(srv, proxy.URL()+"/tgt"))}
	_, err = start(t, rep, engine.Options{Limiter: limiter}).Wait()
	require.ErrorIs(t, err, engine.ErrMaxBackoff)
}
