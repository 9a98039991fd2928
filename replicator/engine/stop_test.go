package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestStopAndCancel checks the lifecycle edges: Stop after the end, Stop
// twice, cancelling the context, and that no goroutines stay behind.
func TestStopAndCancel(t *testing.T) {
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 20)
	// Once the runs have ended no goroutine of theirs is left (each run
	// closes its idle HTTP connections).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, srv.DBURL("tgt")),
		CreateTarget: true, Continuous: true}

	ctx, cancel := context.WithCancel(context.Background())
	run := engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID})
	cancel()
	_, err := run.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, run.Stop(context.Background()), context.Canceled, "Stop after the end returns the run's error")

	// Stopped at once: during its setup (ErrStopped) or just after it (nil).
	run = engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID})
	err = run.Stop(context.Background())
	if err != nil {
		require.ErrorIs(t, err, engine.ErrStopped)
		t.Logf("stopped at once, during its setup: %v", err)
	} else {
		t.Log("stopped at once, just after its setup")
	}
	require.Equal(t, err, run.Stop(context.Background()))
	_, werr := run.Wait()
	require.Equal(t, err, werr)

	// Stopped once set up (its first checkpoint tick is the signal): nil.
	ticking := rep
	ticking.CheckpointInterval = time.Millisecond
	setUp := make(chan struct{})
	var once sync.Once
	run = engine.Start(context.Background(), ticking, engine.Options{ServerUUID: testUUID,
		OnCheckpoint: func(engine.Checkpoint) { once.Do(func() { close(setUp) }) }})
	select {
	case <-setUp:
	case <-run.Done():
		_, err := run.Wait()
		t.Fatalf("the run ended: %v", err)
	}
	_, _, ok := run.ID()
	require.True(t, ok)
	require.NoError(t, run.Stop(context.Background()))
	require.NoError(t, run.Stop(context.Background()))
	_, err = run.Wait()
	require.NoError(t, err)

	// An already expired stop context aborts without a final checkpoint.
	run = engine.Start(context.Background(), rep, engine.Options{ServerUUID: testUUID})
	expired, cancelExpired := context.WithCancel(context.Background())
	cancelExpired()
	err = run.Stop(expired)
	if err != nil {
		require.ErrorIs(t, err, engine.ErrStopped)
		t.Logf("stopped with an expired context, cut short: %v", err)
	} else {
		t.Log("stopped with an expired context, with nothing left to checkpoint")
	}
}
