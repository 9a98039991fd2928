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
	"bytes"
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

func (k keys) chargeRunsKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyChargeRuns, kind, part})
}

func (k keys) usagePeriodKey(kind string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyUsagePeriod, kind})
}

func (k keys) chargeTokenKey(kind string, token []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyChargeToken, kind, token})
}

const (
	// usageFoldPage is how many partitions' charges one transaction of a
	// roll-up folds, and how many usage entries it looks at for idle ones.
	usageFoldPage = 100
	// usageFoldPages bounds the transactions of one roll-up: the charges
	// of partitions beyond usageFoldPage × usageFoldPages wait for the
	// next period's.
	usageFoldPages = 100
)

// checkUsagePartition validates a partition named in a charge: any
// string up to MaxNameSize bytes, the empty one for the jobs without a
// partition. (Wider than InsertOptions.Partition, so that an account such
// as a CouchDB database name fits.)
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

// usage is a USAGE value: a partition's run time (ms) and runs, decayed
// to the end of period.
type usage struct {
	ms, runs float64
	period   int64
}

func decodeUsage(v []byte) (usage, bool) {
	t, err := tuple.Unpack(v)
	if v == nil || err != nil || len(t) < 1 {
		return usage{}, false
	}
	u := usage{period: -1}
	u.ms, _ = t[0].(float64)
	if len(t) >= 3 {
		u.runs, _ = t[1].(float64)
		u.period, _ = intElem(t[2])
	}
	return u, true
}

func (u usage) encode() []byte { return tuple.Tuple{u.ms, u.runs, u.period}.Pack() }

// at is u decayed to period, by coeff per period.
func (u usage) at(period int64, coeff float64) usage {
	if u.period < 0 || period <= u.period {
		return u
	}
	d := math.Pow(coeff, float64(min(period-u.period, usageStepsMax)))
	return usage{ms: u.ms * d, runs: u.runs * d, period: period}
}

// usagePeriod is a USAGE_PERIOD value: the last period rolled up (-1:
// none), the interval and coefficient it was rolled up with, the kind's
// totals as of then, and where the look for idle partitions' entries is.
type usagePeriod struct {
	period   int64
	interval time.Duration
	coeff    float64
	total    usage
	cursor   string
	// token is the roll-up's that took the period, so that its attempt
	// after commit_unknown_result knows; cleared is the last period whose
	// page of idle entries was looked at.
	token   []byte
	cleared int64
}

func decodeUsagePeriod(v []byte) usagePeriod {
	p := usagePeriod{period: -1, coeff: UsageCoeffDefault}
	t, err := tuple.Unpack(v)
	if v == nil || err != nil || len(t) < 1 {
		return p
	}
	if last, ok := intElem(t[0]); ok {
		p.period = last
	}
	if len(t) > 1 {
		if ms, ok := intElem(t[1]); ok {
			p.interval = time.Duration(ms) * time.Millisecond
		}
	}
	if len(t) >= 8 {
		p.coeff, _ = t[2].(float64)
		p.total.ms, _ = t[3].(float64)
		p.total.runs, _ = t[4].(float64)
		p.cursor, _ = t[5].(string)
		p.token, _ = t[6].([]byte)
		p.cleared, _ = intElem(t[7])
	}
	p.total.period = p.period
	return p
}

func (p usagePeriod) encode() []byte {
	return tuple.Tuple{p.period, p.interval.Milliseconds(), p.coeff, p.total.ms, p.total.runs, p.cursor, p.token, p.cleared}.Pack()
}

// mean is the kind's mean run time of a run (ms), 0 when none is known.
func (p usagePeriod) mean() float64 {
	if p.total.runs < 1 {
		return 0
	}
	return p.total.ms / p.total.runs
}

// ChargeRunTime adds run time (ms, per partition; "" for jobs without
// one) and runs (attempts; may be nil) to kind's charges, which the next
// RollUpUsage folds into its usage. (Fair shares by run time take a
// partition's cost of a start from its run time over its runs; a Runtime
// charges them itself.) Its atomic adds are not idempotent, so the
// transaction also writes a token drawn once: an attempt that finds the
// token (an earlier one committed despite commit_unknown_result) adds
// nothing. A second transaction clears the token.
func (c *Client) ChargeRunTime(ctx context.Context, kind string, ms, runs map[string]int64) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	for p := range ms {
		if err := checkUsagePartition(p); err != nil {
			return err
		}
	}
	for p := range runs {
		if err := checkUsagePartition(p); err != nil {
			return err
		}
	}
	if len(ms) == 0 && len(runs) == 0 {
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
		for p, n := range runs {
			if n > 0 {
				// The charge key is the one a roll-up looks for: it is
				// there, at 0 if need be, whenever runs are.
				tr.Add(c.k.chargeKey(kind, p), kv.Int64(0))
				tr.Add(c.k.chargeRunsKey(kind, p), kv.Int64(n))
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

// RollUpUsage folds kind's charges into its decayed usage, which decays
// per period (the period is the Unix time over interval): usage × coeff
// per interval since the last roll-up (at most 64) plus the charges. The
// first node to call it in a period takes the period (the others conflict
// on the period key, then find it taken) and, once taken, clears a page of
// idle partitions' entries (decayed under 1 ms). Every call folds the
// charges waiting, in transactions of usageFoldPage partitions each, each
// conflicting with the charges added meanwhile (which it then folds too);
// usage decays lazily, so that the partitions without charges are not
// written. It returns the usage of
// every partition as of the period. Run it from every node that charges,
// once per interval: no node leads.
func (c *Client) RollUpUsage(ctx context.Context, kind string, now time.Time, interval time.Duration, coeff float64) (KindUsage, error) {
	if err := c.rollUpUsage(ctx, kind, now, interval, coeff); err != nil {
		return KindUsage{}, err
	}
	return c.GetUsage(ctx, nil, kind)
}

func (c *Client) rollUpUsage(ctx context.Context, kind string, now time.Time, interval time.Duration, coeff float64) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if interval <= 0 || coeff < 0 || coeff > 1 {
		return fmt.Errorf("%w: roll-up interval %v (want > 0), coefficient %v (want [0, 1])", ErrInvalidArgument, interval, coeff)
	}
	period := now.UnixMilli() / max(1, interval.Milliseconds())
	pk := c.k.usagePeriodKey(kind)
	token, err := newToken()
	if err != nil {
		return err
	}
	took, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (bool, error) {
		v, err := tr.Get(pk).Get()
		if err != nil {
			return false, err
		}
		rec := decodeUsagePeriod(v)
		if rec.period >= period {
			return rec.period == period && bytes.Equal(rec.token, token), nil
		}
		rec.total = rec.total.at(period, coeff)
		rec.period, rec.interval, rec.coeff, rec.total.period, rec.token = period, interval, coeff, period, token
		tr.Set(pk, rec.encode())
		return true, nil
	})
	if err != nil {
		return err
	}
	// Whoever took the period, the charges are folded: folds conflict on
	// them, so that each is folded once, and one that finds none writes
	// nothing.
	for range usageFoldPages {
		more, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (bool, error) {
			return c.foldCharges(tr, kind, period, coeff)
		})
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if !took {
		return nil // the node that took the period looks for idle entries
	}
	_, err = kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		return struct{}{}, c.clearIdleUsage(tr, kind, period, coeff)
	})
	return err
}

// foldCharges folds a page of kind's charges into its usage as of period,
// and reports whether a page was full (more may wait).
func (c *Client) foldCharges(tr kv.Transaction, kind string, period int64, coeff float64) (bool, error) {
	// Not snapshots: a charge added meanwhile conflicts, and is folded by
	// the next attempt, so that clearing the keys loses none.
	kvs, err := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyCharge, kind}), kv.RangeOptions{Limit: usageFoldPage}).GetSliceWithError()
	if err != nil || len(kvs) == 0 {
		return false, err
	}
	parts := make([]string, 0, len(kvs))
	ms := make([]int64, 0, len(kvs))
	usageF := make([]kv.FutureByteSlice, 0, len(kvs))
	for _, e := range kvs {
		p, ok := usagePartitionOf(c.k, e.Key)
		if !ok {
			tr.Clear(e.Key)
			continue
		}
		parts, ms = append(parts, p), append(ms, kv.DecodeInt64(e.Value))
		usageF = append(usageF, tr.Snapshot().Get(c.k.usageKey(kind, p)))
	}
	// A partition's runs are charged only with its charge key: those of
	// the page's partitions are the runs keys up to its last one's.
	runs := map[string]int64{}
	if len(parts) > 0 {
		rr := prefixRange(c.k.root, tuple.Tuple{keyChargeRuns, kind})
		rr.End = append(c.k.chargeRunsKey(kind, parts[len(parts)-1]), 0x00)
		rkvs, err := tr.GetRange(rr, kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return false, err
		}
		for _, e := range rkvs {
			if p, ok := usagePartitionOf(c.k, e.Key); ok {
				runs[p] = kv.DecodeInt64(e.Value)
			}
		}
	}
	pk := c.k.usagePeriodKey(kind)
	pv, err := tr.Get(pk).Get()
	if err != nil {
		return false, err
	}
	rec := decodeUsagePeriod(pv)
	for i, p := range parts {
		uv, err := usageF[i].Get()
		if err != nil {
			return false, err
		}
		u, _ := decodeUsage(uv)
		u = u.at(period, coeff)
		add := usage{ms: float64(max(0, ms[i])), runs: float64(max(0, runs[p]))}
		u.ms, u.runs, u.period = u.ms+add.ms, u.runs+add.runs, period
		rec.total.ms, rec.total.runs = rec.total.ms+add.ms, rec.total.runs+add.runs
		tr.Set(c.k.usageKey(kind, p), u.encode())
		tr.Clear(c.k.chargeKey(kind, p))
		tr.Clear(c.k.chargeRunsKey(kind, p))
	}
	tr.Set(pk, rec.encode())
	return len(kvs) == usageFoldPage, nil
}

// clearIdleUsage clears the entries, of a page after the period record's
// cursor, of partitions whose usage decayed under 1 ms by period, and
// moves the cursor (back to the start after the last page).
func (c *Client) clearIdleUsage(tr kv.Transaction, kind string, period int64, coeff float64) error {
	pk := c.k.usagePeriodKey(kind)
	pv, err := tr.Get(pk).Get()
	if err != nil {
		return err
	}
	rec := decodeUsagePeriod(pv)
	if rec.cleared >= period {
		return nil // this roll-up's earlier attempt committed
	}
	rec.cleared = period
	r := prefixRange(c.k.root, tuple.Tuple{keyUsage, kind})
	if rec.cursor != "" {
		r.Begin = append(c.k.usageKey(kind, rec.cursor), 0x00)
	}
	kvs, err := tr.GetRange(r, kv.RangeOptions{Limit: usageFoldPage}).GetSliceWithError()
	if err != nil {
		return err
	}
	rec.cursor = ""
	for _, e := range kvs {
		p, ok := usagePartitionOf(c.k, e.Key)
		if !ok {
			continue
		}
		if u, ok := decodeUsage(e.Value); !ok || u.at(period, coeff).ms < 1 {
			tr.Clear(e.Key)
		}
		if len(kvs) == usageFoldPage {
			rec.cursor = p
		}
	}
	tr.Set(pk, rec.encode())
	return nil
}

// GetUsage reads kind's usage as of its last roll-up, with snapshot reads
// (no conflicts): each partition's decayed to that period, those under
// 1 ms left out. tx may be nil, a Database or a caller's Transaction.
func (c *Client) GetUsage(ctx context.Context, tx kv.ReadTransactor, kind string) (KindUsage, error) {
	if err := checkName("kind", kind); err != nil {
		return KindUsage{}, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (KindUsage, error) {
		snap := tr.Snapshot()
		uf := snap.GetRange(prefixRange(c.k.root, tuple.Tuple{keyUsage, kind}), kv.RangeOptions{})
		pv, err := snap.Get(c.k.usagePeriodKey(kind)).Get()
		if err != nil {
			return KindUsage{}, err
		}
		kvs, err := uf.GetSliceWithError()
		if err != nil {
			return KindUsage{}, err
		}
		rec := decodeUsagePeriod(pv)
		out := KindUsage{Usage: Usage{}, Interval: rec.interval}
		for _, e := range kvs {
			p, ok := usagePartitionOf(c.k, e.Key)
			u, uok := decodeUsage(e.Value)
			if !ok || !uok {
				continue
			}
			if ms := u.at(rec.period, rec.coeff).ms; ms >= 1 {
				out.Usage[p] = ms
			}
		}
		return out, nil
	})
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
