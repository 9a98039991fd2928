package service_test

import (
	"context"
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
	return l.Base.Start(ctx, nil, func(ctx context.Context) {
		l.runs.Add(1)
		<-ctx.Done()
	})
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
	b.Start(context.Background(), func(ctx context.Context) { prepared = ctx }, func(ctx context.Context) { <-ctx.Done() })
	require.NotNil(t, prepared)
	require.NoError(t, prepared.Err())
	b.Stop()
	require.Error(t, prepared.Err(), "Stop cancels the loop's context")
}
