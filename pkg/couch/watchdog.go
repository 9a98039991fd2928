package couch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog cancels an attempt when the peer stays silent for a timeout
// while the client waits on it. It runs on real time, as the network's own
// timeouts do (see Options.Clock).
type watchdog struct {
	timeout time.Duration
	mu      sync.Mutex
	timer   *time.Timer
	fire    func(error)

	// The trickle guard (requests that are not streams): bytes moved in
	// the current ConnectionTimeout window.
	moved  atomic.Int64
	trickT *time.Timer
}

// StallBytes is the least a request that is not a stream must move (sent
// or received) in every ConnectionTimeout window; less is a trickle,
// which fails the request with ErrTimeout.
const StallBytes = 1024

// errTrickle is the cancel cause of the trickle guard.
var errTrickle = fmt.Errorf("%w: the peer moved fewer than %d bytes in connection_timeout", ErrTimeout, StallBytes)

func newWatchdog(timeout time.Duration, cancel context.CancelCauseFunc) *watchdog {
	return &watchdog{timeout: timeout, fire: func(e error) { cancel(e) }}
}

// guardTrickle checks, every ConnectionTimeout until stop, that the
// request moved at least StallBytes.
func (w *watchdog) guardTrickle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var check func()
	check = func() {
		if w.moved.Swap(0) < StallBytes {
			w.fire(errTrickle)
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.trickT != nil {
			w.trickT.Reset(w.timeout)
		}
	}
	w.trickT = time.AfterFunc(w.timeout, check)
}

// restartTrickle starts a new trickle window, if the guard is armed.
func (w *watchdog) restartTrickle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trickT != nil {
		w.moved.Store(0)
		w.trickT.Reset(w.timeout)
	}
}

// progress counts bytes moved, for the trickle guard.
func (w *watchdog) progress(n int) { w.moved.Add(int64(n)) }

// end disarms both timers for good.
func (w *watchdog) end() {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trickT != nil {
		w.trickT.Stop()
		w.trickT = nil
	}
}

// start (re)arms the timer.
func (w *watchdog) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(w.timeout, func() { w.fire(errIdle) })
		return
	}
	w.timer.Reset(w.timeout)
}

// stop disarms the timer.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// kickReader re-arms the watchdog whenever the transport reads more of the
// request body (the peer is accepting data).
type kickReader struct {
	r  io.Reader
	wd *watchdog
}

func (k *kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.wd.progress(n)
	k.wd.start()
	return n, err
}

// watchedBody arms the watchdog only while a Read is blocked, maps the
// watchdog's cancellation to ErrTimeout, and releases the connection slot
// on Close.
type watchedBody struct {
	rc   io.ReadCloser
	wd   *watchdog
	ctx  context.Context
	done func()
	// broken, if set, is told of a Read that failed (not at the end).
	broken func()
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.wd.start()
	n, err := b.rc.Read(p)
	b.wd.stop()
	b.wd.progress(n)
	if err != nil && err != io.EOF {
		if b.broken != nil {
			b.broken()
		}
		if cause := context.Cause(b.ctx); cause != nil && errors.Is(cause, ErrTimeout) {
			err = cause
		}
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	if b.done != nil {
		b.done()
	}
	return err
}
