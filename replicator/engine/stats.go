package engine

import (
	"encoding/json"
	"strings"
	"sync/atomic"

	"github.com/fdbrep/fdbrep/api"
)

// Stats are a replication's counters under CouchDB's names: api.Stats,
// which the views show as they are.
type Stats = api.Stats

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
