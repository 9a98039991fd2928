package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

type loop struct {
	service.Base
	runs atomic.Int32
}

func (l *loop) Start(ctx context.Context) bool {
	started, err := l.Base.Start(ctx, nil, func(ctx context.Context) {
		l.runs.Add(1)
		<-ctx.Done()
	})
	if err != nil {
		panic(err)
	}
	return started
}

func TestLifecycle(t *testing.T) {
	var l loop
	l.Stop() // before Start: nothing
	require.False(t, l.Running())

	require.True(t, l.Start(context.Background()))
	require.False(t, l.Start(context.Background()), "already running")
	require.True(t, l.Running())
	l.Stop()
	l.Stop() // twice: nothing
	require.False(t, l.Running())
	require.EqualValues(t, 1, l.runs.Load())

	// A service whose context ended starts again.
	ctx, cancel := context.WithCancel(context.Background())
	require.True(t, l.Start(ctx))
	cancel()
	require.False(t, l.Running())
	require.True(t, l.Start(context.Background()))
	l.Stop()
	require.EqualValues(t, 3, l.runs.Load())
}

func TestPrepareRunsBeforeStartReturns(t *testing.T) {
	var b service.Base
	var prepared context.Context
	started, err := b.Start(context.Background(), func(ctx context.Context) error { prepared = ctx; return nil }, func(ctx context.Context) { <-ctx.Done() })
	require.NoError(t, err)
	require.True(t, started)
	require.NotNil(t, prepared)
	require.NoError(t, prepared.Err())
	b.Stop()
	require.Error(t, prepared.Err(), "Stop cancels the loop's context")
}

// A running service's start-up work is not done again: a second Start
// decides before it (River's StartInit).
func TestPrepareRunsOnlyWhenStarting(t *testing.T) {
	var b service.Base
	var prepares int
	prepare := func(context.Context) error { prepares++; return nil }
	run := func(ctx context.Context) { <-ctx.Done() }
	started, err := b.Start(context.Background(), prepare, run)
	require.NoError(t, err)
	require.True(t, started)
	started, err = b.Start(context.Background(), prepare, run)
	require.NoError(t, err)
	require.False(t, started)
	require.Equal(t, 1, prepares, "a second Start must not redo the start-up work")
	b.Stop()
}

// A failed start-up leaves the service stopped, its context cancelled,
// and a later Start starts it.
func TestPrepareErrorLeavesServiceStopped(t *testing.T) {
	var b service.Base
	boom := errors.New("boom")
	var prepared context.Context
	ran := false
	started, err := b.Start(context.Background(), func(ctx context.Context) error { prepared = ctx; return boom }, func(context.Context) { ran = true })
	require.ErrorIs(t, err, boom)
	require.False(t, started)
	require.False(t, b.Running())
	require.Error(t, prepared.Err(), "the failed start's context is cancelled")
	b.Stop() // nothing to stop
	require.False(t, ran)

	started, err = b.Start(context.Background(), nil, func(ctx context.Context) { <-ctx.Done() })
	require.NoError(t, err)
	require.True(t, started)
	b.Stop()
}
