package embedded

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Defaults of Options. A zero field in Options means its default.
const (
	// CacheSizeDefault is the size of pebble's block cache. pebble's own
	// default (8 MiB) makes random reads about four times slower.
	CacheSizeDefault = 64 << 20
	// MemTableSizeDefault is the size of pebble's memtable, where writes
	// wait for their flush to a table (up to two of them at once: at most
	// 32 MiB of memory). pebble's own default (4 MiB) flushes a busy job
	// queue every few hundred milliseconds, before most of its short-lived
	// keys (pending jobs, leases) are cleared, and their compactions then
	// cost a third of the process's CPU: with 16 MiB, inserts went about a
	// quarter faster and a job queue under continuous inserts about a fifth
	// faster (make bench-jobs; 32 and 64 MiB were slower again).
	MemTableSizeDefault = 16 << 20
	// MaxBatchTxnsDefault is how many transactions the commit leader
	// resolves and writes in one durable batch at most.
	MaxBatchTxnsDefault = 1024
	// MaxBatchBytesDefault is how many bytes of mutations the commit leader
	// puts in one durable batch at most (a single larger transaction still
	// gets a batch of its own).
	MaxBatchBytesDefault = 16 << 20
	// MaxWatchesDefault is how many watches may be outstanding at once, as
	// FoundationDB's default; one more fails with too_many_watches (1032).
	MaxWatchesDefault = 10_000
	// TransactionLifetimeDefault is how long after its read version a
	// transaction may still read and commit (kv.MaxTransactionLifetimeMillis).
	TransactionLifetimeDefault = time.Duration(5_000) * time.Millisecond
	// ErrorLogIntervalDefault is how often at most the store logs storage
	// trouble (pebble's background errors, writes waiting for disk space):
	// the first occurrence at once, then one line per interval with the
	// number of occurrences it stands for.
	ErrorLogIntervalDefault = 10 * time.Second
	// StorageErrorWindowDefault is how long after a background storage error
	// (a failed flush or compaction) the store reports itself unhealthy
	// unless a later flush or compaction succeeds.
	StorageErrorWindowDefault = 30 * time.Second
)

// maxBatchTxnsLimit is the most transactions one batch may hold: the order
// within a batch is the 2-byte tail of a versionstamp.
const maxBatchTxnsLimit = 1 << 16

// Options configure Open.
type Options struct {
	// Dir is the directory of the store; it is created if missing. Required
	// unless InMemory is set.
	Dir string
	// InMemory keeps the store in memory (pebble's vfs.NewMem): nothing
	// survives Close. The code path is otherwise the same as on disk.
	InMemory bool
	// CacheSize is the block cache size in bytes (CacheSizeDefault if 0).
	CacheSize int64
	// MemTableSize is the memtable size in bytes (MemTableSizeDefault if
	// 0; from 1 MiB to 1 GiB).
	MemTableSize int64
	// MaxBatchTxns bounds the transactions per group commit
	// (MaxBatchTxnsDefault if 0; at most 65,536).
	MaxBatchTxns int
	// MaxBatchBytes bounds the mutation bytes per group commit
	// (MaxBatchBytesDefault if 0).
	MaxBatchBytes int
	// MaxWatches bounds outstanding watches (MaxWatchesDefault if 0).
	MaxWatches int
	// TransactionLifetime is how long a read version stays usable
	// (TransactionLifetimeDefault if 0). Only tests should change it:
	// FoundationDB's lifetime is five seconds.
	TransactionLifetime time.Duration
	// Clock measures the transaction lifetime and the timeouts set with
	// SetTimeout, watches' included, and the storage error window (the
	// real clock if nil). Tests pass a fake clock to move past them without
	// waiting. Commit versions, OnError's backoff, the latency mode and
	// the budget check follow the real clock whatever Clock is.
	Clock clockwork.Clock
	// Latency is the network-latency mode (see kv.Latency): nil reads
	// FDBREP_KV_LATENCY (kv.LatencyFromEnv), so that every opener of an
	// embedded store gets it; a zero Latency disables it whatever the
	// environment says.
	Latency *kv.Latency
	// Budget is the transaction budget check (see kv.Budget): nil reads
	// FDBREP_KV_BUDGET (kv.BudgetFromEnv); a zero Budget disables it
	// whatever the environment says.
	Budget *kv.Budget
	// OnBudgetExceeded is called once for each transaction attempt that
	// goes over Budget, besides the attempt failing with the
	// *kv.BudgetError (nil: the error is also written to standard error).
	// kvtest sets it to fail the test.
	OnBudgetExceeded func(*kv.BudgetError)
	// ErrorLogInterval rate-limits the store's error log
	// (ErrorLogIntervalDefault if 0).
	ErrorLogInterval time.Duration
	// StorageErrorWindow is how long a background storage error keeps the
	// store unhealthy (StorageErrorWindowDefault if 0).
	StorageErrorWindow time.Duration

	// FS is the file system under pebble; nil means the OS's (or memory
	// with InMemory). Tests of other packages set it to inject disk
	// faults, e.g. pebble's errorfs returning ENOSPC for a full disk.
	FS vfs.FS

	// Test hooks: changes to pebble's options, and where the error log
	// goes (standard error if nil).
	testPebble func(*pebble.Options)
	testLog    func(string)
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" && !o.InMemory {
		return o, fmt.Errorf("%w: Dir is required unless InMemory is set", ErrInvalidOptions)
	}
	// The first error in this order is reported.
	for _, err := range []error{
		orDefault("CacheSize", &o.CacheSize, CacheSizeDefault),
		memTableLimits(o.MemTableSize),
		orDefault("MemTableSize", &o.MemTableSize, MemTableSizeDefault),
		batchTxnsLimit(o.MaxBatchTxns),
		orDefault("MaxBatchTxns", &o.MaxBatchTxns, MaxBatchTxnsDefault),
		orDefault("MaxBatchBytes", &o.MaxBatchBytes, MaxBatchBytesDefault),
		orDefault("MaxWatches", &o.MaxWatches, MaxWatchesDefault),
		orDefault("TransactionLifetime", &o.TransactionLifetime, TransactionLifetimeDefault),
		orDefault("ErrorLogInterval", &o.ErrorLogInterval, ErrorLogIntervalDefault),
		orDefault("StorageErrorWindow", &o.StorageErrorWindow, StorageErrorWindowDefault),
	} {
		if err != nil {
			return o, err
		}
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Latency == nil {
		l, err := kv.LatencyFromEnv()
		if err != nil {
			return o, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		o.Latency = &l
	}
	if o.Budget == nil {
		b, err := kv.BudgetFromEnv()
		if err != nil {
			return o, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		o.Budget = &b
	}
	if o.Latency.Read < 0 || o.Latency.GRV < 0 || o.Latency.Commit < 0 {
		return o, fmt.Errorf("%w: Latency %v is negative", ErrInvalidOptions, *o.Latency)
	}
	if o.Budget.Bytes < 0 || o.Budget.Duration < 0 {
		return o, fmt.Errorf("%w: Budget %+v is negative", ErrInvalidOptions, *o.Budget)
	}
	return o, nil
}

// orDefault fails if the option name (*v) is negative and sets it to def if
// it is zero.
func orDefault[T int | int64 | time.Duration](name string, v *T, def T) error {
	switch {
	case *v < 0:
		return fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, name, *v)
	case *v == 0:
		*v = def
	}
	return nil
}

// memTableLimits checks that MemTableSize is 0 (the default) or within
// memTableMin..memTableMax.
func memTableLimits(n int64) error {
	if n != 0 && (n < memTableMin || n > memTableMax) {
		return fmt.Errorf("%w: MemTableSize %d is outside [%d, %d]", ErrInvalidOptions, n, int64(memTableMin), int64(memTableMax))
	}
	return nil
}

// The bounds of MemTableSize: pebble wants at least a few table blocks,
// and refuses 4 GiB and more.
const (
	memTableMin = 1 << 20
	memTableMax = 1 << 30
)

// batchTxnsLimit checks that MaxBatchTxns is at most maxBatchTxnsLimit and
// not negative.
func batchTxnsLimit(n int) error {
	if n < 0 || n > maxBatchTxnsLimit {
		return fmt.Errorf("%w: MaxBatchTxns %d is outside [1, %d]", ErrInvalidOptions, n, maxBatchTxnsLimit)
	}
	return nil
}
