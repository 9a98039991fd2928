package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// firstRevision returns the document of an include_docs feed row ready for
// new_edits=false when it is exactly revision rev, a first revision
// ("1-hash", whose _revisions is {"start":1,"ids":["hash"]}), not deleted
// and without attachments; nil otherwise (the revision is then fetched).
func firstRevision(body json.RawMessage, id, rev string) *doc {
	if len(body) == 0 || !strings.HasPrefix(rev, "1-") {
		return nil
	}
	var m struct {
		ID          string          `json:"_id"`
		Rev         string          `json:"_rev"`
		Deleted     bool            `json:"_deleted"`
		Attachments json.RawMessage `json:"_attachments"`
		Revisions   json.RawMessage `json:"_revisions"`
	}
	if json.Unmarshal(body, &m) != nil || m.ID != id || m.Rev != rev || m.Deleted || len(m.Attachments) > 0 || len(m.Revisions) > 0 {
		return nil
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) < 2 || trimmed[0] != '{' {
		return nil
	}
	revs, _ := json.Marshal(map[string]any{"start": 1, "ids": []string{rev[2:]}})
	full := make([]byte, 0, len(trimmed)+len(revs)+16)
	full = append(full, `{"_revisions":`...)
	full = append(full, revs...)
	full = append(full, ',')
	full = append(full, trimmed[1:]...)
	return &doc{ID: id, Rev: rev, Body: full, Revisions: []string{rev}}
}

// batchWriter collects a batch's documents: plain documents go to a
// _bulk_docs buffer (flushed when it grows past maxBulkBytes), design
// documents and documents with attachment bodies are written at once with
// a PUT each. Its writes run on ctx, the batch's, which a halt does not
// end: a write sent finishes; none starts after the halt (errHalted).
type batchWriter struct {
	w     *workers
	ctx   context.Context
	mu    sync.Mutex
	docs  []json.RawMessage
	bytes int
}

// errHalted is the error of a write that a halt (Run.Halt) kept from
// starting.
var errHalted = fmt.Errorf("%w: no write starts after a halt", ErrHalted)

func (b *batchWriter) add(d *doc) error {
	if closed(b.w.halt) {
		return errHalted
	}
	if d.hasAttachments() || strings.HasPrefix(d.ID, "_design/") {
		return b.w.writeOne(b.ctx, d)
	}
	b.mu.Lock()
	b.docs = append(b.docs, d.Body)
	b.bytes += len(d.Body)
	var batch []json.RawMessage
	if b.bytes >= b.w.maxBulkBytes {
		batch, b.docs, b.bytes = b.docs, nil, 0
	}
	b.mu.Unlock()
	if batch != nil {
		return b.w.writeBulk(b.ctx, batch)
	}
	return nil
}

func (b *batchWriter) flush() error {
	b.mu.Lock()
	batch := b.docs
	b.docs, b.bytes = nil, 0
	b.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return b.w.writeBulk(b.ctx, batch)
}

// writeBulk writes documents with _bulk_docs. Per-document errors count as
// doc_write_failures; 413 splits the batch (a single oversized document is
// a failure); 401/403 refuse the whole batch, counted as failures; other
// statuses stop the run.
func (w *workers) writeBulk(ctx context.Context, docs []json.RawMessage) error {
	if closed(w.halt) {
		return errHalted
	}
	failed, err := w.tgt.bulkDocs(ctx, docs)
	switch st := statusOf(err); {
	case err == nil:
		for _, f := range failed {
			w.log.Warn().Str("doc_id", f.ID).Str("error", f.Error).Str("reason", f.Reason).Msg("target refused a document")
			w.changes.health.refuse(f.ID, f.Rev, bulkStatus(f.Error), f.Error, f.Reason)
		}
		w.stats.writeFailures.Add(int64(len(failed)))
		w.stats.docsWritten.Add(int64(len(docs) - len(failed)))
		if len(failed) > 0 {
			w.changes.health.wrote(len(docs), len(failed), bulkStatus(failed[0].Error), failed[0].Error+": "+failed[0].Reason)
		} else {
			w.changes.health.wrote(len(docs), 0, 0, "")
		}
		return nil
	case st == http.StatusRequestEntityTooLarge && len(docs) > 1:
		half := len(docs) / 2
		if err := w.writeBulk(ctx, docs[:half]); err != nil {
			return err
		}
		return w.writeBulk(ctx, docs[half:])
	case st == http.StatusRequestEntityTooLarge || st == http.StatusUnauthorized || st == http.StatusForbidden:
		w.log.Warn().Err(err).Int("docs", len(docs)).Msg("target refused documents")
		w.stats.writeFailures.Add(int64(len(docs)))
		name, reason := refusalParts(err)
		for _, d := range docs {
			id, rev := docIDRev(d)
			w.changes.health.refuse(id, rev, st, name, reason)
		}
		w.changes.health.wrote(len(docs), len(docs), st, refusal(err))
		return nil
	default:
		return fmt.Errorf("%w: %w", ErrBulkDocs, err)
	}
}

// writeOne writes a single document with PUT ?new_edits=false. Refusals
// (401, 403, 413, 415, 400 about an attachment name) count as
// doc_write_failures; 412 missing_stub refetches the document once with all
// its attachments; anything else stops the run.
func (w *workers) writeOne(ctx context.Context, d *doc) error {
	if closed(w.halt) {
		return errHalted
	}
	err := w.tgt.putDoc(ctx, d, newSessionID())
	st := statusOf(err)
	switch {
	case err == nil:
		w.stats.docsWritten.Add(1)
		w.changes.health.wrote(1, 0, 0, "")
		return nil
	case errors.Is(err, errDocMax):
		// A gzip attachment decompressed for a pouchdb-server target
		// past what the document may hold: the source's document.
		return &overLimit{side: w.src.side(), url: w.src.url(), what: "document " + d.ID + " holds, decompressed,",
			limit: DocMax, name: "DocMax"}
	case errors.Is(err, errBadDoc):
		return fmt.Errorf("%w: %s: %w", ErrDocWrite, d.ID, err)
	case st == http.StatusUnauthorized || st == http.StatusForbidden || st == http.StatusRequestEntityTooLarge ||
		st == http.StatusUnsupportedMediaType || st == http.StatusConflict || (st == http.StatusBadRequest && attachmentNameError(err)):
		w.log.Warn().Err(err).Str("doc_id", d.ID).Msg("target refused a document")
		w.stats.writeFailures.Add(1)
		name, reason := refusalParts(err)
		w.changes.health.refuse(d.ID, d.Rev, st, name, reason)
		w.changes.health.wrote(1, 1, st, refusal(err))
		return nil
	case st == http.StatusPreconditionFailed:
		// The document is fetched again, with every attachment, on its
		// own lease (keeping the turn it may hold): its bodies, which
		// the target did not take, are dropped first.
		lease := d.lease
		if lease == nil {
			lease = w.newLease()
			defer lease.release()
		}
		d.Atts = nil
		lease.restart()
		docs, _, ferr := w.src.openRevs(ctx, d.ID, []string{d.Rev}, nil, true, lease)
		if ol, ok := asOverLimit(ferr); ok {
			return ol
		}
		if ferr != nil || len(docs) == 0 {
			return fmt.Errorf("%w: %s: refetch after missing_stub: %v", ErrDocWrite, d.ID, ferr)
		}
		if err := w.tgt.putDoc(ctx, docs[0], newSessionID()); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrDocWrite, d.ID, err)
		}
		w.stats.docsWritten.Add(1)
		return nil
	default:
		return fmt.Errorf("%w: %s: %w", ErrDocWrite, d.ID, err)
	}
}

// bulkStatus is the HTTP status CouchDB gives a _bulk_docs error by its
// name (0 for a name it has no status for).
func bulkStatus(name string) int {
	switch name {
	case "unauthorized":
		return http.StatusUnauthorized
	case "forbidden":
		return http.StatusForbidden
	case "conflict":
		return http.StatusConflict
	case "too_large", "document_too_large":
		return http.StatusRequestEntityTooLarge
	case "bad_request":
		return http.StatusBadRequest
	}
	return 0
}

// refusal is a refused write's error and reason, as CouchDB named them.
func refusal(err error) string {
	name, reason := refusalParts(err)
	return name + ": " + reason
}

// refusalParts is a refused write's error name and reason.
func refusalParts(err error) (name, reason string) {
	var se *statusError
	if errors.As(err, &se) {
		return se.Name, se.Reason
	}
	return "error", err.Error()
}

// docIDRev reads an encoded document's _id and _rev.
func docIDRev(body json.RawMessage) (id, rev string) {
	var m struct {
		ID  string `json:"_id"`
		Rev string `json:"_rev"`
	}
	_ = json.Unmarshal(body, &m)
	return m.ID, m.Rev
}

func attachmentNameError(err error) bool {
	var se *statusError
	return errors.As(err, &se) && strings.HasPrefix(se.Reason, "Attachment name")
}
