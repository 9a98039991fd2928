package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// formatMajorVersion is pebble's on-disk format. It is set explicitly so
// that upgrading pebble never ratchets a store's format by accident.
const formatMajorVersion = pebble.FormatValueSeparation

// versionKey holds the last commit version, big-endian, written in every
// batch. It lies in "\xff\xff", which no transaction can read or write.
var versionKey = []byte("\xff\xff/fdbrep/embedded/version")

// maxReadKey is the end of the user key space: reads and selectors stop at it.
var maxReadKey = []byte{0xff}

// DB is an embedded FoundationDB-like store. It implements kv.Database and
// is safe for concurrent use.
type DB struct {
	opts Options
	pdb  *pebble.DB

	// closeMu is held shared by every operation that touches pebble and
	// exclusively by Close.
	closeMu sync.RWMutex
	closed  atomic.Bool

	cur    atomic.Pointer[snapshot] // the newest durable state
	snapMu sync.Mutex
	live   map[*snapshot]struct{} // open pebble snapshots, closed by Close

	qmu     sync.Mutex
	queue   []*commitReq
	qclosed bool
	qsignal chan struct{}
	stopped chan struct{} // closed when the leader and syncer have exited
	synced  chan *pending // batches written, waiting for the WAL sync

	failMu sync.Mutex
	failed error // set when pebble failed to apply a batch

	health *health
	// inflight are the commits the leader has taken and not finished: when
	// writes start waiting for the disk they fail with
	// commit_unknown_result at once (they may still happen).
	inflightMu sync.Mutex
	inflight   map[*commitReq]struct{}

	// Leader state.
	res         *resolver
	lastVersion int64
	baseVersion int64
	baseTime    time.Time

	watches *watchRegistry
	stats   stats

	// testHookBatch, when set before the first commit, is called by the
	// leader with the size of each batch before resolving it.
	testHookBatch func(n int)
}

// snapshot is a published read version: a pebble snapshot shared by the
// transactions reading at it and released when the last of them is done.
type snapshot struct {
	db      *DB
	s       *pebble.Snapshot
	version int64
	refs    atomic.Int32
}

// openError is the error of a pebble.Open of dir that failed with err:
// ErrInUse, with the holder's pid when known, when the store's lock is
// held.
func openError(dir string, fs vfs.FS, err error) error {
	switch {
	case strings.Contains(err.Error(), "lock held by current process"):
		return fmt.Errorf("%w: %s is open in this process already", ErrInUse, dir)
	case fs == vfs.Default && lockRefused(err):
		if pid := lockHolder(dir); pid > 0 {
			return fmt.Errorf("%w: %s is in use by another process (pid %d)", ErrInUse, dir, pid)
		}
		return fmt.Errorf("%w: %s is in use by another process", ErrInUse, dir)
	}
	return fmt.Errorf("embedded: open %s: %w", dir, err)
}

// Open opens (creating if needed) the store described by opts.
func Open(opts Options) (*DB, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	dir := opts.Dir
	fs := opts.FS
	switch {
	case fs != nil:
	case opts.InMemory:
		fs = vfs.NewMem()
	default:
		fs = vfs.Default
	}
	if opts.InMemory && dir == "" {
		dir = "mem"
	}
	h := newHealth(dir, opts)
	popts := pebbleOptions(cache, opts.MemTableSize, h)
	popts.FS = &healthFS{FS: fs, h: h}
	if opts.testPebble != nil {
		opts.testPebble(popts)
	}
	pdb, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, openError(dir, fs, err)
	}
	var last int64
	v, closer, err := pdb.Get(versionKey)
	switch {
	case err == nil:
		if len(v) == 8 {
			last = int64(binary.BigEndian.Uint64(v))
		}
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		pdb.Close()
		return nil, fmt.Errorf("embedded: read version: %w", err)
	}
	db := &DB{
		opts:        opts,
		pdb:         pdb,
		live:        map[*snapshot]struct{}{},
		qsignal:     make(chan struct{}, 1),
		stopped:     make(chan struct{}),
		synced:      make(chan *pending, syncQueueDepth),
		res:         newResolver(),
		lastVersion: last,
		baseVersion: last + 1,
		baseTime:    time.Now(),
		watches:     newWatchRegistry(),
		health:      h,
		inflight:    map[*commitReq]struct{}{},
	}
	h.onBlocked = func() { go db.refuseCommits() }
	db.publish(db.newSnapshot(last))
	go db.leader()
	go db.syncer()
	return db, nil
}

// Close stops the commit leader, fails queued commits, outstanding watches
// and open transactions with kv.ErrDatabaseClosed, and closes the store.
// Close is idempotent. While writes wait for the disk (see Health), Close
// does not wait for them: it fails every pending commit (with
// commit_unknown_result for those that may still happen), returns an error
// saying so, and closes pebble in the background once the writes complete;
// the directory stays locked until then or until the process exits.
func (db *DB) Close() error {
	db.closeMu.Lock()
	if db.closed.Swap(true) {
		db.closeMu.Unlock()
		return nil
	}
	db.closeMu.Unlock()
	db.qmu.Lock()
	db.qclosed = true
	db.qmu.Unlock()
	select {
	case db.qsignal <- struct{}{}:
	default:
	}
	if err := db.health.commitRefusal(); err != nil {
		db.failPending(kv.ErrDatabaseClosed)
		db.watches.closeAll()
		go db.finishClose()
		return fmt.Errorf("embedded: close: pebble is closed in the background once pending writes complete: %w", err)
	}
	return db.finishClose()
}

// finishClose waits for the leader and syncer and closes pebble.
func (db *DB) finishClose() error {
	<-db.stopped
	db.watches.closeAll()
	db.snapMu.Lock()
	for s := range db.live {
		s.s.Close()
	}
	db.live = nil
	db.snapMu.Unlock()
	return db.pdb.Close()
}

// Health reports whether the store can commit: nil, or an error saying why
// not. While writes wait for disk space the error wraps kv.ErrStorageFull
// and kv.Error{Code: kv.CodeIOError} (io_error, 1510), and commits fail
// at once with such an error; while the disk fails writes otherwise, or
// for Options.StorageErrorWindow after a failed flush or compaction, it
// wraps kv.Error{Code: kv.CodeIOError}; after Close it is
// kv.ErrDatabaseClosed. Reads keep working through all of these. DB is a
// kv.Healther.
func (db *DB) Health() error {
	if db.closed.Load() {
		return kv.ErrDatabaseClosed
	}
	if err := db.storeFailure(); err != nil {
		return err
	}
	return db.health.status()
}

// CreateTransaction starts a transaction.
func (db *DB) CreateTransaction() (kv.Transaction, error) {
	if db.closed.Load() {
		return nil, kv.ErrDatabaseClosed
	}
	return newTransaction(db), nil
}

// Transact runs f in a transaction and commits it, retrying as
// FoundationDB's Transact does (see kv.Transactor).
func (db *DB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return kv.Run(ctx, db.CreateTransaction, f)
}

// ReadTransact runs f in a transaction without committing writes, retrying
// as FoundationDB's ReadTransact does.
func (db *DB) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.RunRead(ctx, db.CreateTransaction, f)
}

// newSnapshot takes a pebble snapshot of the current state at version v.
// Only the leader (and Open) call it: nothing else writes to pebble, so the
// state is exactly what the leader has committed.
func (db *DB) newSnapshot(v int64) *snapshot {
	s := &snapshot{db: db, s: db.pdb.NewSnapshot(), version: v}
	s.refs.Store(1)
	db.snapMu.Lock()
	db.live[s] = struct{}{}
	db.snapMu.Unlock()
	return s
}

// publish makes s the state new transactions read.
func (db *DB) publish(s *snapshot) {
	if old := db.cur.Swap(s); old != nil {
		old.release()
	}
}

// oldestLive returns the version of the oldest snapshot still referenced:
// no transaction that can still commit reads at an older version.
func (db *DB) oldestLive() int64 {
	db.snapMu.Lock()
	defer db.snapMu.Unlock()
	oldest := int64(-1)
	for s := range db.live {
		if oldest < 0 || s.version < oldest {
			oldest = s.version
		}
	}
	return oldest
}

// acquire returns the newest published snapshot with a reference taken.
func (db *DB) acquire() *snapshot {
	for {
		s := db.cur.Load()
		n := s.refs.Load()
		if n > 0 && s.refs.CompareAndSwap(n, n+1) {
			return s
		}
	}
}

func (s *snapshot) release() {
	if s.refs.Add(-1) != 0 {
		return
	}
	db := s.db
	db.snapMu.Lock()
	if db.live != nil {
		delete(db.live, s)
		s.s.Close()
	}
	db.snapMu.Unlock()
}

// pebbleOptions is the engine configuration: an explicit format, the given
// block cache and memtable size, bloom filters on every level (point reads, the commonest
// read, then skip the tables that cannot hold the key), and h's logger and
// event listener.
func pebbleOptions(cache *pebble.Cache, memTable int64, h *health) *pebble.Options {
	o := &pebble.Options{
		Cache:              cache,
		MemTableSize:       uint64(memTable),
		FormatMajorVersion: formatMajorVersion,
		Logger:             pebbleLogger{h},
		EventListener:      h.listener(),
	}
	o.Levels[0].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	return o
}

// bloomBitsPerKey sizes the bloom filters: 10 bits a key give about 1%
// false positives.
const bloomBitsPerKey = 10

var (
	_ kv.Database = (*DB)(nil)
	_ kv.Healther = (*DB)(nil)
)

// Stats are counters of a DB's commit pipeline since Open.
type Stats struct {
	Batches   int64 // batches written by the leader
	Commits   int64 // read-write transactions committed
	Conflicts int64 // transactions rejected with not_committed
	TooOld    int64 // transactions rejected with transaction_too_old at commit
	Syncs     int64 // WAL syncs (each covers one or more batches)
	// History is the number of boundaries in the resolver's conflict
	// history after the last batch.
	History int64
}

type stats struct {
	batches, commits, conflicts, tooOld, syncs, history atomic.Int64
}

// Stats returns the DB's counters.
func (db *DB) Stats() Stats {
	return Stats{
		Batches:   db.stats.batches.Load(),
		Commits:   db.stats.commits.Load(),
		Conflicts: db.stats.conflicts.Load(),
		TooOld:    db.stats.tooOld.Load(),
		Syncs:     db.stats.syncs.Load(),
		History:   db.stats.history.Load(),
	}
}
