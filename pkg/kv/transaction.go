package kv

import "context"

// ReadTransactor runs read-only transaction functions. A Database runs the
// function in its own retry loop; a Transaction or a snapshot runs it
// directly, inside the caller's transaction.
type ReadTransactor interface {
	// ReadTransact runs f. On a Database: with a new transaction, retrying f
	// on retryable errors as FoundationDB's ReadTransact does, until f
	// succeeds, fails with a non-retryable error, or ctx ends. On a
	// Transaction: once, in that transaction; ctx is not consulted.
	ReadTransact(ctx context.Context, f func(ReadTransaction) (any, error)) (any, error)
}

// Transactor runs read-write transaction functions. A Database runs the
// function in its own retry loop and commits; a Transaction runs it directly
// inside the caller's transaction and leaves the commit to the caller.
type Transactor interface {
	// Transact runs f and commits. On a Database, retryable errors from f or
	// from the commit (see Error.Retryable) reset the transaction and run f
	// again after a backoff; this includes commit_unknown_result, after
	// which the previous attempt may have committed, so f must be
	// idempotent. It returns f's result once a commit succeeds, f's or the
	// commit's first non-retryable error, or ctx's error when ctx ends (the
	// transaction is then cancelled; if a commit was in flight, whether it
	// happened is unknown). Panics with an Error from MustGet are turned into
	// errors. On a Transaction: f runs once, without commit.
	Transact(ctx context.Context, f func(Transaction) (any, error)) (any, error)
	ReadTransactor
}

// ReadTransaction is the read side of a transaction. A Transaction is a
// ReadTransaction whose reads add read conflict ranges; the value returned by
// Snapshot is one whose reads do not.
type ReadTransaction interface {
	// Get reads key; the future resolves to nil when the key is absent.
	Get(key KeyConvertible) FutureByteSlice
	// GetKey resolves a key selector.
	GetKey(sel Selectable) FutureKey
	// GetRange reads a range. With a Limit and Reverse it returns the last
	// Limit keys of the range, highest first.
	GetRange(r Range, options RangeOptions) RangeResult
	// GetReadVersion returns the version this transaction reads at.
	GetReadVersion() FutureInt64
	// Snapshot returns a view of this transaction whose reads do not add
	// read conflict ranges: a concurrent write to what it read does not make
	// the commit fail. It still sees this transaction's own writes.
	Snapshot() ReadTransaction
	// Cancel aborts the transaction: outstanding and later operations fail
	// with transaction_cancelled (1025).
	Cancel()
	ReadTransactor
}

// Transaction is a read-write FoundationDB transaction. Writes are buffered
// and become visible to other transactions only when Commit succeeds; the
// transaction's own reads see them at once (read-your-writes).
//
// Write methods do not return errors, as in FoundationDB: an invalid write
// (a key over MaxKeySize, a value over MaxValueSize, a key in the system key
// space) makes the commit fail with the matching Error.
type Transaction interface {
	ReadTransaction
	Transactor

	// Set writes value at key.
	Set(key KeyConvertible, value []byte)
	// Clear removes key.
	Clear(key KeyConvertible)
	// ClearRange removes every key in r.
	ClearRange(r ExactRange)

	// Add adds param to the value at key, both little-endian integers (an
	// absent value counts as zero; the result has the length of param).
	Add(key KeyConvertible, param []byte)
	// BitAnd, BitOr and BitXor combine the value at key with param bytewise.
	BitAnd(key KeyConvertible, param []byte)
	BitOr(key KeyConvertible, param []byte)
	BitXor(key KeyConvertible, param []byte)
	// Max and Min keep the larger or smaller of the value at key and param,
	// compared as little-endian unsigned integers.
	Max(key KeyConvertible, param []byte)
	Min(key KeyConvertible, param []byte)
	// ByteMax and ByteMin keep the lexicographically larger or smaller of the
	// value at key and param.
	ByteMax(key KeyConvertible, param []byte)
	ByteMin(key KeyConvertible, param []byte)
	// CompareAndClear clears key if its value equals param.
	CompareAndClear(key KeyConvertible, param []byte)

	// SetVersionstampedKey writes value at a key in which the commit's
	// 10-byte versionstamp replaces the 10 bytes at the offset given by the
	// last 4 bytes of key (little-endian uint32); those 4 bytes are removed.
	// tuple.Tuple.PackWithVersionstamp produces such keys.
	SetVersionstampedKey(key KeyConvertible, value []byte)
	// SetVersionstampedValue writes at key a value in which the versionstamp
	// replaces the 10 bytes at the offset given by the last 4 bytes of
	// value. Reading a versionstamped key or value back in the same
	// transaction fails with accessed_unreadable (1036).
	SetVersionstampedValue(key KeyConvertible, value []byte)

	// AddReadConflictKey and AddReadConflictRange make the commit fail with
	// not_committed if another transaction writes the key or range after
	// this transaction's read version.
	AddReadConflictKey(key KeyConvertible) error
	AddReadConflictRange(r ExactRange) error
	// AddWriteConflictKey and AddWriteConflictRange make other transactions
	// that read the key or range conflict with this one, as if it wrote it.
	AddWriteConflictKey(key KeyConvertible) error
	AddWriteConflictRange(r ExactRange) error

	// Watch returns a future that becomes ready once the value of key
	// differs from its value when this transaction commits. The watch is
	// registered by the commit; if the commit fails, the future fails with
	// the commit's error. Watches may fire spuriously: re-read after one
	// fires. Cancel it when no longer needed.
	Watch(key KeyConvertible) FutureNil

	// GetVersionstamp returns the 10-byte versionstamp of the commit,
	// resolved once Commit succeeds. Call it before Commit: once Commit has
	// been called it fails with used_during_commit (2017), as on
	// FoundationDB, where the call also fails a commit still in flight.
	GetVersionstamp() FutureKey
	// GetCommittedVersion returns the commit version after a successful
	// commit; for a read-only transaction, -1.
	GetCommittedVersion() (int64, error)

	// Options sets transaction options.
	Options() TransactionOptions

	// Commit commits the transaction. A retry loop is easier: see Transact.
	Commit() FutureNil
	// OnError decides what to do with an error from an operation or the
	// commit: for a retryable Error it waits for a backoff, resets the
	// transaction (keeping its options) and resolves to nil; otherwise it
	// resolves to the error itself.
	OnError(e Error) FutureNil
	// Reset returns the transaction to its initial state, options included
	// (its Locals too).
	Reset()
	// Locals returns the state that code joining the transaction keeps with
	// it across retries, and its after-commit hooks (see Locals).
	Locals() *Locals
}

// TransactionOptions are the transaction options fdbrep uses.
type TransactionOptions interface {
	// SetTimeout makes operations fail with transaction_timed_out (1031),
	// which is not retryable, once milliseconds have passed since the
	// transaction was created or reset by Reset (OnError does not restart
	// the clock). 0 disables the timeout.
	SetTimeout(milliseconds int64) error
	// SetRetryLimit makes OnError return the error after limit retries; -1
	// means no limit.
	SetRetryLimit(limit int64) error
	// SetMaxRetryDelay caps OnError's backoff, in milliseconds (default
	// 1000).
	SetMaxRetryDelay(milliseconds int64) error
}

// Database is a handle to a store. It is safe for concurrent use.
type Database interface {
	Transactor
	// CreateTransaction starts a transaction for callers that run their own
	// loop. Prefer Transact.
	CreateTransaction() (Transaction, error)
	// Close releases the handle. Transactions still open fail afterwards.
	Close() error
}
