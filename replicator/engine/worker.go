package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Internal constants mirroring CouchDB's replicator.
const (
	// bulkDocsMaxBytesDefault flushes a worker's _bulk_docs buffer early
	// once the encoded documents exceed it.
	bulkDocsMaxBytesDefault = 4 << 20
	// retryWaitDefault and retryWaitMax bound the engine's own retry waits
	// (changes feed resumption, missing revision refetch).
	retryWaitDefault = 250 * time.Millisecond
	retryWaitMax     = 5 * time.Second
	// missingDocRetryDefault is the wait before refetching a revision the
	// source reported missing (CouchDB's missing_doc_retry_msec).
	missingDocRetryDefault = 2 * time.Second
	// tuningRecheck forces a _revs_diff / _bulk_get attempt after this long
	// even when the moving averages say to skip it.
	tuningRecheck = 37 * time.Second
)

// tuning holds the moving averages that let workers skip _revs_diff when
// nearly every revision is missing on the target (a fresh target) and stop
// trying _bulk_get on sources where it keeps failing.
type tuning struct {
	mu             sync.Mutex
	missingRatio   float64 // EMA (decay 0.4) of missing / checked
	lastRevsDiff   time.Time
	bulkGetFailure float64 // EMA (decay 0.25) of _bulk_get failures
	lastBulkGet    time.Time
}

func newTuning() tuning { return tuning{lastRevsDiff: time.Now(), lastBulkGet: time.Now()} }

func (t *tuning) skipRevsDiff() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.missingRatio > 0.95 && time.Since(t.lastRevsDiff) < tuningRecheck
}

func (t *tuning) recordRevsDiff(checked, missing int) {
	if checked == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.missingRatio = 0.4*float64(missing)/float64(checked) + 0.6*t.missingRatio
	t.lastRevsDiff = time.Now()
}

func (t *tuning) useBulkGet() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bulkGetFailure <= 0.5 || time.Since(t.lastBulkGet) > tuningRecheck
}

func (t *tuning) recordBulkGet(failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := 0.0
	if failed {
		f = 1
	}
	t.bulkGetFailure = 0.25*f + 0.75*t.bulkGetFailure
	t.lastBulkGet = time.Now()
}

// work is one worker: it takes batches of changes and replicates them until
// the feed ends, the run stops or an error occurs.
func (r *Run) work(ctx context.Context) error {
	for {
		rows, ticket, ok := r.nextBatch(ctx)
		if !ok {
			return nil
		}
		if err := r.processBatch(ctx, rows); err != nil {
			return err
		}
		r.tracker.done(ticket)
	}
}

// nextBatch hands out up to worker_batch_size consecutive rows: it waits for
// one, then takes whatever else is queued. Batches are registered with the
// sequence tracker in feed order under batchMu.
func (r *Run) nextBatch(ctx context.Context) ([]change, uint64, bool) {
	r.batchMu.Lock()
	defer r.batchMu.Unlock()
	if r.stopping() {
		return nil, 0, false
	}
	var first change
	select {
	case c, ok := <-r.rows:
		if !ok {
			return nil, 0, false
		}
		first = c
	case <-ctx.Done():
		return nil, 0, false
	case <-r.stopCh:
		return nil, 0, false
	}
	rows := []change{first}
fill:
	for len(rows) < r.rep.WorkerBatchSize {
		select {
		case c, ok := <-r.rows:
			if !ok {
				break fill
			}
			rows = append(rows, c)
		default:
			break fill
		}
	}
	return rows, r.tracker.begin(rows[len(rows)-1].Seq), true
}

// processBatch replicates one batch: _revs_diff, fetch, write.
func (r *Run) processBatch(ctx context.Context, rows []change) error {
	revs := map[string][]string{}
	var ids []string
	checked := 0
	for _, c := range rows {
		if c.ID == "" {
			continue // a last_seq marker
		}
		if _, ok := revs[c.ID]; !ok {
			ids = append(ids, c.ID)
		}
		for _, rev := range c.Revs {
			if !contains(revs[c.ID], rev) {
				revs[c.ID] = append(revs[c.ID], rev)
				checked++
			}
		}
	}
	r.stats.revisionsChecked.Add(int64(checked))
	if checked == 0 {
		return nil
	}

	start := time.Now()
	var missing map[string]revsDiffEntry
	skipped := r.tuning.skipRevsDiff()
	if skipped {
		missing = make(map[string]revsDiffEntry, len(revs))
		for id, rs := range revs {
			missing[id] = revsDiffEntry{Missing: rs}
		}
	} else {
		var err error
		if missing, err = r.tgt.revsDiff(ctx, revs); err != nil {
			return err
		}
	}
	found := 0
	for _, e := range missing {
		found += len(e.Missing)
	}
	if !skipped {
		r.tuning.recordRevsDiff(checked, found)
	}
	diffed := time.Now()
	r.stats.missingFound.Add(int64(found))
	if found == 0 {
		return nil
	}

	w := &batchWriter{r: r}
	if r.inlineDocs {
		inline := map[string]json.RawMessage{}
		for _, c := range rows {
			if c.ID != "" {
				inline[c.ID] = c.Doc // the last row of an id is the current one
			}
		}
		n := 0
		for id, body := range inline {
			e := missing[id]
			if len(e.Missing) != 1 {
				continue
			}
			d := firstRevision(body, id, e.Missing[0])
			if d == nil {
				continue
			}
			if err := w.add(ctx, d); err != nil {
				return err
			}
			delete(missing, id)
			n++
		}
		r.stats.docsRead.Add(int64(n))
	}
	if err := r.fetchAndWrite(ctx, ids, missing, w); err != nil {
		return err
	}
	fetched := time.Now()
	if err := w.flush(ctx); err != nil {
		return err
	}
	r.log.Debug().Int("rows", len(rows)).Int("missing", found).Bool("revs_diff_skipped", skipped).
		Dur("diff", diffed.Sub(start)).Dur("fetch", fetched.Sub(diffed)).Dur("write", time.Since(fetched)).Msg("batch replicated")
	return nil
}

// fetchAndWrite fetches the missing revisions (through _bulk_get when it
// works, individually otherwise and for documents with attachments) and
// hands them to the writer.
func (r *Run) fetchAndWrite(ctx context.Context, ids []string, missing map[string]revsDiffEntry, w *batchWriter) error {
	var reqs []bulkGetDoc
	for _, id := range ids {
		for _, rev := range missing[id].Missing {
			reqs = append(reqs, bulkGetDoc{ID: id, Rev: rev})
		}
	}
	sort.Slice(reqs, func(i, j int) bool {
		if reqs[i].ID != reqs[j].ID {
			return reqs[i].ID < reqs[j].ID
		}
		return reqs[i].Rev < reqs[j].Rev
	})

	if len(reqs) == 0 {
		return nil // never send an empty _bulk_get: pouchdb-server never answers it
	}
	leftover := map[string][]string{}
	var leftoverIDs []string
	addLeftover := func(id, rev string) {
		if _, ok := leftover[id]; !ok {
			leftoverIDs = append(leftoverIDs, id)
		}
		if !contains(leftover[id], rev) {
			leftover[id] = append(leftover[id], rev)
		}
	}

	if !r.rep.DisableBulkGet && r.tuning.useBulkGet() {
		r.stats.bulkGetAttempts.Add(int64(len(reqs)))
		// Attachment stubs only: documents with attachments are fetched
		// individually, with their bodies (and atts_since).
		docs, err := r.src.bulkGet(ctx, reqs)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrMaxBackoff) {
				return err
			}
			r.log.Debug().Err(err).Msg("_bulk_get failed, fetching individually")
		}
		r.tuning.recordBulkGet(err != nil)
		kept := map[string][]*doc{}
		seen := map[idRev]bool{}
		for _, d := range docs {
			// A reply row that was not asked for (a peer answering with
			// more than the request named) is never written.
			if _, asked := missing[d.ID]; !asked || d.hasAttachments() || seen[idRev{d.ID, d.Rev}] {
				continue
			}
			seen[idRev{d.ID, d.Rev}] = true
			kept[d.ID] = append(kept[d.ID], d)
		}
		n := 0
		for _, q := range reqs {
			covered := false
			for _, d := range kept[q.ID] {
				if d.covers(q.Rev) {
					covered = true
					break
				}
			}
			if !covered {
				addLeftover(q.ID, q.Rev)
			}
		}
		for _, id := range sortedKeys(kept) {
			for _, d := range kept[id] {
				n++
				if err := w.add(ctx, d); err != nil {
					return err
				}
			}
		}
		r.stats.bulkGetDocs.Add(int64(n))
		r.stats.docsRead.Add(int64(n))
	} else {
		for _, q := range reqs {
			addLeftover(q.ID, q.Rev)
		}
	}
	if len(leftoverIDs) == 0 {
		return nil
	}

	// Individual fetches, a few at a time.
	sem := make(chan struct{}, r.perWorkerConn)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, id := range leftoverIDs {
		select {
		case sem <- struct{}{}:
		case <-fctx.Done():
		}
		if fctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(id string, revs []string) {
			defer wg.Done()
			defer func() { <-sem }()
			err := r.safely(func() error { return r.fetchOne(fctx, id, revs, missing[id].PossibleAncestors, w) })
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
			}
		}(id, leftover[id])
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// fetchOne fetches the given revisions of one document with open_revs and
// writes them; a reply cut while it is read is fetched again (up to
// retries_per_request times). Revisions the source reports missing are asked for once more
// after missingDocRetryDefault; a second miss fails the run.
func (r *Run) fetchOne(ctx context.Context, id string, revs, attsSince []string, w *batchWriter) error {
	failures, wait := 0, retryWaitDefault
	for attempt := 0; ; attempt++ {
		docs, missingRevs, err := r.src.openRevs(ctx, id, revs, attsSince, true)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The reply is streamed, so a connection cut while reading it
			// surfaces here rather than in the transport's retries.
			st := statusOf(err)
			if st == http.StatusRequestURITooLong && len(attsSince) > 0 {
				attsSince = nil // fetch every attachment rather than fail
				attempt--
				continue
			}
			// Only a reply cut while it was read is retried here: the
			// transport has retried everything else already, and retrying
			// on top of it would multiply the budget (a frozen source would
			// hold the worker, and a Stop, for retries_per_request² ×
			// connection_timeout).
			failures++
			var done settled
			if errors.As(err, &done) || errors.Is(err, ErrMaxBackoff) || failures > r.rep.RetriesPerRequest {
				return fmt.Errorf("%w: %s: %w", ErrOpenRevs, id, err)
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
			wait = min(2*wait, retryWaitMax)
			attempt--
			continue
		}
		r.stats.docsRead.Add(int64(len(docs)))
		for _, d := range docs {
			if err := w.add(ctx, d); err != nil {
				return err
			}
		}
		var still []string
		for _, m := range missingRevs {
			covered := false
			for _, d := range docs {
				if d.covers(m) {
					covered = true
				}
			}
			if !covered {
				still = append(still, m)
			}
		}
		if len(still) == 0 {
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("%w: %s revisions %v missing on the source", ErrOpenRevs, id, still)
		}
		select {
		case <-time.After(missingDocRetryDefault):
		case <-ctx.Done():
			return ctx.Err()
		}
		revs, attsSince = still, nil
	}
}

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
// a PUT each.
type batchWriter struct {
	r     *Run
	mu    sync.Mutex
	docs  []json.RawMessage
	bytes int
}

func (w *batchWriter) add(ctx context.Context, d *doc) error {
	if d.hasAttachments() || strings.HasPrefix(d.ID, "_design/") {
		return w.r.writeOne(ctx, d)
	}
	w.mu.Lock()
	w.docs = append(w.docs, d.Body)
	w.bytes += len(d.Body)
	var batch []json.RawMessage
	if w.bytes >= w.r.maxBulkBytes {
		batch, w.docs, w.bytes = w.docs, nil, 0
	}
	w.mu.Unlock()
	if batch != nil {
		return w.r.writeBulk(ctx, batch)
	}
	return nil
}

func (w *batchWriter) flush(ctx context.Context) error {
	w.mu.Lock()
	batch := w.docs
	w.docs, w.bytes = nil, 0
	w.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return w.r.writeBulk(ctx, batch)
}

// writeBulk writes documents with _bulk_docs. Per-document errors count as
// doc_write_failures; 413 splits the batch (a single oversized document is
// a failure); 401/403 refuse the whole batch, counted as failures; other
// statuses stop the run.
func (r *Run) writeBulk(ctx context.Context, docs []json.RawMessage) error {
	failed, err := r.tgt.bulkDocs(ctx, docs)
	switch st := statusOf(err); {
	case err == nil:
		for _, f := range failed {
			r.log.Warn().Str("doc_id", f.ID).Str("error", f.Error).Str("reason", f.Reason).Msg("target refused a document")
		}
		r.stats.writeFailures.Add(int64(len(failed)))
		r.stats.docsWritten.Add(int64(len(docs) - len(failed)))
		return nil
	case st == http.StatusRequestEntityTooLarge && len(docs) > 1:
		half := len(docs) / 2
		if err := r.writeBulk(ctx, docs[:half]); err != nil {
			return err
		}
		return r.writeBulk(ctx, docs[half:])
	case st == http.StatusRequestEntityTooLarge || st == http.StatusUnauthorized || st == http.StatusForbidden:
		r.log.Warn().Err(err).Int("docs", len(docs)).Msg("target refused documents")
		r.stats.writeFailures.Add(int64(len(docs)))
		return nil
	default:
		return fmt.Errorf("%w: %w", ErrBulkDocs, err)
	}
}

// writeOne writes a single document with PUT ?new_edits=false. Refusals
// (401, 403, 413, 415, 400 about an attachment name) count as
// doc_write_failures; 412 missing_stub refetches the document once with all
// its attachments; anything else stops the run.
func (r *Run) writeOne(ctx context.Context, d *doc) error {
	err := r.tgt.putDoc(ctx, d, newSessionID())
	st := statusOf(err)
	switch {
	case err == nil:
		r.stats.docsWritten.Add(1)
		return nil
	case errors.Is(err, errBadDoc):
		return fmt.Errorf("%w: %s: %w", ErrDocWrite, d.ID, err)
	case st == http.StatusUnauthorized || st == http.StatusForbidden || st == http.StatusRequestEntityTooLarge ||
		st == http.StatusUnsupportedMediaType || st == http.StatusConflict || (st == http.StatusBadRequest && attachmentNameError(err)):
		r.log.Warn().Err(err).Str("doc_id", d.ID).Msg("target refused a document")
		r.stats.writeFailures.Add(1)
		return nil
	case st == http.StatusPreconditionFailed:
		docs, _, ferr := r.src.openRevs(ctx, d.ID, []string{d.Rev}, nil, true)
		if ferr != nil || len(docs) == 0 {
			return fmt.Errorf("%w: %s: refetch after missing_stub: %v", ErrDocWrite, d.ID, ferr)
		}
		if err := r.tgt.putDoc(ctx, docs[0], newSessionID()); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrDocWrite, d.ID, err)
		}
		r.stats.docsWritten.Add(1)
		return nil
	default:
		return fmt.Errorf("%w: %s: %w", ErrDocWrite, d.ID, err)
	}
}

func attachmentNameError(err error) bool {
	var se *statusError
	return errors.As(err, &se) && strings.HasPrefix(se.Reason, "Attachment name")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
