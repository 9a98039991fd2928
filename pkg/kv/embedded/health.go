package embedded

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// health is what the store knows about its disk: writes waiting for it
// (healthfs.go), pebble's background errors, write stalls. It logs storage
// trouble at a limited rate and tells DB.Health and the commit path.
type health struct {
	dir       string
	clock     clockwork.Clock
	window    time.Duration // how long a background error counts
	w         writeWaiter
	onBlocked func() // called when writes start waiting: the DB refuses commits
	log       rateLog

	mu       sync.Mutex
	bgErr    error     // the last background error, unless a flush or compaction succeeded since
	bgAt     time.Time // on clock
	stalled  string    // why writes are stalled, or ""
	changeCh chan struct{}
}

func newHealth(dir string, o Options) *health {
	h := &health{
		dir:      dir,
		clock:    o.Clock,
		window:   o.StorageErrorWindow,
		changeCh: make(chan struct{}),
	}
	h.w.wake = make(chan struct{})
	h.log = rateLog{clock: o.Clock, interval: o.ErrorLogInterval, out: o.testLog}
	if h.log.out == nil {
		h.log.out = func(s string) { fmt.Fprintln(os.Stderr, s) }
	}
	return h
}

// status returns why the store is unhealthy, or nil: writes waiting for the
// disk (the disk is full, or failing), or a recent background error.
func (h *health) status() error {
	if err := h.commitRefusal(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bgErr != nil && h.clock.Since(h.bgAt) < h.window {
		return fmt.Errorf("%w: embedded store %s: background storage error %v ago: %v",
			errIO, h.dir, h.clock.Since(h.bgAt).Round(time.Second), h.bgErr)
	}
	return nil
}

// commitRefusal returns the error new commits fail with while writes wait
// for the disk, or nil. The commits did not happen and are not retryable.
func (h *health) commitRefusal() error {
	err, file, since := h.writesBlocked()
	if err == nil {
		return nil
	}
	if isNoSpace(err) {
		return fmt.Errorf("%w: %w: embedded store %s: the disk is full (writing %s failed at %s: %v); "+
			"commits are refused until space is freed", errIO, kv.ErrStorageFull, h.dir, file,
			since.Format(time.RFC3339), err)
	}
	return fmt.Errorf("%w: embedded store %s: the disk fails writes (writing %s failed at %s: %v); "+
		"commits are refused until writes succeed", errIO, h.dir, file, since.Format(time.RFC3339), err)
}

// listener is pebble's event listener: background errors are recorded and
// logged at a limited rate (pebble retries a failed flush at once, which
// could log thousands of lines a second); a successful flush or compaction
// clears them.
func (h *health) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			h.mu.Lock()
			h.bgErr, h.bgAt = err, h.clock.Now()
			h.mu.Unlock()
			h.logf("background", "embedded: %s: pebble background error: %v", h.dir, err)
			h.changed()
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				h.clearBackground()
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil {
				h.clearBackground()
			}
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			h.mu.Lock()
			h.stalled = info.Reason
			h.mu.Unlock()
		},
		WriteStallEnd: func() {
			h.mu.Lock()
			h.stalled = ""
			h.mu.Unlock()
		},
	}
}

func (h *health) clearBackground() {
	h.mu.Lock()
	cleared := h.bgErr != nil
	h.bgErr = nil
	h.mu.Unlock()
	if cleared {
		h.changed()
	}
}

// changed wakes whoever waits for a change of health (tests).
func (h *health) changed() {
	h.mu.Lock()
	close(h.changeCh)
	h.changeCh = make(chan struct{})
	h.mu.Unlock()
}

// changes returns a channel closed at the next change of health.
func (h *health) changes() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changeCh
}

func (h *health) logf(key, format string, args ...any) { h.log.logf(key, format, args...) }

// rateLog writes at most one line per key and interval; the next line that
// gets through says how many it stands for.
type rateLog struct {
	clock    clockwork.Clock
	interval time.Duration
	out      func(string)

	mu      sync.Mutex
	last    map[string]time.Time
	skipped map[string]int
}

func (l *rateLog) logf(key, format string, args ...any) {
	l.mu.Lock()
	now := l.clock.Now()
	if l.last == nil {
		l.last, l.skipped = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[key]; ok && now.Sub(t) < l.interval {
		l.skipped[key]++
		l.mu.Unlock()
		return
	}
	msg := fmt.Sprintf(format, args...)
	if n := l.skipped[key]; n > 0 {
		msg += fmt.Sprintf(" (and %d more like this since the last report)", n)
	}
	l.last[key], l.skipped[key] = now, 0
	l.mu.Unlock()
	l.out(msg)
}

// pebbleLogger passes pebble's errors to the rate-limited log and drops its
// informational messages. Fatalf, which pebble calls when it cannot go on
// (a failed WAL sync), stops the process: nothing that was not durable was
// acknowledged, and the WAL replays on the next Open.
type pebbleLogger struct{ h *health }

func (pebbleLogger) Infof(string, ...any) {}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.h.logf("pebble:"+format, "embedded: pebble: "+format, args...)
}

func (pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("embedded: pebble: "+format, args...))
}
