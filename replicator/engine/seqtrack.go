package engine

import (
	"encoding/json"
	"sync"
)

// seqTracker orders batches so that a checkpoint never claims a sequence
// whose changes are not all written. Each batch handed to a worker gets an
// increasing ticket together with the sequence of its last row; through is
// the sequence of the last batch of the longest completed prefix of tickets.
// Tickets exist because sequences are opaque (clustered CouchDB sequences
// cannot be compared). Unlike CouchDB, which advances only to the lowest
// finished batch, the tracker skips over every batch already finished behind
// it, so a slow batch does not hold the checkpoint back once it completes.
type seqTracker struct {
	mu       sync.Mutex
	next     uint64
	pending  []trackedBatch // in ticket order
	through  json.RawMessage
	passed   int64 // the changes of the batches through covers
	finished int64 // the changes of every finished batch, past through too
	// Changes are documents' rows; the marker of a feed's last_seq is none.
	highest  json.RawMessage
	highestT uint64
}

type trackedBatch struct {
	ticket  uint64
	seq     json.RawMessage
	changes int
	bytes   int64 // what its rows count toward ChangesQueueMax
	done    bool
}

// newSeqTracker starts at the given sequence (the replication's start seq).
func newSeqTracker(start json.RawMessage) *seqTracker {
	return &seqTracker{through: start, highest: start}
}

// begin registers a batch of changes ending at seq, whose rows count
// bytes toward ChangesQueueMax, and returns its ticket. Batches must begin
// in feed order.
func (t *seqTracker) begin(seq json.RawMessage, changes int, bytes int64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.pending = append(t.pending, trackedBatch{ticket: t.next, seq: seq, changes: changes, bytes: bytes})
	return t.next
}

// done marks the batch with the given ticket as written and advances through
// over the completed prefix. Unknown tickets are ignored. It returns the
// bytes of the batches the tracker no longer holds (a batch finished
// behind a slower one is held, its sequence with it, until that one
// finishes).
func (t *seqTracker) done(ticket uint64) (released int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.pending {
		if t.pending[i].ticket == ticket && !t.pending[i].done {
			t.pending[i].done = true
			t.finished += int64(t.pending[i].changes)
			if ticket > t.highestT {
				t.highestT, t.highest = ticket, t.pending[i].seq
			}
			break
		}
	}
	n := 0
	for n < len(t.pending) && t.pending[n].done {
		t.through = t.pending[n].seq
		t.passed += int64(t.pending[n].changes)
		released += t.pending[n].bytes
		n++
	}
	t.pending = t.pending[n:]
	return released
}

// snapshot returns the checkpointable sequence, the highest finished
// sequence and the number of batches in flight.
func (t *seqTracker) snapshot() (through, highest json.RawMessage, inFlight int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.through, t.highest, len(t.pending)
}

// finishedAhead returns the checkpointable sequence, the changes up to it
// and the changes of the batches finished past it.
func (t *seqTracker) finishedAhead() (through json.RawMessage, passed, ahead int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.through, t.passed, t.finished - t.passed
}

// passedThrough returns the checkpointable sequence with the number of
// changes the run has processed up to it.
func (t *seqTracker) passedThrough() (json.RawMessage, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.through, t.passed
}
