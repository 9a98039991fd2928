package fdbjobs

// The fair-share RFC's priorities (Kay and Lauder's Fair Share Scheduler,
// as CouchDB's replicator runs it), from a kind's usage (usage.go), for a
// run loop that rotates long jobs.

import (
	"fmt"
	"math"
	"time"
)

const (
	// PriorityCoeffDefault is RunTimeShares.PriorityCoeff's default (K2 of
	// the fair-share RFC, CouchDB's priority_coeff).
	PriorityCoeffDefault = 0.98
	// UsageWindowDefault is RunTimeShares.Window's default: with
	// PriorityCoeffDefault and a one-minute interval, a priority that takes
	// more than a day to decay to 1 is ordered as one that takes a day.
	UsageWindowDefault = 24 * time.Hour
)

// RunTimeShares is the fair-share RFC's rule for a kind's priorities,
// from its partitions' usage (RollUpUsage). Lower priorities run first.
//
//   - Decay: every priority decays by PriorityCoeff per interval, so that
//     jobs that waited move to the front.
//   - Adjustment: once per interval a running job's priority grows by
//     Increment: usage(p) × jobs(p) / weight(p)², where jobs(p) is the
//     number of the partition's jobs waiting or running (a partition with
//     more jobs does not get more run time for them). A new job starts
//     with one increment, as if it had run one interval.
//
// Priorities are in microseconds of usage, CouchDB's unit, so that
// PriorityCoeff has CouchDB's meaning (a priority under 1 counts as 0).
//
// A waiting job's priority P decays as P × K2^(t/interval), so the order
// of waiting jobs by priority is that of the moment τ = now + interval ×
// ln(P) / ln(1/K2) at which each priority decays to 1: ScheduledTime
// enqueues a job at τ − Window − Margin, always in the past, so that it is
// due at once and the queue stays work conserving, and acceptors, which
// take the oldest scheduled time first, take the lowest priority first.
// Priorities further than Window ahead are capped there.
type RunTimeShares struct {
	// UsageCoeff is the per-interval decay of usage (K1), in [0, 1];
	// 0 means UsageCoeffDefault.
	UsageCoeff float64
	// PriorityCoeff is the per-interval decay of priorities (K2), in
	// [0, 1]; 0 means PriorityCoeffDefault.
	PriorityCoeff float64
	// Window is how far ahead priorities are ordered (UsageWindowDefault
	// when 0); negative turns the order off: every job is enqueued at now
	// − Margin.
	Window time.Duration
	// Margin moves every scheduled time this much further into the past
	// (for instance, past the clock skew of the acceptors waiting).
	Margin time.Duration
}

// withDefaults fills in the zero fields.
func (s RunTimeShares) withDefaults() RunTimeShares {
	if s.UsageCoeff == 0 {
		s.UsageCoeff = UsageCoeffDefault
	}
	if s.PriorityCoeff == 0 {
		s.PriorityCoeff = PriorityCoeffDefault
	}
	if s.Window == 0 {
		s.Window = UsageWindowDefault
	}
	return s
}

// Validate reports a coefficient outside [0, 1] or a negative margin.
func (s RunTimeShares) Validate() error {
	switch {
	case s.UsageCoeff < 0 || s.UsageCoeff > 1:
		return fmt.Errorf("%w: usage coefficient %v not in [0, 1]", ErrInvalidArgument, s.UsageCoeff)
	case s.PriorityCoeff < 0 || s.PriorityCoeff > 1:
		return fmt.Errorf("%w: priority coefficient %v not in [0, 1]", ErrInvalidArgument, s.PriorityCoeff)
	case s.Margin < 0:
		return fmt.Errorf("%w: margin %v is negative", ErrInvalidArgument, s.Margin)
	}
	return nil
}

// Increment is the priority a running job of a partition gains per
// interval: its usage (ms) in µs × its jobs waiting or running (at least
// 1) / its weight².
func (s RunTimeShares) Increment(usage float64, jobs int64, weight int) float64 {
	w := float64(max(1, weight))
	return usage * 1000 * float64(max(1, jobs)) / (w * w)
}

// Decay returns priority p after elapsed time: p × PriorityCoeff^(elapsed
// / interval). A result under 1 is 0 (CouchDB truncates priorities).
func (s RunTimeShares) Decay(p float64, elapsed, interval time.Duration) float64 {
	if p <= 0 || elapsed <= 0 || interval <= 0 {
		return max(0, p)
	}
	p *= math.Pow(s.withDefaults().PriorityCoeff, float64(elapsed)/float64(interval))
	if p < 1 {
		return 0
	}
	return p
}

// Adjust returns a running job's priority p after elapsed time, of which
// the job ran for ran: decayed, plus increment (Increment) for the part of
// an interval it ran.
func (s RunTimeShares) Adjust(p, increment float64, ran, elapsed, interval time.Duration) float64 {
	p = s.Decay(p, elapsed, interval)
	if ran > 0 && interval > 0 {
		p += increment * float64(ran) / float64(interval)
	}
	return p
}

// ScheduledTime is the time to enqueue a job at, now, with priority p,
// priorities decaying by PriorityCoeff per interval: in the past by
// Margin and Window, less how long p takes to decay to 1 (at most Window).
func (s RunTimeShares) ScheduledTime(now time.Time, p float64, interval time.Duration) time.Time {
	s = s.withDefaults()
	t := now.Add(-s.Margin)
	if s.Window < 0 {
		return t
	}
	w := s.Window.Milliseconds()
	off := int64(0)
	if p > 1 && interval >= time.Millisecond {
		// ln(1/K2) is 0 for K2 = 1 (no decay: every priority is beyond
		// the window, +Inf).
		ahead := float64(interval.Milliseconds()) * math.Log(p) / math.Log(1/s.PriorityCoeff)
		off = int64(min(float64(w), ahead))
	}
	return t.Add(time.Duration(off-w) * time.Millisecond)
}
