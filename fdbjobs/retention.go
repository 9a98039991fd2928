package fdbjobs

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Retention of finished runtime jobs (WorkerOptions.Retain…): how long a
// job that ended with each outcome is kept before its Runtime's sweeper
// removes it. River's periods.
const (
	// RetainCompletedDefault keeps completed jobs a day.
	RetainCompletedDefault = 24 * time.Hour
	// RetainCancelledDefault keeps cancelled jobs a day.
	RetainCancelledDefault = 24 * time.Hour
	// RetainDiscardedDefault keeps discarded jobs a week: their errors are
	// what an operator reads.
	RetainDiscardedDefault = 7 * 24 * time.Hour
	// RetainForever, as a Retain… option, never removes such jobs.
	RetainForever time.Duration = -1
	// SweepPeriodDefault is how often each Runtime's sweeper looks for
	// jobs past their retention (RuntimeOptions.SweepPeriod), at a random
	// moment within each period, so that nodes seldom sweep at once (when
	// they do, one of their transactions retries).
	SweepPeriodDefault = time.Minute
	// sweepPage is the most jobs one sweep transaction removes.
	sweepPage = 200
)

// retention is a kind's retention by outcome (negative: forever).
type retention map[string]time.Duration

// retainKey is the index entry of a job finished with outcome at (Unix
// ms): (13, Type, Outcome, At, JobID). The sweeper walks each outcome's
// entries in time order, and removes a job only when its row still says
// the same (an entry left behind by a job added again is cleared alone).
func (k keys) retainKey(typ, outcome string, at int64, id string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyRetain, typ, outcome, at, id})
}

func (k keys) retainRange(typ, outcome string, before int64) kv.KeyRange {
	return kv.KeyRange{Begin: k.root.Pack(tuple.Tuple{keyRetain, typ, outcome}),
		End: k.root.Pack(tuple.Tuple{keyRetain, typ, outcome, before})}
}

func (k keys) retainSet(tr kv.Transaction, typ, id string, e *envelope) {
	if e.Outcome != "" && e.FinishedAt != 0 {
		tr.Set(k.retainKey(typ, e.Outcome, e.FinishedAt, id), nil)
	}
}

func (k keys) retainClear(tr kv.Transaction, typ, id string, e *envelope) {
	if e.Outcome != "" && e.FinishedAt != 0 {
		tr.Clear(k.retainKey(typ, e.Outcome, e.FinishedAt, id))
	}
}

// Sweep removes, now, the jobs of the Runtime's kinds past their retention
// (WorkerOptions.Retain…), in pages of a transaction each, and returns how
// many it removed. Each Runtime does so by itself every SweepPeriod.
func (r *Runtime) Sweep(ctx context.Context) (int, error) {
	total := 0
	for _, k := range r.kinds {
		n, err := r.sweep(ctx, k)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// sweep removes k's jobs past their retention, in pages, until none is
// left or ctx ends; it returns how many entries it cleared.
func (r *Runtime) sweep(ctx context.Context, k *kindWorker) (int, error) {
	removed := 0
	now := r.c.cfg.Clock.Now()
	for outcome, keep := range k.retain {
		if keep < 0 {
			continue
		}
		before := now.Add(-keep).UnixMilli() + 1
		for {
			n, err := kv.Transact(ctx, r.c.db, func(tr kv.Transaction) (int, error) {
				entries, err := tr.GetRange(r.c.k.retainRange(k.kind, outcome, before), kv.RangeOptions{Limit: sweepPage}).GetSliceWithError()
				if err != nil {
					return 0, err
				}
				rows := make([]kv.FutureByteSlice, len(entries))
				ids := make([]string, len(entries))
				for i, en := range entries {
					t, err := r.c.k.root.Unpack(en.Key)
					if err != nil || len(t) != 5 {
						continue
					}
					ids[i], _ = t[4].(string)
					rows[i] = tr.Get(r.c.k.dataKey(k.kind, ids[i]))
				}
				for i, en := range entries {
					tr.Clear(en.Key)
					if rows[i] == nil {
						continue
					}
					v, err := rows[i].Get()
					if err != nil {
						return 0, err
					}
					if v == nil {
						continue
					}
					row, err := decodeRow(v)
					if err != nil || row.state != Finished {
						continue
					}
					var e envelope
					if json.Unmarshal(row.data, &e) != nil || !bytes.Equal(r.c.k.retainKey(k.kind, e.Outcome, e.FinishedAt, ids[i]), en.Key) {
						continue // the job ended again since: its own entry stays
					}
					r.c.k.clearRow(tr, k.kind, ids[i], row)
				}
				return len(entries), nil
			})
			if err != nil {
				return removed, err
			}
			removed += n
			if n < sweepPage {
				break
			}
		}
	}
	return removed, nil
}

// sweeper runs k's sweeps every SweepPeriod, at a random moment of each.
func (r *Runtime) sweeper(ctx context.Context, k *kindWorker) {
	clock := r.c.cfg.Clock
	for {
		wait := time.Duration(rand.Int64N(int64(r.opts.SweepPeriod))) + r.opts.SweepPeriod/2
		select {
		case <-clock.After(wait):
		case <-ctx.Done():
			return
		}
		if _, err := r.sweep(ctx, k); err != nil && ctx.Err() == nil {
			r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: removing jobs past their retention")
		}
	}
}
