package engine

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"
)

// CheckpointIDPrefix prefixes the replication's base id to name the
// checkpoint documents on both peers.
const CheckpointIDPrefix = "_local/"

// ReplicationIDVersion is the replication id algorithm version written into
// checkpoint documents (CouchDB's current version).
const ReplicationIDVersion = 4

// HistoryLimit is the number of history entries a checkpoint document keeps.
const HistoryLimit = 50

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
