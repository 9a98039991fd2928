package embedded

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// A transaction's methods are spread over files by concern: reads in
// tx_read.go (range reads in range.go), writes in tx_write.go over the
// writeBuffer of writebuffer.go, conflict ranges in tx_conflict.go, watches
// in tx_watch.go, and commit, retry and cancellation in tx_commit.go. This
// file holds its state and the checks they share.

// maxRetryDelayDefault is FoundationDB's default for SetMaxRetryDelay, in
// milliseconds (kv.BackoffMaxDefault).
const maxRetryDelayDefault = int64(kv.BackoffMaxDefault / time.Millisecond)

// snapRef holds a transaction's snapshot reference; a cleanup releases it
// if the transaction is dropped without Commit, Cancel or Reset.
type snapRef struct {
	s *snapshot
}

// transaction implements kv.Transaction. Its methods lock mu: Cancel may
// come from another goroutine (a context), everything else from the
// transaction's user.
type transaction struct {
	db     *DB
	mu     sync.Mutex
	locals kv.Locals // kept by OnError, cleared by Reset

	// Options, kept by OnError and cleared by Reset.
	timeoutMs     int64
	retryLimit    int64
	maxRetryDelay int64
	start         time.Time // on the store's clock, for the timeout
	retries       int64
	backoff       kv.Backoff // OnError's, on the real clock

	ref     *snapRef
	grvTime time.Time // on the store's clock, for the lifetime

	buf      writeBuffer
	reads    []span // read conflict ranges
	wconf    []span // write conflict ranges
	vsw      []span // where versionstamped keys may land: write conflicts the client does not send
	watches  []*watch
	deferred error // the first invalid write's error, for Commit
	grvNow   bool  // the last readable() took the read version (latency mode)

	// The budget check (Options.Budget): where the transaction was
	// created, when the attempt's first operation ran (real clock), what
	// it read, and the attempt's budget error once it went over.
	site      kv.CallSite
	opStart   time.Time
	readBytes int64
	budgetErr error

	cancelled     bool
	commitStarted bool
	readOnlyDone  bool
	commitErr     error // why a commit failed before reaching the leader
	req           *commitReq
	vs            *future[kv.Key]
}

func newTransaction(db *DB) *transaction {
	tr := &transaction{db: db, ref: &snapRef{}}
	if !db.opts.Budget.IsZero() {
		tr.site = kv.CaptureCallSite()
	}
	tr.resetOptions()
	runtime.AddCleanup(tr, func(r *snapRef) {
		if r.s != nil {
			r.s.release()
		}
	}, tr.ref)
	return tr
}

func (tr *transaction) resetOptions() {
	tr.timeoutMs = 0
	tr.retryLimit = -1
	tr.maxRetryDelay = maxRetryDelayDefault
	tr.start = tr.clock().Now()
	tr.retries = 0
	tr.backoff = kv.Backoff{Max: retryDelay(tr.maxRetryDelay)}
}

// retryDelay converts SetMaxRetryDelay's milliseconds to kv.Backoff.Max,
// where 0 means the default and a negative value no delay.
func retryDelay(ms int64) time.Duration {
	if ms == 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// resetAttempt drops everything of the current attempt; pending watches
// and the versionstamp fail with err (the attempt's outcome).
func (tr *transaction) resetAttempt(err error) {
	for _, w := range tr.watches {
		w.finish(err)
	}
	if tr.vs != nil {
		tr.vs.fail(err)
	}
	tr.releaseSnapshot()
	tr.buf = writeBuffer{}
	tr.reads, tr.wconf, tr.vsw, tr.watches = nil, nil, nil, nil
	tr.deferred = nil
	tr.opStart, tr.readBytes, tr.budgetErr = time.Time{}, 0, nil
	tr.cancelled, tr.commitStarted, tr.readOnlyDone = false, false, false
	tr.req, tr.vs, tr.commitErr = nil, nil, nil
}

func (tr *transaction) releaseSnapshot() {
	if tr.ref.s != nil {
		tr.ref.s.release()
		tr.ref.s = nil
	}
}

// clock is the store's clock, which measures timeouts and lifetimes.
func (tr *transaction) clock() clockwork.Clock { return tr.db.opts.Clock }

// timedOut reports whether the timeout set with SetTimeout has passed.
func (tr *transaction) timedOut() bool {
	return timeoutPassed(tr.clock(), tr.start, tr.timeoutMs)
}

// timeoutPassed reports whether a timeout of ms milliseconds (0: none)
// counted from start has passed on clock.
func timeoutPassed(clock clockwork.Clock, start time.Time, ms int64) bool {
	return ms > 0 && clock.Since(start) >= time.Duration(ms)*time.Millisecond
}

// tooOld reports whether the read version is older than the transaction
// lifetime.
func (tr *transaction) tooOld() bool {
	return tr.clock().Since(tr.grvTime) > tr.db.opts.TransactionLifetime
}

// lockRead locks the transaction for a read and checks that it may read,
// taking a read version if it has none. On success the caller must call
// tr.unlockRead.
func (tr *transaction) lockRead() error {
	tr.mu.Lock()
	tr.db.closeMu.RLock()
	if err := tr.readable(); err != nil {
		tr.unlockRead()
		return err
	}
	return nil
}

func (tr *transaction) unlockRead() {
	tr.db.closeMu.RUnlock()
	tr.mu.Unlock()
}

// usable returns why the transaction cannot be used now, or nil; the
// timeout counts only if timeout is set. An operation during a commit
// fails with used_during_commit and, as on FoundationDB, fails the commit
// still in flight with it too.
func (tr *transaction) usable(timeout bool) error {
	switch {
	case tr.db.closed.Load():
		return kv.ErrDatabaseClosed
	case tr.cancelled:
		return errCancelled
	case timeout && tr.timedOut():
		return errTimedOut
	case tr.commitStarted:
		tr.poisonCommit(errUsedDuringCommit)
		return errUsedDuringCommit
	}
	tr.startOp()
	return tr.overTime()
}

// readable returns why the transaction cannot read now, or nil, taking a
// read version if it has none (grvNow then reports it, for the latency).
func (tr *transaction) readable() error {
	if err := tr.usable(true); err != nil {
		return err
	}
	tr.grvNow = false
	if tr.ref.s == nil {
		tr.ref.s = tr.db.acquire()
		tr.grvTime = tr.clock().Now()
		tr.grvNow = true
	}
	if tr.tooOld() {
		return errTooOld
	}
	return nil
}

// writable reports whether a write may be buffered; if not, the reason is
// kept for Commit.
func (tr *transaction) writable() bool {
	switch {
	case tr.cancelled:
		return false
	case tr.commitStarted:
		tr.poisonCommit(errUsedDuringCommit)
		tr.deferErr(errUsedDuringCommit)
		return false
	}
	tr.startOp()
	if err := tr.overTime(); err != nil {
		tr.deferErr(err)
	}
	return true
}

// poisonCommit fails the commit in flight, if any, with err: its future
// and its versionstamp's. The commit itself goes on, so it may still
// happen, as on FoundationDB.
func (tr *transaction) poisonCommit(err error) {
	if tr.req != nil {
		tr.req.fail(err)
	}
}

// noteUnreadable keeps accessed_unreadable for Commit when a read met a
// key a pending versionstamped operation makes unreadable, as
// FoundationDB does (its commit fails too, even when the caller dropped
// the read's error), and returns err.
func (tr *transaction) noteUnreadable(err error) error {
	if errors.Is(err, errUnreadable) {
		tr.deferErr(errUnreadable)
	}
	return err
}

// deferErr keeps err for Commit to fail with, unless an earlier error is
// kept already: write methods return no error.
func (tr *transaction) deferErr(err error) {
	if tr.deferred == nil {
		tr.deferred = err
	}
}

func (tr *transaction) Options() kv.TransactionOptions { return txnOptions{tr} }

func (tr *transaction) Snapshot() kv.ReadTransaction { return snapshotView{tr} }

// Transact runs f once in this transaction, without committing; a panic
// with an error (as MustGet raises) is returned as the error.
func (tr *transaction) Transact(_ context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(tr) })
}

// ReadTransact runs f once in this transaction.
func (tr *transaction) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(tr) })
}

// txnOptions implements kv.TransactionOptions.
type txnOptions struct{ tr *transaction }

// set sets the option *field to v under the transaction's lock, or fails
// with invalid_option_value if v is below least.
func (o txnOptions) set(field *int64, v, least int64) error {
	if v < least {
		return errInvalidOption
	}
	o.tr.mu.Lock()
	*field = v
	o.tr.mu.Unlock()
	return nil
}

func (o txnOptions) SetTimeout(ms int64) error { return o.set(&o.tr.timeoutMs, ms, 0) }

func (o txnOptions) SetRetryLimit(limit int64) error { return o.set(&o.tr.retryLimit, limit, -1) }

func (o txnOptions) SetMaxRetryDelay(ms int64) error {
	if ms < 0 {
		return errInvalidOption
	}
	o.tr.mu.Lock()
	o.tr.maxRetryDelay = ms
	o.tr.backoff.Max = retryDelay(ms)
	o.tr.mu.Unlock()
	return nil
}

// snapshotView is a transaction's snapshot-read view: the same reads, no
// read conflict ranges.
type snapshotView struct{ tr *transaction }

func (s snapshotView) Get(key kv.KeyConvertible) kv.FutureByteSlice { return s.tr.get(key, true) }
func (s snapshotView) GetKey(sel kv.Selectable) kv.FutureKey        { return s.tr.getKey(sel, true) }
func (s snapshotView) GetRange(r kv.Range, o kv.RangeOptions) kv.RangeResult {
	return &rangeResult{tr: s.tr, snap: true, r: r, opts: o}
}
func (s snapshotView) GetReadVersion() kv.FutureInt64 { return s.tr.GetReadVersion() }
func (s snapshotView) Snapshot() kv.ReadTransaction   { return s }
func (s snapshotView) Cancel()                        { s.tr.Cancel() }
func (s snapshotView) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(s) })
}

var (
	_ kv.Transaction     = (*transaction)(nil)
	_ kv.ReadTransaction = snapshotView{}
)
