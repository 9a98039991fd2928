package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/stretchr/testify/require"
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
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.CreateDB(t, "tgt")
	srv.AddDocs(t, "src", 0, 3000)
	rep := engine.Replication{
		Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")),
		WorkerProcesses: 1, WorkerBatchSize: 50, CheckpointInterval: time.Millisecond,
	}
	written := make(chan struct{})
	var once bool
	opts := engine.Options{ServerUUID: testUUID, OnCheckpoint: func(c engine.Checkpoint) {
		if c.Written && !once {
			once = true
			close(written)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := engine.Start(ctx, rep, opts)
	select {
	case <-written:
	case <-run.Done():
		t.Fatal("the run ended before its first checkpoint")
	}
	require.NoError(t, run.Stop(ctx))
	require.NoError(t, run.Stop(ctx), "Stop twice")
	first, err := run.Wait()
	require.NoError(t, err)
	require.False(t, first.Completed)
	checkpointed := first.SourceLastSeq
	require.Equal(t, string(checkpointed), first.Stats.CheckpointedSourceSeq, "the final checkpoint covers everything written")
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
	enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("tgt"))
}

func TestContinuous(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 200)
	rep := engine.Replication{
		Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")),
		Continuous: true, CreateTarget: true, CheckpointInterval: 20 * time.Millisecond,
	}
	events := make(chan engine.Checkpoint, 1)
	opts := engine.Options{ServerUUID: testUUID, OnCheckpoint: func(c engine.Checkpoint) {
		select {
		case events <- c:
		default:
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := engine.Start(ctx, rep, opts)
	waitWritten := func(n int64) {
		t.Helper()
		for {
			select {
			case c := <-events:
				if c.Stats.DocsWritten >= n {
					return
				}
			case <-run.Done():
				_, err := run.Wait()
				t.Fatalf("continuous run ended: %v", err)
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %d writes: %+v", n, run.Progress())
			}
		}
	}
	waitWritten(200)
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
	waitWritten(302)

	require.NoError(t, run.Stop(ctx))
	res, err := run.Wait()
	require.NoError(t, err)
	require.Equal(t, int64(302), res.Stats.DocsWritten)
	enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("tgt"))
	require.False(t, srv.Exited())
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t, couchtest.WithAdmin("admin", "secret"))
	srv.CreateDB(t, "closed")
	srv.SetSecurity(t, "closed", map[string]any{"members": map[string]any{"names": []string{"admin"}}})
	srv.CreateDB(t, "open")
	authed := func(db, user, pass string) couch.Endpoint {
		ep := endpoint(t, srv.DBURL(db))
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
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := engine.Start(ctx, tt.rep, engine.Options{ServerUUID: testUUID}).Wait()
			require.ErrorIs(t, err, tt.want)
			require.NotContains(t, err.Error(), "secret")
			require.NotContains(t, err.Error(), "wrong")
		})
	}

	// create_target with credentials works; a wrong password does not.
	rep := engine.Replication{Source: authed("open", "admin", "secret"), Target: authed("created", "admin", "secret"), CreateTarget: true}
	runOnce(t, rep, engine.Options{})
	rep.Target = authed("created2", "admin", "wrong")
	_, err := engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID}).Wait()
	require.ErrorIs(t, err, engine.ErrUnauthorized)
	// Anonymous: pouchdb-server would crash on the PUT, so it is not sent.
	rep.Target = authed("created3", "", "")
	_, err = engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID}).Wait()
	require.ErrorIs(t, err, engine.ErrUnauthorized)
	require.False(t, srv.Exited())
}

// TestFaults replicates through fault-injecting proxies on both sides and
// requires the same outcome as without faults.
func TestFaults(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.CreateDB(t, "tgt")
	fixture(t, srv, "src", 400, 3)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	cfg := couchtest.FaultConfig{Seed: seed, Rate500: 0.04, Rate429: 0.04, RateDrop: 0.03, RateReset: 0.03, RateStall: 0.02,
		Stall: 300 * time.Millisecond}
	proxy := couchtest.NewFaultProxy(t, srv.URL(), cfg)
	rep := engine.Replication{
		Source: endpoint(t, proxy.URL()+"/src"), Target: endpoint(t, proxy.URL()+"/tgt"),
		WorkerBatchSize: 10, CheckpointInterval: 50 * time.Millisecond, RetriesPerRequest: 8,
	}
	// A run may still fail when one request exhausts its retries; the
	// next run resumes from its checkpoint, as the scheduler would do.
	var res engine.Result
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 10, "too many failed runs")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		res, err = engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID}).Wait()
		cancel()
		if err == nil {
			break
		}
		t.Logf("run %d failed: %v", attempt, err)
		require.False(t, errors.Is(err, engine.ErrInvalidSpec))
	}
	counts := proxy.Counts()
	t.Logf("faults: %+v", counts)
	require.Positive(t, counts.Total())
	enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("tgt"))
	require.Zero(t, res.Stats.DocWriteFailures)
	require.False(t, srv.Exited())
	_ = fmt.Sprint()
}

// TestFaultsContinuous runs a continuous replication through fault-injecting
// proxies while the source keeps changing.
func TestFaultsContinuous(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.CreateDB(t, "tgt")
	srv.AddDocs(t, "src", 0, 100)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{Seed: seed, Rate500: 0.05, Rate429: 0.05,
		RateDrop: 0.04, RateReset: 0.04, RateStall: 0.02, Stall: 200 * time.Millisecond})
	rep := engine.Replication{
		Source: endpoint(t, proxy.URL()+"/src"), Target: endpoint(t, proxy.URL()+"/tgt"), Continuous: true,
		WorkerBatchSize: 10, CheckpointInterval: 20 * time.Millisecond, RetriesPerRequest: 10,
	}
	events := make(chan engine.Checkpoint, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID, OnCheckpoint: func(c engine.Checkpoint) {
		select {
		case events <- c:
		default:
		}
	}})
	for i := 1; i <= 3; i++ {
		srv.AddDocs(t, "src", 100*i, 100)
	}
	for done := false; !done; {
		select {
		case c := <-events:
			done = c.Stats.DocsWritten >= 400
		case <-run.Done():
			_, err := run.Wait()
			t.Fatalf("continuous run ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("timed out: %+v", run.Progress())
		}
	}
	require.NoError(t, run.Stop(ctx))
	t.Logf("faults: %+v", proxy.Counts())
	enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("tgt"))
}
