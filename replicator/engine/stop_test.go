package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestStopAndCancel checks the lifecycle edges: Stop after the end, Stop
// twice, cancelling the context, and that no goroutines stay behind.
func TestStopAndCancel(t *testing.T) {
	srv := startPeer(t, 20)
	// Once the runs have ended no goroutine of theirs is left (each run
	// closes its idle HTTP connections).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rep := srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true, Continuous: true})

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
	tr := start(t, ticking, engine.Options{})
	tr.next()
	run = tr.Run
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
