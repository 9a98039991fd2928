package fdbjobs

// Usage of run time (see doc.go, "Fair shares"): the fair-share RFC's
// accounting (Kay and Lauder's Fair Share Scheduler, as CouchDB's
// replicator runs it). Nodes charge each partition of a kind the run time
// of its jobs and their runs; once per interval one node folds the charges
// into the partitions' decayed usage. Fair shares by run time take a
// partition's cost of a start from it (fair.go); RunTimeShares
// (runshares.go) turns usage into the RFC's priorities for a run loop that
// rotates long jobs (the replicator's).

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
	// UsageCoeffDefault is the usage's decay per interval that Runtimes
	// roll up with (K1 of the fair-share RFC, CouchDB's usage_coeff):
	// usage halves each interval.
	UsageCoeffDefault = 0.5
	// usageStepsMax bounds the intervals usage decays by at once: after 64
	// intervals at UsageCoeffDefault, it is 2⁻⁶⁴ of what it was.
	usageStepsMax = 64
	// usagePage is how many partitions one transaction charges, folds, or
	// looks at for idle entries.
	usagePage = 100
	// usageFoldPages bounds the fold transactions of one roll-up: the
	// charges of partitions beyond usagePage × usageFoldPages wait for the
	// next period's.
	usageFoldPages = 100
	// chargeTokenKeep is how long a charge's token is kept, against which
	// an attempt of the same charge (commit_unknown_result) checks; a
	// roll-up clears older ones. A charge a Runtime could not write is
	// dropped when it is half that old.
	chargeTokenKeep = 10 * time.Minute
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

func (k keys) chargeTokenKey(kind string, at int64, token []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyChargeToken, kind, at, token})
}

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
// to at (Unix ms: the start of a period).
type usage struct {
	ms, runs float64
	at       int64
}

func decodeUsage(v []byte) (usage, bool) {
	t, err := tuple.Unpack(v)
	if v == nil || err != nil || len(t) != 3 {
		return usage{}, false
	}
	ms, ok1 := t[0].(float64)
	runs, ok2 := t[1].(float64)
	at, ok3 := intElem(t[2])
	return usage{ms: ms, runs: runs, at: at}, ok1 && ok2 && ok3
}

func (u usage) encode() []byte { return tuple.Tuple{u.ms, u.runs, u.at}.Pack() }

// decayed is u decayed to at by coeff per interval (at most
// usageStepsMax of them).
func (u usage) decayed(at int64, interval time.Duration, coeff float64) usage {
	ims := interval.Milliseconds()
	if at <= u.at || ims <= 0 {
		return u
	}
	d := math.Pow(coeff, min(float64(at-u.at)/float64(ims), usageStepsMax))
	return usage{ms: u.ms * d, runs: u.runs * d, at: at}
}

// usageRecord is a USAGE_PERIOD value: the start of the last period
// rolled up (Unix ms; -1: none), the interval and coefficient it was
// rolled up with, the kind's totals as of then, and where the look for
// idle partitions' entries is.
type usageRecord struct {
	at       int64
	interval time.Duration
	coeff    float64
	total    usage
	cursor   string
	// token is the roll-up's that took the period, so that its attempt
	// after commit_unknown_result knows it did; cleared is the last period
	// whose page of idle entries was looked at.
	token   []byte
	cleared int64
}

func decodeUsageRecord(v []byte) usageRecord {
	r := usageRecord{at: -1, coeff: UsageCoeffDefault}
	t, err := tuple.Unpack(v)
	if v == nil || err != nil || len(t) != 8 {
		return r
	}
	r.at, _ = intElem(t[0])
	ims, _ := intElem(t[1])
	r.interval = time.Duration(ims) * time.Millisecond
	r.coeff, _ = t[2].(float64)
	r.total.ms, _ = t[3].(float64)
	r.total.runs, _ = t[4].(float64)
	r.cursor, _ = t[5].(string)
	r.token, _ = t[6].([]byte)
	r.cleared, _ = intElem(t[7])
	r.total.at = r.at
	return r
}

func (r usageRecord) encode() []byte {
	return tuple.Tuple{r.at, r.interval.Milliseconds(), r.coeff, r.total.ms, r.total.runs, r.cursor, r.token, r.cleared}.Pack()
}

// mean is the kind's mean run time of a run (ms), 0 when none is known.
func (r usageRecord) mean() float64 {
	if r.total.runs < 1 {
		return 0
	}
	return r.total.ms / r.total.runs
}

// chargePage is a charge of at most usagePage partitions, with the token
// that makes its writes count once, drawn when the page was made and kept
// until they committed.
type chargePage struct {
	ms, runs map[string]int64
	token    []byte
	at       int64 // when the page was made, Unix ms (the token's time)
}

// chargePages splits ms and runs into pages of usagePage partitions at
// most, each partition in one page with its run time and runs, each page
// with a new token.
func (c *Client) chargePages(ms, runs map[string]int64) ([]*chargePage, error) {
	parts := make([]string, 0, len(ms)+len(runs))
	for p := range ms {
		parts = append(parts, p)
	}
	for p := range runs {
		if _, ok := ms[p]; !ok {
			parts = append(parts, p)
		}
	}
	var pages []*chargePage
	for len(parts) > 0 {
		token, err := newToken()
		if err != nil {
			return nil, err
		}
		pg := &chargePage{ms: map[string]int64{}, runs: map[string]int64{}, token: token, at: c.cfg.Clock.Now().UnixMilli()}
		for _, p := range parts[:min(len(parts), usagePage)] {
			if v, ok := ms[p]; ok {
				pg.ms[p] = v
			}
			if n, ok := runs[p]; ok {
				pg.runs[p] = n
			}
		}
		parts = parts[min(len(parts), usagePage):]
		pages = append(pages, pg)
	}
	return pages, nil
}

// ChargeRunTime adds run time (ms, per partition; "" for jobs without
// one) and runs (attempts; may be nil) to kind's charges, which the next
// RollUpUsage folds into its usage. (Fair shares by run time take a
// partition's cost of a start from its run time over its runs; a Runtime
// charges them itself.) It writes a transaction per 100 partitions, each
// with a token drawn once, so that an attempt that finds its token (an
// earlier one committed despite commit_unknown_result) adds nothing. On
// an error, the pages before the one that failed are charged.
func (c *Client) ChargeRunTime(ctx context.Context, kind string, ms, runs map[string]int64) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	for _, m := range []map[string]int64{ms, runs} {
		for p := range m {
			if err := checkUsagePartition(p); err != nil {
				return err
			}
		}
	}
	pages, err := c.chargePages(ms, runs)
	if err != nil {
		return err
	}
	for _, pg := range pages {
		if err := c.charge(ctx, kind, pg); err != nil {
			return err
		}
	}
	return nil
}

// charge writes one page of charges, once whatever the attempts.
func (c *Client) charge(ctx context.Context, kind string, pg *chargePage) error {
	tk := c.k.chargeTokenKey(kind, pg.at, pg.token)
	_, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		v, err := tr.Get(tk).Get()
		if err != nil || v != nil {
			return struct{}{}, err
		}
		for p, v := range pg.ms {
			if v > 0 {
				tr.Add(c.k.chargeKey(kind, p), kv.Int64(v))
			}
		}
		for p, n := range pg.runs {
			if n > 0 {
				// The charge key is the one a roll-up looks for: it is
				// there, at 0 if need be, whenever runs are.
				tr.Add(c.k.chargeKey(kind, p), kv.Int64(0))
				tr.Add(c.k.chargeRunsKey(kind, p), kv.Int64(n))
			}
		}
		tr.Set(tk, nil) // cleared by a roll-up after chargeTokenKeep
		return struct{}{}, nil
	})
	return err
}

// RollUpUsage folds kind's charges into its decayed usage, which decays
// by coeff per interval: the periods are the Unix time over interval. The
// first node to call it in a period takes the period (the others conflict
// on the period key, then find it taken; a later attempt of the same call
// knows its token), folds the charges waiting, in transactions of 100
// partitions each, each conflicting with the charges added meanwhile, and
// clears a page of idle partitions' entries (decayed under 1 ms) and the
// tokens of charges older than chargeTokenKeep. Usage decays lazily:
// partitions without charges are not written. It returns the usage of
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
	ims := interval.Milliseconds()
	if ims <= 0 || coeff < 0 || coeff > 1 {
		return fmt.Errorf("%w: roll-up interval %v (want 1 ms or more), coefficient %v (want [0, 1])", ErrInvalidArgument, interval, coeff)
	}
	at := now.UnixMilli() / ims * ims
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
		rec := decodeUsageRecord(v)
		if rec.at >= at {
			return rec.at == at && bytes.Equal(rec.token, token), nil
		}
		rec.total = rec.total.decayed(at, interval, coeff)
		rec.at, rec.interval, rec.coeff, rec.token = at, interval, coeff, token
		tr.Set(pk, rec.encode())
		return true, nil
	})
	if err != nil || !took {
		return err // the node that took the period folds
	}
	for range usageFoldPages {
		more, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (bool, error) {
			return c.foldCharges(tr, kind)
		})
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	_, err = kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		return struct{}{}, c.clearIdleUsage(tr, kind, now)
	})
	return err
}

// foldCharges folds a page of kind's charges into its usage as of the
// period the record names, and reports whether a page was full (more may
// wait).
func (c *Client) foldCharges(tr kv.Transaction, kind string) (bool, error) {
	pk := c.k.usagePeriodKey(kind)
	pf := tr.Get(pk)
	// Not snapshots: a charge added meanwhile conflicts, and is folded by
	// the next attempt, so that clearing the keys loses none.
	kvs, err := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyCharge, kind}), kv.RangeOptions{Limit: usagePage}).GetSliceWithError()
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
	pv, err := pf.Get()
	if err != nil {
		return false, err
	}
	rec := decodeUsageRecord(pv)
	for i, p := range parts {
		uv, err := usageF[i].Get()
		if err != nil {
			return false, err
		}
		u, _ := decodeUsage(uv)
		u = u.decayed(rec.at, rec.interval, rec.coeff)
		add := usage{ms: float64(max(0, ms[i])), runs: float64(max(0, runs[p]))}
		// At the later of the record's period and the entry's own (an
		// entry is never dated back, which would decay it twice).
		u = usage{ms: u.ms + add.ms, runs: u.runs + add.runs, at: max(u.at, rec.at)}
		rec.total.ms, rec.total.runs = rec.total.ms+add.ms, rec.total.runs+add.runs
		tr.Set(c.k.usageKey(kind, p), u.encode())
		tr.Clear(c.k.chargeKey(kind, p))
		tr.Clear(c.k.chargeRunsKey(kind, p))
	}
	tr.Set(pk, rec.encode())
	return len(kvs) == usagePage, nil
}

// clearIdleUsage clears the entries, of a page after the record's
// cursor, of partitions whose usage decayed under 1 ms by the record's
// period, and moves the cursor (back to the start after the last page);
// and the tokens of charges made more than chargeTokenKeep before now.
// Once per period.
func (c *Client) clearIdleUsage(tr kv.Transaction, kind string, now time.Time) error {
	pk := c.k.usagePeriodKey(kind)
	pv, err := tr.Get(pk).Get()
	if err != nil {
		return err
	}
	rec := decodeUsageRecord(pv)
	if rec.cleared >= rec.at {
		return nil // this roll-up's earlier attempt committed
	}
	rec.cleared = rec.at
	tr.ClearRange(kv.KeyRange{
		Begin: c.k.root.Pack(tuple.Tuple{keyChargeToken, kind}),
		End:   c.k.root.Pack(tuple.Tuple{keyChargeToken, kind, now.Add(-chargeTokenKeep).UnixMilli()}),
	})
	r := prefixRange(c.k.root, tuple.Tuple{keyUsage, kind})
	if rec.cursor != "" {
		r.Begin = append(c.k.usageKey(kind, rec.cursor), 0x00)
	}
	kvs, err := tr.GetRange(r, kv.RangeOptions{Limit: usagePage}).GetSliceWithError()
	if err != nil {
		return err
	}
	rec.cursor = ""
	for _, e := range kvs {
		p, ok := usagePartitionOf(c.k, e.Key)
		if !ok {
			continue
		}
		if u, ok := decodeUsage(e.Value); !ok || u.decayed(rec.at, rec.interval, rec.coeff).ms < 1 {
			tr.Clear(e.Key)
		}
		if len(kvs) == usagePage {
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
		rec := decodeUsageRecord(pv)
		out := KindUsage{Usage: Usage{}, Interval: rec.interval}
		for _, e := range kvs {
			p, ok := usagePartitionOf(c.k, e.Key)
			u, uok := decodeUsage(e.Value)
			if !ok || !uok {
				continue
			}
			if ms := u.decayed(rec.at, rec.interval, rec.coeff).ms; ms >= 1 {
				out.Usage[p] = ms
			}
		}
		return out, nil
	})
}

// usagePartitionOf is the partition of a USAGE, CHARGE or CHARGE_RUNS key.
func usagePartitionOf(k keys, key kv.Key) (string, bool) {
	t, err := k.root.Unpack(key)
	if err != nil || len(t) != 3 {
		return "", false
	}
	p, ok := t[2].(string)
	return p, ok
}
