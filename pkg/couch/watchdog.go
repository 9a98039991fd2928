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

// endTrickle disarms the trickle guard's timer for good (a body handed
// to the caller is guarded by its readTrickle instead).
func (w *watchdog) endTrickle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trickT != nil {
		w.trickT.Stop()
		w.trickT = nil
	}
}

// end disarms both timers for good.
func (w *watchdog) end() {
	w.stop()
	w.endTrickle()
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
// watchdog's cancellation to ErrTimeout, stops at the request's MaxBody,
// and releases the connection slot on Close.
type watchedBody struct {
	rc   io.ReadCloser
	wd   *watchdog
	ctx  context.Context
	done func()
	// left is how many more bytes the body may have, -1 for no limit;
	// past it Read fails with tooLarge.
	left     int64
	tooLarge error
	// trickle guards a body handed to the caller of a request that is not
	// a stream; nil for the others.
	trickle *readTrickle
	// broken, if set, is told of a Read that failed (not at the end).
	broken func()
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.left >= 0 && int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte past the limit tells a longer body
	}
	var began time.Time
	if b.trickle != nil {
		began = time.Now()
	}
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
	if b.left >= 0 {
		if int64(n) > b.left {
			n, b.left = int(b.left), 0
			b.wd.fire(b.tooLarge) // the rest is not read: drop the connection
			return n, b.tooLarge
		}
		b.left -= int64(n)
	}
	if b.trickle != nil && !b.trickle.add(time.Since(began), n) {
		b.wd.fire(errTrickle)
		return n, errTrickle
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

// readTrickle is the trickle guard of a body that Do hands to its caller
// for a request that is not a Stream. Only the time its Reads wait on the
// peer counts, so that a caller pausing between Reads (to write what it
// read, or to wait its turn) is not taken for a trickling peer: whenever
// the waits add up to timeout, the Reads must have got StallBytes since
// the last check.
type readTrickle struct {
	timeout time.Duration
	waited  time.Duration
	moved   int64
}

// add records a Read that waited d for n bytes and reports whether the
// peer keeps up.
func (t *readTrickle) add(d time.Duration, n int) bool {
	t.waited += d
	t.moved += int64(n)
	if t.waited < t.timeout {
		return true
	}
	ok := t.moved >= StallBytes
	t.waited, t.moved = 0, 0
	return ok
}
