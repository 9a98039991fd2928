package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestCheckpointsOnClock runs a continuous replication on a fake clock: a
// checkpoint happens at each tick of the clock and at Stop, and
// Checkpoint.Time and the history's timestamps are the clock's.
func TestCheckpointsOnClock(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 20)
	start := time.Date(2013, 8, 11, 20, 38, 50, 0, time.UTC)
	clk := clockwork.NewFakeClockAt(start)
	const interval = time.Minute
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")),
		CreateTarget: true, Continuous: true, CheckpointInterval: interval}
	events := make(chan engine.Checkpoint, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID, Clock: clk,
		OnCheckpoint: func(c engine.Checkpoint) { events <- c }})
	next := func() engine.Checkpoint {
		t.Helper()
		select {
		case c := <-events:
			return c
		case <-run.Done():
			_, err := run.Wait()
			t.Fatalf("the run ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("no checkpoint: %+v", run.Progress())
		}
		return engine.Checkpoint{}
	}

	// Tick until a checkpoint has recorded every document.
	for ticks := 1; ; ticks++ {
		// Without failures, the ticker is the run's one timer.
		require.NoError(t, clk.BlockUntilContext(ctx, 1))
		clk.Advance(interval)
		c := next()
		require.Equal(t, start.Add(time.Duration(ticks)*interval), c.Time, "tick %d", ticks)
		if c.Written && c.Stats.DocsWritten == 20 {
			break
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- run.Stop(ctx) }()
	require.Equal(t, clk.Now(), next().Time, "the final checkpoint")
	require.NoError(t, <-stopped)
	res, err := run.Wait()
	require.NoError(t, err)
	require.Len(t, res.History, 1)
	require.Equal(t, "Sun, 11 Aug 2013 20:38:50 GMT", res.History[0].StartTime)
	require.Equal(t, clk.Now().Format(http.TimeFormat), res.History[0].EndTime)
	enginetest.RequireSame(t, srv.DBURL("src"), srv.DBURL("tgt"))
}
