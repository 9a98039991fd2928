package fdbjobs

// A Runtime's part of fair shares by run time (FairShareRunTime): it
// charges the run time of a kind's partitioned jobs it ran, and rolls the
// kind's usage up, every RuntimeOptions.ChargeInterval.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// chargeFlushTimeout bounds the last charge of a Runtime that stops.
const chargeFlushTimeout = 5 * time.Second

// runTimeCharges is a kind's run time on a Runtime not yet charged (one
// per Runtime, as slots). Runners add to it as their jobs' attempts end;
// the kind's charger writes it.
type runTimeCharges struct {
	// on is whether the kind's fair shares are by run time, as the
	// charger last read them: runners charge only then.
	on atomic.Bool
	mu sync.Mutex       // guards ms, runs and pending
	ms map[string]int64 // per partition, not yet in a page
	// runs are the attempts per partition (a partition's cost of a start
	// is its run time over its runs).
	runs map[string]int64
	// pending are pages made, not yet written: each keeps its token until
	// it is, so that a write that committed unseen is not made twice.
	pending []*chargePage
}

func newRunTimeCharges() *runTimeCharges {
	return &runTimeCharges{ms: map[string]int64{}, runs: map[string]int64{}}
}

// add charges an attempt at a job of partition part that ran for d.
func (rc *runTimeCharges) add(part string, d time.Duration) {
	if part == "" || !rc.on.Load() {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.ms[part] += max(0, d.Milliseconds())
	rc.runs[part]++
}

// drop forgets what accrued and what is pending.
func (rc *runTimeCharges) drop() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.ms, rc.runs, rc.pending = map[string]int64{}, map[string]int64{}, nil
}

// flush writes what accrued and what was pending to the store, page by
// page; a page it could not write stays pending, with its token, unless
// it is older than half chargeTokenKeep (its token may be gone: dropped,
// and said so). Runners add meanwhile.
func (r *Runtime) flushCharges(ctx context.Context, k *kindWorker) error {
	rc := k.runTime
	rc.mu.Lock()
	ms, runs := rc.ms, rc.runs
	rc.ms, rc.runs = map[string]int64{}, map[string]int64{}
	pages, err := r.c.chargePages(ms, runs)
	rc.pending = append(rc.pending, pages...)
	todo := rc.pending
	rc.pending = nil
	rc.mu.Unlock()
	if err != nil {
		return err
	}
	now := r.c.cfg.Clock.Now().UnixMilli()
	for i, pg := range todo {
		if now-pg.at > (chargeTokenKeep / 2).Milliseconds() {
			r.c.cfg.Logger.Warn().Str("kind", k.kind).Int("partitions", len(pg.runs)).
				Msg("fdbjobs: runtime: dropping run time that could not be charged for minutes")
			continue
		}
		if err := r.c.charge(ctx, k.kind, pg); err != nil {
			rc.mu.Lock()
			rc.pending = append(todo[i:], rc.pending...)
			rc.mu.Unlock()
			return err
		}
	}
	return nil
}

// charger runs k's part of fair shares by run time on the Runtime until
// ctx ends (after the Runtime's jobs did), then writes what is left
// (Stop waits for it, at most chargeFlushTimeout): it reads the kind's
// mode at once and then every RuntimeOptions.ChargeInterval, and by run time
// charges the run time accrued and rolls the kind's usage up.
//
// Invariant: every attempt's run time that a runner added while the mode
// was by run time is charged once (each page's token, kept until its
// write committed), or is still pending, or was dropped and logged (its
// page could not be written for chargeTokenKeep / 2, or at the end).
func (r *Runtime) charger(ctx context.Context, k *kindWorker) {
	clock := r.c.cfg.Clock
	if mode, err := r.c.GetFairShareMode(ctx, nil, k.kind); err == nil {
		k.runTime.on.Store(mode == FairShareRunTime) // from the first job on
	}
	for {
		select {
		case <-clock.After(r.opts.ChargeInterval):
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chargeFlushTimeout)
			defer cancel()
			if err := r.flushCharges(fctx, k); err != nil {
				r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: charging run time as it stops (lost)")
			}
			return
		}
		mode, err := r.c.GetFairShareMode(ctx, nil, k.kind)
		if err == nil {
			k.runTime.on.Store(mode == FairShareRunTime)
			if mode != FairShareRunTime {
				k.runTime.drop() // charged while it was on: no longer of use
				continue
			}
			if err = r.flushCharges(ctx, k); err == nil {
				err = r.c.rollUpUsage(ctx, k.kind, clock.Now(), r.opts.ChargeInterval, UsageCoeffDefault)
			}
		}
		if err != nil && ctx.Err() == nil {
			r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: charging run time for fair shares")
		}
	}
}
