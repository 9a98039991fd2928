package fdbjobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// listAll walks every page of kind's jobs in state, limit at a time.
func (b *bundle) listAll(t *testing.T, kind, state string, limit int) []JobRow {
	t.Helper()
	var all []JobRow
	p := ListParams{Kind: kind, State: state, Limit: limit}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "List goes on forever")
		page, err := b.c.List(b.ctx, nil, p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Jobs), limit)
		all = append(all, page.Jobs...)
		if page.Next == "" {
			return all
		}
		p.After = page.Next
	}
}

// listStore is a kind's jobs in every state List tells apart: the ids
// each state must list.
func listStore(t *testing.T, b *bundle) map[string][]string {
	t.Helper()
	const kind = "cnt"
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, kind, time.Hour))
	ids := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	insert := func(ids []string, at time.Time) {
		for _, id := range ids {
			_, err := b.c.Insert(b.ctx, nil, cntArgs{N: len(id)}, InsertOptions{ID: id, ScheduledAt: at})
			require.NoError(t, err)
		}
	}
	now := b.clock.Now()
	// Attempts that ended: retried, completed, discarded (as the Runtime
	// ends them).
	retrying, completed, discarded := ids("r", 4), ids("f", 3), ids("d", 2)
	insert(slices.Concat(retrying, completed, discarded), now)
	jobs, err := b.c.AcceptBatch(b.ctx, kind, 9, AcceptOptions{})
	require.NoError(t, err)
	require.Len(t, jobs, 9)
	// One completer batch: the completed jobs share a retention entry, and
	// so do the discarded ones.
	var ends []*ending
	for _, j := range jobs {
		e, err := decodeEnvelope(j.Data)
		require.NoError(t, err)
		en := &ending{job: j, stime: -1, e: e}
		switch j.ID[0] {
		case 'r':
			e.failed(errors.New("again"), now)
			en.stime = b.c.cfg.stime(now.Add(100 * time.Second))
		case 'f':
			e.Attempt++
			e.Outcome, e.FinishedAt = OutcomeCompleted, b.clock.Now().UnixMilli()
		case 'd':
			e.failed(errors.New("no"), now)
			e.Outcome, e.FinishedAt = OutcomeDiscarded, b.clock.Now().UnixMilli()
		}
		en.data, err = e.encode()
		require.NoError(t, err)
		ends = append(ends, en)
		b.clock.Advance(time.Millisecond)
	}
	errs, err := b.c.endBatch(ends)
	require.NoError(t, err)
	for _, err := range errs {
		require.NoError(t, err)
	}
	running := ids("run", 5)
	insert(running, now)
	jobs, err = b.c.AcceptBatch(b.ctx, kind, 5, AcceptOptions{})
	require.NoError(t, err)
	require.Len(t, jobs, 5, "one Accept: its jobs share one lease")
	available, scheduled, cancelled := ids("a", 6), ids("s", 5), ids("c", 3)
	insert(available, now)
	insert(slices.Concat(scheduled, cancelled), now.Add(50*time.Second))
	for _, id := range cancelled {
		_, err := b.c.Cancel(b.ctx, nil, kind, id)
		require.NoError(t, err)
	}
	require.NoError(t, b.c.Add(b.ctx, nil, kind, "low", json.RawMessage(`{"low":1}`), 0)) // the lower-level API's
	available = append(available, "low")
	return map[string][]string{
		StateAvailable: available, StateScheduled: scheduled, StateRetrying: retrying,
		StatePending: slices.Concat(available, scheduled, retrying),
		StateRunning: running, OutcomeCompleted: completed, OutcomeDiscarded: discarded, OutcomeCancelled: cancelled,
	}
}

// List walks each state's index in pages of any size: every job in the
// state once, in the index's order, across the queue's shards and
// within one lease.
func TestListPagesEveryState(t *testing.T) {
	b := setup(t)
	want := listStore(t, b)
	for state, ids := range want {
		for _, limit := range []int{1, 2, 3, 100} {
			t.Run(fmt.Sprintf("%s/limit=%d", state, limit), func(t *testing.T) {
				jobs := b.listAll(t, "cnt", state, limit)
				var got []string
				for _, j := range jobs {
					got = append(got, j.ID)
					require.Equal(t, "cnt", j.Kind)
					if state != StatePending {
						require.Equal(t, state, j.State, j.ID)
					}
				}
				require.ElementsMatch(t, ids, got)
				switch state {
				case StateRunning:
				case OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded:
					require.True(t, slices.IsSortedFunc(jobs, func(a, b JobRow) int { return a.FinishedAt.Compare(b.FinishedAt) }), "finishing order")
				default:
					require.True(t, slices.IsSortedFunc(jobs, func(a, b JobRow) int { return a.ScheduledAt.Compare(b.ScheduledAt) }), "scheduled order")
				}
			})
		}
	}
	// What a row says.
	byID := map[string]JobRow{}
	for _, state := range []string{StatePending, StateRunning, OutcomeDiscarded} {
		for _, j := range b.listAll(t, "cnt", state, 100) {
			byID[j.ID] = j
		}
	}
	r := byID["r0"]
	require.Equal(t, StateRetrying, r.State)
	require.Equal(t, 1, r.Attempt)
	require.Len(t, r.Errors, 1)
	require.Equal(t, "again", r.Errors[0].Error)
	require.JSONEq(t, `{"N":2}`, string(r.Args))
	require.Equal(t, time.Unix(1_000_100, 0), r.ScheduledAt)
	require.True(t, r.FinishedAt.IsZero())
	require.Equal(t, 1, byID["run0"].Attempt, "the running attempt counts")
	require.Equal(t, StateAvailable, byID["a0"].State)
	require.Equal(t, StateScheduled, byID["s0"].State)
	require.Zero(t, byID["s0"].Attempt)
	require.Equal(t, OutcomeDiscarded, byID["d0"].State)
	require.WithinRange(t, byID["d0"].FinishedAt, time.Unix(1_000_000, 0), time.Unix(1_000_001, 0))
	require.JSONEq(t, `{"low":1}`, string(byID["low"].Args), "a lower-level job's data")

	// Time moves the retrying and scheduled jobs into available.
	b.clock.Advance(200 * time.Second)
	require.Len(t, b.listAll(t, "cnt", StateAvailable, 4), len(want[StatePending]))
	require.Empty(t, b.listAll(t, "cnt", StateScheduled, 4))
}

// A type with more shards than a page reads keys from: each shard gives
// fewer, and the walk still ends with every job once.
func TestListManyShards(t *testing.T) {
	b := setup(t)
	shards := ShardsMax
	// A page reads one range per shard: under injected storage faults a
	// transaction of ShardsMax reads almost never gets through (about one
	// read in a hundred fails), and under injected latency or on
	// FoundationDB it outlasts the 1 s transaction budget, so those passes
	// merge 32 shards.
	if _, faults, err := faultkv.FromEnv(); err == nil && faults || os.Getenv("FDBREP_KV_LATENCY") != "" || kvtest.OnFoundationDB(t) {
		shards = 32
		t.Logf("under injected faults or latency, or on FoundationDB: %d shards", shards)
	}
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "cnt", time.Hour))
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, "cnt", shards))
	var want []string
	for i := range 50 {
		r, err := b.c.Insert(b.ctx, nil, cntArgs{N: i}, InsertOptions{ScheduledAt: b.clock.Now().Add(time.Duration(i%7) * time.Second)})
		require.NoError(t, err)
		want = append(want, r.ID)
	}
	b.clock.Advance(10 * time.Second)
	var got []string
	for _, j := range b.listAll(t, "cnt", StateAvailable, 30) {
		got = append(got, j.ID)
	}
	require.ElementsMatch(t, want, got)
}

func TestListInvalidArguments(t *testing.T) {
	b := setup(t)
	want := listStore(t, b)
	require.Greater(t, len(want[StatePending]), 1)
	page, err := b.c.List(b.ctx, nil, ListParams{Kind: "cnt", State: StatePending, Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.Next)
	for _, tc := range []struct {
		name string
		p    ListParams
	}{
		{"no kind", ListParams{State: StatePending, Limit: 1}},
		{"no state", ListParams{Kind: "cnt", Limit: 1}},
		{"unknown state", ListParams{Kind: "cnt", State: "finished", Limit: 1}},
		{"zero limit", ListParams{Kind: "cnt", State: StatePending}},
		{"negative limit", ListParams{Kind: "cnt", State: StatePending, Limit: -1}},
		{"limit too large", ListParams{Kind: "cnt", State: StatePending, Limit: ListLimitMax + 1}},
		{"cursor not base64", ListParams{Kind: "cnt", State: StatePending, Limit: 1, After: "!!"}},
		{"cursor not a tuple", ListParams{Kind: "cnt", State: StatePending, Limit: 1, After: "AAAA"}},
		{"cursor of another state", ListParams{Kind: "cnt", State: StateAvailable, Limit: 1, After: page.Next}},
		{"cursor of another kind", ListParams{Kind: "other", State: StatePending, Limit: 1, After: page.Next}},
		{"cursor of another place", ListParams{Kind: "cnt", State: StateRunning, Limit: 1,
			After: encodeCursor(ListParams{Kind: "cnt", State: StateRunning}, tuple.Tuple{int64(1), "x"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.c.List(b.ctx, nil, tc.p)
			require.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
}
