package fdbjobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

type feedArgs struct {
	Fail bool `json:"fail"`
}

func (feedArgs) Kind() string { return "feed" }

// feedEvents reads events from r until it has n, and returns them.
func feedEvents(t *testing.T, ctx context.Context, r *fdbjobs.FeedReader, n int) []fdbjobs.FeedEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out []fdbjobs.FeedEvent
	for len(out) < n {
		evs, err := r.Next(ctx)
		require.NoError(t, err, "after %d events: %v", len(out), out)
		out = append(out, evs...)
	}
	return out
}

// byJob is each job's events, in order.
func byJob(evs []fdbjobs.FeedEvent) map[string][]string {
	m := map[string][]string{}
	for _, e := range evs {
		m[e.JobID] = append(m[e.JobID], e.Event)
	}
	return m
}

// TestFeed: a kind's feed has an event for each change of its jobs'
// states, and the kind's own events, in commit order, with increasing
// seqs; a reader that comes back from a seq misses nothing, one whose
// events were pruned is told so, and an off feed says it is off.
func TestFeed(t *testing.T) {
	b := startClient(t)
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[feedArgs](func(ctx context.Context, w *fdbjobs.Work[feedArgs]) error {
		if w.Args.Fail && w.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), fdbjobs.WorkerOptions{RetryPolicy: fdbjobs.RetryFunc(func(int, error) time.Duration { return 0 })}))

	_, err := b.c.ReadFeed(b.ctx, nil, "feed", "", 0)
	require.ErrorIs(t, err, fdbjobs.ErrNoFeed)
	require.NoError(t, b.c.SetFeed(b.ctx, nil, "feed", time.Hour))
	keep, on, err := b.c.FeedKeep(b.ctx, nil, "feed")
	require.NoError(t, err)
	require.True(t, on)
	require.Equal(t, time.Hour, keep)

	r := b.c.Feed("feed", "", 0)
	b.start(t, ws)
	later, err := b.c.Insert(b.ctx, nil, feedArgs{}, fdbjobs.InsertOptions{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = b.c.Cancel(b.ctx, nil, "feed", later.ID)
	require.NoError(t, err)
	ok, err := b.c.Insert(b.ctx, nil, feedArgs{}, fdbjobs.InsertOptions{})
	require.NoError(t, err)
	failing, err := b.c.Insert(b.ctx, nil, feedArgs{Fail: true}, fdbjobs.InsertOptions{})
	require.NoError(t, err)
	b.outcome(t, "feed", failing.ID)
	b.outcome(t, "feed", ok.ID)
	_, err = b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		// Idempotent as a caller's transaction must be: a retry after
		// commit_unknown_result would emit the event again.
		mark := kv.Key("feed-test/checked")
		if v, err := tr.Get(mark).Get(); err != nil || v != nil {
			return nil, err
		}
		tr.Set(mark, []byte{1})
		return nil, b.c.EmitEvent(tr, "feed", ok.ID, "checked", json.RawMessage(`{"by":"test"}`))
	})
	require.NoError(t, err)

	evs := feedEvents(t, b.ctx, r, 2+3+5+1)
	require.Equal(t, map[string][]string{
		later.ID:   {"inserted", "cancelled"},
		ok.ID:      {"inserted", "started", "completed", "checked"},
		failing.ID: {"inserted", "started", "retried", "started", "completed"},
	}, byJob(evs))
	for i, e := range evs {
		require.Equal(t, "feed", e.Kind)
		require.WithinDuration(t, time.Now(), e.At, time.Minute)
		if i > 0 {
			require.Less(t, evs[i-1].Seq, e.Seq, "in order")
		}
	}
	require.JSONEq(t, `{"by":"test"}`, string(evs[len(evs)-1].Data))
	require.Equal(t, evs[len(evs)-1].Seq, r.Seq())

	// From any seq, the events that follow it, none missed.
	mid := evs[4].Seq
	rest, err := b.c.ReadFeed(b.ctx, nil, "feed", mid, 0)
	require.NoError(t, err)
	require.Equal(t, evs[5:], rest)
	page, err := b.c.ReadFeed(b.ctx, nil, "feed", "", 3)
	require.NoError(t, err)
	require.Equal(t, evs[:3], page)

	// Pruned: events older than the keep go, and a reader from before them
	// is told it missed some; one from the last pruned event is not.
	n, err := b.c.PruneFeed(b.ctx, "feed", time.Now().Add(time.Hour-time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "none older than an hour")
	n, err = b.c.PruneFeed(b.ctx, "feed", evs[4].At.Add(time.Hour+time.Millisecond))
	require.NoError(t, err)
	oldest, err := b.c.ReadFeed(b.ctx, nil, "feed", "", 0)
	require.NoError(t, err)
	pruned := len(evs) - len(oldest)
	if _, faults, _ := faultkv.FromEnv(); !faults && !kvtest.OnFoundationDB(t) {
		// (A prune retried after commit_unknown_result reports what its
		// retry removed.)
		require.Equal(t, pruned, n, "the events pruned, as reported")
	}
	n = pruned
	require.GreaterOrEqual(t, n, 5)
	cut := evs[n-1].Seq
	_, err = b.c.ReadFeed(b.ctx, nil, "feed", evs[0].Seq, 0)
	require.ErrorIs(t, err, fdbjobs.ErrFeedPruned)
	_, err = b.c.Feed("feed", evs[0].Seq, 0).Next(b.ctx)
	require.ErrorIs(t, err, fdbjobs.ErrFeedPruned)
	rest, err = b.c.ReadFeed(b.ctx, nil, "feed", cut, 0)
	require.NoError(t, err)
	require.Equal(t, evs[n:], rest)
	require.Equal(t, evs[n:], oldest, `"" reads from the oldest kept`)

	// Off: no feed, its events gone, and a reader from any seq of before
	// missed them once it is on again.
	require.NoError(t, b.c.DisableFeed(b.ctx, nil, "feed"))
	_, err = b.c.ReadFeed(b.ctx, nil, "feed", cut, 0)
	require.ErrorIs(t, err, fdbjobs.ErrNoFeed)
	_, on, err = b.c.FeedKeep(b.ctx, nil, "feed")
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, b.c.SetFeed(b.ctx, nil, "feed", time.Hour))
	_, err = b.c.ReadFeed(b.ctx, nil, "feed", evs[len(evs)-1].Seq, 0)
	require.ErrorIs(t, err, fdbjobs.ErrFeedPruned)
	again, err := b.c.ReadFeed(b.ctx, nil, "feed", "", 0)
	require.NoError(t, err)
	require.Empty(t, again)
}

// TestFeedBadInput: each bad argument is ErrInvalidArgument (or the data
// errors), and writes nothing.
func TestFeedBadInput(t *testing.T) {
	b := startClient(t)
	require.NoError(t, b.c.SetFeed(b.ctx, nil, "feed", time.Hour))
	for _, tc := range []struct {
		name string
		err  error
		call func() error
	}{
		{"keep under a minute", fdbjobs.ErrInvalidArgument, func() error { return b.c.SetFeed(b.ctx, nil, "feed", time.Second) }},
		{"keep over 90 days", fdbjobs.ErrInvalidArgument, func() error { return b.c.SetFeed(b.ctx, nil, "feed", 91*24*time.Hour) }},
		{"empty kind", fdbjobs.ErrInvalidArgument, func() error { return b.c.SetFeed(b.ctx, nil, "", time.Hour) }},
		{"kind too long", fdbjobs.ErrInvalidArgument, func() error {
			_, err := b.c.ReadFeed(b.ctx, nil, strings.Repeat("k", fdbjobs.MaxNameSize+1), "", 0)
			return err
		}},
		{"seq not hex", fdbjobs.ErrInvalidArgument, func() error {
			_, err := b.c.ReadFeed(b.ctx, nil, "feed", "zz", 0)
			return err
		}},
		{"seq of no commit", fdbjobs.ErrInvalidArgument, func() error {
			_, err := b.c.ReadFeed(b.ctx, nil, "feed", "ffffffffffffffffffff00000000", 0)
			return err
		}},
		{"seq too short", fdbjobs.ErrInvalidArgument, func() error {
			_, err := b.c.ReadFeed(b.ctx, nil, "feed", "00ff", 0)
			return err
		}},
		{"limit over the page", fdbjobs.ErrInvalidArgument, func() error {
			_, err := b.c.ReadFeed(b.ctx, nil, "feed", "", fdbjobs.FeedPageMax+1)
			return err
		}},
		{"negative limit", fdbjobs.ErrInvalidArgument, func() error {
			_, err := b.c.ReadFeed(b.ctx, nil, "feed", "", -1)
			return err
		}},
		{"empty event", fdbjobs.ErrInvalidArgument, func() error { return emit(b, "j", "", nil) }},
		{"event too long", fdbjobs.ErrInvalidArgument, func() error {
			return emit(b, "j", strings.Repeat("e", fdbjobs.MaxEventNameSize+1), nil)
		}},
		{"the layer's event", fdbjobs.ErrInvalidArgument, func() error { return emit(b, "j", fdbjobs.FeedCompleted, nil) }},
		{"empty job id", fdbjobs.ErrInvalidArgument, func() error { return emit(b, "", "mine", nil) }},
		{"data not JSON", fdbjobs.ErrInvalidData, func() error { return emit(b, "j", "mine", json.RawMessage("{")) }},
		{"data too large", fdbjobs.ErrDataTooLarge, func() error {
			return emit(b, "j", "mine", json.RawMessage(`"`+strings.Repeat("x", fdbjobs.MaxEventDataSize)+`"`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { require.ErrorIs(t, tc.call(), tc.err) })
	}
	evs, err := b.c.ReadFeed(b.ctx, nil, "feed", "", 0)
	require.NoError(t, err)
	require.Empty(t, evs, "nothing written")
	keep, _, err := b.c.FeedKeep(b.ctx, nil, "feed")
	require.NoError(t, err)
	require.Equal(t, time.Hour, keep, "unchanged")
}

func emit(b *runtimeBundle, id, event string, data json.RawMessage) error {
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		return nil, b.c.EmitEvent(tr, "feed", id, event, data)
	})
	return err
}

// TestFeedPages: the events of one transaction share keys (a batch of
// inserts writes a few); reading them in pages of any size, from any
// event's Seq, gives each once, in order.
func TestFeedPages(t *testing.T) {
	b := startClient(t)
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "feed", time.Minute))
	require.NoError(t, b.c.SetFeed(b.ctx, nil, "feed", time.Hour))
	jobs := make([]fdbjobs.InsertJob, 700)
	for i := range jobs {
		jobs[i] = fdbjobs.InsertJob{Args: feedArgs{}, Opts: fdbjobs.InsertOptions{ScheduledAt: time.Now().Add(time.Hour)}}
	}
	ids, err := b.c.InsertMany(b.ctx, nil, jobs)
	require.NoError(t, err)
	all, err := b.c.ReadFeed(b.ctx, nil, "feed", "", fdbjobs.FeedPageMax)
	require.NoError(t, err)
	require.Len(t, all, len(ids))
	for _, size := range []int{1, 7, 100, 699} {
		var got []fdbjobs.FeedEvent
		for after := ""; ; {
			page, err := b.c.ReadFeed(b.ctx, nil, "feed", after, size)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			require.LessOrEqual(t, len(page), size)
			got = append(got, page...)
			after = page[len(page)-1].Seq
		}
		require.Equal(t, all, got, "pages of %d", size)
	}
	end, err := b.c.FeedEnd(b.ctx, nil, "feed")
	require.NoError(t, err)
	require.Equal(t, all[len(all)-1].Seq, end)
}

// A page of InsertMany retried after commit_unknown_result, smaller once a
// read failed, leaves jobs its first attempt committed to the next page:
// that page reads them as any retry does, so each job's insert makes one
// event and counts once (a blind first attempt wrote them again, each
// with a second event).
func TestInsertManyRetriedPagesOnce(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := faultkv.Wrap(kvtest.NewDB(t), faultkv.Options{Seed: seed, CommitUnknownResult: 0.4, ReadTooOld: 0.002})
			c, err := fdbjobs.New(db, fdbjobs.Config{})
			require.NoError(t, err)
			require.NoError(t, c.SetTypeTimeout(ctx, nil, "feed", time.Minute))
			require.NoError(t, c.SetFeed(ctx, nil, "feed", time.Hour))
			jobs := make([]fdbjobs.InsertJob, 1500)
			for i := range jobs {
				jobs[i] = fdbjobs.InsertJob{Args: feedArgs{}, Opts: fdbjobs.InsertOptions{ScheduledAt: time.Now().Add(time.Hour)}}
			}
			ids, err := c.InsertMany(ctx, nil, jobs)
			require.NoError(t, err)
			var events []fdbjobs.FeedEvent
			for after := ""; ; {
				page, err := c.ReadFeed(ctx, nil, "feed", after, fdbjobs.FeedPageMax)
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				events, after = append(events, page...), page[len(page)-1].Seq
			}
			require.Len(t, events, len(ids), "one event per job inserted")
			counts, err := c.Counts(ctx, nil, "feed")
			require.NoError(t, err)
			require.EqualValues(t, len(ids), counts.Pending, "each job counted once")
		})
	}
}
