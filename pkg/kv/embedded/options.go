package embedded

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
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
	// Clock measures the transaction lifetime and the timeouts set with
	// SetTimeout, watches' included (the real clock if nil). Tests pass a
	// fake clock to move past them without waiting. Commit versions and
	// OnError's backoff follow the real clock whatever Clock is.
	Clock clockwork.Clock
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" && !o.InMemory {
		return o, fmt.Errorf("%w: Dir is required unless InMemory is set", ErrInvalidOptions)
	}
	// The first error in this order is reported.
	for _, err := range []error{
		orDefault("CacheSize", &o.CacheSize, CacheSizeDefault),
		batchTxnsLimit(o.MaxBatchTxns),
		orDefault("MaxBatchTxns", &o.MaxBatchTxns, MaxBatchTxnsDefault),
		orDefault("MaxBatchBytes", &o.MaxBatchBytes, MaxBatchBytesDefault),
		orDefault("MaxWatches", &o.MaxWatches, MaxWatchesDefault),
		orDefault("TransactionLifetime", &o.TransactionLifetime, TransactionLifetimeDefault),
	} {
		if err != nil {
			return o, err
		}
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
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

// batchTxnsLimit checks that MaxBatchTxns is at most maxBatchTxnsLimit and
// not negative.
func batchTxnsLimit(n int) error {
	if n < 0 || n > maxBatchTxnsLimit {
		return fmt.Errorf("%w: MaxBatchTxns %d is outside [1, %d]", ErrInvalidOptions, n, maxBatchTxnsLimit)
	}
	return nil
}
