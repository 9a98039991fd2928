package fdbjobs

// A Runtime's part of fair shares by run time (FairShareRunTime): it
// charges the run time of a kind's partitioned jobs it ran, and rolls the
// kind's usage up, every RunTimeIntervalDefault.

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
// the kind's charger flushes it.
type runTimeCharges struct {
	// on is whether the kind's fair shares are by run time, as the
	// charger last read them: runners charge only then.
	on atomic.Bool
	mu sync.Mutex       // guards ms and runs
	ms map[string]int64 // per partition
	// runs are the attempts per partition (a partition's cost of a start
	// is its run time over its runs).
	runs map[string]int64
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

// take returns what accrued, and forgets it.
func (rc *runTimeCharges) take() (ms, runs map[string]int64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ms, runs = rc.ms, rc.runs
	rc.ms, rc.runs = map[string]int64{}, map[string]int64{}
	return ms, runs
}

// giveBack keeps charges a flush could not write for the next one.
func (rc *runTimeCharges) giveBack(ms, runs map[string]int64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for p, v := range ms {
		rc.ms[p] += v
	}
	for p, n := range runs {
		rc.runs[p] += n
	}
}

// charger runs k's part of fair shares by run time on the Runtime until
// ctx ends (after the Runtime's jobs did), then writes what is left:
// every RunTimeIntervalDefault it reads the kind's mode, and by run time
// charges the run time accrued and rolls the kind's usage up.
//
// Invariant: every attempt's run time that a runner added while the mode
// was by run time is charged once (the charge's token), or is still held
// for the next flush, or the flush at the end failed (logged).
func (r *Runtime) charger(ctx context.Context, k *kindWorker) {
	clock := r.c.cfg.Clock
	flush := func(ctx context.Context) error {
		ms, runs := k.runTime.take()
		if len(runs) == 0 {
			return nil
		}
		if err := r.c.ChargeRunTime(ctx, k.kind, ms, runs); err != nil {
			k.runTime.giveBack(ms, runs)
			return err
		}
		return nil
	}
	if mode, err := r.c.GetFairShareMode(ctx, nil, k.kind); err == nil {
		k.runTime.on.Store(mode == FairShareRunTime) // from the first job on
	}
	for {
		select {
		case <-clock.After(RunTimeIntervalDefault):
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chargeFlushTimeout)
			defer cancel()
			if err := flush(fctx); err != nil {
				r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: charging run time as it stops (lost)")
			}
			return
		}
		mode, err := r.c.GetFairShareMode(ctx, nil, k.kind)
		if err == nil {
			k.runTime.on.Store(mode == FairShareRunTime)
			if mode != FairShareRunTime {
				k.runTime.take() // charged while it was on: no longer of use
				continue
			}
			if err = flush(ctx); err == nil {
				err = r.c.rollUpUsage(ctx, k.kind, clock.Now(), RunTimeIntervalDefault, UsageCoeffDefault)
			}
		}
		if err != nil && ctx.Err() == nil {
			r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: charging run time for fair shares")
		}
	}
}
