package faultkv

import (
	"context"
	"sync"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// transaction wraps a kv.Transaction. Its state between two resets is an
// attempt; OnError and Reset start a new one.
type transaction struct {
	faultReads
	db    *DB
	inner kv.Transaction

	mu      sync.Mutex
	timeout bool // a timeout is set: transaction_timed_out may be injected
	att     *attempt
}

var _ kv.Transaction = (*transaction)(nil)

func newTransaction(db *DB, inner kv.Transaction) *transaction {
	t := &transaction{db: db, inner: inner, att: &attempt{}}
	t.faultReads = faultReads{t: t, inner: inner}
	return t
}

// attempt is one try of a transaction. Once a fault is injected into it,
// every later read and the commit fail with the same error, as in
// FoundationDB, where a transaction that got transaction_too_old or
// transaction_timed_out stays failed until OnError or Reset; and the
// watches and versionstamp futures of the attempt fail with it.
type attempt struct {
	mu      sync.Mutex
	err     error // the injected failure, or nil
	wrote   bool  // a mutation or write conflict range: commit faults apply
	sealed  bool  // committed without a fault: no more faults
	grv     bool  // the attempt has (asked for) its read version
	pending []func()
}

// seal marks the attempt as committed for real: later operations get no
// faults and its futures are the wrapped transaction's.
func (a *attempt) seal() {
	a.mu.Lock()
	a.sealed = true
	a.pending = nil
	a.mu.Unlock()
}

// status returns the injected failure (or nil), whether the attempt wrote,
// and whether it is sealed.
func (a *attempt) status() (failure error, wrote, sealed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err, a.wrote, a.sealed
}

func (a *attempt) failure() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// fail records err (the first failure wins) and cancels the inner futures
// that must now fail with it.
func (a *attempt) fail(err error) error {
	a.mu.Lock()
	if a.sealed {
		a.mu.Unlock()
		return err
	}
	if a.err == nil {
		a.err = err
	}
	err = a.err
	cancels := a.pending
	a.pending = nil
	a.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	return err
}

func (a *attempt) markWrote() {
	a.mu.Lock()
	a.wrote = true
	a.mu.Unlock()
}

// track registers an inner future to cancel if the attempt fails.
func (a *attempt) track(cancel func()) {
	a.mu.Lock()
	failed := a.err != nil
	if !failed && !a.sealed {
		a.pending = append(a.pending, cancel)
	}
	a.mu.Unlock()
	if failed {
		cancel()
	}
}

func (t *transaction) current() (*attempt, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.att, t.timeout
}

// newAttempt starts a new attempt; clearOptions also forgets the timeout,
// as Reset does.
func (t *transaction) newAttempt(clearOptions bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.att = &attempt{}
	if clearOptions {
		t.timeout = false
	}
}

// readFault returns the error a read fails with, injecting one by chance:
// the attempt's first read may fail getting the read version, any read
// as a storage server may fail it.
func (t *transaction) readFault() error {
	att, timeout := t.current()
	if err, _, sealed := att.status(); err != nil || sealed {
		return err
	}
	if err := t.grvFault(att); err != nil {
		return err
	}
	if code := t.db.readFault(timeout); code != 0 {
		return att.fail(kv.Error{Code: code})
	}
	return nil
}

// grvFault injects a read version fault by chance on the attempt's first
// read.
func (t *transaction) grvFault(att *attempt) error {
	att.mu.Lock()
	first := !att.grv
	att.grv = true
	att.mu.Unlock()
	if !first {
		return nil
	}
	if code := t.db.grvFault(); code != 0 {
		return att.fail(kv.Error{Code: code})
	}
	return nil
}

func (t *transaction) markWrote() {
	att, _ := t.current()
	att.markWrote()
}

// faultReads are the reads of a transaction or of its snapshot view: each
// may fail with an injected fault, which fails the attempt.
type faultReads struct {
	t     *transaction
	inner kv.ReadTransaction
}

func (r faultReads) Get(key kv.KeyConvertible) kv.FutureByteSlice {
	if err := r.t.readFault(); err != nil {
		return kv.ReadyFuture[[]byte](nil, err)
	}
	return r.inner.Get(key)
}

func (r faultReads) GetKey(sel kv.Selectable) kv.FutureKey {
	if err := r.t.readFault(); err != nil {
		return kv.ReadyFuture[kv.Key](nil, err)
	}
	return r.inner.GetKey(sel)
}

func (r faultReads) GetRange(rg kv.Range, options kv.RangeOptions) kv.RangeResult {
	if err := r.t.readFault(); err != nil {
		return failedRange{err}
	}
	return r.inner.GetRange(rg, options)
}

func (r faultReads) GetReadVersion() kv.FutureInt64 {
	att, _ := r.t.current()
	if err, _, sealed := att.status(); err != nil || sealed {
		if err != nil {
			return kv.ReadyFuture[int64](0, err)
		}
		return r.inner.GetReadVersion()
	}
	if err := r.t.grvFault(att); err != nil {
		return kv.ReadyFuture[int64](0, err)
	}
	return r.inner.GetReadVersion()
}

func (t *transaction) Snapshot() kv.ReadTransaction {
	return &snapshot{faultReads{t: t, inner: t.inner.Snapshot()}}
}

func (t *transaction) Cancel() { t.inner.Cancel() }

// ReadTransact runs f in this transaction, as a kv.Transaction does.
func (t *transaction) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(t) })
}

// Transact runs f in this transaction without committing, as a
// kv.Transaction does, so that nested helpers join the caller's
// transaction and its faults.
func (t *transaction) Transact(_ context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(t) })
}

// Writes.

func (t *transaction) Set(key kv.KeyConvertible, value []byte) {
	t.markWrote()
	t.inner.Set(key, value)
}

func (t *transaction) Clear(key kv.KeyConvertible) {
	t.markWrote()
	t.inner.Clear(key)
}

func (t *transaction) ClearRange(r kv.ExactRange) {
	t.markWrote()
	t.inner.ClearRange(r)
}

func (t *transaction) Add(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.Add(key, param)
}

func (t *transaction) BitAnd(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.BitAnd(key, param)
}

func (t *transaction) BitOr(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.BitOr(key, param)
}

func (t *transaction) BitXor(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.BitXor(key, param)
}

func (t *transaction) Max(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.Max(key, param)
}

func (t *transaction) Min(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.Min(key, param)
}

func (t *transaction) ByteMax(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.ByteMax(key, param)
}

func (t *transaction) ByteMin(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.ByteMin(key, param)
}

func (t *transaction) CompareAndClear(key kv.KeyConvertible, param []byte) {
	t.markWrote()
	t.inner.CompareAndClear(key, param)
}

func (t *transaction) SetVersionstampedKey(key kv.KeyConvertible, value []byte) {
	t.markWrote()
	t.inner.SetVersionstampedKey(key, value)
}

func (t *transaction) SetVersionstampedValue(key kv.KeyConvertible, value []byte) {
	t.markWrote()
	t.inner.SetVersionstampedValue(key, value)
}

func (t *transaction) AddReadConflictKey(key kv.KeyConvertible) error {
	return t.inner.AddReadConflictKey(key)
}

func (t *transaction) AddReadConflictRange(r kv.ExactRange) error {
	return t.inner.AddReadConflictRange(r)
}

func (t *transaction) AddWriteConflictKey(key kv.KeyConvertible) error {
	t.markWrote()
	return t.inner.AddWriteConflictKey(key)
}

func (t *transaction) AddWriteConflictRange(r kv.ExactRange) error {
	t.markWrote()
	return t.inner.AddWriteConflictRange(r)
}

// Commit-bound futures.

// Watch fails by chance with too_many_watches or future_version, as
// FoundationDB's watches may; the transaction is not affected.
func (t *transaction) Watch(key kv.KeyConvertible) kv.FutureNil {
	att, _ := t.current()
	if err, _, sealed := att.status(); err == nil && !sealed {
		if code := t.db.watchFault(); code != 0 {
			return kv.ReadyFuture(struct{}{}, error(kv.Error{Code: code}))
		}
	}
	return attemptFuture(att, t.inner.Watch(key))
}

func (t *transaction) GetVersionstamp() kv.FutureKey {
	att, _ := t.current()
	return attemptFuture(att, t.inner.GetVersionstamp())
}

func (t *transaction) GetCommittedVersion() (int64, error) {
	att, _ := t.current()
	if err := att.failure(); err != nil {
		return 0, err
	}
	return t.inner.GetCommittedVersion()
}

// Lifecycle.

func (t *transaction) Options() kv.TransactionOptions {
	return txOptions{t: t, inner: t.inner.Options()}
}

// Commit commits, unless a fault is injected: a dropped commit fails at once
// with not_committed, transaction_too_old or transaction_timed_out; an
// unknown result commits for real and then reports commit_unknown_result.
// Read-only transactions are passed through: FoundationDB never fails them.
func (t *transaction) Commit() kv.FutureNil {
	att, timeout := t.current()
	err, wrote, _ := att.status()
	if err != nil {
		return kv.ReadyFuture(struct{}{}, att.fail(err))
	}
	if !wrote {
		att.seal()
		return t.inner.Commit()
	}
	switch code := t.db.commitFault(timeout); code {
	case 0:
		t.db.commits.Add(1)
		att.seal()
		return t.inner.Commit()
	case kv.CodeCommitUnknownResult:
		t.db.commits.Add(1)
		return unknownResultFuture(t.db, att, t.inner.Commit())
	default:
		return kv.ReadyFuture(struct{}{}, att.fail(kv.Error{Code: code}))
	}
}

// OnError passes e to the wrapped transaction's OnError, which decides
// about retries, backs off and resets; once it resolves without error, a
// new attempt starts here too.
func (t *transaction) OnError(e kv.Error) kv.FutureNil {
	return onErrorFuture(t, t.inner.OnError(e))
}

func (t *transaction) Reset() {
	t.inner.Reset()
	t.newAttempt(true)
}

// Locals are the wrapped transaction's.
func (t *transaction) Locals() *kv.Locals { return t.inner.Locals() }

// txOptions records whether a timeout is set, since only such transactions
// may time out.
type txOptions struct {
	t     *transaction
	inner kv.TransactionOptions
}

func (o txOptions) SetTimeout(milliseconds int64) error {
	if err := o.inner.SetTimeout(milliseconds); err != nil {
		return err
	}
	o.t.mu.Lock()
	o.t.timeout = milliseconds > 0
	o.t.mu.Unlock()
	return nil
}

func (o txOptions) SetRetryLimit(limit int64) error { return o.inner.SetRetryLimit(limit) }

func (o txOptions) SetMaxRetryDelay(milliseconds int64) error {
	return o.inner.SetMaxRetryDelay(milliseconds)
}

// snapshot is the snapshot view of a wrapped transaction: its reads get
// faults as the transaction's do.
type snapshot struct {
	faultReads
}

var _ kv.ReadTransaction = (*snapshot)(nil)

func (s *snapshot) Snapshot() kv.ReadTransaction { return s }
func (s *snapshot) Cancel()                      { s.t.Cancel() }

func (s *snapshot) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(s) })
}
