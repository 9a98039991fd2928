package engine

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// Limits of what a run reads from its peers. Whatever a peer answers, a
// run holds no more than MemoryBound of it: an answer, or a part of one,
// over its limit fails the run with an error that names the limit (see
// overLimit) instead of growing the process until it dies. The limits are
// far above what CouchDB and pouchdb-server send for the requests the
// engine makes, except DocMax, which fdbrep enforces and CouchDB does not
// (its replicator streams attachments; the engine holds a document whole
// between its fetch and its write).
const (
	// AnswerMax bounds the answers of a fixed shape: a database's info,
	// the server's root and _session, _ensure_full_commit, checkpoint
	// documents, _changes?limit=0, and the replies to writes. The replies
	// to _revs_diff and _bulk_docs may be as long again as their request:
	// they list the revisions asked about and more, or the documents
	// written.
	AnswerMax = 4 << 20
	// ChangesRowMax bounds one row of a changes feed (and each member of
	// a feed=normal reply other than its results). A feed read with
	// include_docs (a replication from sequence 0 into an empty target)
	// whose row goes over it is read again without the documents from
	// that row on; other rows over it fail the run.
	ChangesRowMax = 1 << 20
	// ChangesQueueMax bounds the changes rows a run holds at once, read
	// ahead of its workers or in their batches (their sequences, ids,
	// revisions and inline documents): past it the feed waits for the
	// workers.
	ChangesQueueMax = 16 << 20
	// DocMax bounds one document as a run fetches it: an open_revs answer
	// (every revision asked for, with their attachments, as multipart or
	// as base64 in JSON) together with the attachments it decompresses for
	// a pouchdb-server target, and a design document read for its filter.
	DocMax = 64 << 20
	// LargeDocMin is the size past which a fetched document is large:
	// large documents take turns, one at a time per run, from the byte
	// that makes them large until they are written, so that a run holds
	// one DocMax at a time, not one per connection. A _bulk_get reply
	// whose entry goes past it is read no further: what it did not bring
	// is fetched one document at a time.
	LargeDocMin = 1 << 20
)

// workerMemoryMax bounds what one worker holds besides its rows and its
// individual fetches: a _bulk_get entry being decoded, the _bulk_docs
// buffer (flushed past bulkDocsMaxBytesDefault, so less than that and
// one document) and its encoding, and the replies to _revs_diff and
// _bulk_docs beyond the size of their requests.
const workerMemoryMax = 4*LargeDocMin + 2*(bulkDocsMaxBytesDefault+LargeDocMin) + 2*AnswerMax

// MemoryBound is the most memory a run of rep holds for what its peers
// send, whatever they send: one large document (DocMax, held as read,
// decoded and encoded again: 4 × DocMax), a changes row being decoded
// (4 × ChangesRowMax), the rows read ahead and in the workers' batches
// with the requests made of them (3 × ChangesQueueMax), each worker's
// buffers and replies (workerMemoryMax: 4 × LargeDocMin + 2 × (4 MiB +
// LargeDocMin) + 2 × AnswerMax), and each of its concurrent individual
// fetches of a document under LargeDocMin (3 × LargeDocMin; a worker runs
// max(1, http_connections / worker_processes) of them). With the default
// tunables it is 456 MiB; it grows with worker_processes and
// http_connections. The answers of a run's setup and checkpoints are
// read one at a time and are far smaller.
func MemoryBound(rep Replication) int64 {
	rep = rep.WithDefaults()
	workers := int64(rep.WorkerProcesses)
	fetches := workers * int64(max(1, rep.HTTPConnections/rep.WorkerProcesses))
	return 4*DocMax + 4*ChangesRowMax + 3*ChangesQueueMax + workers*workerMemoryMax + fetches*3*LargeDocMin
}

// overLimit is an answer of a peer, or a part of one, over one of the
// limits above. It reads "http_request_failed: source http://host/db/:
// GET /db/ answered more than 4194304 bytes (AnswerMax)" and unwraps to
// ErrHTTP and couch.ErrBodyTooLarge; the run fails with it, and is not
// retried within the run (the peer would answer the same).
type overLimit struct {
	side, url string // the peer, and its redacted URL
	what      string // what went over: "GET _changes sent a row of"
	limit     int64
	name      string // the limit's name, "AnswerMax"
}

func (e *overLimit) Error() string {
	return fmt.Sprintf("%v: %s %s: %s more than %d bytes (%s)", ErrHTTP, e.side, e.url, e.what, e.limit, e.name)
}

func (e *overLimit) Unwrap() []error { return []error{ErrHTTP, couch.ErrBodyTooLarge} }

// asOverLimit returns the *overLimit in err's chain, if any: parsers wrap
// what their reader returns, and callers report the limit as it is.
func asOverLimit(err error) (*overLimit, bool) {
	var ol *overLimit
	return ol, errors.As(err, &ol)
}

// errPartTooLarge is the error of a partReader past its limit.
var errPartTooLarge = errors.New("a part of the answer is over its limit")

// partReader reads a streamed answer whose parts (a changes row, a
// _bulk_get entry) are decoded one at a time: it counts the bytes read
// since the last reset and fails past max, so a decoder never buffers
// more than a part's limit, and a part that never ends fails at it.
type partReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (p *partReader) Read(b []byte) (int, error) {
	if p.n > p.max {
		return 0, errPartTooLarge
	}
	if left := p.max - p.n + 1; int64(len(b)) > left {
		b = b[:left] // one byte past the limit tells a longer part
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.n > p.max {
		return n, errPartTooLarge
	}
	return n, err
}

// reset starts a new part.
func (p *partReader) reset() { p.n = 0 }

// errDocMax is the error of a docLease past DocMax (the attachments a
// document decompresses; its answer's own bytes stop at couch's MaxBody).
var errDocMax = fmt.Errorf("%w: the document holds more than %d bytes (DocMax)", couch.ErrBodyTooLarge, DocMax)

// docLease counts the bytes one fetched document holds, from its answer's
// first byte until it is written: past LargeDocMin it takes the run's turn
// for large documents (turn, capacity 1), waiting for it, and keeps it
// until release; past DocMax it fails with errDocMax. The turn's holder
// never waits for another document, so the turn always comes back. A
// lease is used by one goroutine at a time.
type docLease struct {
	turn chan struct{} // the run's; nil: no turn to take
	n    int64
	held bool
}

// grow counts n more bytes.
func (l *docLease) grow(ctx context.Context, n int) error {
	l.n += int64(n)
	if l.n > DocMax {
		return errDocMax
	}
	if l.n > LargeDocMin && !l.held && l.turn != nil {
		select {
		case l.turn <- struct{}{}:
			l.held = true
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// restart counts from nothing again, keeping the turn if it is held: the
// document the bytes were counted for is dropped for another one.
func (l *docLease) restart() { l.n = 0 }

// release gives the turn back, if held, and counts from nothing again.
func (l *docLease) release() {
	if l.held {
		<-l.turn
		l.held = false
	}
	l.n = 0
}

// leaseReader counts what it reads on a docLease.
type leaseReader struct {
	r     io.Reader
	lease *docLease
	ctx   context.Context
}

func (l *leaseReader) Read(b []byte) (int, error) {
	n, err := l.r.Read(b)
	if gerr := l.lease.grow(l.ctx, n); gerr != nil {
		return n, gerr
	}
	return n, err
}
