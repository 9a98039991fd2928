package replicator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
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

// queueChange queues a change of job as the index does, in a transaction
// of its own.
func queueChange(t *testing.T, s *Store, job, owner, state string) {
	t.Helper()
	_, err := kv.Transact(context.Background(), s, func(tr kv.Transaction) (struct{}, error) {
		return struct{}{}, s.webhooks.enqueue(tr, []hookChange{{jobID: job, c: StateChange{Owner: owner, State: state}}})
	})
	require.NoError(t, err)
}

// A webhook's changes queue in commit order, the ones it does not want
// are left out, and the queue keeps the newest WebhookQueueMax.
func TestWebhookQueue(t *testing.T) {
	ctx := context.Background()
	s, _ := newWebhookStore(t)
	w := s.Webhooks()
	_, err := kv.Transact(ctx, s, func(tr kv.Transaction) (bool, error) {
		return w.Put(ctx, tr, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/", Events: []string{StateRunning, StateCompleted}})
	})
	require.NoError(t, err)
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
	var states []string
	for {
		_, _, c, err := w.Next(ctx, d)
		require.NoError(t, err)
		if c == nil {
			break
		}
		var b webhookBody
		require.NoError(t, json.Unmarshal(c.Body, &b))
		states = append(states, b.State)
		_, _, _, err = w.Ack(ctx, d, c, true)
		require.NoError(t, err)
	}
	require.Len(t, states, WebhookQueueMax, "the newest kept")
	for i, st := range states {
		want := StateRunning
		if (i+5)%2 == 1 {
			want = StateCompleted
		}
		require.Equal(t, want, st, "change %d in commit order", i)
	}
}

// A delivery's end and a change queued meanwhile conflict: the end does
// not commit, so the change is not left without a delivery job.
func TestWebhookEndConflictsWithAChange(t *testing.T) {
	ctx := context.Background()
	s, db := newWebhookStore(t)
	w := s.Webhooks()
	_, err := kv.Transact(ctx, s, func(tr kv.Transaction) (bool, error) {
		return w.Put(ctx, tr, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/"})
	})
	require.NoError(t, err)
	d := WebhookDelivery{Owner: "u", Hook: "h", JobID: "j"}
	queueChange(t, s, "j", "u", StateRunning)
	job, err := s.jobs.Accept(ctx, WebhookType, fdbjobs.AcceptOptions{})
	require.NoError(t, err)
	_, _, c, err := w.Next(ctx, d)
	require.NoError(t, err)
	_, _, _, err = w.Ack(ctx, d, c, true)
	require.NoError(t, err)

	end, err := db.CreateTransaction()
	require.NoError(t, err)
	ended, err := w.EndDelivery(end, d, func(tr kv.Transaction) error {
		return s.jobs.Finish(ctx, tr, job, nil)
	})
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
	_, err := kv.Transact(ctx, s, func(tr kv.Transaction) (bool, error) {
		return w.Put(ctx, tr, &Webhook{ID: "h", Owner: "u", URL: "http://example.com/"})
	})
	require.NoError(t, err)
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
