package fdbjobs

// Shares of run time (see doc.go, "Fair shares"): the fair-share RFC's
// accounting (Kay and Lauder's Fair Share Scheduler, as CouchDB's
// replicator runs it) for kinds whose jobs run long and are rotated, where
// a share of starts says little. Nodes charge each partition the run time
// of its jobs; once per interval one node folds the charges into the
// partition's decayed usage; RunTimeShares turns usage into priorities,
// and a priority into a scheduled time, so that the queue's order is the
// shares'.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

const (
	// UsageCoeffDefault is RunTimeShares.UsageCoeff's default: usage halves
	// each interval (K1 of the fair-share RFC, CouchDB's usage_coeff).
	UsageCoeffDefault = 0.5
	// PriorityCoeffDefault is RunTimeShares.PriorityCoeff's default (K2,
	// CouchDB's priority_coeff).
	PriorityCoeffDefault = 0.98
	// UsageWindowDefault is RunTimeShares.Window's default: with
	// PriorityCoeffDefault and a one-minute interval, a priority that takes
	// more than a day to decay to 1 is ordered as one that takes a day.
	UsageWindowDefault = 24 * time.Hour
	// usageStepsMax bounds the intervals one roll-up decays by: after 64
	// intervals at UsageCoeffDefault, usage is 2⁻⁶⁴ of what it was.
	usageStepsMax = 64
)

func (k keys) usageKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyUsage, kind, part})
}

func (k keys) chargeKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyCharge, kind, part})
}

func (k keys) usagePeriodKey(kind string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyUsagePeriod, kind})
}

func (k keys) chargeTokenKey(kind string, token []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyChargeToken, kind, token})
}

// checkUsagePartition validates a partition named in a charge: any
// UTF-8 string up to MaxNameSize bytes, the empty one for the jobs without
// a partition. (Wider than InsertOptions.Partition, so that an account
// such as a CouchDB database name fits.)
func checkUsagePartition(p string) error {
	if len(p) > MaxNameSize {
		return fmt.Errorf("%w: partition of %d bytes: at most %d", ErrInvalidArgument, len(p), MaxNameSize)
	}
	return nil
}

// Usage is the decayed run time of a kind's partitions, in milliseconds.
type Usage map[string]float64

// RollUp returns u decayed by coeff^steps plus charges (ms): one step per
// interval. Entries under 1 ms are dropped (an idle partition is
// forgotten).
func (u Usage) RollUp(charges map[string]int64, coeff float64, steps int64) Usage {
	decay := math.Pow(coeff, float64(steps))
	next := Usage{}
	for p, v := range u {
		next[p] = v * decay
	}
	for p, c := range charges {
		next[p] += float64(c)
	}
	for p, v := range next {
		if v < 1 {
			delete(next, p)
		}
	}
	return next
}

// KindUsage is a kind's usage as of its last roll-up, and the interval it
// was rolled up with (the unit of both decays; 0 before the first).
type KindUsage struct {
	Usage    Usage
	Interval time.Duration
}

// ChargeRunTime adds run time (ms, per partition; "" for jobs without
// one) to kind's charges, which the next RollUpUsage folds into its
// usage. Its atomic adds are not idempotent, so the transaction also
// writes a token drawn once: an attempt that finds the token (an earlier
// one committed despite commit_unknown_result) adds nothing. A second
// transaction clears the token.
func (c *Client) ChargeRunTime(ctx context.Context, kind string, ms map[string]int64) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	for p := range ms {
		if err := checkUsagePartition(p); err != nil {
			return err
		}
	}
	if len(ms) == 0 {
		return nil
	}
	token, err := newToken()
	if err != nil {
		return err
	}
	tk := c.k.chargeTokenKey(kind, token)
	_, err = kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		v, err := tr.Get(tk).Get()
		if err != nil || v != nil {
			return struct{}{}, err
		}
		for p, v := range ms {
			if v > 0 {
				tr.Add(c.k.chargeKey(kind, p), kv.Int64(v))
			}
		}
		tr.Set(tk, nil)
		return struct{}{}, nil
	})
	if err != nil {
		return err
	}
	_, _ = kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		tr.Clear(tk)
		return struct{}{}, nil
	})
	return nil
}

// RollUpUsage folds kind's charges into its decayed usage once per period
// (the period is the Unix time over interval): usage × coeff per interval
// since the last roll-up (at most 64) plus the charges. Nodes that call it
// in the same period conflict on the period key and one applies it; the
// others read the result. It returns the usage. Run it from every node
// that charges, once per interval: no node leads.
func (c *Client) RollUpUsage(ctx context.Context, kind string, now time.Time, interval time.Duration, coeff float64) (KindUsage, error) {
	if err := checkName("kind", kind); err != nil {
		return KindUsage{}, err
	}
	if interval <= 0 || coeff < 0 || coeff > 1 {
		return KindUsage{}, fmt.Errorf("%w: roll-up interval %v (want > 0), coefficient %v (want [0, 1])", ErrInvalidArgument, interval, coeff)
	}
	period := now.UnixMilli() / max(1, interval.Milliseconds())
	return kv.Transact(ctx, c.db, func(tr kv.Transaction) (KindUsage, error) {
		pv, err := tr.Get(c.k.usagePeriodKey(kind)).Get()
		if err != nil {
			return KindUsage{}, err
		}
		last, _ := decodeUsagePeriod(pv)
		u, err := c.readUsage(tr, kind)
		if err != nil || last >= period {
			return u, err
		}
		steps := period - last
		if last < 0 || steps > usageStepsMax {
			steps = usageStepsMax
		}
		kvs, err := tr.Snapshot().GetRange(prefixRange(c.k.root, tuple.Tuple{keyCharge, kind}), kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return KindUsage{}, err
		}
		charges := map[string]int64{}
		for _, e := range kvs {
			if p, ok := usagePartitionOf(c.k, e.Key); ok {
				charges[p] = kv.DecodeInt64(e.Value)
			}
		}
		next := u.Usage.RollUp(charges, coeff, steps)
		for p, ch := range charges {
			if ch != 0 {
				// Subtract what was folded: charges added meanwhile stay.
				tr.Add(c.k.chargeKey(kind, p), kv.Int64(-ch))
			}
		}
		for p := range u.Usage {
			if _, ok := next[p]; !ok {
				tr.Clear(c.k.usageKey(kind, p))
			}
		}
		for p, v := range next {
			tr.Set(c.k.usageKey(kind, p), tuple.Tuple{v}.Pack())
		}
		tr.Set(c.k.usagePeriodKey(kind), tuple.Tuple{period, interval.Milliseconds()}.Pack())
		return KindUsage{Usage: next, Interval: interval}, nil
	})
}

// GetUsage reads kind's usage as of its last roll-up, with snapshot reads
// (no conflicts). tx may be nil, a Database or a caller's Transaction.
func (c *Client) GetUsage(ctx context.Context, tx kv.ReadTransactor, kind string) (KindUsage, error) {
	if err := checkName("kind", kind); err != nil {
		return KindUsage{}, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (KindUsage, error) {
		return c.readUsage(tr, kind)
	})
}

func (c *Client) readUsage(tr kv.ReadTransaction, kind string) (KindUsage, error) {
	snap := tr.Snapshot()
	uf := snap.GetRange(prefixRange(c.k.root, tuple.Tuple{keyUsage, kind}), kv.RangeOptions{})
	pf := snap.Get(c.k.usagePeriodKey(kind))
	kvs, err := uf.GetSliceWithError()
	if err != nil {
		return KindUsage{}, err
	}
	pv, err := pf.Get()
	if err != nil {
		return KindUsage{}, err
	}
	u := KindUsage{Usage: Usage{}}
	_, u.Interval = decodeUsagePeriod(pv)
	for _, e := range kvs {
		p, ok := usagePartitionOf(c.k, e.Key)
		if !ok {
			continue
		}
		if t, err := tuple.Unpack(e.Value); err == nil && len(t) == 1 {
			if v, ok := t[0].(float64); ok {
				u.Usage[p] = v
			}
		}
	}
	return u, nil
}

// usagePartitionOf is the partition of a USAGE or CHARGE key.
func usagePartitionOf(k keys, key kv.Key) (string, bool) {
	t, err := k.root.Unpack(key)
	if err != nil || len(t) != 3 {
		return "", false
	}
	p, ok := t[2].(string)
	return p, ok
}

// decodeUsagePeriod reads a USAGE_PERIOD value: the last period rolled up
// (-1 when none) and the interval it was rolled up with (0 when not
// recorded).
func decodeUsagePeriod(v []byte) (int64, time.Duration) {
	t, err := tuple.Unpack(v)
	if v == nil || err != nil || len(t) < 1 {
		return -1, 0
	}
	last, ok := t[0].(int64)
	if !ok {
		return -1, 0
	}
	var interval time.Duration
	if len(t) > 1 {
		if ms, ok := t[1].(int64); ok {
			interval = time.Duration(ms) * time.Millisecond
		}
	}
	return last, interval
}

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
	if p > 1 && interval > 0 {
		// ln(1/K2) is +Inf for K2 = 0 (no memory: off 0) and 0 for K2 = 1
		// (no decay: every priority is beyond the window).
		ahead := float64(interval.Milliseconds()) * math.Log(p) / math.Log(1/s.PriorityCoeff)
		off = int64(min(float64(w), ahead))
	}
	return t.Add(time.Duration(off-w) * time.Millisecond)
}
