// Package service is the start/stop lifecycle shared by fdbrep's
// long-lived background services (the fdbjobs client, its activity
// monitors and notifiers, replication nodes), after River's startstop.
//
// A service embeds a Base and calls Start with its loop. The rules are the
// same everywhere:
//   - Start decides first: on a running service it does nothing, not even
//     the service's start-up work (River's StartInit). Then it runs that
//     work (prepare), and, unless it failed, the loop on a new goroutine
//     under a context derived from the caller's.
//   - Stop cancels that context and waits for the loop to return. Stop
//     before Start, and a second Stop, do nothing; Stop may race Start.
//   - A service whose context ended (the caller's ctx was cancelled) is
//     stopped in effect: the next Start waits for the old loop to finish
//     and starts a new one.
package service

import (
	"context"
	"sync"
)

// Base is the lifecycle state of one service. The zero value is a stopped
// service; a Base must not be copied after first use.
type Base struct {
	mu     sync.Mutex
	ctx    context.Context // of the running loop
	cancel context.CancelFunc
	done   chan struct{}
}

// Start starts run on a new goroutine with a context derived from ctx and
// reports whether it did (false: the service is already running, or
// prepare failed). prepare, when not nil, is the service's start-up work:
// it runs only when the service is not running, first, on the caller's
// goroutine with that context and under the lifecycle lock, so that state
// it sets is in place before Start returns and before run begins, and a
// concurrent Start or Stop waits for it. When it returns an error the
// service stays stopped and Start returns the error.
func (b *Base) Start(ctx context.Context, prepare func(ctx context.Context) error, run func(ctx context.Context)) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		if b.ctx.Err() == nil {
			return false, nil
		}
		// The loop ends, or ended, with its context: wait, then restart.
		<-b.done
		b.cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	if prepare != nil {
		if err := prepare(ctx); err != nil {
			cancel()
			b.ctx, b.cancel, b.done = nil, nil, nil
			return false, err
		}
	}
	done := make(chan struct{})
	b.ctx, b.cancel, b.done = ctx, cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
	return true, nil
}

// Stop cancels the running loop's context and waits for it to return.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.ctx, b.cancel, b.done = nil, nil, nil
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Running reports whether a loop was started and not stopped, and its
// context has not ended.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctx != nil && b.ctx.Err() == nil
}
