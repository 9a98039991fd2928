package faultkv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// DB wraps a kv.Database and injects faults into its transactions. It is a
// kv.Database, safe for concurrent use.
type DB struct {
	inner kv.Database
	opts  Options

	mu  sync.Mutex // guards rnd
	rnd *rand.Rand

	commits, commitUnknown, notCommitted, commitTooOld, readTooOld, timedOut        atomic.Uint64
	proxyMemory, processBehind, futureVersion, grvMemory, tagThrottled, watchFailed atomic.Uint64
}

var (
	_ kv.Database = (*DB)(nil)
	_ kv.Healther = (*DB)(nil)
)

// Wrap returns db with fault injection at the rates of opts. It panics if
// opts is invalid (see Options.Validate); check options from untrusted
// sources with Validate or get them from FromEnv, which validates.
func Wrap(db kv.Database, opts Options) *DB {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	return &DB{inner: db, opts: opts, rnd: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))}
}

// Options returns the options db was created with.
func (db *DB) Options() Options { return db.opts }

// Unwrap returns the wrapped database.
func (db *DB) Unwrap() kv.Database { return db.inner }

// Stats counts what a wrapper did. Commits counts the commits of
// transactions with writes that reached the wrapped database (including
// those then reported as commit_unknown_result); the other fields count
// injected faults.
type Stats struct {
	Commits             uint64
	CommitUnknownResult uint64
	NotCommitted        uint64
	CommitTooOld        uint64
	ReadTooOld          uint64
	TimedOut            uint64
	ProxyMemoryLimit    uint64
	ProcessBehind       uint64
	FutureVersion       uint64
	GRVProxyMemoryLimit uint64
	TagThrottled        uint64
	WatchFailed         uint64
}

// Injected returns the number of injected faults of every kind.
func (s Stats) Injected() uint64 {
	return s.CommitUnknownResult + s.NotCommitted + s.CommitTooOld + s.ReadTooOld + s.TimedOut +
		s.ProxyMemoryLimit + s.ProcessBehind + s.FutureVersion + s.GRVProxyMemoryLimit + s.TagThrottled + s.WatchFailed
}

// String renders s for logs.
func (s Stats) String() string {
	return fmt.Sprintf("commits=%d commit_unknown_result=%d not_committed=%d commit_too_old=%d read_too_old=%d timed_out=%d "+
		"proxy_memory=%d process_behind=%d future_version=%d grv_memory=%d tag_throttled=%d watch_failed=%d",
		s.Commits, s.CommitUnknownResult, s.NotCommitted, s.CommitTooOld, s.ReadTooOld, s.TimedOut,
		s.ProxyMemoryLimit, s.ProcessBehind, s.FutureVersion, s.GRVProxyMemoryLimit, s.TagThrottled, s.WatchFailed)
}

// Stats returns the counters so far.
func (db *DB) Stats() Stats {
	return Stats{
		Commits:             db.commits.Load(),
		CommitUnknownResult: db.commitUnknown.Load(),
		NotCommitted:        db.notCommitted.Load(),
		CommitTooOld:        db.commitTooOld.Load(),
		ReadTooOld:          db.readTooOld.Load(),
		TimedOut:            db.timedOut.Load(),
		ProxyMemoryLimit:    db.proxyMemory.Load(),
		ProcessBehind:       db.processBehind.Load(),
		FutureVersion:       db.futureVersion.Load(),
		GRVProxyMemoryLimit: db.grvMemory.Load(),
		TagThrottled:        db.tagThrottled.Load(),
		WatchFailed:         db.watchFailed.Load(),
	}
}

// StatsOf returns the counters of db if it is a fault-injecting wrapper.
func StatsOf(db kv.Database) (Stats, bool) {
	f, ok := db.(*DB)
	if !ok {
		return Stats{}, false
	}
	return f.Stats(), true
}

// CreateTransaction returns a fault-injecting transaction of the wrapped
// database.
func (db *DB) CreateTransaction() (kv.Transaction, error) {
	tr, err := db.inner.CreateTransaction()
	if err != nil {
		return nil, err
	}
	return newTransaction(db, tr), nil
}

// Transact runs f in kv.Run's retry loop with fault-injecting transactions,
// so injected errors go through the wrapped transaction's OnError.
func (db *DB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return kv.Run(ctx, db.CreateTransaction, f)
}

// ReadTransact runs f in kv.RunRead's retry loop with fault-injecting
// transactions.
func (db *DB) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.RunRead(ctx, db.CreateTransaction, f)
}

// Close closes the wrapped database.
func (db *DB) Close() error { return db.inner.Close() }

// Health is the wrapped database's (see kv.Health).
func (db *DB) Health() error { return kv.Health(db.inner) }

// draw returns a uniform number in [0, 1) from the seeded source.
func (db *DB) draw() float64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.rnd.Float64()
}

// readFault decides whether a read fails, and with which code (0: no).
// Every decision takes one draw, so the sequence is fixed by the seed.
func (db *DB) readFault(withTimeout bool) int {
	u := db.draw()
	o := db.opts
	switch {
	case u < o.ReadTooOld:
		db.readTooOld.Add(1)
		return kv.CodeTransactionTooOld
	case u < o.ReadTooOld+o.ProcessBehind:
		db.processBehind.Add(1)
		return kv.CodeProcessBehind
	case u < o.ReadTooOld+o.ProcessBehind+o.FutureVersion:
		db.futureVersion.Add(1)
		return kv.CodeFutureVersion
	case withTimeout && u < o.ReadTooOld+o.ProcessBehind+o.FutureVersion+o.TimedOut:
		db.timedOut.Add(1)
		return kv.CodeTransactionTimedOut
	}
	return 0
}

// grvFault decides whether getting an attempt's read version fails, and
// with which code (0: no).
func (db *DB) grvFault() int {
	if db.opts.GRVProxyMemoryLimit == 0 && db.opts.TagThrottled == 0 {
		return 0 // no draw: the sequence of older options stays the same
	}
	u := db.draw()
	switch {
	case u < db.opts.GRVProxyMemoryLimit:
		db.grvMemory.Add(1)
		return kv.CodeGRVProxyMemoryLimit
	case u < db.opts.GRVProxyMemoryLimit+db.opts.TagThrottled:
		db.tagThrottled.Add(1)
		return kv.CodeTagThrottled
	}
	return 0
}

// watchFault decides whether a watch fails, and with which code (0: no).
func (db *DB) watchFault() int {
	if db.opts.WatchFailure == 0 {
		return 0
	}
	u := db.draw()
	if u >= db.opts.WatchFailure {
		return 0
	}
	db.watchFailed.Add(1)
	if u < db.opts.WatchFailure/2 {
		return kv.CodeTooManyWatches
	}
	return kv.CodeFutureVersion
}

// commitFault decides what happens to a commit with writes: 0 (commit),
// kv.CodeCommitUnknownResult (commit, then report it) or a code to fail
// with instead of committing.
func (db *DB) commitFault(withTimeout bool) int {
	u := db.draw()
	o := db.opts
	switch {
	case u < o.NotCommitted:
		db.notCommitted.Add(1)
		return kv.CodeNotCommitted
	case u < o.NotCommitted+o.TransactionTooOld:
		db.commitTooOld.Add(1)
		return kv.CodeTransactionTooOld
	case u < o.NotCommitted+o.TransactionTooOld+o.CommitUnknownResult:
		// Counted once the real commit succeeded.
		return kv.CodeCommitUnknownResult
	case u < o.NotCommitted+o.TransactionTooOld+o.CommitUnknownResult+o.ProxyMemoryLimit:
		db.proxyMemory.Add(1)
		return kv.CodeProxyMemoryLimit
	}
	if withTimeout && db.draw() < o.TimedOut {
		db.timedOut.Add(1)
		return kv.CodeTransactionTimedOut
	}
	return 0
}
