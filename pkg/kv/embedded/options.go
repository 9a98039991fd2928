package embedded

import (
	"fmt"
	"time"
)

// Defaults of Options. A zero field in Options means its default.
const (
	// CacheSizeDefault is the size of pebble's block cache. pebble's own
	// default (8 MiB) makes random reads about four times slower.
	CacheSizeDefault = 64 << 20
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
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" && !o.InMemory {
		return o, fmt.Errorf("%w: Dir is required unless InMemory is set", ErrInvalidOptions)
	}
	if o.CacheSize < 0 {
		return o, fmt.Errorf("%w: CacheSize %d is negative", ErrInvalidOptions, o.CacheSize)
	}
	if o.CacheSize == 0 {
		o.CacheSize = CacheSizeDefault
	}
	if o.MaxBatchTxns < 0 || o.MaxBatchTxns > maxBatchTxnsLimit {
		return o, fmt.Errorf("%w: MaxBatchTxns %d is outside [1, %d]", ErrInvalidOptions, o.MaxBatchTxns, maxBatchTxnsLimit)
	}
	if o.MaxBatchTxns == 0 {
		o.MaxBatchTxns = MaxBatchTxnsDefault
	}
	if o.MaxBatchBytes < 0 {
		return o, fmt.Errorf("%w: MaxBatchBytes %d is negative", ErrInvalidOptions, o.MaxBatchBytes)
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = MaxBatchBytesDefault
	}
	if o.MaxWatches < 0 {
		return o, fmt.Errorf("%w: MaxWatches %d is negative", ErrInvalidOptions, o.MaxWatches)
	}
	if o.MaxWatches == 0 {
		o.MaxWatches = MaxWatchesDefault
	}
	if o.TransactionLifetime < 0 {
		return o, fmt.Errorf("%w: TransactionLifetime %v is negative", ErrInvalidOptions, o.TransactionLifetime)
	}
	if o.TransactionLifetime == 0 {
		o.TransactionLifetime = TransactionLifetimeDefault
	}
	return o, nil
}
