package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"
)

// changesReader reads the source's changes feed into rows, in feed order,
// and owns the tracker that orders the batches the workers take from rows,
// so that a checkpoint never claims a change that is not on the target.
type changesReader struct {
	rep      Replication
	src      *peer
	startSeq json.RawMessage // where the feed starts
	// inlineDocs reads the feed with include_docs=true (see
	// workers.inlineDocs).
	inlineDocs bool
	clock      clockwork.Clock
	log        zerolog.Logger

	rows chan change
	// queued counts the bytes of the rows read and not yet released
	// (rows, in the workers' batches, or in batches the tracker holds):
	// at most ChangesQueueMax.
	queued   *semaphore.Weighted
	tracker  *seqTracker
	complete atomic.Bool // a one-shot feed was read to its end
	health   *health     // nil: none
	// stats counts the documents skipped for their id's length (nil:
	// none), count the feed's failures (nil: none).
	stats *counters
	count func(Count)
}

func newChangesReader(rep Replication, src *peer, startSeq json.RawMessage, inlineDocs bool, clock clockwork.Clock,
	log zerolog.Logger) *changesReader {
	return &changesReader{rep: rep, src: src, startSeq: startSeq, inlineDocs: inlineDocs, clock: clock, log: log,
		// rows holds two rounds of batches at most.
		rows:    make(chan change, min(rep.WorkerBatchSize*rep.WorkerProcesses, WorkerBatchSizeMax)*2),
		queued:  semaphore.NewWeighted(ChangesQueueMax),
		tracker: newSeqTracker(startSeq)}
}

// run reads the feed until it ends, fails or ctx ends. A one-shot feed
// read to its end is recorded as complete. Its caller closes rows after it
// has recorded run's error (see Run.spawn): the workers end when rows
// close, and the run must not end before it has the feed's failure.
func (c *changesReader) run(ctx context.Context) error {
	err := c.read(ctx)
	if err == nil && ctx.Err() == nil && !c.rep.Continuous {
		c.complete.Store(true)
	}
	return err
}

// completed reports whether the one-shot feed was read to its end and each
// of its changes written: nothing is left queued or in flight.
func (c *changesReader) completed() bool {
	_, _, inFlight := c.tracker.snapshot()
	return c.complete.Load() && len(c.rows) == 0 && inFlight == 0
}

// changesRequest is how the changes feed is asked for, given the filter.
type changesRequest struct {
	method string
	query  url.Values
	body   []byte
	// keep, when set, filters rows client-side (doc_ids against a server
	// without the _doc_ids filter).
	keep map[string]bool
}

// viewArgKeys are query_params keys JSON-encoded for filter=_view.
var viewArgKeys = map[string]bool{"key": true, "keys": true, "startkey": true, "endkey": true,
	"start_key": true, "end_key": true, "startkey_docid": false}

// changesRequest builds the request for the configured filter.
func (c *changesReader) changesRequest() (changesRequest, error) {
	rep := c.rep
	q := url.Values{}
	if rep.WinningRevsOnly {
		q.Set("style", "main_only")
	} else {
		q.Set("style", "all_docs")
	}
	if c.inlineDocs {
		q.Set("include_docs", "true")
	}
	req := changesRequest{method: http.MethodGet, query: q}
	switch {
	case rep.DocIDs != nil:
		q.Set("filter", "_doc_ids")
		b, err := json.Marshal(map[string][]string{"doc_ids": rep.docIDs()})
		if err != nil {
			return req, err
		}
		req.method, req.body = http.MethodPost, b
	case len(rep.Selector) > 0:
		q.Set("filter", "_selector")
		if c.src.pouch {
			// pouchdb-server ignores a POSTed selector and then crashes;
			// it reads the selector from the query string instead.
			q.Set("selector", compactJSON(rep.Selector))
		} else {
			req.method = http.MethodPost
			req.body = []byte(`{"selector":` + compactJSON(rep.Selector) + `}`)
		}
	case rep.Filter != "":
		var jsonKeys map[string]bool
		if rep.Filter == "_view" {
			jsonKeys = viewArgKeys
		}
		params, err := objectQuery(rep.QueryParams, jsonKeys)
		if err != nil {
			return req, fmt.Errorf("%w: query_params: %v", ErrInvalidSpec, err)
		}
		for k, v := range params {
			if k == "filter" || k == "feed" || k == "since" || k == "style" {
				continue
			}
			q[k] = v
		}
		q.Set("filter", rep.Filter)
	}
	return req, nil
}

// read streams the source's changes into rows: one request for a
// one-shot replication (feed=normal, ending with the feed), or an endless
// sequence of feed=continuous requests, each resuming from the last
// sequence seen. A feed that ends with last_seq beyond the last row queues a
// row without id so that the checkpoint can advance past filtered changes.
// Broken streams are resumed from the last sequence; the error budget
// (retries_per_request, 250 ms doubling) is refilled whenever rows arrive.
// A request that fails after the transport's own retries, or gets an
// unexpected status, fails the feed at once.
func (c *changesReader) read(ctx context.Context) error {
	base, err := c.changesRequest()
	if err != nil {
		return err
	}
	since := c.startSeq   // where the next request resumes
	emitted := c.startSeq // the last sequence handed to the workers
	failures := 0
	wait := retryWaitDefault
	send := func(row change) error {
		row.size = row.bytes()
		if err := c.queued.Acquire(ctx, row.size); err != nil {
			return err
		}
		select {
		case c.rows <- row:
		case <-ctx.Done():
			c.queued.Release(row.size)
			return ctx.Err()
		}
		c.health.rowSent(row.ID != "")
		emitted = row.Seq
		return nil
	}
	// pouchdb-server builds a whole feed=normal reply before sending any of
	// it, which would leave the target idle for seconds on a large source:
	// one-shot runs read it in pages of limit rows instead, the next page
	// being fetched while the workers replicate the previous one. CouchDB
	// streams its reply, so it gets one request, as its replicator sends.
	limit := 0
	if !c.rep.Continuous && c.src.pouch {
		limit = max(100, c.rep.WorkerBatchSize*c.rep.WorkerProcesses)
	}
	for {
		progressed := false
		rows := 0
		emit := func(row change) error {
			since, progressed = row.Seq, true
			rows++
			if base.keep != nil && !base.keep[row.ID] || c.idTooLong(row) {
				return nil
			}
			return send(row)
		}
		lastSeq, err := c.changesOnce(ctx, &base, since, limit, emit)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && lastSeq != nil {
			if !seqEqual(lastSeq, emitted) {
				if err := send(change{Seq: lastSeq}); err != nil {
					return nil
				}
			}
			since = lastSeq
			c.health.feedEnded()
		}
		if err == nil && !c.rep.Continuous && (limit == 0 || rows < limit) {
			return nil
		}
		if err == nil {
			failures, wait = 0, retryWaitDefault
			continue
		}
		if errors.Is(err, errRetryNow) {
			continue
		}
		if _, ok := asOverLimit(err); ok {
			if base.query.Get("include_docs") != "" {
				// A document too large to ride in a row: read on without
				// the documents, from the row that had it.
				c.log.Info().Err(err).Msg("changes feed read again without include_docs")
				base.query.Del("include_docs")
				continue
			}
			return fmt.Errorf("%w: %w", ErrChangesFeed, err) // the peer would send it again
		}
		var st settled
		if errors.As(err, &st) || !progressed && !(c.rep.Continuous && errors.Is(err, couch.ErrTimeout)) {
			// A failed request counts; a feed that broke off after rows,
			// or went quiet, is resumed below and does not.
			c.readFailed()
		}
		if errors.As(err, &st) {
			// The request failed after the transport's own retries, or
			// got a definitive answer: retrying it here again would
			// multiply the retry budget (a frozen source would hold the
			// run for retries_per_request² × connection_timeout).
			return fmt.Errorf("%w: %w", ErrChangesFeed, st.err)
		}
		if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrMaxBackoff) || errors.Is(err, ErrInvalidSpec) {
			return fmt.Errorf("%w: %w", ErrChangesFeed, err)
		}
		if progressed || (c.rep.Continuous && errors.Is(err, couch.ErrTimeout)) {
			// Progress refills the budget; so does a continuous feed that
			// merely went quiet for connection_timeout (pouchdb-server
			// sends heartbeats, CouchDB ends the feed itself, so silence
			// means a dead connection, not a dead source).
			failures, wait = 0, retryWaitDefault
			c.log.Debug().Err(err).Msg("changes feed interrupted, resuming")
			continue
		}
		failures++
		if failures > c.rep.RetriesPerRequest {
			return fmt.Errorf("%w: %w", ErrChangesFeed, err)
		}
		c.log.Warn().Err(err).Int("attempt", failures).Msg("changes feed interrupted, resuming")
		select {
		case <-c.clock.After(wait):
		case <-ctx.Done():
			return nil
		}
		wait = min(2*wait, retryWaitMax)
	}
}

// readFailed counts a changes request that failed.
func (c *changesReader) readFailed() {
	if c.count != nil {
		c.count(CountChangesReadFailure)
	}
}

// idTooLong reports a row whose document id is longer than
// max_document_id_length, which is logged and counted in
// doc_write_failures, as CouchDB does, and not replicated.
func (c *changesReader) idTooLong(row change) bool {
	if c.rep.MaxDocIDLength <= 0 || len(row.ID) <= c.rep.MaxDocIDLength {
		return false
	}
	c.log.Error().Str("doc_id", clip(row.ID, 64)).Int("id_bytes", len(row.ID)).Int("max_document_id_length", c.rep.MaxDocIDLength).
		Msg("document id longer than max_document_id_length: not replicated, counted in doc_write_failures")
	if c.stats != nil {
		c.stats.writeFailures.Add(1)
	}
	return true
}

// changesOnce issues one changes request and parses its rows.
func (c *changesReader) changesOnce(ctx context.Context, base *changesRequest, since json.RawMessage, limit int, emit func(change) error) (json.RawMessage, error) {
	q := url.Values{}
	for k, v := range base.query {
		q[k] = v
	}
	q.Set("since", seqParam(since))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if c.rep.Continuous {
		q.Set("feed", "continuous")
		q.Set("timeout", strconv.FormatInt(max(1000, c.rep.ConnectionTimeout.Milliseconds()/3), 10))
	} else {
		q.Set("feed", "normal")
	}
	// The feed has no end (continuous) or no bound (a large database):
	// its rows are bounded one by one instead.
	req := httpRequest{method: base.method, path: "_changes", query: q, header: jsonHeader(), body: base.body, stream: true,
		feed: true, maxBody: -1}
	res, err := c.src.t.call(ctx, req)
	if statusOf(err) == http.StatusMethodNotAllowed && base.method == http.MethodPost && c.rep.DocIDs != nil {
		// Servers without the _doc_ids filter: read everything, keep ours.
		base.method, base.body = http.MethodGet, nil
		base.query.Del("filter")
		base.keep = map[string]bool{}
		for _, id := range c.rep.docIDs() {
			base.keep[id] = true
		}
		return nil, errRetryNow
	}
	if err != nil {
		return nil, settled{err}
	}
	defer res.stream.Close()
	if res.status != http.StatusOK {
		return nil, settled{unexpectedStatus(req, c.src.url(), res)}
	}
	parse := parseNormalFeed
	if c.rep.Continuous {
		parse = parseContinuousFeed
	}
	lastSeq, err := parse(res.stream, ChangesRowMax, emit)
	if errors.Is(err, errPartTooLarge) {
		return nil, &overLimit{side: c.src.side(), url: c.src.url(), what: req.method + " " + requestPath(c.src.url(), req.path) + " sent a row of",
			limit: ChangesRowMax, name: "ChangesRowMax"}
	}
	return lastSeq, err
}

// settled marks an error that the transport has already retried as far as
// retries_per_request allows (no answer), or a definitive HTTP answer (408,
// 429 and 5xx are retried by the transport). The engine's own retries only
// cover what the transport cannot see: a streamed reply cut while it is read.
type settled struct{ err error }

func (e settled) Error() string { return e.err.Error() }
func (e settled) Unwrap() error { return e.err }

// errRetryNow asks read to reissue the request (after switching
// strategy), counting as one failure.
var errRetryNow = errors.New("changes request strategy changed")

// seqParam encodes a sequence for the since parameter: strings as is, other
// values as JSON.
func seqParam(seq json.RawMessage) string {
	if len(seq) == 0 {
		return "0"
	}
	return seqString(seq)
}

// compactJSON returns raw without insignificant whitespace (raw as is if
// it is not valid JSON; Validate has checked it).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
