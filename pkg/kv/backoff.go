package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/internal/clockwait"
)

// FoundationDB 7.3's client knobs for OnError's backoff (ClientKnobs.cpp).
const (
	// BackoffInitialDefault is the first backoff limit (DEFAULT_BACKOFF).
	BackoffInitialDefault = 10 * time.Millisecond
	// BackoffMaxDefault caps the backoff (DEFAULT_MAX_BACKOFF; a
	// transaction's SetMaxRetryDelay changes it).
	BackoffMaxDefault = time.Second
	// BackoffResourceConstrainedMaxDefault caps the backoff after
	// commit_proxy_memory_limit_exceeded (1042) and
	// grv_proxy_memory_limit_exceeded (1078)
	// (RESOURCE_CONSTRAINED_MAX_BACKOFF).
	BackoffResourceConstrainedMaxDefault = 30 * time.Second
	// BackoffGrowth is the factor the limit grows by after each retry
	// (BACKOFF_GROWTH_RATE).
	BackoffGrowth = 2
	// FutureVersionRetryDelayDefault is the fixed delay, without jitter or
	// growth, after transaction_too_old (1007) and future_version (1009)
	// (FUTURE_VERSION_RETRY_DELAY).
	FutureVersionRetryDelayDefault = 10 * time.Millisecond
)

// OnErrorRetries reports whether FoundationDB 7.3's Transaction::onError
// retries e: every Retryable code, plus blob_granule_request_failed (1079).
func OnErrorRetries(e Error) bool {
	return e.Retryable() || e.Code == CodeBlobGranuleRequest
}

// Backoff is FoundationDB's OnError backoff, for loops that retry on their
// own instead of through Run (a batch that shrinks on error, a watch loop,
// a monitor cycle). Run needs none: the backend's OnError backs off.
//
//	var b kv.Backoff
//	for {
//		err := attempt(ctx)
//		if err == nil {
//			b.Reset()
//			...
//			continue
//		}
//		if err := b.Wait(ctx, err); err != nil {
//			return err // not retryable, or ctx ended
//		}
//	}
//
// As FoundationDB: after transaction_too_old and future_version it waits a
// fixed FutureVersionRetryDelayDefault (at most Max); after any other
// retryable error a random time in [0, limit), the limit starting at
// Initial and doubling after each retry up to Max (up to
// MaxResourceConstrained after a proxy memory limit error). tag_throttled
// follows the general rule: FoundationDB would also wait for the server's
// throttle time of the transaction's tags, which fdbrep does not set.
// The zero value is ready to use with FoundationDB's defaults. A Backoff is
// not safe for concurrent use.
type Backoff struct {
	// Initial is the first limit (BackoffInitialDefault if 0).
	Initial time.Duration
	// Max caps the limit as it grows (BackoffMaxDefault if 0; a negative
	// Max caps it at zero, as SetMaxRetryDelay(0) does).
	Max time.Duration
	// MaxResourceConstrained caps the limit after 1042 and 1078
	// (BackoffResourceConstrainedMaxDefault if 0).
	MaxResourceConstrained time.Duration
	// Clock is what Wait waits on (the real clock if nil).
	Clock clockwork.Clock
	// Rand returns a number in [0, 1) for the jitter (math/rand/v2 if nil).
	Rand func() float64

	limit   time.Duration // the next limit
	started bool          // limit is set
}

// Next returns how long to wait before retrying after err and advances the
// backoff; ok is false when err is not an Error that FoundationDB's OnError
// retries, and the loop should give up with err.
func (b *Backoff) Next(err error) (delay time.Duration, ok bool) {
	var e Error
	if !errors.As(err, &e) || !OnErrorRetries(e) {
		return 0, false
	}
	return b.delay(e.Code), true
}

// NextAny is Next for a loop that runs again after any error, not only
// those OnError retries (a job's transaction that must not be abandoned
// halfway, after an error its retry loop returned): such an error waits as
// a conflict would.
func (b *Backoff) NextAny(err error) time.Duration {
	if delay, ok := b.Next(err); ok {
		return delay
	}
	return b.delay(CodeNotCommitted)
}

// delay returns the wait after an error of code that OnError retries and
// advances the backoff.
func (b *Backoff) delay(code int) time.Duration {
	maxDelay := orDefault(b.Max, BackoffMaxDefault)
	if maxDelay < 0 {
		maxDelay = 0
	}
	if code == CodeTransactionTooOld || code == CodeFutureVersion {
		return min(FutureVersionRetryDelayDefault, maxDelay)
	}
	if !b.started {
		b.limit, b.started = orDefault(b.Initial, BackoffInitialDefault), true
	}
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	delay := time.Duration(r() * float64(b.limit))
	if code == CodeProxyMemoryLimit || code == CodeGRVProxyMemoryLimit {
		maxDelay = orDefault(b.MaxResourceConstrained, BackoffResourceConstrainedMaxDefault)
	}
	b.limit = min(b.limit*BackoffGrowth, maxDelay)
	return delay
}

// Wait waits as Next says, on b.Clock, and returns nil when the loop should
// try again; err itself when it is not retryable; ctx's error when ctx ends
// first.
func (b *Backoff) Wait(ctx context.Context, err error) error {
	delay, ok := b.Next(err)
	if !ok {
		return err
	}
	return b.sleep(ctx, delay)
}

// WaitAny waits as NextAny says, on b.Clock; it returns ctx's error when
// ctx ends first.
func (b *Backoff) WaitAny(ctx context.Context, err error) error {
	return b.sleep(ctx, b.NextAny(err))
}

func (b *Backoff) sleep(ctx context.Context, delay time.Duration) error {
	clock := b.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return clockwait.Sleep(ctx, clock, delay)
}

// Full is a Backoff.Rand that always waits the whole limit: a fixed
// doubling, for loops that must keep a known pace.
func Full() float64 { return 1 }

// Reset returns the backoff to its initial limit, as after a success.
func (b *Backoff) Reset() { b.limit, b.started = 0, false }

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
