package embedded

import (
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Commit, the results of a commit, and what ends or restarts an attempt:
// OnError, Reset and Cancel.

// committed reports whether the last Commit succeeded.
func (tr *transaction) committed() bool {
	if tr.readOnlyDone {
		return true
	}
	if tr.req == nil {
		return false
	}
	done, err := tr.req.outcome()
	return done && err == nil
}

// GetVersionstamp returns the future of the commit's versionstamp. As on
// FoundationDB it must be called before Commit: afterwards it fails with
// used_during_commit, and fails a commit still in flight with it too.
func (tr *transaction) GetVersionstamp() kv.FutureKey {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch {
	case tr.commitStarted:
		tr.poisonCommit(errUsedDuringCommit)
		return kv.ReadyFuture[kv.Key](nil, errUsedDuringCommit)
	case tr.cancelled:
		return kv.ReadyFuture[kv.Key](nil, errCancelled)
	case tr.vs != nil:
		return tr.vs
	}
	tr.vs = newFuture[kv.Key]()
	return tr.vs
}

func (tr *transaction) GetCommittedVersion() (int64, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.req != nil {
		if done, err := tr.req.outcome(); done && err == nil {
			return tr.req.version, nil
		}
	}
	return -1, nil
}

func (tr *transaction) Commit() kv.FutureNil {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.db.closeMu.RLock()
	defer tr.db.closeMu.RUnlock()
	switch {
	case tr.commitStarted:
		tr.poisonCommit(errUsedDuringCommit)
		return kv.ReadyFuture(struct{}{}, errUsedDuringCommit)
	case tr.cancelled:
		return kv.ReadyFuture(struct{}{}, errCancelled)
	}
	tr.commitStarted = true
	switch {
	case tr.db.closed.Load():
		return tr.failCommit(kv.ErrDatabaseClosed)
	case tr.timedOut():
		return tr.failCommit(errTimedOut)
	case tr.deferred != nil:
		return tr.failCommit(tr.deferred)
	}
	if tr.buf.empty() && len(tr.wconf) == 0 && len(tr.vsw) == 0 {
		// Read-only: nothing to resolve; watches arm at the newest state.
		if err := tr.overTime(); err != nil {
			return tr.failCommit(err)
		}
		tr.readOnlyDone = true
		if len(tr.watches) > 0 {
			tr.db.armReadOnly(tr.watches)
			tr.watches = nil
		}
		if tr.vs != nil {
			tr.vs.fail(errNoCommitVersion)
		}
		tr.releaseSnapshot()
		return kv.ReadyFuture(struct{}{}, nil)
	}
	if len(tr.reads) > 0 && tr.ref.s != nil && tr.tooOld() {
		return tr.failCommit(errTooOld)
	}
	reads, writes := coalesce(tr.reads), coalesce(tr.wconf)
	size := transactionSizeAtMost(tr.buf.muts, reads, writes)
	if limit := tr.db.opts.Budget.Bytes; size > kv.MaxTransactionSize || limit > 0 && int64(size) > limit {
		size = transactionSize(tr.buf.muts, reads, writes) // near a limit: exact
	}
	if size > kv.MaxTransactionSize {
		return tr.failCommit(errTooLarge)
	}
	if err := tr.checkWritten(size); err != nil {
		return tr.failCommit(err)
	}
	if len(tr.vsw) > 0 {
		writes = coalesce(append(append([]span(nil), writes...), tr.vsw...))
	}
	req := &commitReq{
		db:      tr.db,
		reads:   reads,
		writes:  writes,
		muts:    tr.buf.muts,
		size:    size,
		atomic:  tr.buf.atomic,
		watches: tr.watches,
		fut:     newFuture[struct{}](),
		vs:      tr.vs,
	}
	tr.vs = nil // the request owns it now
	if tr.ref.s != nil {
		// The request keeps the snapshot until the leader has resolved it,
		// which holds back the resolver's horizon.
		req.rv, req.snap = tr.ref.s.version, tr.ref.s
		tr.ref.s = nil
	} else {
		// No read version yet: read at the newest, as FoundationDB takes one
		// at commit. Explicit read conflict ranges are checked against it.
		req.snap = tr.db.acquire()
		req.rv = req.snap.version
	}
	tr.watches = nil
	tr.buf = writeBuffer{}
	tr.reads, tr.wconf, tr.vsw = nil, nil, nil
	tr.req = req
	tr.db.enqueue(req)
	return resolvedAfter(tr.db.opts.Latency.Commit, kv.FutureNil(req.fut))
}

// failCommit fails a commit before it reaches the leader: the watches and
// the versionstamp fail with err too.
func (tr *transaction) failCommit(err error) kv.FutureNil {
	for _, w := range tr.watches {
		w.finish(err)
	}
	tr.watches = nil
	tr.commitErr = err
	if tr.vs != nil {
		tr.vs.fail(err)
	}
	tr.releaseSnapshot()
	return kv.ReadyFuture(struct{}{}, err)
}

// OnError resolves, after FoundationDB's backoff, to nil for a retryable
// error within the retry limit, resetting the transaction for the next
// attempt; otherwise to the error. The backoff runs on the real clock;
// the timeout is checked on the store's.
func (tr *transaction) OnError(e kv.Error) kv.FutureNil {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.cancelled {
		return kv.ReadyFuture(struct{}{}, errCancelled)
	}
	if !kv.OnErrorRetries(e) || (tr.retryLimit >= 0 && tr.retries >= tr.retryLimit) {
		return kv.ReadyFuture[struct{}](struct{}{}, e)
	}
	if tr.timedOut() {
		return kv.ReadyFuture(struct{}{}, errTimedOut)
	}
	tr.retries++
	delay, _ := tr.backoff.Next(e)
	tr.resetAttempt(errCancelled)
	fut := newFuture[struct{}]()
	clock, start, timeout := tr.clock(), tr.start, tr.timeoutMs
	t := time.AfterFunc(delay, func() {
		if timeoutPassed(clock, start, timeout) {
			fut.fail(errTimedOut)
			return
		}
		fut.set(struct{}{}, nil)
	})
	fut.onCancel = func() { t.Stop() }
	return fut
}

func (tr *transaction) Reset() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.resetAttempt(errCancelled)
	tr.resetOptions()
	tr.locals.Reset()
}

func (tr *transaction) Locals() *kv.Locals { return &tr.locals }

// Cancel fails the transaction's operations with transaction_cancelled,
// a commit still in flight included (which may still happen, as on
// FoundationDB); it does nothing after a successful commit.
func (tr *transaction) Cancel() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.committed() {
		return
	}
	tr.poisonCommit(errCancelled)
	tr.resetAttempt(errCancelled)
	tr.cancelled = true
}
