package fdbjobs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestLifecycleStopBeforeStartAndDoubleStop(t *testing.T) {
	testutil.NoLeaks(t)
	b := setup(t)
	m := b.c.NewActivityMonitor(t1)
	b.c.Stop()
	m.Stop()

	b.start(t)
	require.NoError(t, b.c.Start(b.ctx), "Start on a started client does nothing")
	require.NoError(t, m.Start(b.ctx))
	require.NoError(t, m.Start(b.ctx))
	b.add(t, t1, j1, "", 0)
	sub, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)

	m.Stop()
	m.Stop()
	b.c.Stop()
	b.c.Stop()
	_, err = sub.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed, "stopping the client closes its subscriptions")
	_, _, _, err = b.c.Subscribe(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotStarted)

	// It starts again after a stop.
	b.start(t)
	sub, _, _, err = b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	b.accept(t, t1)
	require.Equal(t, Running, next(t, b.ctx, sub).State)
	b.c.Stop()
}

// A blocked Accept ends with its context and leaves no watch or goroutine.
func TestLifecycleAcceptCancelled(t *testing.T) {
	testutil.NoLeaks(t)
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.c.Accept(ctx, t1, AcceptOptions{Timeout: WaitForever})
		done <- err
	}()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// TestLifecycleStress starts and stops clients, monitors and notifiers from
// several goroutines at once, with subscriptions coming and going, and
// checks that no goroutine is left behind.
func TestLifecycleStress(t *testing.T) {
	testutil.NoLeaks(t)
	b := setup(t, func(c *Config) { c.TypeCheckPeriod = time.Millisecond })
	b.add(t, t1, j1, "", 0)
	m := b.c.NewActivityMonitor(t2)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				switch (g + i) % 4 {
				case 0:
					_ = b.c.Start(b.ctx)
				case 1:
					b.c.Stop()
				case 2:
					_ = m.Start(b.ctx)
					m.Stop()
				case 3:
					sub, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
					if err == nil {
						sub.Unsubscribe()
					}
				}
			}
		}()
	}
	wg.Wait()
	b.c.Stop()
	m.Stop()
}

// A client whose start context ends stops its services by itself.
func TestLifecycleStartContextEnds(t *testing.T) {
	testutil.NoLeaks(t)
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	require.NoError(t, b.c.Start(ctx))
	b.add(t, t1, j1, "", 0)
	sub, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	cancel()
	_, err = sub.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed)

	// Start works again without a Stop in between.
	b.start(t)
	sub, _, _, err = b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	sub.Unsubscribe()
	b.c.Stop()
}

// A Subscribe to a type created while the type-check loop had read the
// types without it keeps its notifier: the loop's stale list does not stop
// it (it did, and a POST /_replicate waiting on a new node's first job got
// ErrSubscriptionClosed instead of its result).
func TestSubscriptionOutlivesAStaleTypeList(t *testing.T) {
	b := setup(t)
	read := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	b.c.hooks.typesRead = func() {
		once.Do(func() {
			close(read)
			<-release
		})
	}
	synced := make(chan struct{}, 1)
	b.c.hooks.typesSynced = func() {
		select {
		case synced <- struct{}{}:
		default:
		}
	}
	b.start(t)
	<-read // the loop read the types: t1 and t2, not t3
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "t3", time.Second))
	b.add(t, "t3", j1, `{"n":1}`, 0)
	sub, st, _, err := b.c.Subscribe(b.ctx, nil, "t3", j1)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.Equal(t, Pending, st)
	close(release)
	select {
	case <-synced: // the stale list was applied
	case <-b.ctx.Done():
		t.Fatal("the type-check loop never synced")
	}
	job := b.accept(t, "t3")
	require.NoError(t, b.c.Finish(b.ctx, nil, job, raw(`{"n":2}`)))
	e, err := sub.WaitState(b.ctx, Finished)
	require.NoError(t, err)
	require.Equal(t, Finished, e.State)
	require.JSONEq(t, `{"n":2}`, string(e.Data))
}
