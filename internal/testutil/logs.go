package testutil

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Logs collects the JSON lines of a zerolog logger so that a test can wait
// for a line to be logged (lines logged after a commit or from another
// goroutine arrive when they arrive), and check that nothing secret was
// ever logged. The zero value is ready to use.
type Logs struct {
	mu      sync.Mutex
	raw     bytes.Buffer
	lines   []map[string]any
	changed chan struct{} // closed and replaced at each line
}

// Logger returns a debug-level logger writing to l.
func (l *Logs) Logger() *zerolog.Logger {
	lg := zerolog.New(l).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	return &lg
}

// Write implements io.Writer for zerolog: one JSON object per call.
func (l *Logs) Write(p []byte) (int, error) {
	var m map[string]any
	_ = json.Unmarshal(p, &m)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw.Write(p)
	if m != nil {
		l.lines = append(l.lines, m)
	}
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

// String returns everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

// Find returns the first line logged so far with message msg for which
// match (nil: any) holds, without waiting.
func (l *Logs) Find(msg string, match func(map[string]any) bool) (map[string]any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.lines {
		if m["message"] == msg && (match == nil || match(m)) {
			return m, true
		}
	}
	return nil, false
}

// WaitFor returns the first line, logged before or after the call, with
// message msg for which match (nil: any) holds; it fails t after
// WaitTimeout.
func (l *Logs) WaitFor(t testing.TB, msg string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	seen := 0
	for {
		l.mu.Lock()
		for ; seen < len(l.lines); seen++ {
			if m := l.lines[seen]; m["message"] == msg && (match == nil || match(m)) {
				l.mu.Unlock()
				return m
			}
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for the log line %q", WaitTimeout, msg)
		}
	}
}
