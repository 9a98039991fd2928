package fdbjobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// A job's hold counts from before its Accept, and from the start of each
// renewal known to have committed; a renewal that failed does not move it.
func TestHoldDeadline(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.Add(b.ctx, nil, t1, j1, nil, 0))
	acceptedAt := b.clock.Now()
	job, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
	require.NoError(t, err)
	deadline, ok := job.HoldDeadline()
	require.True(t, ok)
	require.Equal(t, acceptedAt.Add(time.Second), deadline, "half of t1's 2 s timeout")

	b.clock.Advance(700 * time.Millisecond)
	done := job.Renewing()
	_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (any, error) {
		return nil, b.c.Update(b.ctx, tr, job, nil)
	})
	require.NoError(t, err)
	done(true)
	deadline, _ = job.HoldDeadline()
	require.Equal(t, acceptedAt.Add(1700*time.Millisecond), deadline)

	b.clock.Advance(700 * time.Millisecond)
	job.Renewing()(false)
	again, _ := job.HoldDeadline()
	require.Equal(t, deadline, again, "a renewal that did not commit holds nothing")

	// A job not from Accept has no hold to trust.
	_, ok = (&Job{Type: t1, ID: j1}).HoldDeadline()
	require.False(t, ok)
	(&Job{}).Renewing()(true) // and renewing it does nothing
}

// WatchHold says whether the worker still holds its job and, while it
// does, watches the job's row: the watch fires on the worker's own Update
// (WatchHold then says held again), and on a Remove, a re-enqueue or a
// Finish (WatchHold then says not held, as Update would ErrHalt).
func TestWatchHold(t *testing.T) {
	b := setup(t)
	watch := func(job *Job) (kv.FutureNil, bool) {
		t.Helper()
		type res struct {
			w    kv.FutureNil
			held bool
		}
		r, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (res, error) {
			w, held, err := b.c.WatchHold(tr, job)
			return res{w, held}, err
		})
		require.NoError(t, err)
		require.Equal(t, r.held, r.w != nil, "a watch exactly when held")
		return r.w, r.held
	}
	// The watch ends: it fires, or fails as a FoundationDB watch may
	// (under injected faults, FDBREP_KV_FAULTS); either way the worker
	// reads the row again.
	fired := func(w kv.FutureNil) {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.ctx, testutil.WaitTimeout)
		defer cancel()
		_, _ = kv.Await(ctx, w)
		require.NoError(t, ctx.Err(), "the watch ends")
	}
	for _, tc := range []struct {
		name   string
		change func(*Job) error
		held   bool
	}{
		{"own update", func(j *Job) error { return b.c.Update(b.ctx, nil, j, raw(`{"n":1}`)) }, true},
		{"removed", func(j *Job) error { return b.c.Remove(b.ctx, nil, t1, j.ID) }, false},
		{"finished", func(j *Job) error { return b.c.Finish(b.ctx, nil, j, nil) }, false},
		{"resubmitted and finished", func(j *Job) error {
			return b.c.FinishAt(b.ctx, nil, j, 0, nil)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, b.c.Add(b.ctx, nil, t1, j1, nil, 0))
			job, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
			require.NoError(t, err)
			w, held := watch(job)
			require.True(t, held)
			require.NoError(t, tc.change(job))
			fired(w)
			w, held = watch(job)
			require.Equal(t, tc.held, held)
			if held {
				w.Cancel()
				require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
			}
			if err := b.c.Remove(b.ctx, nil, t1, j1); !errors.Is(err, ErrNotFound) {
				require.NoError(t, err)
			}
		})
	}
	_, held := watch(&Job{Type: t1, ID: j1})
	require.False(t, held, "a job not from Accept is never held")
}
