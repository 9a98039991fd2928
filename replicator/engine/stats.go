package engine

import (
	"encoding/json"
	"strings"
	"sync/atomic"
)

// Stats are a replication's counters under CouchDB's names (as shown by
// _scheduler/jobs and _active_tasks). Counters are cumulative over the runs
// of one replication: a run starts from the element-wise maximum of
// Options.Stats and the counters of the checkpoint history it resumes from.
// The sequence fields follow CouchDB's encoding: a string sequence as is,
// any other JSON value JSON-encoded into a string (integer 5 is "5").
type Stats struct {
	RevisionsChecked      int64 `json:"revisions_checked"`
	MissingRevisionsFound int64 `json:"missing_revisions_found"`
	DocsRead              int64 `json:"docs_read"`
	DocsWritten           int64 `json:"docs_written"`
	DocWriteFailures      int64 `json:"doc_write_failures"`
	BulkGetDocs           int64 `json:"bulk_get_docs"`
	BulkGetAttempts       int64 `json:"bulk_get_attempts"`
	// ChangesPending is the number of source changes the run has yet to
	// process: those after through_seq, less those of the batches already
	// done past it (which RevisionsChecked counts), so that the two never
	// count a change twice; nil when unknown. It is known from the end of
	// a run's setup on; with
	// integer sequences (PouchDB, CouchDB 1.x) it counts down live as
	// through_seq advances, the source's update_seq being read again at
	// every checkpoint; with opaque sequences (CouchDB 2.x and later) it is
	// the _changes "pending" count of the last checkpoint (or of the
	// setup), counted down live by the changes processed since.
	ChangesPending        *int64 `json:"changes_pending"`
	CheckpointedSourceSeq string `json:"checkpointed_source_seq,omitempty"`
	SourceSeq             string `json:"source_seq,omitempty"`
	ThroughSeq            string `json:"through_seq,omitempty"`
}

// counters are the live, concurrently updated counters of a run.
type counters struct {
	revisionsChecked, missingFound, docsRead, docsWritten, writeFailures atomic.Int64
	bulkGetDocs, bulkGetAttempts                                         atomic.Int64
}

func (c *counters) seed(s Stats) {
	c.revisionsChecked.Store(s.RevisionsChecked)
	c.missingFound.Store(s.MissingRevisionsFound)
	c.docsRead.Store(s.DocsRead)
	c.docsWritten.Store(s.DocsWritten)
	c.writeFailures.Store(s.DocWriteFailures)
	c.bulkGetDocs.Store(s.BulkGetDocs)
	c.bulkGetAttempts.Store(s.BulkGetAttempts)
}

func (c *counters) load() Stats {
	return Stats{
		RevisionsChecked:      c.revisionsChecked.Load(),
		MissingRevisionsFound: c.missingFound.Load(),
		DocsRead:              c.docsRead.Load(),
		DocsWritten:           c.docsWritten.Load(),
		DocWriteFailures:      c.writeFailures.Load(),
		BulkGetDocs:           c.bulkGetDocs.Load(),
		BulkGetAttempts:       c.bulkGetAttempts.Load(),
	}
}

// maxStats is the element-wise maximum of the counters of a and b.
func maxStats(a, b Stats) Stats {
	a.RevisionsChecked = max(a.RevisionsChecked, b.RevisionsChecked)
	a.MissingRevisionsFound = max(a.MissingRevisionsFound, b.MissingRevisionsFound)
	a.DocsRead = max(a.DocsRead, b.DocsRead)
	a.DocsWritten = max(a.DocsWritten, b.DocsWritten)
	a.DocWriteFailures = max(a.DocWriteFailures, b.DocWriteFailures)
	a.BulkGetDocs = max(a.BulkGetDocs, b.BulkGetDocs)
	a.BulkGetAttempts = max(a.BulkGetAttempts, b.BulkGetAttempts)
	return a
}

// statsOfHistory returns the counters recorded in a history entry.
func statsOfHistory(h HistoryEntry) Stats {
	return Stats{
		RevisionsChecked:      h.MissingChecked,
		MissingRevisionsFound: h.MissingFound,
		DocsRead:              h.DocsRead,
		DocsWritten:           h.DocsWritten,
		DocWriteFailures:      h.DocWriteFailures,
		BulkGetDocs:           h.BulkGetDocs,
		BulkGetAttempts:       h.BulkGetAttempts,
	}
}

// seqString encodes a sequence for Stats: a JSON string as its contents,
// anything else as its compact JSON text.
func seqString(seq json.RawMessage) string {
	if len(seq) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(seq, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(seq))
}
