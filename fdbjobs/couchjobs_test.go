package fdbjobs

// The tests of couch_jobs_tests.erl, as behaviour checks. Each test is named
// after the Erlang test it ports: TestCouchJobs_<erlang_name>.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestCouchJobs_add_remove_pending(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 0)
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, "{}", b.data(t, t1, j1))
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	_, err := b.c.JobState(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotFound)

	// In a caller's transaction, with the other ("numeric") type.
	_, err = b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		return nil, b.c.Add(b.ctx, tr, t2, j1, nil, 0)
	})
	require.NoError(t, err)
	require.Equal(t, Pending, b.state(t, t2, j1))
	// Joined to a caller's transaction, a call runs once per attempt of the
	// caller's function: one that may run again after its commit
	// (commit_unknown_result) must tolerate its own earlier success.
	_, err = b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		err := b.c.Remove(b.ctx, tr, t2, j1)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	})
	require.NoError(t, err)
	require.Zero(t, b.count(t, keyPending))
	require.Zero(t, b.count(t, keyData))
}

func TestCouchJobs_add_remove_errors(t *testing.T) {
	b := setup(t)
	require.ErrorIs(t, b.c.Remove(b.ctx, nil, t1, j1), ErrNotFound)
	require.ErrorIs(t, b.c.Add(b.ctx, nil, t1, j1, raw(`{1:2}`), 0), ErrInvalidData)
	require.ErrorIs(t, b.c.Add(b.ctx, nil, "no-timeout", j1, nil, 0), ErrNoTypeTimeout)
	require.NoError(t, b.c.Add(b.ctx, nil, t1, j1, nil, 0))
	require.NoError(t, b.c.Add(b.ctx, nil, t1, j1, nil, 0))

	for _, tc := range []struct {
		name    string
		typ, id string
		stime   int64
		data    string
		want    error
	}{
		{"empty type", "", j1, 0, "", ErrInvalidArgument},
		{"empty id", t1, "", 0, "", ErrInvalidArgument},
		{"negative stime", t1, j1, -1, "", ErrInvalidArgument},
		{"long id", t1, string(make([]byte, MaxNameSize+1)), 0, "", ErrInvalidArgument},
		{"too large", t1, j1, 0, `"` + string(make([]byte, MaxDataSize)) + `"`, ErrDataTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, b.c.Add(b.ctx, nil, tc.typ, tc.id, raw(tc.data), tc.stime), tc.want)
		})
	}
}

func TestCouchJobs_add_with_the_same_scheduled_time(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"a":1}`, 5)
	before := b.pendingCounter(t, t1)
	// Re-adding at the same time writes nothing: the caller's transaction
	// stays read-only, and the data is not replaced.
	var last kv.Transaction
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		last = tr
		return nil, b.c.Add(b.ctx, tr, t1, j1, raw(`{"a":2}`), 5)
	})
	require.NoError(t, err)
	v, err := last.GetCommittedVersion()
	require.NoError(t, err)
	require.Equal(t, int64(-1), v, "a read-only transaction has no commit version")
	require.Equal(t, before, b.pendingCounter(t, t1))
	require.Equal(t, `{"a":1}`, b.data(t, t1, j1))
	require.Equal(t, 1, b.count(t, keyPending))
}

func TestCouchJobs_get_job_data_and_state(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"x":1}`, 0)
	require.Equal(t, `{"x":1}`, b.data(t, t1, j1))
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	_, err := b.c.JobData(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = b.c.JobState(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotFound)
}

func TestCouchJobs_resubmit_as_job_creator(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 15)
	b.add(t, t1, j1, "", 16)
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, int64(16), b.stime(t, t1, j1))

	job := b.accept(t, t1)
	b.add(t, t1, j1, "", 17)
	require.Equal(t, Running, b.state(t, t1, j1))
	require.Equal(t, int64(17), b.stime(t, t1, j1))
	require.NoError(t, b.c.Update(b.ctx, nil, job, nil))
	require.True(t, job.Resubmitted)

	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, int64(17), b.stime(t, t1, j1))

	job = b.accept(t, t1)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.Equal(t, Finished, b.state(t, t1, j1))

	b.add(t, t1, j1, "", 18)
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, int64(18), b.stime(t, t1, j1))
	b.requireClean(t)
}

// TestCouchJobs_type_timeouts_and_server covers type_timeouts_and_server:
// the activity monitors follow the types, a notifier serves a type while it
// exists, and a cleared type reads as not found. (The Erlang tests
// dead_notifier_restarts_jobs_server and bad_cast/bad_call/bad_info_* check
// OTP supervision, which has no Go counterpart; see TestLifecycle*.)
func TestCouchJobs_type_timeouts_and_server(t *testing.T) {
	b := setup(t)
	synced := make(chan struct{}, 1)
	b.c.hooks.typesSynced = func() {
		select {
		case synced <- struct{}{}:
		default:
		}
	}
	d, err := b.c.TypeTimeout(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, d)
	types, err := b.c.Types(b.ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{t2, t1}, types)

	waitCounts := func(monitors, notifiers int) {
		t.Helper()
		for {
			m, n := b.c.runningCounts()
			if m == monitors && n == notifiers {
				return
			}
			select {
			case <-synced:
			case <-b.ctx.Done():
				t.Fatalf("monitors/notifiers stayed %d/%d, want %d/%d", m, n, monitors, notifiers)
			}
		}
	}
	b.start(t)
	waitCounts(2, 0)
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "t3", time.Second))
	waitCounts(3, 0)

	b.add(t, "t3", j1, "", 0)
	sub, st, _, err := b.c.Subscribe(b.ctx, nil, "t3", j1)
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	waitCounts(3, 1)

	require.NoError(t, b.c.ClearTypeTimeout(b.ctx, nil, "t3"))
	waitCounts(2, 0)
	_, err = sub.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed, "the cleared type's notifier is gone")
	_, _, _, err = b.c.Subscribe(b.ctx, nil, "t3", j1)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = b.c.TypeTimeout(b.ctx, nil, "t3")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestCouchJobs_basic_accept_and_finish(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 0)
	job := b.accept(t, t1)
	require.Equal(t, j1, job.ID)
	require.Equal(t, "{}", string(job.Data))
	require.Equal(t, Running, b.state(t, t1, j1))
	require.ErrorIs(t, b.c.Finish(b.ctx, nil, job, raw(`{1:2}`)), ErrInvalidData)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, raw(`{"x":1}`)))
	require.Equal(t, Finished, b.state(t, t1, j1))
	require.Equal(t, `{"x":1}`, b.data(t, t1, j1))
	b.requireClean(t)
}

func TestCouchJobs_accept_blocking(t *testing.T) {
	b := setup(t)
	type result struct {
		job *Job
		err error
	}
	acceptAsync := func(timeout time.Duration) chan result {
		ch := make(chan result, 1)
		go func() {
			j, err := b.c.Accept(b.ctx, t1, AcceptOptions{Timeout: timeout})
			ch <- result{j, err}
		}()
		return ch
	}

	// A blocked accept returns when a job is added.
	ch := acceptAsync(WaitForever)
	b.add(t, t1, j1, "", 0)
	r := <-ch
	require.NoError(t, r.err)
	require.Equal(t, j1, r.job.ID)

	// A second accept blocks (it waits on its timer and its watch) until
	// another job is added.
	ch = acceptAsync(time.Hour)
	require.NoError(t, b.clock.BlockUntilContext(b.ctx, 1))
	select {
	case r := <-ch:
		t.Fatalf("accept returned %v, %v with nothing pending", r.job, r.err)
	default:
	}
	b.add(t, t1, j2, "", 0)
	r = <-ch
	require.NoError(t, r.err)
	require.Equal(t, j2, r.job.ID)

	// With nothing added, it gives up at its timeout.
	ch = acceptAsync(time.Hour)
	require.NoError(t, b.clock.BlockUntilContext(b.ctx, 1))
	b.clock.Advance(time.Hour)
	require.ErrorIs(t, (<-ch).err, ErrNotFound)

	// Timeout 0 does not wait.
	_, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
	require.ErrorIs(t, err, ErrNotFound)
}

func TestCouchJobs_job_processor_update(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Update(b.ctx, nil, job, raw(`{"d":1}`)))
	require.Equal(t, `{"d":1}`, b.data(t, t1, j1))
	require.Equal(t, `{"d":1}`, string(job.Data))
	require.NoError(t, b.c.Update(b.ctx, nil, job, nil))
	require.Equal(t, `{"d":1}`, b.data(t, t1, j1))
	require.ErrorIs(t, b.c.Update(b.ctx, nil, job, raw(`{1:2}`)), ErrInvalidData)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, raw(`{"d":2}`)))
	require.Equal(t, `{"d":2}`, b.data(t, t1, j1))
	require.Equal(t, 0, b.count(t, keyLeases), "updates and the finish leave no lease")
}

func TestCouchJobs_resubmit_enqueues_job(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 6, nil))
	require.True(t, job.Resubmitted)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, int64(6), b.stime(t, t1, j1))
	job = b.accept(t, t1)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.Equal(t, Finished, b.state(t, t1, j1))
}

func TestCouchJobs_resubmit_finished_updates_job_data(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 6, raw(`{"v":2}`)))
	job = b.accept(t, t1)
	require.Equal(t, `{"v":2}`, string(job.Data))
}

func TestCouchJobs_resubmit_running_does_not_update_job_data(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 6, raw(`{"v":2}`)))
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	job = b.accept(t, t1)
	require.Equal(t, `{"v":1}`, string(job.Data))
}

func TestCouchJobs_resubmit_custom_schedtime(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 7)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 9, nil))
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, int64(9), b.stime(t, t1, j1))
}

// FinishAt is the holder's own resubmit: pending at its time with its
// data, whatever time another client flagged while it ran; fenced by the
// lock, so a worker that lost the job writes nothing.
func TestFinishAt(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 7)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 3, nil)) // flagged at 3 while running
	require.ErrorIs(t, b.c.FinishAt(b.ctx, nil, job, -1, nil), ErrInvalidArgument)
	require.NoError(t, b.c.FinishAt(b.ctx, nil, job, 9, raw(`{"v":2}`)))
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, int64(9), b.stime(t, t1, j1))
	require.Equal(t, `{"v":2}`, b.data(t, t1, j1))
	require.Equal(t, 1, b.count(t, keyPending))

	job2 := b.accept(t, t1)
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	require.ErrorIs(t, b.c.FinishAt(b.ctx, nil, job2, 9, nil), ErrHalt, "removed")
	b.add(t, t1, j1, `{"v":3}`, 0)
	require.ErrorIs(t, b.c.FinishAt(b.ctx, nil, job2, 9, nil), ErrHalt, "added again: another job")
	require.Equal(t, int64(0), b.stime(t, t1, j1))
	require.Equal(t, `{"v":3}`, b.data(t, t1, j1))
	b.requireClean(t)
}

// Resubmit with nil data keeps the data (couch_jobs crashed on it, §1.9).
func TestResubmitNilDataKeepsData(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 3, nil))
	require.Equal(t, `{"v":1}`, b.data(t, t1, j1))
	require.NoError(t, b.c.Resubmit(b.ctx, nil, job, 4, nil))
	require.Equal(t, `{"v":1}`, b.data(t, t1, j1))
	require.Equal(t, int64(4), b.stime(t, t1, j1))
	require.Equal(t, 1, b.count(t, keyPending))
}

func TestCouchJobs_add_pending_updates_job_data(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	b.add(t, t1, j1, `{"v":2}`, 6)
	require.Equal(t, `{"v":2}`, b.data(t, t1, j1))
	require.Equal(t, int64(6), b.stime(t, t1, j1))
	require.Equal(t, 1, b.count(t, keyPending))
}

func TestCouchJobs_add_finished_updates_job_data(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	b.add(t, t1, j1, `{"v":2}`, 0)
	require.Equal(t, Pending, b.state(t, t1, j1))
	job = b.accept(t, t1)
	require.Equal(t, `{"v":2}`, string(job.Data))
}

func TestCouchJobs_add_running_does_not_update_job_data(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	job := b.accept(t, t1)
	b.add(t, t1, j1, `{"v":2}`, 0)
	require.Equal(t, `{"v":1}`, b.data(t, t1, j1))
	require.NoError(t, b.c.Update(b.ctx, nil, job, nil))
	require.True(t, job.Resubmitted)
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	job = b.accept(t, t1)
	require.Equal(t, `{"v":1}`, string(job.Data))
}

func TestCouchJobs_accept_max_schedtime(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 5000)
	b.add(t, t1, j2, "", 3000)
	_, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 1000})
	require.ErrorIs(t, err, ErrNotFound)
	job, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 3000})
	require.NoError(t, err)
	require.Equal(t, j2, job.ID, "the bound is inclusive")
	job, err = b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 9000})
	require.NoError(t, err)
	require.Equal(t, j1, job.ID)
}

func TestCouchJobs_accept_no_schedule(t *testing.T) {
	b := setup(t)
	_, err := b.c.Accept(b.ctx, t1, AcceptOptions{NoSchedule: true, MaxScheduledTime: 1})
	require.ErrorIs(t, err, ErrNoScheduleMaxTime)

	const n = 25
	want := map[string]bool{}
	for range n {
		id := uuid.NewString()
		want[id] = true
		b.add(t, t1, id, "", 0)
	}
	got := map[string]bool{}
	for range n {
		job, err := b.c.Accept(b.ctx, t1, AcceptOptions{NoSchedule: true})
		require.NoError(t, err)
		require.False(t, got[job.ID], "job %s accepted twice", job.ID)
		got[job.ID] = true
	}
	require.Equal(t, want, got)
	_, err = b.c.Accept(b.ctx, t1, AcceptOptions{NoSchedule: true})
	require.ErrorIs(t, err, ErrNotFound)
}

func TestCouchJobs_subscribe(t *testing.T) { testCouchJobs_subscribe(t, plain) }

func testCouchJobs_subscribe(t *testing.T, v variant) {
	b := v.started(t)
	_, _, _, err := b.c.Subscribe(b.ctx, nil, "unknown-type", j1)
	require.ErrorIs(t, err, ErrNotFound)
	_, _, _, err = b.c.Subscribe(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotFound)

	b.add(t, t1, j1, `{"v":1}`, 0)
	sub, st, data, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	require.Equal(t, `{"v":1}`, string(data))
	// A repeated subscribe gives a subscription of its own; after
	// unsubscribing, subscribing again works.
	sub2, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.NotSame(t, sub, sub2)
	sub2.Unsubscribe()
	sub2.Unsubscribe()
	_, err = sub2.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed)
	sub.Unsubscribe()
	sub, _, _, err = b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	defer sub.Unsubscribe()

	job := b.accept(t, t1)
	require.Equal(t, Event{Type: t1, ID: j1, State: Running, Data: raw(`{"v":1}`)}, next(t, b.ctx, sub))
	require.NoError(t, b.c.Update(b.ctx, nil, job, raw(`{"v":2}`)))
	require.Equal(t, Event{Type: t1, ID: j1, State: Running, Data: raw(`{"v":2}`)}, next(t, b.ctx, sub))
	require.NoError(t, b.c.Finish(b.ctx, nil, job, raw(`{"v":3}`)))
	e, err := sub.WaitState(b.ctx, Finished)
	require.NoError(t, err)
	require.Equal(t, Event{Type: t1, ID: j1, State: Finished, Data: raw(`{"v":3}`)}, e)
	// No further events: the finished event was the last.
	_, err = sub.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed)

	none, st, data, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.Nil(t, none)
	require.Equal(t, Finished, st)
	require.Equal(t, `{"v":3}`, string(data))

	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	_, _, _, err = b.c.Subscribe(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotFound)
}

func TestCouchJobs_remove_when_subscribed_and_pending(t *testing.T) {
	testCouchJobs_remove_when_subscribed_and_pending(t, plain)
}

func testCouchJobs_remove_when_subscribed_and_pending(t *testing.T, v variant) {
	b := v.started(t)
	b.add(t, t1, j1, "", 0)
	sub, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	require.Equal(t, Event{Type: t1, ID: j1, State: NotFound}, next(t, b.ctx, sub))
	_, err = sub.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed)
}

func TestCouchJobs_remove_when_subscribed_and_running(t *testing.T) {
	testCouchJobs_remove_when_subscribed_and_running(t, plain)
}

func testCouchJobs_remove_when_subscribed_and_running(t *testing.T, v variant) {
	b := v.started(t)
	b.add(t, t1, j1, "", 0)
	sub, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	b.accept(t, t1)
	require.Equal(t, Running, next(t, b.ctx, sub).State)
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	require.Equal(t, Event{Type: t1, ID: j1, State: NotFound}, next(t, b.ctx, sub))
	_, err = sub.Wait(b.ctx)
	require.ErrorIs(t, err, ErrSubscriptionClosed)
	b.requireClean(t)
}

func TestCouchJobs_subscribe_wait_multiple(t *testing.T) {
	testCouchJobs_subscribe_wait_multiple(t, plain)
}

func testCouchJobs_subscribe_wait_multiple(t *testing.T, v variant) {
	b := v.started(t)
	b.add(t, t1, j1, "", 0)
	b.add(t, t1, j2, "", 0)
	s1, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	s2, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j2)
	require.NoError(t, err)

	// Each accept gives exactly one running event.
	jobs := map[string]*Job{}
	for range 2 {
		job := b.accept(t, t1)
		jobs[job.ID] = job
		e, _, err := WaitAny(b.ctx, s1, s2)
		require.NoError(t, err)
		require.Equal(t, Running, e.State)
		require.Equal(t, job.ID, e.ID)
	}
	// Each update gives one event.
	for _, id := range []string{j1, j2} {
		require.NoError(t, b.c.Update(b.ctx, nil, jobs[id], raw(fmt.Sprintf(`{"id":%q}`, id))))
		e, _, err := WaitAny(b.ctx, s1, s2)
		require.NoError(t, err)
		require.Equal(t, Event{Type: t1, ID: id, State: Running, Data: raw(fmt.Sprintf(`{"id":%q}`, id))}, e)
	}
	// Finish both in one transaction: both finished events come in the same
	// notifier round. Take s1's, then unsubscribe s2: its queued event is
	// dropped.
	errs, err := b.c.FinishBatch(b.ctx, nil, []Completion{{Job: jobs[j1]}, {Job: jobs[j2]}})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, errs)
	e, err := s1.WaitState(b.ctx, Finished)
	require.NoError(t, err)
	require.Equal(t, j1, e.ID)
	s2.Unsubscribe()
	_, _, err = WaitAny(b.ctx, s1, s2)
	require.ErrorIs(t, err, ErrSubscriptionClosed)
}

// monitorEvents returns a channel of (type, re-enqueued) per activity
// monitor cycle, sent once the cycle's next timer is set.
func monitorEvents(b *bundle) chan [2]any {
	ch := make(chan [2]any, 1000)
	b.c.hooks.monitorChecked = func(typ string, n int) {
		select {
		case ch <- [2]any{typ, n}:
		default:
		}
	}
	return ch
}

// waitCycle waits for a monitor cycle of typ and returns its count.
func waitCycle(t *testing.T, b *bundle, ch chan [2]any, typ string) int {
	t.Helper()
	for {
		select {
		case e := <-ch:
			if e[0] == typ {
				return e[1].(int)
			}
		case <-b.ctx.Done():
			t.Fatal("no activity monitor cycle")
		}
	}
}

func TestCouchJobs_enqueue_inactive(t *testing.T) {
	testEnqueueInactive(t, plain)
}

func testEnqueueInactive(t *testing.T, v variant) {
	b := v.setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	job := b.accept(t, t1)
	cycles := monitorEvents(b)
	var logs testutil.Logs
	b.c.cfg.Logger = logs.Logger()
	b.start(t)
	sub, _, _, err := b.c.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	defer sub.Unsubscribe()

	require.Equal(t, 0, waitCycle(t, b, cycles, t1), "the first cycle only reads the activity clock")
	// One timeout plus the largest jitter later, the job has been inactive
	// for a whole period.
	// (Under storage faults a batch that committed may report
	// commit_unknown_result and go uncounted, hence LessOrEqual.)
	b.clock.Advance(3 * time.Second)
	if n := waitCycle(t, b, cycles, t1); n == 1 {
		require.Contains(t, logs.String(), `"type":"`+t1+`","jobs":1,"timeout":2000`, "the operator sees the re-enqueue")
	} else {
		require.Zero(t, n)
	}
	e, err := sub.WaitState(b.ctx, Pending)
	require.NoError(t, err)
	require.Equal(t, Event{Type: t1, ID: j1, State: Pending, Data: raw(`{"v":1}`)}, e)
	require.Equal(t, `{"v":1}`, b.data(t, t1, j1), "the data is kept")

	// The old worker's late writes are fenced off and change nothing.
	require.ErrorIs(t, b.c.Update(b.ctx, nil, job, raw(`{"late":1}`)), ErrHalt)
	require.ErrorIs(t, b.c.Finish(b.ctx, nil, job, raw(`{"late":2}`)), ErrHalt)
	require.Equal(t, Pending, b.state(t, t1, j1))
	require.Equal(t, `{"v":1}`, b.data(t, t1, j1))
	b.requireClean(t)

	// A new worker gets it.
	job2 := b.accept(t, t1)
	require.Equal(t, j1, job2.ID)
	require.NoError(t, b.c.Finish(b.ctx, nil, job2, nil))
}

// A job that keeps heartbeating is never re-enqueued.
func TestActivityMonitorSparesActiveJobs(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 0)
	job := b.accept(t, t1)
	cycles := monitorEvents(b)
	b.start(t)
	require.Equal(t, 0, waitCycle(t, b, cycles, t1))
	for range 3 {
		require.NoError(t, b.c.Update(b.ctx, nil, job, nil))
		b.clock.Advance(3 * time.Second)
		require.Equal(t, 0, waitCycle(t, b, cycles, t1))
	}
	require.Equal(t, Running, b.state(t, t1, j1))
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
}

func TestCouchJobs_remove_running_job(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, "", 0)
	job := b.accept(t, t1)
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	require.ErrorIs(t, b.c.Remove(b.ctx, nil, t1, j1), ErrNotFound)
	require.ErrorIs(t, b.c.Update(b.ctx, nil, job, nil), ErrHalt)
	require.ErrorIs(t, b.c.Finish(b.ctx, nil, job, nil), ErrHalt)
	b.requireClean(t)
}

// check_get_jobs: FoldJobs lists the jobs with their state.
func TestCouchJobs_check_get_jobs(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	b.add(t, t1, j2, "", 3)
	list := func() []JobInfo {
		var out []JobInfo
		require.NoError(t, b.c.FoldJobs(b.ctx, t1, func(j JobInfo) error {
			out = append(out, j)
			return nil
		}))
		return out
	}
	require.Equal(t, []JobInfo{
		{Type: t1, ID: j1, State: Pending, ScheduledTime: 0, Priority: 1, Data: raw(`{"v":1}`)},
		{Type: t1, ID: j2, State: Pending, ScheduledTime: 3, Priority: 1, Data: raw(`{}`)},
	}, list())
	_, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 1})
	require.NoError(t, err)
	require.Equal(t, Running, list()[0].State)
	require.Equal(t, Pending, list()[1].State)
	ids, err := b.c.ActiveJobIDs(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, []string{j1}, ids)
}

// use_fabric_transaction_object: job calls join a caller's transaction, so
// a document write and a job change commit together or not at all.
func TestCouchJobs_use_fabric_transaction_object(t *testing.T) {
	b := setup(t)
	docKey := kv.Key("doc/1")
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(docKey, []byte("rev-1"))
		return nil, b.c.Add(b.ctx, tr, t1, j1, raw(`{"doc":"1"}`), 0)
	})
	require.NoError(t, err)
	job := b.accept(t, t1)

	_, err = b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		// (Under storage faults this function may run again after its
		// commit: it then reads the finished job's data, and Finish
		// recognises its own earlier commit.)
		d, err := b.c.JobData(b.ctx, tr, t1, j1)
		if err != nil {
			return nil, err
		}
		tr.Set(docKey, append([]byte("rev-2:"), d[:1]...))
		return nil, b.c.Finish(b.ctx, tr, job, raw(`{"done":true}`))
	})
	require.NoError(t, err)
	require.Equal(t, Finished, b.state(t, t1, j1))

	// A failing caller transaction takes the job change with it.
	boom := errors.New("boom")
	_, err = b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		if err := b.c.Add(b.ctx, tr, t1, j2, nil, 0); err != nil {
			return nil, err
		}
		return nil, boom
	})
	require.ErrorIs(t, err, boom)
	_, err = b.c.JobState(b.ctx, nil, t1, j2)
	require.ErrorIs(t, err, ErrNotFound)

	require.Equal(t, `{"done":true}`, b.data(t, t1, j1))
	require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
	v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(docKey).Get() })
	require.NoError(t, err)
	require.Equal(t, `rev-2:{`, string(v))
}

// couch_jobs_batching_test_: the background services under injected batch
// failures, with batches shrinking to one job.
func TestCouchJobs_batching(t *testing.T) {
	small := func(c *Config) { c.BatchIncrement = 1; c.BatchFactor = 0.0001 }
	alternate := func(codes ...int) func(int) error {
		var n int
		return func(int) error {
			n++
			if n%2 == 1 {
				return kv.Error{Code: codes[(n/2)%len(codes)]}
			}
			return nil
		}
	}
	t.Run("enqueue_inactive", func(t *testing.T) {
		testEnqueueInactive(t, variant{func(b *bundle) {
			b.c.hooks.monitorBatch = alternate(kv.CodeTransactionTooLarge, kv.CodeTransactionTooOld)
			b.c.hooks.notifierBatch = alternate(kv.CodeTransactionTimedOut)
		}, []bundleOpt{small}})
	})
	t.Run("enqueue_inactive_many", func(t *testing.T) {
		b := setup(t, small)
		b.c.hooks.monitorBatch = alternate(kv.CodeTransactionTooLarge, kv.CodeTransactionTooOld)
		const n = 20
		for i := range n {
			b.add(t, t1, fmt.Sprintf("j%02d", i), "", 0)
		}
		jobs, err := b.c.AcceptBatch(b.ctx, t1, n, AcceptOptions{})
		require.NoError(t, err)
		require.Len(t, jobs, n)
		m := b.c.NewActivityMonitor(t1)
		got, _, err := m.Check(b.ctx)
		require.NoError(t, err)
		require.Zero(t, got)
		// Under storage faults a batch that committed may report
		// commit_unknown_result and go uncounted: check the outcome.
		got, _, err = m.Check(b.ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, got, n)
		require.Equal(t, 1, m.batch.Size(), "the batch shrank to one job")
		cnt, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
		require.NoError(t, err)
		require.Equal(t, n, cnt)
		b.requireClean(t)
	})
	notifierFaults := func(b *bundle) { b.c.hooks.notifierBatch = alternate(kv.CodeTransactionTimedOut) }
	t.Run("subscribe", func(t *testing.T) { testCouchJobs_subscribe(t, variant{notifierFaults, []bundleOpt{small}}) })
	t.Run("remove_when_subscribed_and_pending", func(t *testing.T) {
		testCouchJobs_remove_when_subscribed_and_pending(t, variant{notifierFaults, []bundleOpt{small}})
	})
	t.Run("remove_when_subscribed_and_running", func(t *testing.T) {
		testCouchJobs_remove_when_subscribed_and_running(t, variant{notifierFaults, []bundleOpt{small}})
	})
	t.Run("subscribe_wait_multiple", func(t *testing.T) {
		testCouchJobs_subscribe_wait_multiple(t, variant{notifierFaults, []bundleOpt{small}})
	})
	t.Run("subscribe_many", func(t *testing.T) {
		b := setup(t, small)
		b.c.hooks.notifierBatch = alternate(kv.CodeTransactionTimedOut)
		b.start(t)
		var subs []*Subscription
		for i := range 5 {
			id := fmt.Sprintf("j%d", i)
			b.add(t, t1, id, "", 0)
			s, _, _, err := b.c.Subscribe(b.ctx, nil, t1, id)
			require.NoError(t, err)
			subs = append(subs, s)
		}
		jobs, err := b.c.AcceptBatch(b.ctx, t1, 5, AcceptOptions{})
		require.NoError(t, err)
		items := make([]Completion, len(jobs))
		for i, j := range jobs {
			items[i] = Completion{Job: j}
		}
		_, err = b.c.FinishBatch(b.ctx, nil, items)
		require.NoError(t, err)
		var finished []string
		for _, s := range subs {
			e, err := s.WaitState(b.ctx, Finished)
			require.NoError(t, err)
			finished = append(finished, e.ID)
		}
		sort.Strings(finished)
		require.Equal(t, []string{"j0", "j1", "j2", "j3", "j4"}, finished)
	})
}

// A job added with an earlier scheduled time than those pending is found,
// and a bound below the pending ones still takes it.
func TestAcceptEarlierJob(t *testing.T) {
	b := setup(t)
	for i := range 3 {
		b.add(t, t1, fmt.Sprintf("m%d", i), "", 10)
	}
	b.accept(t, t1)
	b.add(t, t1, "a-low", "", 0)
	b.add(t, t1, "z-low", "", 5)
	job, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 5})
	require.NoError(t, err, "a bound below the jobs pending before")
	require.Contains(t, []string{"a-low", "z-low"}, job.ID)
	got := map[string]bool{job.ID: true}
	for range 3 {
		j := b.accept(t, t1)
		got[j.ID] = true
	}
	require.Len(t, got, 4)
	_, err = b.c.Accept(b.ctx, t1, AcceptOptions{})
	require.ErrorIs(t, err, ErrNotFound)
}

// Acceptors of one node skip the shards the others are claiming from; one
// that finds nothing else waits for a peer to finish instead of reporting
// nothing pending, or waiting on the pending watch.
func TestAcceptSkipsLocalClaims(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, 1))
	b.add(t, t1, j1, "", 0)
	b.add(t, t1, j2, "", 0)
	// Pretend a peer is claiming from the only shard.
	require.True(t, b.c.claiming.take(t1, 0))
	type result struct {
		job *Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		j, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
		done <- result{j, err}
	}()
	// The peer gives the shard up (its transaction failed): the acceptor
	// takes the first job of the shard.
	b.c.claiming.release(t1, 0)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, j1, r.job.ID)
	require.Equal(t, j2, b.accept(t, t1).ID)
}

// An accept whose caller's ctx ends while its claim commits (a Runtime
// stopping) returns the jobs it claimed, or claims none: a job is never
// left running without a holder until the activity monitor hands it
// back.
func TestAcceptCancelledLosesNoJob(t *testing.T) {
	b := setup(t)
	for i := range 300 {
		id := fmt.Sprintf("j%d", i)
		b.add(t, t1, id, `{}`, 0)
		ctx, cancel := context.WithCancel(b.ctx)
		// Cancelled at once, or after a moment: sometimes before the
		// claim, sometimes while it commits.
		go func() {
			for range i % 50 {
				runtime.Gosched()
			}
			cancel()
		}()
		jobs, err := b.c.AcceptBatch(ctx, t1, 1, AcceptOptions{MaxScheduledTime: 1})
		cancel()
		switch st := b.state(t, t1, id); {
		case len(jobs) == 1:
			require.Equal(t, Running, st)
			require.NoError(t, b.c.Finish(b.ctx, nil, jobs[0], nil))
		case st == Running:
			t.Fatalf("job %s running, yet the accept returned %v", id, err)
		default:
			require.Equal(t, Pending, st)
			require.NoError(t, b.c.Remove(b.ctx, nil, t1, id))
		}
	}
}
