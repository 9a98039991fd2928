package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
)

// CheckpointIDPrefix prefixes the replication's base id to name the
// checkpoint documents on both peers.
const CheckpointIDPrefix = "_local/"

// ReplicationIDVersion is the replication id algorithm version written into
// checkpoint documents (CouchDB's current version).
const ReplicationIDVersion = 4

// HistoryLimit is the number of history entries a checkpoint document keeps.
const HistoryLimit = 50

// Checkpoint describes one checkpoint tick.
type Checkpoint struct {
	// Seq is the sequence recorded: every change up to it is on the target.
	Seq json.RawMessage
	// Written reports whether checkpoint documents were written on this
	// tick (false when nothing changed or with use_checkpoints false).
	Written bool
	// Stats are the run's counters at the tick.
	Stats Stats
	// Time is when the tick happened, on Options.Clock.
	Time time.Time
}

// HistoryEntry is one session's entry in a checkpoint document's history,
// newest first, in CouchDB's format.
type HistoryEntry struct {
	SessionID        string          `json:"session_id"`
	StartTime        string          `json:"start_time,omitempty"`
	EndTime          string          `json:"end_time,omitempty"`
	StartLastSeq     json.RawMessage `json:"start_last_seq,omitempty"`
	EndLastSeq       json.RawMessage `json:"end_last_seq,omitempty"`
	RecordedSeq      json.RawMessage `json:"recorded_seq,omitempty"`
	MissingChecked   int64           `json:"missing_checked"`
	MissingFound     int64           `json:"missing_found"`
	DocsRead         int64           `json:"docs_read"`
	DocsWritten      int64           `json:"docs_written"`
	DocWriteFailures int64           `json:"doc_write_failures"`
	BulkGetDocs      int64           `json:"bulk_get_docs"`
	BulkGetAttempts  int64           `json:"bulk_get_attempts"`
}

// CheckpointDoc is a replication log as stored in _local/<base id> on the
// source and the target (and returned by one-shot completion).
type CheckpointDoc struct {
	ID                   string          `json:"_id,omitempty"`
	Rev                  string          `json:"_rev,omitempty"`
	SessionID            string          `json:"session_id"`
	SourceLastSeq        json.RawMessage `json:"source_last_seq"`
	ReplicationIDVersion int             `json:"replication_id_version"`
	History              []HistoryEntry  `json:"history"`
	// PurgeSeq is the source's purge_seq whose purges a follow_purges
	// replication had applied to the target when it wrote this
	// checkpoint (fdbrep's own field; absent otherwise).
	PurgeSeq json.RawMessage `json:"fdbrep_purge_seq,omitempty"`

	// The remaining fields are written only for doc_ids replications, for
	// compatibility with CouchDB 1.0-era readers.
	StartTime        string `json:"start_time,omitempty"`
	EndTime          string `json:"end_time,omitempty"`
	DocsRead         *int64 `json:"docs_read,omitempty"`
	DocsWritten      *int64 `json:"docs_written,omitempty"`
	DocWriteFailures *int64 `json:"doc_write_failures,omitempty"`
}

// seqZero is the sequence a full replication starts from.
var seqZero = json.RawMessage("0")

// CheckpointStart is where a run started: from the checkpoint both peers
// hold, or, finding none, from since_seq or the first change (the views'
// info.checkpoint). MigratedFrom names one of CheckpointIDs.
type CheckpointStart = api.CheckpointInfo

// foundLogs is what findLogs found.
type foundLogs struct {
	seq     json.RawMessage
	history []HistoryEntry
	found   bool
	// src and tgt are the run's own checkpoint documents (nil when
	// absent), whose revisions its checkpoints update; from is the
	// source's document it resumes from (its counters seed the run's).
	src, tgt, from *CheckpointDoc
	// migratedFrom is the other base id from was found under.
	migratedFrom string
}

// CheckpointProbe is what FindCheckpoint found.
type CheckpointProbe struct {
	// ID is the replication's full id.
	ID string
	// Start is where a run would start (Since "0", or since_seq, when
	// nothing is found).
	Start CheckpointStart
	// OnSource and OnTarget report a checkpoint document on each peer:
	// under the id Start.Found names (the run's own, or MigratedFrom), or
	// under the run's own when none was found.
	OnSource, OnTarget bool
}

// FindCheckpoint reports where a run of rep would start, as its setup
// finds it (the same ids, CheckpointIDs included, and requests), without
// replicating or writing anything: a migration's dry run. opts gives the
// server UUID and the client settings; a user filter's code is fetched
// when opts.FilterCode is empty. Errors are the peers' (ErrUnauthorized
// for refused credentials, …); the probe then has the ID when it was
// computed.
func FindCheckpoint(ctx context.Context, rep Replication, opts Options) (p CheckpointProbe, err error) {
	err = withPeers(rep, opts, func(rep Replication, src, tgt *peer) error {
		code := opts.FilterCode
		if rep.userFilter() && code == "" {
			if code, err = fetchFilterCode(ctx, src, rep.Filter); err != nil {
				return err
			}
		}
		base, full, err := ReplicationID(rep, opts.ServerUUID, code)
		if err != nil {
			return err
		}
		p.ID = full
		others, err := CheckpointIDs(rep, opts.ServerUUID, code)
		if err != nil {
			return err
		}
		logs, err := findLogs(ctx, src, tgt, base, others)
		if err != nil {
			return err
		}
		_, p.Start = logs.start(rep)
		migrated := logs.migratedFrom != ""
		p.OnSource, p.OnTarget = migrated || logs.src != nil, migrated || logs.tgt != nil
		return nil
	})
	return p, err
}

// start is where a run that found f starts: the common checkpoint's
// sequence, else since_seq, else the first change.
func (f foundLogs) start(rep Replication) (json.RawMessage, CheckpointStart) {
	seq := f.seq
	if !f.found && len(rep.SinceSeq) > 0 {
		seq = rep.SinceSeq
	}
	return seq, CheckpointStart{Found: f.found, Since: seqString(seq), MigratedFrom: f.migratedFrom}
}

// findLogs reads the checkpoint documents of base id on both peers and
// finds their common ancestry. Without one it looks under others in
// turn, as CouchDB looks under the ids of its earlier algorithms, and
// takes over the first checkpoint both peers share (a source that holds
// none under an id is one request, the target is not asked).
func findLogs(ctx context.Context, src, tgt *peer, base string, others []string) (foundLogs, error) {
	var f foundLogs
	var err error
	read := func(id string) (*CheckpointDoc, *CheckpointDoc, error) {
		s, err := src.getLocal(ctx, CheckpointIDPrefix+id)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the source checkpoint: %w", err)
		}
		if s == nil && id != base {
			return nil, nil, nil
		}
		t, err := tgt.getLocal(ctx, CheckpointIDPrefix+id)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the target checkpoint: %w", err)
		}
		return s, t, nil
	}
	if f.src, f.tgt, err = read(base); err != nil {
		return f, err
	}
	f.seq, f.history, f.found = compareLogs(f.src, f.tgt)
	f.from = f.src
	for _, id := range others {
		if f.found {
			break
		}
		s, t, err := read(id)
		if err != nil {
			return f, err
		}
		if seq, history, ok := compareLogs(s, t); ok {
			f.seq, f.history, f.found, f.from, f.migratedFrom = seq, history, true, s, id
		}
	}
	return f, nil
}

// compareLogs finds the common ancestry of the source and target checkpoint
// documents (either may be nil) and returns the sequence to start from, the
// history to carry over and whether a common checkpoint was found.
func compareLogs(src, tgt *CheckpointDoc) (json.RawMessage, []HistoryEntry, bool) {
	if src == nil || tgt == nil {
		return seqZero, nil, false
	}
	if src.SessionID != "" && src.SessionID == tgt.SessionID {
		seq := src.SourceLastSeq
		if len(seq) == 0 || bytes.Equal(seq, []byte("null")) {
			seq = seqZero
		}
		return seq, src.History, true
	}
	s, t := src.History, tgt.History
	for len(s) > 0 && len(t) > 0 {
		sh, th := s[0], t[0]
		if hasSession(t, sh.SessionID) {
			return seqOrZero(sh.RecordedSeq), s[1:], true
		}
		if hasSession(s[1:], th.SessionID) {
			return seqOrZero(th.RecordedSeq), t[1:], true
		}
		s, t = s[1:], t[1:]
	}
	return seqZero, nil, false
}

func hasSession(h []HistoryEntry, id string) bool {
	if id == "" {
		return false
	}
	for _, e := range h {
		if e.SessionID == id {
			return true
		}
	}
	return false
}

func seqOrZero(seq json.RawMessage) json.RawMessage {
	if len(seq) == 0 || bytes.Equal(seq, []byte("null")) {
		return seqZero
	}
	return seq
}

// isZeroSeq reports whether seq is the start of the feed.
func isZeroSeq(seq json.RawMessage) bool {
	s := string(bytes.TrimSpace(seq))
	return s == "" || s == "0" || s == `"0"` || s == "null"
}

// rfc1123 formats t as CouchDB's history timestamps.
func rfc1123(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

// historyWith prepends entry to history, capped at HistoryLimit.
func historyWith(entry HistoryEntry, history []HistoryEntry) []HistoryEntry {
	out := make([]HistoryEntry, 0, min(len(history)+1, HistoryLimit))
	out = append(out, entry)
	for _, h := range history {
		if len(out) == HistoryLimit {
			break
		}
		out = append(out, h)
	}
	return out
}

// checkpointer records a run's progress: when through_seq has moved, it
// writes the checkpoint documents on both peers; it keeps the committed
// sequence and changes_pending for Progress, and builds the run's result
// from its last checkpoint.
type checkpointer struct {
	// Set during setup, read-only afterwards.
	src, tgt                   *peer
	srcStartTime, tgtStartTime json.RawMessage // instance_start_time at setup
	id                         string          // CheckpointIDPrefix + base id
	sessionID                  string
	startTime                  time.Time
	startSeq                   json.RawMessage
	history                    []HistoryEntry // carried over from the common ancestor
	disabled                   bool           // use_checkpoints: false
	docIDs                     bool           // a doc_ids replication, whose documents carry more fields
	tracker                    *seqTracker
	stats                      *counters
	onCheckpoint               func(Checkpoint)
	clock                      clockwork.Clock
	log                        zerolog.Logger

	// ckMu serialises checkpoints and is held across their requests;
	// nothing that must answer promptly (Progress) may take it. It guards
	// the revisions of the checkpoint documents and purges (nil without
	// follow_purges), which each checkpoint brings up to date first.
	ckMu      sync.Mutex
	srcLogRev string
	tgtLogRev string
	purges    *purger
	// committedMu guards committedSeq and lastResultDoc, written by
	// checkpoints (under ckMu too) and read by progress and the result.
	committedMu   sync.Mutex
	committedSeq  json.RawMessage
	lastResultDoc *CheckpointDoc
	// pendingMu guards pending, pendingAt and updateSeq: changes_pending
	// as last asked of the source, when the run had processed pendingAt
	// changes (seqTracker.passedThrough), from which progress counts it
	// down live by the changes processed since; or, for integer
	// sequences, the source's update_seq, from which progress counts it
	// down as through_seq advances.
	pendingMu sync.Mutex
	pending   *int64
	pendingAt int64
	updateSeq *int64
}

// every checkpoints every interval (on the clock) until stop is closed or
// ctx ends; it returns the error of the first checkpoint that fails.
func (c *checkpointer) every(ctx context.Context, interval time.Duration, stop <-chan struct{}) error {
	t := c.clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.Chan():
			if _, err := c.checkpoint(ctx); err != nil {
				return err
			}
		case <-stop:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// checkpoint records through_seq on both peers when it moved, refreshes
// changes_pending and notifies Options.OnCheckpoint. It reports whether
// checkpoint documents were written.
func (c *checkpointer) checkpoint(ctx context.Context) (bool, error) {
	written, through, passed, err := c.commitThrough(ctx)
	if err != nil {
		return false, err
	}
	c.refreshPending(ctx, through, passed)
	if c.onCheckpoint != nil {
		// Called without locks held, so the callback may use Progress.
		c.onCheckpoint(Checkpoint{Seq: through, Written: written, Stats: c.progress(), Time: c.clock.Now()})
	}
	return written, nil
}

// progress returns the counters with the sequences and changes_pending.
func (c *checkpointer) progress() Stats {
	s := c.stats.load()
	_, highest, _ := c.tracker.snapshot()
	through, passed, ahead := c.tracker.finishedAhead()
	s.ThroughSeq, s.SourceSeq = seqString(through), seqString(highest)
	c.committedMu.Lock()
	s.CheckpointedSourceSeq = seqString(c.committedSeq)
	c.committedMu.Unlock()
	c.pendingMu.Lock()
	if c.pending != nil {
		p := max(0, *c.pending-(passed-c.pendingAt)-ahead)
		s.ChangesPending = &p
	}
	if n, ok := intSeq(through); ok && c.updateSeq != nil {
		p := max(0, *c.updateSeq-n-ahead)
		s.ChangesPending = &p
	}
	c.pendingMu.Unlock()
	return s
}

// finalCheckpoint writes the last checkpoint and builds the run's result;
// completed is Result.Completed.
func (c *checkpointer) finalCheckpoint(ctx context.Context, completed bool) (Result, error) {
	if _, err := c.checkpoint(ctx); err != nil {
		return Result{}, err
	}
	res := Result{OK: true, Stats: c.progress(), StartSeq: c.startSeq, Completed: completed}
	switch {
	case c.disabled:
		f := false
		res.UseCheckpoints = &f
	default:
		c.committedMu.Lock()
		d := c.lastResultDoc
		c.committedMu.Unlock()
		if d == nil {
			d = c.logDoc(c.startSeq, c.stats.load())
			d.History = c.history
		}
		// no_changes, as CouchDB answers a run that replicated no change:
		// none came, or none passed the filter (the checkpoint may still
		// have moved past the filtered ones to the feed's last_seq, which
		// CouchDB's does not).
		_, passed, ahead := c.tracker.finishedAhead()
		res.NoChanges = passed+ahead == 0
		res.SessionID = d.SessionID
		res.SourceLastSeq = d.SourceLastSeq
		res.ReplicationIDVersion = ReplicationIDVersion
		res.History = d.History
		res.StartTime, res.EndTime = d.StartTime, d.EndTime
		res.DocsRead, res.DocsWritten, res.DocWriteFailures = d.DocsRead, d.DocsWritten, d.DocWriteFailures
	}
	return res, nil
}

// commitThrough applies the source's new purges (follow_purges), then
// writes the checkpoint documents for the current through_seq if it, or
// the purges applied, moved since the last checkpoint.
// passed is the number of changes processed up to through.
func (c *checkpointer) commitThrough(ctx context.Context) (written bool, through json.RawMessage, passed int64, err error) {
	c.ckMu.Lock()
	defer c.ckMu.Unlock()
	purged := false
	if c.purges != nil {
		if _, err = c.purges.follow(ctx, nil); err != nil {
			return false, nil, 0, err
		}
		purged = !seqEqual(c.purges.applied, c.purges.logged)
	}
	through, passed = c.tracker.passedThrough()
	c.committedMu.Lock()
	committed := c.committedSeq
	c.committedMu.Unlock()
	if seqEqual(through, committed) && !purged {
		return false, through, passed, nil
	}
	if !c.disabled {
		if err := c.writeLogs(ctx, through); err != nil {
			return false, through, passed, err
		}
		written = true
	}
	c.committedMu.Lock()
	c.committedSeq = through
	c.committedMu.Unlock()
	return written, through, passed, nil
}

// logDoc builds the checkpoint body for seq.
func (c *checkpointer) logDoc(seq json.RawMessage, s Stats) *CheckpointDoc {
	entry := HistoryEntry{
		SessionID:        c.sessionID,
		StartTime:        rfc1123(c.startTime),
		EndTime:          rfc1123(c.clock.Now()),
		StartLastSeq:     c.startSeq,
		EndLastSeq:       seq,
		RecordedSeq:      seq,
		MissingChecked:   s.RevisionsChecked,
		MissingFound:     s.MissingRevisionsFound,
		DocsRead:         s.DocsRead,
		DocsWritten:      s.DocsWritten,
		DocWriteFailures: s.DocWriteFailures,
		BulkGetDocs:      s.BulkGetDocs,
		BulkGetAttempts:  s.BulkGetAttempts,
	}
	d := &CheckpointDoc{
		ID:                   c.id,
		SessionID:            c.sessionID,
		SourceLastSeq:        seq,
		ReplicationIDVersion: ReplicationIDVersion,
		History:              historyWith(entry, c.history),
	}

	if c.docIDs {
		d.StartTime, d.EndTime = entry.StartTime, entry.EndTime
		d.DocsRead, d.DocsWritten, d.DocWriteFailures = &entry.DocsRead, &entry.DocsWritten, &entry.DocWriteFailures
	}
	return d
}

// writeLogs commits both peers and writes the checkpoint documents. Called
// with ckMu held.
func (c *checkpointer) writeLogs(ctx context.Context, seq json.RawMessage) error {
	for _, side := range []struct {
		name string
		p    *peer
		want json.RawMessage
	}{{"source", c.src, c.srcStartTime}, {"target", c.tgt, c.tgtStartTime}} {
		got, err := side.p.ensureFullCommit(ctx)
		if err != nil {
			return fmt.Errorf("%w: _ensure_full_commit on the %s: %w", ErrCheckpoint, side.name, err)
		}
		if !sameInstance(got, side.want) {
			return fmt.Errorf("%w: instance_start_time on %s database has changed since last checkpoint", ErrCheckpoint, side.name)
		}
	}
	d := c.logDoc(seq, c.stats.load())
	if c.purges != nil {
		d.PurgeSeq = c.purges.applied
	}
	rev, err := putLog(ctx, c.src, d, c.srcLogRev)
	if err != nil {
		return fmt.Errorf("%w: Error updating the source checkpoint document: %w", ErrCheckpoint, err)
	}
	c.srcLogRev = rev
	rev, err = putLog(ctx, c.tgt, d, c.tgtLogRev)
	if err != nil {
		return fmt.Errorf("%w: Error updating the target checkpoint document: %w", ErrCheckpoint, err)
	}
	c.tgtLogRev = rev
	if c.purges != nil {
		c.purges.logged = d.PurgeSeq
	}
	c.committedMu.Lock()
	c.lastResultDoc = d
	c.committedMu.Unlock()
	c.log.Debug().RawJSON("seq", seq).Msg("checkpoint written")
	return nil
}

// putLog writes d to p with the given revision and returns the new one. On
// a conflict it re-reads the document and adopts its revision if it already
// holds what we sent (an earlier attempt succeeded but its reply was lost).
func putLog(ctx context.Context, p *peer, d *CheckpointDoc, rev string) (string, error) {
	body := *d
	body.Rev = rev
	newRev, err := p.putLocal(ctx, &body)
	if statusOf(err) == http.StatusConflict {
		cur, gerr := p.getLocal(ctx, d.ID)
		if gerr == nil && cur != nil && cur.SessionID == d.SessionID && seqEqual(cur.SourceLastSeq, d.SourceLastSeq) {
			return cur.Rev, nil
		}
		return "", err
	}
	if err != nil {
		return "", err
	}
	if newRev == "" { // pouchdb-server style replies without rev
		cur, gerr := p.getLocal(ctx, d.ID)
		switch {
		case gerr != nil:
			return "", fmt.Errorf("re-reading %s: %w", d.ID, gerr)
		case cur == nil:
			return "", fmt.Errorf("re-reading %s: the document is missing", d.ID)
		}
		newRev = cur.Rev
	}
	return newRev, nil
}

func sameInstance(got, want json.RawMessage) bool {
	if seqString(got) == "0" || seqString(want) == "0" {
		return true
	}
	return seqString(got) == seqString(want)
}

// refreshPending recomputes changes_pending at a checkpoint tick: for an
// integer through_seq from the source's update_seq (progress then counts it
// down as through_seq advances), otherwise from the _changes "pending"
// count since through, which the run had reached after passed changes
// (progress counts it down by the changes processed since); nil when
// unknown.
func (c *checkpointer) refreshPending(ctx context.Context, through json.RawMessage, passed int64) {
	if _, ok := intSeq(through); ok {
		var updateSeq json.RawMessage
		if info, err := c.src.info(ctx); err == nil {
			updateSeq = info.UpdateSeq
		}
		c.setPending(nil, 0, updateSeq)
		return
	}
	c.setPending(c.src.pendingSince(ctx, through), passed, nil)
}

// primePending sets changes_pending at the end of setup, before the first
// checkpoint: from the source's update_seq read by setup when both it and
// the start sequence are integers, otherwise from the _changes "pending"
// count since start.
func (c *checkpointer) primePending(ctx context.Context, start, updateSeq json.RawMessage) {
	_, startOK := intSeq(start)
	if _, ok := intSeq(updateSeq); ok && startOK {
		c.setPending(nil, 0, updateSeq)
		return
	}
	c.setPending(c.src.pendingSince(ctx, start), 0, nil)
}

// setPending records a pending count, counted when the run had processed
// at changes, or an integer update_seq (nil or not an integer: unknown).
func (c *checkpointer) setPending(pending *int64, at int64, updateSeq json.RawMessage) {
	var u *int64
	if n, ok := intSeq(updateSeq); ok {
		u = &n
	}
	c.pendingMu.Lock()
	c.pending, c.pendingAt, c.updateSeq = pending, at, u
	c.pendingMu.Unlock()
}

// intSeq returns an integer sequence's value (PouchDB's and CouchDB 1.x's
// sequences; clustered CouchDB's are opaque strings).
func intSeq(seq json.RawMessage) (int64, bool) {
	if len(seq) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(seqString(seq), 10, 64)
	return n, err == nil
}
