//go:build fdb

package fdbkv

import (
	"context"
	"sync/atomic"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// reads adapts the reads of the binding's transaction or snapshot.
type reads struct {
	r fdb.ReadTransaction
}

func (r reads) Get(key kv.KeyConvertible) kv.FutureByteSlice {
	return byteSliceFuture(r.r.Get(fdbKey(key)))
}

func (r reads) GetKey(sel kv.Selectable) kv.FutureKey {
	return keyFuture(r.r.GetKey(fdbSelector(sel)))
}

func (r reads) GetRange(rg kv.Range, options kv.RangeOptions) kv.RangeResult {
	return rangeResult{rr: r.r.GetRange(fdbRange(rg), fdbRangeOptions(options))}
}

func (r reads) GetReadVersion() kv.FutureInt64 { return int64Future(r.r.GetReadVersion()) }

// transaction adapts fdb.Transaction to kv.Transaction.
type transaction struct {
	reads
	tr     fdb.Transaction
	db     *database
	locals kv.Locals // kept by OnError, cleared by Reset
	// committed is set once a Commit is seen to succeed and cleared by
	// Reset; while it is set, Cancel does nothing, so that cancelling a
	// committed transaction cannot cancel the watches it set.
	committed atomic.Bool
}

var _ kv.Transaction = (*transaction)(nil)

func newTransaction(db *database, tr fdb.Transaction) *transaction {
	return &transaction{reads: reads{tr}, tr: tr, db: db}
}

func (t *transaction) Snapshot() kv.ReadTransaction {
	return &snapshot{reads: reads{t.tr.Snapshot()}, t: t}
}

func (t *transaction) Cancel() {
	if t.committed.Load() {
		return
	}
	t.tr.Cancel()
}

// ReadTransact runs f once in t; ctx is not consulted.
func (t *transaction) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return guard(func() (any, error) { return f(t) })
}

// Transact runs f once in t, without committing; ctx is not consulted.
func (t *transaction) Transact(_ context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return guard(func() (any, error) { return f(t) })
}

func (t *transaction) Set(key kv.KeyConvertible, value []byte) { t.tr.Set(fdbKey(key), value) }
func (t *transaction) Clear(key kv.KeyConvertible)             { t.tr.Clear(fdbKey(key)) }
func (t *transaction) ClearRange(r kv.ExactRange)              { t.tr.ClearRange(fdbExactRange(r)) }

func (t *transaction) Add(key kv.KeyConvertible, param []byte)    { t.tr.Add(fdbKey(key), param) }
func (t *transaction) BitAnd(key kv.KeyConvertible, param []byte) { t.tr.BitAnd(fdbKey(key), param) }
func (t *transaction) BitOr(key kv.KeyConvertible, param []byte)  { t.tr.BitOr(fdbKey(key), param) }
func (t *transaction) BitXor(key kv.KeyConvertible, param []byte) { t.tr.BitXor(fdbKey(key), param) }
func (t *transaction) Max(key kv.KeyConvertible, param []byte)    { t.tr.Max(fdbKey(key), param) }
func (t *transaction) Min(key kv.KeyConvertible, param []byte)    { t.tr.Min(fdbKey(key), param) }
func (t *transaction) ByteMax(key kv.KeyConvertible, param []byte) {
	t.tr.ByteMax(fdbKey(key), param)
}
func (t *transaction) ByteMin(key kv.KeyConvertible, param []byte) {
	t.tr.ByteMin(fdbKey(key), param)
}
func (t *transaction) CompareAndClear(key kv.KeyConvertible, param []byte) {
	t.tr.CompareAndClear(fdbKey(key), param)
}

func (t *transaction) SetVersionstampedKey(key kv.KeyConvertible, value []byte) {
	t.tr.SetVersionstampedKey(fdbKey(key), value)
}

func (t *transaction) SetVersionstampedValue(key kv.KeyConvertible, value []byte) {
	t.tr.SetVersionstampedValue(fdbKey(key), value)
}

func (t *transaction) AddReadConflictKey(key kv.KeyConvertible) error {
	return convertErr(t.tr.AddReadConflictKey(fdbKey(key)))
}

func (t *transaction) AddReadConflictRange(r kv.ExactRange) error {
	return convertErr(t.tr.AddReadConflictRange(fdbExactRange(r)))
}

func (t *transaction) AddWriteConflictKey(key kv.KeyConvertible) error {
	return convertErr(t.tr.AddWriteConflictKey(fdbKey(key)))
}

func (t *transaction) AddWriteConflictRange(r kv.ExactRange) error {
	return convertErr(t.tr.AddWriteConflictRange(fdbExactRange(r)))
}

func (t *transaction) Watch(key kv.KeyConvertible) kv.FutureNil {
	return nilFuture(t.tr.Watch(fdbKey(key)), nil)
}

func (t *transaction) GetVersionstamp() kv.FutureKey {
	return keyFuture(t.tr.GetVersionstamp())
}

func (t *transaction) GetCommittedVersion() (int64, error) {
	v, err := t.tr.GetCommittedVersion()
	return v, convertErr(err)
}

func (t *transaction) Options() kv.TransactionOptions {
	return transactionOptions{o: t.tr.Options()}
}

func (t *transaction) Commit() kv.FutureNil {
	if t.db.closed.Load() {
		return kv.ReadyFuture(struct{}{}, kv.ErrDatabaseClosed)
	}
	return nilFuture(t.tr.Commit(), func() { t.committed.Store(true) })
}

func (t *transaction) OnError(e kv.Error) kv.FutureNil {
	return nilFuture(t.tr.OnError(fdb.Error{Code: e.Code}), nil)
}

// Reset resets the transaction, options included, and sets the database's
// default timeout again, as FoundationDB does for a database-wide
// transaction timeout.
func (t *transaction) Locals() *kv.Locals { return &t.locals }

func (t *transaction) Reset() {
	t.locals.Reset()
	t.committed.Store(false)
	t.tr.Reset()
	_ = t.setDefaults() // only fails for an invalid value, checked at creation
}

// setDefaults applies the database's transaction defaults.
func (t *transaction) setDefaults() error {
	if t.db.timeoutMs > 0 {
		return convertErr(t.tr.Options().SetTimeout(t.db.timeoutMs))
	}
	return nil
}

// snapshot adapts fdb.Snapshot: reads that add no read conflict ranges.
type snapshot struct {
	reads
	t *transaction
}

var _ kv.ReadTransaction = (*snapshot)(nil)

func (s *snapshot) Snapshot() kv.ReadTransaction { return s }

// Cancel cancels the transaction the snapshot belongs to.
func (s *snapshot) Cancel() { s.t.Cancel() }

// ReadTransact runs f once with the snapshot; ctx is not consulted.
func (s *snapshot) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return guard(func() (any, error) { return f(s) })
}

// transactionOptions adapts fdb.TransactionOptions.
type transactionOptions struct {
	o fdb.TransactionOptions
}

func (o transactionOptions) SetTimeout(milliseconds int64) error {
	return convertErr(o.o.SetTimeout(milliseconds))
}

func (o transactionOptions) SetRetryLimit(limit int64) error {
	return convertErr(o.o.SetRetryLimit(limit))
}

func (o transactionOptions) SetMaxRetryDelay(milliseconds int64) error {
	return convertErr(o.o.SetMaxRetryDelay(milliseconds))
}
