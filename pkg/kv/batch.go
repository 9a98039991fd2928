package kv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
)

// Defaults of Batch.
const (
	// BatchFactorDefault multiplies a batch's size after a failed batch.
	BatchFactorDefault = 0.5
	// BatchAttemptsDefault is how many failed batches in a row Retry
	// accepts before it gives up with the last error.
	BatchAttemptsDefault = 50
)

// Batch sizes the transactions of a loop that pages through more work than
// one transaction should hold (a scan, a backfill, a removal): it shrinks
// after a failed batch and grows back after successes, so that a loop whose
// big batches conflict with other writers, or run into FoundationDB's size
// or time limits, goes on in smaller ones instead of failing the same way
// forever. It is every paging loop's one adaptive batch size; what a batch
// costs in bytes is bounded by the loop itself (PageBytes).
//
// Two ways to use it. A loop that runs each batch as one attempt (its own
// retry loop, so that it also shrinks after transaction_too_large and
// timeouts, which OnError does not retry) calls Size, runs the batch, and
// then Done on success or Retry on failure:
//
//	b := kv.Batch{Max: 1000}
//	for more {
//		n, err := attempt(ctx, b.Size())
//		if err != nil {
//			if err := b.Retry(ctx, err); err != nil {
//				return err
//			}
//			continue
//		}
//		b.Done()
//		b.Grow()
//	}
//
// A loop whose batches go through Transact uses TransactBatch, which
// shrinks the batch at each retried attempt.
//
// The zero value of each field takes its default; a Batch keeps its size
// from one loop to the next when it lives in a long-lived value (an
// activity monitor's batch grows over its rounds). A Batch is not safe for
// concurrent use.
type Batch struct {
	// Max is the largest size Grow reaches (1 if below).
	Max int
	// Min is the smallest size Shrink cuts a batch to (1 if below): a
	// batch that must make progress through failures in a row, each of
	// which a smaller batch meets less often but never avoids (reads
	// failing at random), stops shrinking there. Fit may go below it.
	Min int
	// First is the first size (Max if 0); it may exceed Max, which the
	// first Grow comes back to.
	First int
	// Factor multiplies the size after a failure (BatchFactorDefault if
	// 0); the size never goes below 1.
	Factor float64
	// Increment is what Grow adds to the size; 0 doubles it.
	Increment int
	// Attempts is how many failed batches in a row Retry accepts
	// (BatchAttemptsDefault if 0).
	Attempts int
	// Backoff paces Retry after retryable errors, as OnError would.
	Backoff Backoff

	size     int // 0: Max
	failures int // in a row
}

// Size is the size of the next batch: at least 1.
func (b *Batch) Size() int {
	if b.size == 0 {
		b.size = max(1, cmp.Or(b.First, b.Max))
	}
	return b.size
}

// Shrink multiplies the size by Factor, down to Min (at least 1); a size
// already under Min stays.
func (b *Batch) Shrink() {
	f := b.Factor
	if f == 0 {
		f = BatchFactorDefault
	}
	b.size = max(1, min(b.Size(), max(b.Min, int(float64(b.Size())*f))))
}

// Grow adds Increment to the size (doubles it if Increment is 0), up to
// Max: after a batch that was full, so that the loop gets back to big
// batches once what made them fail is gone.
func (b *Batch) Grow() {
	if b.Increment == 0 {
		b.size = min(max(1, b.Max), 2*b.Size())
		return
	}
	b.size = min(max(1, b.Max), b.Size()+b.Increment)
}

// Fit sets the size to n (at least 1): a batch that its byte budget ended
// after n items tells how many items of that size fit.
func (b *Batch) Fit(n int) {
	b.size = max(1, n)
}

// Done records a batch that succeeded: the count of failures in a row and
// the backoff start again.
func (b *Batch) Done() {
	b.failures = 0
	b.Backoff.Reset()
}

// ErrGaveUp wraps the last error of a loop whose batches failed
// Batch.Attempts times in a row.
var ErrGaveUp = errors.New("gave up")

// Retry decides what a loop does after a batch failed with err. When err is
// one a smaller batch may get past (Shrinks) and fewer than Attempts batches
// failed in a row, it shrinks the batch, waits as OnError would after a
// retryable error (not at all after transaction_too_large or a timeout,
// where the smaller batch is the remedy), and returns nil: try again.
// Otherwise it returns err (ctx's error if ctx ended first), wrapped in
// ErrGaveUp after too many failures, and the count of failures starts
// again.
func (b *Batch) Retry(ctx context.Context, err error) error {
	if !Shrinks(err) || ctx.Err() != nil {
		b.failures = 0
		return err
	}
	attempts := b.Attempts
	if attempts == 0 {
		attempts = BatchAttemptsDefault
	}
	if b.failures++; b.failures > attempts {
		n := b.failures
		b.failures = 0
		return fmt.Errorf("%w after %d failed batches: %w", ErrGaveUp, n, err)
	}
	b.Shrink()
	if werr := b.Backoff.Wait(ctx, err); werr != nil && werr != err {
		b.failures = 0
		return werr
	}
	return nil
}

// Shrinks reports whether a batch that failed with err may succeed smaller:
// after the errors OnError retries (a conflict above all, which a smaller
// batch meets less often), transaction_too_large, and the transaction or
// operation timeouts.
func Shrinks(err error) bool {
	var e Error
	if !errors.As(err, &e) {
		return false
	}
	return OnErrorRetries(e) || e.Code == CodeTransactionTooLarge || e.Code == CodeTransactionTimedOut ||
		e.Code == CodeTimedOut
}

// TransactBatch runs f in Transact with n, the batch's size, shrinking it at
// each retried attempt (a batch that reads many rows conflicts with their
// writers, and one retried as it is could conflict forever), and grows the
// batch after a commit. The batch keeps the size of the last attempt.
func TransactBatch[T any](ctx context.Context, t Transactor, b *Batch, f func(tr Transaction, n int) (T, error)) (T, error) {
	first := true
	v, err := Transact(ctx, t, func(tr Transaction) (T, error) {
		if !first {
			b.Shrink()
		}
		first = false
		return f(tr, b.Size())
	})
	if err == nil {
		b.Grow()
	}
	return v, err
}
