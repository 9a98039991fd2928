package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

func newWebhookStore(t *testing.T) (*Store, kv.Database) {
	t.Helper()
	db := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	_, err = s.Setup(context.Background(), time.Hour, 0)
	require.NoError(t, err)
	return s, db
}

// drain delivers d's queued changes as a worker does, oldest first, and
// returns their states.
func drain(t *testing.T, w *Webhooks, d WebhookDelivery) []string {
	t.Helper()
	ctx := context.Background()
	var states []string
	for {
		_, _, c, err := w.Next(ctx, d)
		require.NoError(t, err)
		if c == nil {
			return states
		}
		var b webhookBody
		require.NoError(t, json.Unmarshal(c.Body, &b))
		states = append(states, b.State)
		_, _, _, err = w.Ack(ctx, d, c, true)
		require.NoError(t, err)
	}
}

// putHook stores h.
func putHook(t *testing.T, s *Store, h *Webhook) {
	t.Helper()
	_, err := kv.Transact(context.Background(), s, func(tr kv.Transaction) (struct{}, error) {
		_, _, err := s.Webhooks().Put(context.Background(), tr, h)
		return struct{}{}, err
	})
	require.NoError(t, err)
}

// queueChange queues a change of job as the index does, in a transaction
// of its own, once: a retry after a commit that did commit (under
// injected faults) finds its mark, as the index finds the state written.
func queueChange(t *testing.T, s *Store, job, owner, state string) {
	t.Helper()
	mark := subspace.Sub("test-change-marks").Pack(tuple.Tuple{changeMarks.Add(1)})
	_, err := kv.Transact(context.Background(), s, func(tr kv.Transaction) (struct{}, error) {
		if v, err := tr.Get(mark).Get(); err != nil || v != nil {
			return struct{}{}, err
		}
		tr.Set(mark, []byte{1})
		return struct{}{}, s.webhooks.enqueue(tr, []hookChange{{jobID: job, c: StateChange{Owner: owner, State: state}}})
	})
	require.NoError(t, err)
}

var changeMarks atomic.Int64

// A webhook's changes queue in commit order, the ones it does not want
// are left out, and the queue keeps the newest WebhookQueueMax.
func TestWebhookQueue(t *testing.T) {
	ctx := context.Background()
	s, _ := newWebhookStore(t)
	w := s.Webhooks()
	putHook(t, s, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/", Events: []string{StateRunning, StateCompleted}})
	d := WebhookDelivery{Owner: "u", Hook: "h", JobID: "j"}
	queueChange(t, s, "j", "v", StateRunning) // another owner's
	queueChange(t, s, "j", "u", StatePending) // not wanted
	_, _, c, err := w.Next(ctx, d)
	require.NoError(t, err)
	require.Nil(t, c, "nothing queued")
	st, _, err := s.jobs.Job(ctx, nil, WebhookType, deliveryID("u", "h", "j"))
	require.ErrorIs(t, err, fdbjobs.ErrNotFound, "no delivery job: %v", st)

	for i := range WebhookQueueMax + 5 {
		state := StateRunning
		if i%2 == 1 {
			state = StateCompleted
		}
		queueChange(t, s, "j", "u", state)
	}
	st, _, err = s.jobs.Job(ctx, nil, WebhookType, deliveryID("u", "h", "j"))
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Pending, st, "one delivery job, pending")
	ds, err := w.Deliveries(ctx, "u", "h", 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, WebhookQueueMax, ds[0].Queued)
	require.EqualValues(t, 5, ds[0].Dropped, "the oldest dropped, counted")
	states := drain(t, w, d)
	require.Len(t, states, WebhookQueueMax, "the newest kept")
	for i, st := range states {
		want := StateRunning
		if (i+5)%2 == 1 {
			want = StateCompleted
		}
		require.Equal(t, want, st, "change %d in commit order", i)
	}
}

// Two changes of one job in one transaction are both queued, in order.
func TestWebhookTwoChangesInOneTransaction(t *testing.T) {
	ctx := context.Background()
	s, _ := newWebhookStore(t)
	w := s.Webhooks()
	putHook(t, s, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/"})
	mark := subspace.Sub("test-change-marks").Pack(tuple.Tuple{changeMarks.Add(1)})
	_, err := kv.Transact(ctx, s, func(tr kv.Transaction) (struct{}, error) {
		if v, err := tr.Get(mark).Get(); err != nil || v != nil {
			return struct{}{}, err // committed by an attempt that was told otherwise
		}
		tr.Set(mark, []byte{1})
		for _, st := range []string{StatePending, StateRunning} {
			if err := w.enqueue(tr, []hookChange{{jobID: "j", c: StateChange{Owner: "u", State: st}}}); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	require.NoError(t, err)
	d := WebhookDelivery{Owner: "u", Hook: "h", JobID: "j"}
	got := drain(t, w, d)
	require.Equal(t, []string{StatePending, StateRunning}, got)
}

// A delivery's end and a change queued meanwhile conflict: the end does
// not commit, so the change is not left without a delivery job.
func TestWebhookEndConflictsWithAChange(t *testing.T) {
	ctx := context.Background()
	s, db := newWebhookStore(t)
	w := s.Webhooks()
	putHook(t, s, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/"})
	d := WebhookDelivery{Owner: "u", Hook: "h", JobID: "j"}
	queueChange(t, s, "j", "u", StateRunning)
	job, err := s.jobs.Accept(ctx, WebhookType, fdbjobs.AcceptOptions{})
	require.NoError(t, err)
	_, _, c, err := w.Next(ctx, d)
	require.NoError(t, err)
	_, _, _, err = w.Ack(ctx, d, c, true)
	require.NoError(t, err)

	// The end's transaction is the test's own, to commit after the
	// change: its reads are tried again on an error the faults pass
	// injects, as a retry loop would.
	var end kv.Transaction
	var ended bool
	for attempt := 0; ; attempt++ {
		end, err = db.CreateTransaction()
		require.NoError(t, err)
		ended, err = w.EndDelivery(end, d, func(tr kv.Transaction) error {
			return s.jobs.Finish(ctx, tr, job, nil)
		})
		if err == nil || attempt == 20 || !kv.IsRetryable(err) {
			break
		}
		end.Cancel()
	}
	require.NoError(t, err)
	require.True(t, ended, "the queue looked empty")
	queueChange(t, s, "j", "u", StateCompleted) // commits first
	_, err = end.Commit().Get()
	require.Error(t, err, "the end conflicts with the change")

	st, _, err := s.jobs.Job(ctx, nil, WebhookType, job.ID)
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Running, st, "the delivery goes on")
	_, _, c, err = w.Next(ctx, d)
	require.NoError(t, err)
	require.NotNil(t, c, fmt.Sprintf("the change is queued for job %s", job.ID))
}

// A receiver's failures in a row make its deliveries rest longer, up to
// WebhookPauseMax; a taken change clears them; a deleted webhook records
// none.
func TestWebhookHealth(t *testing.T) {
	ctx := context.Background()
	s, _ := newWebhookStore(t)
	w := s.Webhooks()
	putHook(t, s, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/"})
	d := WebhookDelivery{Owner: "u", Hook: "h", JobID: "j"}
	now := time.Unix(1000, 0)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		until, err := w.Failed(ctx, d, fmt.Sprintf("failure %d", i), now)
		require.NoError(t, err)
		require.Equal(t, now.Add(want), until)
	}
	require.Equal(t, WebhookPauseMax, webhookPause(100))
	hl, err := w.Health(ctx, "u", "h")
	require.NoError(t, err)
	require.Equal(t, 3, hl.Failures)
	require.Equal(t, "failure 2", hl.LastError)

	queueChange(t, s, "j", "u", StateRunning)
	_, hl, c, err := w.Next(ctx, d)
	require.NoError(t, err)
	require.Equal(t, 3, hl.Failures)
	_, _, _, err = w.Ack(ctx, d, c, false)
	require.NoError(t, err)
	hl, err = w.Health(ctx, "u", "h")
	require.NoError(t, err)
	require.Zero(t, hl.Failures, "a taken change clears the failures")

	_, err = kv.Transact(ctx, s, func(tr kv.Transaction) (bool, error) { return w.Delete(ctx, tr, "u", "h") })
	require.NoError(t, err)
	_, err = w.Failed(ctx, d, "late", now)
	require.NoError(t, err)
	hl, err = w.Health(ctx, "u", "h")
	require.NoError(t, err)
	require.Zero(t, hl.Failures, "nothing recorded for a deleted webhook")
}

// TestWebhookDeliveryModel drives the queue of a webhook's changes and its
// delivery jobs through random interleavings of changes, accepts,
// deliveries and ends (a worker's end transaction left open while changes
// commit, then committed or not), and checks the invariant of doc.go,
// "Webhooks": whenever a replication has changes queued for a webhook, its
// delivery job is pending or running; and each worker delivers a
// replication's changes in the order they were made, none twice, none
// skipped. Seeded: replay with FDBREP_TEST_SEED.
func TestWebhookDeliveryModel(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(testutil.Seed(t), 0))
	s, db := newWebhookStore(t)
	w := s.Webhooks()
	putHook(t, s, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/"})
	reps := []string{"r1", "r2", "r3"}
	byID := map[string]string{}
	for _, r := range reps {
		byID[deliveryID("u", "h", r)] = r
	}
	queued := map[string][]string{}       // the model: changes not yet delivered, oldest first
	held := map[string]*fdbjobs.Job{}     // delivery jobs a worker holds, by replication
	ending := map[string]kv.Transaction{} // a worker's end transaction, not yet committed
	made, steps := 0, map[string]int{}
	endedAt := map[string]int{} // the step each end transaction began
	ops := []string{"change", "accept", "deliver", "ended", "end conflicted"}
	uncovered := func() bool { // an operation no step has run yet
		for _, name := range ops {
			if steps[name] == 0 {
				return true
			}
		}
		return false
	}
	// 600 steps, and on until every operation ran (some seeds come to a
	// conflicted end late), 6,000 at most.
	for i := 0; i < 600 || uncovered() && i < 6000; i++ {
		r := reps[rng.IntN(len(reps))]
		d := WebhookDelivery{Owner: "u", Hook: "h", JobID: r}
		switch op := rng.IntN(6); {
		case op == 0:
			made++
			state := fmt.Sprintf("s%d", made)
			queueChange(t, s, r, "u", state)
			queued[r] = append(queued[r], state)
			steps["change"]++
		case op == 1:
			jobs, err := s.jobs.AcceptBatch(ctx, WebhookType, 3, fdbjobs.AcceptOptions{MaxScheduledTime: time.Now().Add(time.Hour).Unix()})
			if errors.Is(err, fdbjobs.ErrNotFound) {
				continue
			}
			require.NoError(t, err)
			for _, j := range jobs {
				rep := byID[j.ID]
				require.Nil(t, held[rep], "step %d: a delivery taken twice", i)
				held[rep] = j
			}
			steps["accept"]++
		case (op == 2 || op == 5) && held[r] != nil && ending[r] == nil:
			_, _, c, err := w.Next(ctx, d)
			require.NoError(t, err)
			if c == nil {
				continue
			}
			var b webhookBody
			require.NoError(t, json.Unmarshal(c.Body, &b))
			require.NotEmpty(t, queued[r], "step %d: %s delivered with nothing queued", i, b.State)
			require.Equal(t, queued[r][0], b.State, "step %d: in order", i)
			_, _, _, err = w.Ack(ctx, d, c, true)
			require.NoError(t, err)
			queued[r] = queued[r][1:]
			steps["deliver"]++
		case op == 3 && held[r] != nil && ending[r] == nil:
			tr, err := db.CreateTransaction()
			require.NoError(t, err)
			job := held[r]
			ended, err := w.EndDelivery(tr, d, func(tr kv.Transaction) error { return s.jobs.Finish(ctx, tr, job, nil) })
			if kv.IsRetryable(err) {
				tr.Cancel() // an injected fault: the worker tries again later
				continue
			}
			require.NoError(t, err)
			if ended {
				ending[r], endedAt[r] = tr, i // committed later, changes may come first
			} else {
				tr.Cancel()
			}
			steps["begin end"]++
		case (op == 4 || i-endedAt[r] >= 2) && ending[r] != nil: // within the store's one-second budget
			_, err := ending[r].Commit().Get()
			delete(ending, r)
			if err != nil && kv.IsMaybeCommitted(err) {
				// An injected fault: whether it committed is in the store.
				st, _, jerr := s.jobs.Job(ctx, nil, WebhookType, deliveryID("u", "h", r))
				require.NoError(t, jerr)
				if st == fdbjobs.Finished {
					err = nil
				}
			}
			if err == nil {
				delete(held, r)
				steps["ended"]++
			} else {
				steps["end conflicted"]++ // the worker goes on
			}
		}
		for _, rep := range reps {
			if len(queued[rep]) == 0 {
				continue
			}
			st, _, err := s.jobs.Job(ctx, nil, WebhookType, deliveryID("u", "h", rep))
			require.NoError(t, err, "step %d: %s has changes queued and no delivery job", i, rep)
			require.Contains(t, []fdbjobs.State{fdbjobs.Pending, fdbjobs.Running}, st,
				"step %d: %s has changes queued and its delivery job is %v", i, rep, st)
		}
	}
	t.Logf("operations: %v", steps)
	for _, name := range ops {
		require.Positive(t, steps[name], "%s never ran", name)
	}
}
