package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/jonboulle/clockwork"
)

// Stall reasons: why a job that is not caught up is not moving (Stall).
// The list is closed; docs/COMPAT.md describes each.
const (
	// StallSourceUnreachable: requests to the source fail without an
	// answer (connection refused, no route, name not resolved, TLS).
	StallSourceUnreachable = "source_unreachable"
	// StallTargetUnreachable: the same for the target.
	StallTargetUnreachable = "target_unreachable"
	// StallConnectionStalled: a peer stopped sending in the middle of a
	// reply, or sent nothing, for connection_timeout.
	StallConnectionStalled = "connection_stalled"
	// StallRetrying: a request is being retried after a 408, 429 or 5xx
	// answer or a connection cut short (the detail says which attempt of
	// how many, and to which host).
	StallRetrying = "retrying"
	// StallTargetRefusing: the target refused every document of the last
	// write (the detail has the status); cleared when one is written.
	StallTargetRefusing = "target_refusing_writes"
	// StallFiltering: a filtered replication is not caught up, has
	// nothing in flight, and no change has passed its filter for
	// StallAfter: the source reads its changes, none passing.
	StallFiltering = "filtering"
	// StallBackingOff: the job crashed and waits out its backoff (set by
	// the scheduler's views from the job's state, never by a run).
	StallBackingOff = "backing_off"
	// StallNoReplicationNode: the job waits for a replication node and no
	// live member of the cluster has the replication role (set by the
	// control plane's views from the membership, never by a run).
	StallNoReplicationNode = "no_replication_node"
	// StallNodeDown: the node that ran the job is no longer a live member
	// of the cluster (it died, or is cut off from the store), while other
	// replication nodes are; the job goes back to the queue when the
	// activity monitor finds it without heartbeats (set by the control
	// plane's views from the membership, never by a run).
	StallNodeDown = "node_down"
)

// StallAfter is how long a filtered replication with changes ahead may
// read changes without any passing its filter before it is shown as
// StallFiltering.
const StallAfter = 10 * time.Second

// throughputWindow is the period Sync.Throughput averages over.
const throughputWindow = time.Minute

// RefusedDocsMax is how many refused documents a run keeps (the last
// ones), and a job shows.
const RefusedDocsMax = 100

// RefusedDoc is a document the target refused to write.
type RefusedDoc struct {
	ID     string `json:"id"`
	Rev    string `json:"rev,omitempty"`
	Status int    `json:"status,omitempty"` // the HTTP status, or CouchDB's for its error
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Time   int64  `json:"time"` // Unix ms
	// Seq numbers the run's refusals from 1.
	Seq int64 `json:"seq"`
}

// refusedFieldMax bounds each text field of a RefusedDoc (in bytes), so
// that RefusedDocsMax of them stay well under a store value's 100 kB.
const refusedFieldMax = 200

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Stall says why a job is not progressing: one of the Stall… reasons, a
// detail for people, and since when (Unix ms).
type Stall struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
	Since  int64  `json:"since"`
	// Until is when a backing-off job is retried (Unix ms; 0 otherwise).
	Until int64 `json:"until,omitempty"`
}

// Sync is whether a run is in sync with its source, and if not, why: what
// the views show beside the counters (see docs/COMPAT.md, "Is it in
// sync?"). Times are Unix ms, 0 when unknown.
type Sync struct {
	// CaughtUp reports that the run has processed every change it has
	// received, and the source had none after them when last asked (the
	// pending count of the setup or the last checkpoint, counted down by
	// the changes processed since, is 0; or the last changes request
	// ended at the feed's end).
	CaughtUp bool `json:"caught_up"`
	// CaughtUpSince is when the run last caught up after replicating
	// anything: when it was first seen caught up, or when it last
	// finished a batch of changes if later (changes that came and were
	// replicated between two readings, which never saw it behind).
	CaughtUpSince int64 `json:"caught_up_since,omitempty"`
	// BehindSince is when a run that is not caught up last was (or its
	// start); 0 while caught up.
	BehindSince int64 `json:"behind_since,omitempty"`
	// LastProgress is when the run last finished a batch of changes (its
	// documents checked, and written where missing).
	LastProgress int64 `json:"last_progress,omitempty"`
	// Throughput is the revisions checked per second over the last minute
	// (over the run's life when shorter).
	Throughput float64 `json:"throughput"`
	// Stall is nil while the run progresses, or is idle and caught up.
	Stall *Stall `json:"stall,omitempty"`
	// Checkpoint is where the run started (nil until its setup is done).
	Checkpoint *CheckpointStart `json:"checkpoint,omitempty"`
}

// Equal reports whether two readings are the same (the progress loop
// writes only what changed).
func (s Sync) Equal(o Sync) bool {
	if (s.Stall == nil) != (o.Stall == nil) || s.Stall != nil && *s.Stall != *o.Stall {
		return false
	}
	if (s.Checkpoint == nil) != (o.Checkpoint == nil) || s.Checkpoint != nil && *s.Checkpoint != *o.Checkpoint {
		return false
	}
	s.Stall, o.Stall, s.Checkpoint, o.Checkpoint = nil, nil, nil, nil
	return s == o
}

// side is which peer a condition is about.
type side int

const (
	sourceSide side = iota
	targetSide
)

// condition is a cause of a stall that is present: its reason, detail
// and since when.
type condition struct {
	reason, detail string
	since          int64
}

// health keeps what Sync is computed from. Its methods are safe for
// concurrent use; the zero value is not usable (newHealth).
type health struct {
	clock clockwork.Clock
	// sent counts the rows the changes reader handed to the workers.
	sent atomic.Int64
	// feedEnd reports that the last changes request ended at the feed's
	// end and no row came after it.
	feedEnd atomic.Bool

	mu sync.Mutex
	// peer holds each side's transport condition, if any.
	peer [2]*condition
	// refusing is set while the target refuses every document written.
	refusing *condition
	// filtered: the replication has a filter; lastMatch is when a row
	// last passed it (or the run started).
	filtered  bool
	lastMatch int64
	caughtUp  int64 // since when caught up (0: not)
	behind    int64 // since when not caught up (0: caught up)
	progress  int64
	samples   []sample     // revisions checked, at least a second apart, over throughputWindow
	refused   []RefusedDoc // the last RefusedDocsMax
	refusedN  int64        // refusals so far (the last one's Seq)
}

type sample struct {
	at      int64
	checked int64
}

func newHealth(clock clockwork.Clock, filtered bool) *health {
	now := clock.Now().UnixMilli()
	return &health{clock: clock, filtered: filtered, lastMatch: now, behind: now}
}

func (h *health) now() int64 { return h.clock.Now().UnixMilli() }

// observer returns the couch.Options.Observe of one side's client.
func (h *health) observer(s side) func(couch.Attempt) {
	if h == nil {
		return nil
	}
	return func(a couch.Attempt) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if a.Err == nil {
			h.peer[s] = nil
			return
		}
		reason, what := attemptReason(s, a.Err)
		detail := fmt.Sprintf("%s %s: %s (attempt %d of %d", a.Method, a.URL, what, a.N, a.Max)
		if a.Final {
			detail += ", giving up)"
		} else {
			detail += ")"
		}
		since := h.now()
		if c := h.peer[s]; c != nil && c.reason == reason {
			since = c.since
		}
		h.peer[s] = &condition{reason: reason, detail: detail, since: since}
	}
}

// attemptReason classifies a failed attempt: no connection (unreachable),
// a stall, or anything else that is retried.
func attemptReason(s side, err error) (reason, what string) {
	var herr *couch.HTTPError
	switch {
	case errors.As(err, &herr):
		return StallRetrying, fmt.Sprintf("%d %s", herr.Status, herr.Error_)
	case errors.Is(err, couch.ErrTimeout):
		return StallConnectionStalled, err.Error()
	case Unreachable(err) || errors.Is(err, couch.ErrTLS) || errors.Is(err, couch.ErrAddressDenied):
		if s == sourceSide {
			return StallSourceUnreachable, err.Error()
		}
		return StallTargetUnreachable, err.Error()
	}
	return StallRetrying, err.Error()
}

// wrote records a write of n documents of which failed were refused,
// the first refusal with status.
func (h *health) wrote(n, failed int, status int, why string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if failed < n || n == 0 {
		h.refusing = nil
		return
	}
	since := h.now()
	if h.refusing != nil {
		since = h.refusing.since
	}
	h.refusing = &condition{reason: StallTargetRefusing, since: since,
		detail: fmt.Sprintf("the target refused the last %d document(s) written: %d %s", n, status, why)}
}

// rowSent records a row handed to the workers; matched reports a
// document's row (not the marker of a feed's last sequence).
func (h *health) rowSent(matched bool) {
	if h == nil {
		return
	}
	h.sent.Add(1)
	h.feedEnd.Store(false)
	if matched {
		now := h.now()
		h.mu.Lock()
		h.lastMatch = now
		h.mu.Unlock()
	}
}

// refuse records a document the target refused.
func (h *health) refuse(id, rev string, status int, errName, reason string) {
	if h == nil {
		return
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refusedN++
	h.refused = append(h.refused, RefusedDoc{ID: clip(id, refusedFieldMax), Rev: clip(rev, 64), Status: status,
		Error: clip(errName, 64), Reason: clip(reason, refusedFieldMax), Time: now, Seq: h.refusedN})
	if len(h.refused) > RefusedDocsMax {
		h.refused = h.refused[len(h.refused)-RefusedDocsMax:]
	}
}

// refusedAfter returns the refusals kept whose Seq is above after.
func (h *health) refusedAfter(after int64) []RefusedDoc {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []RefusedDoc
	for _, d := range h.refused {
		if d.Seq > after {
			out = append(out, d)
		}
	}
	return out
}

// feedEnded records a changes request that ended at the feed's end.
func (h *health) feedEnded() {
	if h != nil {
		h.feedEnd.Store(true)
	}
}

// batchDone records a finished batch.
func (h *health) batchDone() {
	if h == nil {
		return
	}
	now := h.now()
	h.mu.Lock()
	h.progress = now
	h.mu.Unlock()
}

// sync computes the run's Sync from its counters s and passed, the
// changes it has processed.
func (h *health) sync(s Stats, passed int64) Sync {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	// Throughput: revisions checked over the window, from the oldest
	// sample within it.
	if n := len(h.samples); n == 0 || now-h.samples[n-1].at >= 1000 {
		h.samples = append(h.samples, sample{at: now, checked: s.RevisionsChecked})
	}
	for len(h.samples) > 1 && now-h.samples[1].at >= throughputWindow.Milliseconds() {
		h.samples = h.samples[1:]
	}
	var rate float64
	if first := h.samples[0]; now > first.at {
		rate = float64(s.RevisionsChecked-first.checked) / (float64(now-first.at) / 1000)
	}
	inFlight := h.sent.Load() > passed
	caught := !inFlight && (s.ChangesPending != nil && *s.ChangesPending == 0 || h.feedEnd.Load())
	switch {
	case caught && h.caughtUp == 0:
		h.caughtUp, h.behind = now, 0
	case !caught && h.behind == 0:
		h.caughtUp, h.behind = 0, now
	}
	out := Sync{CaughtUp: caught, CaughtUpSince: h.caughtUp, BehindSince: h.behind, LastProgress: h.progress, Throughput: rate}
	if caught {
		// Work done since this reading last saw the run catch up (changes
		// that came and were replicated between two readings) makes the
		// target identical to the source only when it ended.
		out.CaughtUpSince = max(h.caughtUp, h.progress)
	}
	// The stall: the first present condition, in order of what to check
	// first.
	conds := []*condition{h.peer[sourceSide], h.peer[targetSide], h.refusing}
	if h.filtered && !caught && !inFlight && now-h.lastMatch >= StallAfter.Milliseconds() {
		detail := "the source is reading its changes for the filter, none passing it so far"
		if s.ChangesPending != nil {
			detail = fmt.Sprintf("%s (%d changes ahead when last counted)", detail, *s.ChangesPending)
		}
		conds = append(conds, &condition{reason: StallFiltering, since: h.lastMatch, detail: detail})
	}
	for _, c := range conds {
		if c != nil {
			out.Stall = &Stall{Reason: c.reason, Detail: c.detail, Since: c.since}
			break
		}
	}
	return out
}
