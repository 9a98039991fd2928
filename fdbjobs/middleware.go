package fdbjobs

// Middleware around a Runtime's work, and hooks in Insert's transactions.

import (
	"context"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// WorkMiddleware wraps each attempt of a Runtime's jobs (River's
// WorkerMiddleware): it gets the job, as List shows it, and next, which
// runs the rest of the chain and then the Worker; it returns the attempt's
// error (nil completes the job; it may return another error than next's,
// Permanent or Snooze among them, or not call next at all). The ctx it
// passes to next is the Work's. It runs on the job's goroutine, and a
// panic in it is the attempt's error, as one in Work is. Middleware are
// given in RuntimeOptions.Middleware (every kind's, outermost) and
// WorkerOptions.Middleware (the kind's, inside them), each list outermost
// first.
type WorkMiddleware func(ctx context.Context, job *JobRow, next func(ctx context.Context) error) error

// InsertHook runs inside every transaction in which Insert or InsertMany
// adds jobs (one per page of InsertMany; not for a unique insert that
// found a duplicate), after the jobs were written, with them as List shows
// them, so that whatever it writes in tr commits with the jobs or not at
// all, and an error it returns rejects them: the transaction fails with
// it (the pages before it have committed). It follows the kv rules: no
// I/O, small, and a function of what it reads, because the transaction
// may run again, also after commit_unknown_result. It must not change the
// jobs. Add and AddBatch, the lower-level API, do not run it.
type InsertHook func(ctx context.Context, tr kv.Transaction, jobs []JobRow) error

// AddInsertHook adds h to the hooks that this Client's Insert and
// InsertMany run, after those added before.
func (c *Client) AddInsertHook(h InsertHook) {
	if h == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertHooks = append(c.insertHooks, h)
}

// insertHook is the page hook that runs the insert hooks of jobs of kind
// (nil when there are none).
func (c *Client) insertHook(ctx context.Context, kind string) pageHook {
	c.mu.Lock()
	hooks := c.insertHooks
	c.mu.Unlock()
	if len(hooks) == 0 {
		return nil
	}
	return func(tr kv.Transaction, jobs []NewJob) error {
		rows := make([]JobRow, len(jobs))
		now := c.cfg.now()
		for i, j := range jobs {
			e, err := decodeEnvelope(j.Data)
			if err != nil {
				return err // Insert wrote it: not reached
			}
			rows[i] = c.jobRow(kind, j.ID, &row{state: Pending, stime: j.ScheduledTime, data: j.Data}, e, now)
		}
		for _, h := range hooks {
			if err := h(ctx, tr, rows); err != nil {
				return fmt.Errorf("fdbjobs: insert hook: %w", err)
			}
		}
		return nil
	}
}

// chain wraps work, an attempt at job, in the Runtime's middleware and
// then k's, outermost first.
func (r *Runtime) chain(k *kindWorker, job *Job, e *envelope, work func(context.Context) error) func(context.Context) error {
	mws := append(append([]WorkMiddleware(nil), r.opts.Middleware...), k.opts.Middleware...)
	if len(mws) == 0 {
		return work
	}
	row := r.c.jobRow(k.kind, job.ID, &row{state: Running, stime: job.ScheduledTime, data: job.Data}, e, 0)
	next := work
	for i := len(mws) - 1; i >= 0; i-- {
		mw, inner := mws[i], next
		next = func(ctx context.Context) error { return mw(ctx, &row, inner) }
	}
	return next
}

func isNilMiddleware(m WorkMiddleware) bool { return m == nil }
