package fdbjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// attempt is one attempt at a job on this Runtime, as its Work's Update
// and CompleteTx reach it.
type attempt struct {
	r   *Runtime
	job *Job
	// write, a lock held while its one slot is full, orders the keeper's
	// heartbeats and Work.Update: one Update of the job at a time (each
	// recognises its own earlier commit by the job's seq, which a
	// concurrent one would move too). It guards e's Args, which Update
	// replaces. A channel, not a mutex: the keeper waits for it or for
	// the job's end, whichever comes first, and a wait on it is one that
	// testing/synctest's clock can pass (a goroutine blocked on a mutex
	// held across a store's retry backoff would stop the model tests'
	// clock for good).
	write chan struct{}
	e     *envelope
	// completed is set when CompleteTx finished the job in the worker's
	// transaction.
	completed atomic.Bool
	// manual is set for a job of a Manual kind: the Runtime writes
	// nothing of it.
	manual bool
}

// errManual is Work.Update's and Work.CompleteTx's error in a Manual
// kind's attempt.
var errManual = fmt.Errorf("%w: a Manual kind's worker writes its job with the Client", ErrInvalidArgument)

// update is Work.Update: it stores the envelope with args, under the job's
// lock, and keeps them for the attempt's end.
func (a *attempt) update(ctx context.Context, args json.RawMessage) error {
	if a.manual {
		return fmt.Errorf("Work.Update: %w", errManual)
	}
	select {
	case a.write <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-a.write }()
	next := *a.e
	next.Args = args
	data, err := next.encode()
	if err != nil {
		return fmt.Errorf("%w: Work.Update: %v", ErrInvalidArgument, err)
	}
	hctx, done := a.job.HoldContext(ctx)
	defer done()
	renewed := a.job.Renewing()
	err = a.r.c.Update(hctx, nil, a.job, data)
	renewed(err == nil)
	if err != nil {
		return err
	}
	a.e.Args = args
	return nil
}

// completeTx is Work.CompleteTx: the attempt's end, completed, in tr.
func (a *attempt) completeTx(ctx context.Context, tr kv.Transaction) error {
	if a.manual {
		return fmt.Errorf("Work.CompleteTx: %w", errManual)
	}
	a.write <- struct{}{}
	e := *a.e
	<-a.write
	e.Attempt++
	e.Outcome, e.FinishedAt = OutcomeCompleted, a.r.c.cfg.Clock.Now().UnixMilli()
	data, err := e.encode()
	if err != nil {
		return err
	}
	errs, err := a.r.c.endBatchIn(ctx, tr, []*ending{{job: a.job, data: data, stime: -1, e: &e}})
	if err == nil {
		err = errs[0]
	}
	if err == nil {
		a.completed.Store(true)
	}
	return err
}

// keep renews job's hold until held closes, and cancels ctx when the job
// is no longer this node's (ErrHalt) or its hold lapsed (ErrHoldLapsed).
// It starts when the job has run for started (keepAfter): its timers
// count from the job's accept.
func (r *Runtime) keep(ctx context.Context, cancel context.CancelCauseFunc, held <-chan struct{}, k *kindWorker, job *Job, started time.Duration, write chan struct{}) {
	clock := r.c.cfg.Clock
	period := k.opts.Timeout / HeartbeatFraction
	beat := clock.NewTimer(period - started)
	defer beat.Stop()
	watchAfter := clock.NewTimer(r.opts.WatchHoldAfter - started)
	defer watchAfter.Stop()
	var watch kv.FutureNil
	var watchDone <-chan struct{}
	defer func() {
		if watch != nil {
			watch.Cancel()
		}
	}()
	setWatch := func() bool {
		if watch != nil {
			watch.Cancel()
			watch, watchDone = nil, nil
		}
		hctx, done := job.HoldContext(ctx)
		defer done()
		var ok, cancelled bool
		_, err := kv.Transact(hctx, r.c.db, func(tr kv.Transaction) (struct{}, error) {
			w, h, err := r.c.WatchHold(tr, job)
			watch, ok, cancelled = w, h, false
			if err == nil && !h {
				row, e, rerr := r.c.readEnvelope(tr, job.Type, job.ID)
				cancelled = rerr == nil && row.state == Finished && e.Outcome == OutcomeCancelled
			}
			return struct{}{}, err
		})
		if err != nil {
			watch = nil
			return true // the next heartbeat or watch says
		}
		if !ok {
			cause := ErrHalt
			if cancelled {
				cause = ErrCancelled
			}
			cancel(cause)
			return false
		}
		watchDone = watch.Done()
		return true
	}
	for {
		deadline, _ := job.HoldDeadline()
		lapse := clock.NewTimer(max(0, deadline.Sub(clock.Now())))
		select {
		case <-held:
			lapse.Stop()
			return
		case <-ctx.Done():
			lapse.Stop()
			return
		case <-lapse.Chan():
			cancel(ErrHoldLapsed)
			return
		case <-watchAfter.Chan():
			if !setWatch() {
				lapse.Stop()
				return
			}
		case <-watchDone:
			if !setWatch() {
				lapse.Stop()
				return
			}
		case <-beat.Chan():
			// The lock (a Work.Update, which renews the hold too, may
			// hold it), unless the job ends first.
			select {
			case write <- struct{}{}:
			case <-held:
				lapse.Stop()
				return
			case <-ctx.Done():
				lapse.Stop()
				return
			}
			renewed := job.Renewing()
			hctx, done := job.HoldContext(ctx)
			err := r.c.Update(hctx, nil, job, nil)
			done()
			renewed(err == nil)
			<-write
			if errors.Is(err, ErrHalt) {
				lapse.Stop()
				cancel(ErrHalt)
				return
			}
			beat.Reset(period)
		}
		lapse.Stop()
	}
}
