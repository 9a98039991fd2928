package couch

import (
	"cmp"
	"context"
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/internal/clockwait"
)

// AIMD rate limiter defaults (couch_replicator_rate_limiter).
const (
	// RateBaseIntervalDefault is the smallest non-zero interval between
	// requests once a 429 has been seen.
	RateBaseIntervalDefault = 20 * time.Millisecond
	// RateMaxIntervalDefault: an interval that reaches it makes requests fail
	// with ErrMaxBackoff.
	RateMaxIntervalDefault = 25 * time.Second
	// RateMultiplierDefault grows the interval on each 429.
	RateMultiplierDefault = 1.2
	// RateMinUpdateIntervalDefault: updates closer together than this are
	// ignored, so a burst of concurrent 429s counts once.
	RateMinUpdateIntervalDefault = 80 * time.Millisecond
	// RateDecayAfterDefault: a success this long after the previous update
	// first decays the interval by 2 ms per elapsed millisecond.
	RateDecayAfterDefault = time.Second
	// RateForgetAfterDefault: a key not updated for this long (beyond its
	// current interval) is reset.
	RateForgetAfterDefault = 25 * time.Second
)

// RateLimiterConfig tunes a RateLimiter. Zero fields take their defaults.
type RateLimiterConfig struct {
	BaseInterval      time.Duration
	MaxInterval       time.Duration
	Multiplier        float64 // > 1
	MinUpdateInterval time.Duration
	ForgetAfter       time.Duration
	// Clock is the time source of the intervals and waits (nil: the real
	// clock).
	Clock clockwork.Clock
}

func (c RateLimiterConfig) withDefaults() RateLimiterConfig {
	c.BaseInterval = cmp.Or(c.BaseInterval, RateBaseIntervalDefault)
	c.MaxInterval = cmp.Or(c.MaxInterval, RateMaxIntervalDefault)
	c.Multiplier = cmp.Or(c.Multiplier, RateMultiplierDefault)
	c.MinUpdateInterval = cmp.Or(c.MinUpdateInterval, RateMinUpdateIntervalDefault)
	c.ForgetAfter = cmp.Or(c.ForgetAfter, RateForgetAfterDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// Validate reports a configuration error (zero fields are fine).
func (c RateLimiterConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.BaseInterval <= 0:
		return invalidOptions("rate limiter base interval must be positive")
	case c.MaxInterval < c.BaseInterval:
		return invalidOptions("rate limiter max interval %v is below the base interval %v", c.MaxInterval, c.BaseInterval)
	case !(c.Multiplier > 1) || math.IsInf(c.Multiplier, 0):
		return invalidOptions("rate limiter multiplier must be > 1, got %v", c.Multiplier)
	case c.MinUpdateInterval < 0 || c.ForgetAfter < 0:
		return invalidOptions("rate limiter intervals must not be negative")
	}
	return nil
}

// RateLimiter is CouchDB's AIMD (additive increase of speed, multiplicative
// decrease) limiter for peers that answer 429 Too Many Requests. It keeps
// one interval per key (scheme://host and HTTP method) and is meant to be
// shared by every DB of a process so that all replications to a host back
// off together.
//
// Before each request the client waits the key's interval. A 429 multiplies
// the interval (at least BaseInterval) by Multiplier, capped at MaxInterval;
// a success first decays it by 2 ms per millisecond since the last update if
// that was more than a second ago, then subtracts 20 ms (interval ≤ 100 ms),
// 40 ms (> 100 ms), 100 ms (> 1 s) or 1 s (> 10 s); at 0 the key is dropped,
// and a result below BaseInterval becomes BaseInterval. Once the interval has
// reached MaxInterval, requests fail at once with ErrMaxBackoff. A key left
// alone for ForgetAfter beyond its interval starts over at 0.
//
// A RateLimiter is safe for concurrent use; the zero value is not usable.
type RateLimiter struct {
	cfg RateLimiterConfig

	mu      sync.Mutex
	entries map[string]*rateEntry
}

type rateEntry struct {
	interval time.Duration
	updated  time.Time
}

// NewRateLimiter returns a limiter; see RateLimiterConfig.Validate.
func NewRateLimiter(cfg RateLimiterConfig) (*RateLimiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &RateLimiter{cfg: cfg.withDefaults(), entries: map[string]*rateEntry{}}, nil
}

// Interval is the current interval for key.
func (l *RateLimiter) Interval(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entry(key, l.cfg.Clock.Now(), false); e != nil {
		return e.interval
	}
	return 0
}

// entry returns key's live entry (nil if none and !create), dropping stale
// ones. Called with mu held.
func (l *RateLimiter) entry(key string, now time.Time, create bool) *rateEntry {
	e := l.entries[key]
	if e != nil && l.stale(e, now) {
		delete(l.entries, key)
		e = nil
	}
	if e == nil && create {
		e = &rateEntry{}
		l.entries[key] = e
	}
	if len(l.entries) > 1024 { // bound memory: drop other stale keys now and then
		for k, o := range l.entries {
			if l.stale(o, now) {
				delete(l.entries, k)
			}
		}
	}
	return e
}

// stale reports whether e has seen no update for ForgetAfter beyond its own
// interval (so a client that waits the interval and then spends a while on
// the request is not forgotten in the middle of a back-off).
func (l *RateLimiter) stale(e *rateEntry, now time.Time) bool {
	return now.Sub(e.updated) > e.interval+l.cfg.ForgetAfter
}

// Wait sleeps key's interval (returning early with ctx's error), or fails
// with ErrMaxBackoff when the interval has reached the maximum.
func (l *RateLimiter) Wait(ctx context.Context, key string) error {
	d := l.Interval(key)
	if d >= l.cfg.MaxInterval {
		return ErrMaxBackoff
	}
	return clockwait.Sleep(ctx, l.cfg.Clock, d)
}

// Failure records a 429 for key.
func (l *RateLimiter) Failure(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Clock.Now()
	e := l.entry(key, now, true)
	if !e.updated.IsZero() && now.Sub(e.updated) < l.cfg.MinUpdateInterval {
		return
	}
	cur := max(e.interval, l.cfg.BaseInterval)
	// Whole milliseconds, as CouchDB; always growing, even from tiny bases.
	next := time.Duration(math.Round(float64(cur)*l.cfg.Multiplier/float64(time.Millisecond))) * time.Millisecond
	if next <= cur {
		next = cur + time.Millisecond
	}
	e.interval = min(next, l.cfg.MaxInterval)
	e.updated = now
}

// Success records a non-429 answer for key.
func (l *RateLimiter) Success(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Clock.Now()
	e := l.entry(key, now, false)
	if e == nil || now.Sub(e.updated) < l.cfg.MinUpdateInterval {
		return
	}
	iv := e.interval
	if since := now.Sub(e.updated); since > RateDecayAfterDefault {
		iv -= 2 * since
	}
	switch {
	case iv > 10*time.Second:
		iv -= time.Second
	case iv > time.Second:
		iv -= 100 * time.Millisecond
	case iv > 100*time.Millisecond:
		iv -= 40 * time.Millisecond
	default:
		iv -= 20 * time.Millisecond
	}
	if iv <= 0 {
		delete(l.entries, key)
		return
	}
	e.interval = max(iv, l.cfg.BaseInterval)
	e.updated = now
}
