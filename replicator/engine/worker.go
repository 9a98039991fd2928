package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/couch"
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
	// tuningRecheck forces a _revs_diff / _bulk_get attempt after this long
	// even when the moving averages say to skip it.
	tuningRecheck = 37 * time.Second
)

// workers replicate batches of changes. Each of worker_processes workers
// takes the next batch from the changes reader, asks the target which of
// its revisions are missing, fetches those from the source and writes them.
type workers struct {
	rep      Replication
	src, tgt *peer
	changes  *changesReader
	stats    *counters
	stop     <-chan struct{} // closed by Run.Stop: take no more batches
	// halt is closed by Run.Halt: take no more batches and start no
	// write; halting ends with it, and cancels a batch's reads.
	halt    <-chan struct{}
	halting context.Context
	clock   clockwork.Clock
	log     zerolog.Logger
	// inlineDocs is set for a full replication into an empty target, where
	// every document is missing: the changes feed carries the documents
	// (include_docs=true), and first revisions (single leaf, "1-", no
	// attachments) are written from it without a fetch, as PouchDB does
	// with _all_docs.
	inlineDocs    bool
	maxBulkBytes  int // flush a batch's _bulk_docs buffer past this size
	perWorkerConn int // concurrent individual fetches per worker

	batchMu sync.Mutex // hands batches out in feed order
	tuning  tuning
	// large is the run's turn for large documents (see docLease):
	// capacity 1.
	large chan struct{}
}

// newLease is a lease for one document's fetch on the run's turn.
func (w *workers) newLease() *docLease { return &docLease{turn: w.large} }

// tuning holds the moving averages that let workers skip _revs_diff when
// nearly every revision is missing on the target (a fresh target) and stop
// trying _bulk_get on sources where it keeps failing.
type tuning struct {
	clock          clockwork.Clock
	mu             sync.Mutex
	missingRatio   float64 // EMA (decay 0.4) of missing / checked
	lastRevsDiff   time.Time
	bulkGetFailure float64 // EMA (decay 0.25) of _bulk_get failures
	lastBulkGet    time.Time
}

// newTuning starts the averages at now, with missingRatio as the first
// estimate of the share of missing revisions.
func newTuning(clock clockwork.Clock, now time.Time, missingRatio float64) tuning {
	return tuning{clock: clock, missingRatio: missingRatio, lastRevsDiff: now, lastBulkGet: now}
}

func (t *tuning) skipRevsDiff() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.missingRatio > 0.95 && t.clock.Since(t.lastRevsDiff) < tuningRecheck
}

func (t *tuning) recordRevsDiff(checked, missing int) {
	if checked == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.missingRatio = 0.4*float64(missing)/float64(checked) + 0.6*t.missingRatio
	t.lastRevsDiff = t.clock.Now()
}

func (t *tuning) useBulkGet() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bulkGetFailure <= 0.5 || t.clock.Since(t.lastBulkGet) > tuningRecheck
}

func (t *tuning) recordBulkGet(failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := 0.0
	if failed {
		f = 1
	}
	t.bulkGetFailure = 0.25*f + 0.75*t.bulkGetFailure
	t.lastBulkGet = t.clock.Now()
}

// work is one worker: it takes batches of changes and replicates them until
// the feed ends, the run stops or an error occurs.
func (w *workers) work(ctx context.Context) error {
	for {
		rows, ticket, ok := w.nextBatch(ctx)
		if !ok {
			return nil
		}
		if err := w.processBatch(ctx, rows); err != nil {
			return err
		}
		w.changes.queued.Release(w.changes.tracker.done(ticket))
		w.changes.health.batchDone()
	}
}

// nextBatch hands out up to worker_batch_size consecutive rows: it waits for
// one, then takes whatever else is queued. Batches are registered with the
// changes reader's tracker in feed order under batchMu.
func (w *workers) nextBatch(ctx context.Context) ([]change, uint64, bool) {
	w.batchMu.Lock()
	defer w.batchMu.Unlock()
	if closed(w.stop) || closed(w.halt) {
		return nil, 0, false
	}
	var first change
	select {
	case c, ok := <-w.changes.rows:
		if !ok {
			return nil, 0, false
		}
		first = c
	case <-ctx.Done():
		return nil, 0, false
	case <-w.stop:
		return nil, 0, false
	case <-w.halt:
		return nil, 0, false
	}
	rows := []change{first}
fill:
	for len(rows) < w.rep.WorkerBatchSize {
		select {
		case c, ok := <-w.changes.rows:
			if !ok {
				break fill
			}
			rows = append(rows, c)
		default:
			break fill
		}
	}
	changes := 0 // document rows: a last_seq marker is no change
	var size int64
	for _, c := range rows {
		if c.ID != "" {
			changes++
		}
		size += c.size
	}
	return rows, w.changes.tracker.begin(rows[len(rows)-1].Seq, changes, size), true
}

// processBatch replicates one batch: _revs_diff, fetch, write. Its
// writes run on ctx; its reads end also when the run is halted
// (Run.Halt), after which no write starts (errHalted).
func (w *workers) processBatch(ctx context.Context, rows []change) error {
	b := &batchWriter{w: w, ctx: ctx}
	if w.halting != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(w.halting, cancel)()
	}
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
	w.stats.revisionsChecked.Add(int64(checked))
	if checked == 0 {
		return nil
	}

	start := w.clock.Now()
	var missing map[string]revsDiffEntry
	skipped := w.tuning.skipRevsDiff()
	if skipped {
		missing = make(map[string]revsDiffEntry, len(revs))
		for id, rs := range revs {
			missing[id] = revsDiffEntry{Missing: rs}
		}
	} else {
		var err error
		if missing, err = w.tgt.revsDiff(ctx, revs); err != nil {
			return err
		}
	}
	found := 0
	for _, e := range missing {
		found += len(e.Missing)
	}
	if !skipped {
		w.tuning.recordRevsDiff(checked, found)
	}
	if w.rep.SkipDeleted {
		n, err := w.skipDeletions(ctx, rows, missing, skipped)
		if err != nil {
			return err
		}
		if n > 0 {
			w.log.Debug().Int("deletions_skipped", n).Msg("skip_deleted: deletions of documents the target does not have left out")
		}
	}
	diffed := w.clock.Now()
	w.stats.missingFound.Add(int64(found))
	if found == 0 {
		return nil
	}

	if w.inlineDocs {
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
			if err := b.add(d); err != nil {
				return err
			}
			delete(missing, id)
			n++
		}
		w.stats.docsRead.Add(int64(n))
	}
	if err := w.fetchAndWrite(ctx, ids, missing, b); err != nil {
		return err
	}
	fetched := w.clock.Now()
	if err := b.flush(); err != nil {
		return err
	}
	w.log.Debug().Int("rows", len(rows)).Int("missing", found).Bool("revs_diff_skipped", skipped).
		Float64("diff_ms", millis(diffed.Sub(start))).Float64("fetch_ms", millis(fetched.Sub(diffed))).
		Float64("write_ms", millis(w.clock.Since(fetched))).Msg("batch replicated")
	return nil
}

// skipDeletions drops from missing the deleted documents the target does
// not have (skip_deleted): those whose last row is a deletion and of which
// the target has no revision, as its _revs_diff answer suggests (no
// possible ancestor; every revision when the diff was skipped) and its
// _all_docs confirms. It returns how many it dropped.
func (w *workers) skipDeletions(ctx context.Context, rows []change, missing map[string]revsDiffEntry, diffSkipped bool) (int, error) {
	deleted := map[string]bool{}
	for _, c := range rows {
		if c.ID != "" {
			deleted[c.ID] = c.Deleted // the last row of an id is the current one
		}
	}
	var cands []string
	for id, e := range missing {
		if deleted[id] && (diffSkipped || len(e.PossibleAncestors) == 0) {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return 0, nil
	}
	sort.Strings(cands)
	has, err := w.tgt.hasDocs(ctx, cands)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range cands {
		if !has[id] {
			delete(missing, id)
			n++
		}
	}
	return n, nil
}

// fetchAndWrite fetches the missing revisions (through _bulk_get when it
// works, individually otherwise and for documents with attachments) and
// hands them to the writer.
func (w *workers) fetchAndWrite(ctx context.Context, ids []string, missing map[string]revsDiffEntry, b *batchWriter) error {
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

	if !w.rep.DisableBulkGet && w.tuning.useBulkGet() {
		w.stats.bulkGetAttempts.Add(int64(len(reqs)))
		// Attachment stubs only: documents with attachments are fetched
		// individually, with their bodies (and atts_since). Documents are
		// written as the reply brings them; what a reply cut short, or
		// too large to read further, did not bring is fetched
		// individually.
		kept := map[string][]*doc{} // the revisions written, without bodies
		seen := map[idRev]bool{}
		n := 0
		var addErr error
		err := w.src.bulkGet(ctx, reqs, func(d *doc) error {
			// A reply row that was not asked for (a peer answering with
			// more than the request named) is never written.
			if _, asked := missing[d.ID]; !asked || d.hasAttachments() || seen[idRev{d.ID, d.Rev}] {
				return nil
			}
			seen[idRev{d.ID, d.Rev}] = true
			kept[d.ID] = append(kept[d.ID], &doc{ID: d.ID, Rev: d.Rev, Revisions: d.Revisions})
			n++
			addErr = b.add(d)
			return addErr
		})
		if addErr != nil {
			return addErr
		}
		w.stats.bulkGetDocs.Add(int64(n))
		w.stats.docsRead.Add(int64(n))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrMaxBackoff) {
				return err
			}
			w.log.Debug().Err(err).Int("docs", n).Msg("_bulk_get failed, fetching the rest individually")
		}
		w.tuning.recordBulkGet(err != nil)
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
	} else {
		for _, q := range reqs {
			addLeftover(q.ID, q.Rev)
		}
	}
	if len(leftoverIDs) == 0 {
		return nil
	}

	// Individual fetches, a few at a time.
	sem := make(chan struct{}, w.perWorkerConn)
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
			err := safely(&w.log, func() error { return w.fetchOne(fctx, id, revs, missing[id].PossibleAncestors, b) })
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
// after Replication.MissingDocRetry; a second miss fails the run.
func (w *workers) fetchOne(ctx context.Context, id string, revs, attsSince []string, b *batchWriter) error {
	failures, wait := 0, retryWaitDefault
	lease := w.newLease()
	defer lease.release()
	for attempt := 0; ; attempt++ {
		lease.release() // an answer counts from nothing, and takes its turn if large
		docs, missingRevs, err := w.src.openRevs(ctx, id, revs, attsSince, true, lease)
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
			if errors.As(err, &done) || errors.Is(err, ErrMaxBackoff) || errors.Is(err, couch.ErrBodyTooLarge) || failures > w.rep.RetriesPerRequest {
				return fmt.Errorf("%w: %s: %w", ErrOpenRevs, id, err)
			}
			select {
			case <-w.clock.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
			wait = min(2*wait, retryWaitMax)
			attempt--
			continue
		}
		w.stats.docsRead.Add(int64(len(docs)))
		for _, d := range docs {
			if err := b.add(d); err != nil {
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
		case <-w.clock.After(w.rep.MissingDocRetry):
		case <-ctx.Done():
			return ctx.Err()
		}
		revs, attsSince = still, nil
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// millis is d in milliseconds, to the microsecond, for log fields named
// …_ms.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
