package replicator

import (
	"context"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Fair share (seed 001, Kay & Lauder, adapted to absolute scheduled
// times). Run time is charged per share key (the _replicator database;
// "" for transient jobs) into atomic counters; once per Interval one node
// folds the charges into a decayed usage (usage = usage*UsageCoeff +
// charges). A job is enqueued with the scheduled time
//
//	now - margin - FairShareWindow + FairShareWindow * p(key) / max p
//
// (margin = StartupJitter + 1s)
// where p(key) = usage(key) / shares(key). Every such time is in the past,
// so the job is runnable at once (the scheduler stays work-conserving), and
// acceptors take the runnable job with the oldest scheduled time first: a
// database that used more than its share queues behind the others by up to
// FairShareWindow, and its jobs move forward as time passes (the uniform
// priority decay of the paper comes for free). Crash backoff uses times in
// the future, which are not runnable until they pass.

// Usage is the decayed usage (ms) per share key.
type Usage map[string]float64

// Usage reads the usage table with snapshot reads (no conflicts).
func (s *Store) Usage(tr kv.ReadTransaction) (Usage, error) {
	kvs, err := tr.Snapshot().GetRange(subspaceRange(s.usage), kv.RangeOptions{}).GetSliceWithError()
	if err != nil {
		return nil, err
	}
	m := make(Usage, len(kvs))
	for _, e := range kvs {
		t, err := s.usage.Unpack(e.Key)
		if err != nil || len(t) != 1 {
			continue
		}
		key, _ := t[0].(string)
		v, err := tuple.Unpack(e.Value)
		if err != nil || len(v) != 1 {
			continue
		}
		if f, ok := v[0].(float64); ok {
			m[key] = f
		}
	}
	return m, nil
}

// EnqueueTime is the scheduled time (Unix ms) of a job of share key
// enqueued now.
func (c Config) EnqueueTime(now time.Time, usage Usage, key string) int64 {
	// The margin keeps every such time at or before the maximum of an
	// Accept that started waiting up to StartupJitter ago.
	t := Millis(now) - (c.StartupJitter + time.Second).Milliseconds()
	if c.FairShareWindow < 0 {
		return t
	}
	w := float64(c.FairShareWindow.Milliseconds())
	p := usage[key] / float64(c.SharesOf(key))
	pmax := 0.0
	for k, u := range usage {
		pmax = math.Max(pmax, u/float64(c.SharesOf(k)))
	}
	off := 0.0
	if pmax > 0 {
		off = w * p / pmax
	}
	return t - int64(w) + int64(off)
}

// Charge adds run time (ms) per share key to the cluster's charges.
// The atomic adds are not idempotent, so the transaction also writes a
// token chosen outside the retry loop: a retry that finds the token (its
// earlier attempt committed despite commit_unknown_result) adds nothing.
// A second transaction clears the token afterwards.
func (s *Store) Charge(ctx context.Context, charges map[string]int64) error {
	if len(charges) == 0 {
		return nil
	}
	token := s.chargeTokenKey(uuid.NewString())
	_, err := s.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		v, err := tr.Get(token).Get()
		if err != nil || v != nil {
			return nil, err
		}
		for key, v := range charges {
			if v > 0 {
				tr.Add(s.chargesKey(key), kv.Int64(v))
			}
		}
		tr.Set(token, nil)
		return nil, nil
	})
	if err != nil {
		return err
	}
	_, _ = s.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Clear(token)
		return nil, nil
	})
	return nil
}

// RollUp folds the charges into the usage once per period (the
// period number is Unix ms / interval); concurrent nodes conflict on the
// period key and only one applies it. It returns the usage table.
func (s *Store) RollUp(ctx context.Context, now time.Time, interval time.Duration, coeff float64) (Usage, error) {
	period := Millis(now) / max(1, interval.Milliseconds())
	return kv.Transact(ctx, s.DB, func(tr kv.Transaction) (Usage, error) {
		pv, err := tr.Get(s.periodKey()).Get()
		if err != nil {
			return nil, err
		}
		var last int64 = -1
		if pv != nil {
			if t, err := tuple.Unpack(pv); err == nil && len(t) == 1 {
				if i, ok := t[0].(int64); ok {
					last = i
				}
			}
		}
		usage, err := s.Usage(tr)
		if err != nil {
			return nil, err
		}
		if last >= period {
			return usage, nil
		}
		steps := period - last
		if last < 0 || steps > 64 {
			steps = 64
		}
		decay := math.Pow(coeff, float64(steps))
		kvs, err := tr.Snapshot().GetRange(subspaceRange(s.charges), kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		charges := map[string]int64{}
		for _, e := range kvs {
			t, err := s.charges.Unpack(e.Key)
			if err != nil || len(t) != 1 {
				continue
			}
			key, _ := t[0].(string)
			charges[key] = kv.DecodeInt64(e.Value)
		}
		next := Usage{}
		for key, u := range usage {
			next[key] = u * decay
		}
		for key, c := range charges {
			next[key] += float64(c)
			if c != 0 {
				// Subtract what was folded: charges added meanwhile stay.
				tr.Add(s.chargesKey(key), kv.Int64(-c))
			}
		}
		for key, u := range next {
			if u < 1 {
				tr.Clear(s.usageKey(key))
				delete(next, key)
				continue
			}
			tr.Set(s.usageKey(key), tuple.Tuple{u}.Pack())
		}
		tr.Set(s.periodKey(), tuple.Tuple{period}.Pack())
		return next, nil
	})
}
