package fdbjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// cntArgs are the runtime jobs of the counts' model test.
type cntArgs struct{ N int }

func (cntArgs) Kind() string { return "cnt" }

// scanCounts counts the jobs of typ by reading every row: what Counts
// must answer.
func scanCounts(t *testing.T, ctx context.Context, c *Client, typ string) JobCounts {
	t.Helper()
	var n JobCounts
	require.NoError(t, c.FoldJobs(ctx, typ, func(j JobInfo) error {
		switch j.State {
		case Pending:
			n.Pending++
		case Running:
			n.Running++
		default:
			switch o, _, _, err := JobOutcome(j.Data); {
			case err == nil && o == OutcomeCancelled:
				n.Cancelled++
			case err == nil && o == OutcomeDiscarded:
				n.Discarded++
			default: // completed, no outcome, or a lower-level job's data
				n.Completed++
			}
		}
		return nil
	}))
	return n
}

// feedModel follows a kind's feed as a reader that reads on from where
// it stopped: each job's last event.
type feedModel struct {
	seq  string
	last map[string]string
}

// check reads the events since the last check and checks them against
// every job's state: a job's events never repeat one (each is a change),
// and its last one says the state it is in (a job without events, or
// whose last is removed, is gone; inserted leaves it pending, or
// completed for AddFinished).
func (f *feedModel) check(t *testing.T, ctx context.Context, c *Client, kind, when string) {
	t.Helper()
	if f.last == nil {
		f.last = map[string]string{}
	}
	for {
		evs, err := c.ReadFeed(ctx, nil, kind, f.seq, 0)
		require.NoError(t, err)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			require.NotEqual(t, f.last[e.JobID], e.Event, "%s: job %s: the same event twice", when, e.JobID)
			f.last[e.JobID] = e.Event
			f.seq = e.Seq
		}
	}
	states := map[string]string{}
	require.NoError(t, c.FoldJobs(ctx, kind, func(j JobInfo) error {
		states[j.ID] = countState(j.State, j.Data)
		return nil
	}))
	for id, ev := range f.last {
		if _, ok := states[id]; !ok {
			require.Equal(t, FeedRemoved, ev, "%s: job %s is gone", when, id)
		}
	}
	for id, st := range states {
		want := map[string]string{FeedStarted: StateRunning, FeedRetried: StatePending}[f.last[id]]
		switch ev := f.last[id]; ev {
		case FeedInserted:
			require.Contains(t, []string{StatePending, OutcomeCompleted}, st, "%s: job %s", when, id)
			continue
		case FeedCompleted, FeedCancelled, FeedDiscarded:
			want = ev
		}
		require.Equal(t, want, st, "%s: job %s, last event %q", when, id, f.last[id])
	}
}

// TestCountsFollowEveryTransition runs a seeded stream of every operation
// that creates, moves or removes a job (inserts, adds, accepts, updates,
// the Runtime's ends, Finish, FinishAt, Resubmit, Cancel, RetryNow,
// SetData, Reenqueue, Remove, the activity monitor, retention's sweep),
// on runtime jobs and lower-level ones of the same type, and after each
// checks Counts, and the kind's event feed (feedModel), against a read of
// every row: plainly, and where commits report commit_unknown_result, so
// that transaction bodies run again after committing. Replay:
// FDBJOBS_SEED.
func TestCountsFollowEveryTransition(t *testing.T) {
	for _, faults := range []bool{false, true} {
		t.Run(fmt.Sprintf("commit_unknown_result=%v", faults), func(t *testing.T) {
			seed := testSeed(t)
			rng := rand.New(rand.NewPCG(seed, 2))
			var db kv.Database = kvtest.NewDB(t)
			if faults {
				db = faultkv.Wrap(db, faultkv.Options{Seed: seed, CommitUnknownResult: 0.3})
			}
			clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
			c, err := New(db, Config{Clock: clock})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			const kind = "cnt"
			require.NoError(t, c.SetTypeTimeout(ctx, nil, kind, time.Hour))
			ws := NewWorkers()
			require.NoError(t, AddWorker(ws, WorkFunc[cntArgs](func(context.Context, *Work[cntArgs]) error { return nil }), WorkerOptions{}))
			rt, err := NewRuntime(c, ws, RuntimeOptions{})
			require.NoError(t, err)
			monitor := c.NewActivityMonitor(kind)
			require.NoError(t, c.SetFeed(ctx, nil, kind, FeedKeepMax))
			feed := feedModel{seq: ""}

			var ids []string
			var held []*Job
			pick := func() string { return ids[rng.IntN(len(ids))] }
			later := func() int64 { return c.cfg.now() + rng.Int64N(3) } // due now or soon
			// ok lets through the errors an operation on a random job may
			// meet by design.
			ok := func(err error, allowed ...error) {
				t.Helper()
				for _, a := range append(allowed, ErrNotFound, ErrInvalidData) {
					if errors.Is(err, a) {
						return
					}
				}
				require.NoError(t, err)
			}
			n := 400
			if testing.Short() {
				n = 150
			}
			for i := range n {
				op := rng.IntN(17)
				if len(ids) == 0 {
					op = 0
				}
				switch op {
				case 0: // a runtime job, maybe for later, maybe unique
					opts := InsertOptions{ScheduledAt: clock.Now().Add(time.Duration(rng.IntN(3)) * time.Second), Priority: rng.IntN(PriorityLowest + 1)}
					if rng.IntN(3) == 0 {
						opts.Unique = UniqueOpts{ByArgs: true}
					}
					res, err := c.Insert(ctx, nil, cntArgs{N: rng.IntN(20)}, opts)
					require.NoError(t, err)
					if !res.Duplicate {
						ids = append(ids, res.ID)
					}
				case 1:
					got, err := c.InsertMany(ctx, nil, []InsertJob{{Args: cntArgs{N: i}}, {Args: cntArgs{N: i + 1}}})
					require.NoError(t, err)
					ids = append(ids, got...)
				case 2: // a lower-level job: new, or an existing one resubmitted
					id := fmt.Sprintf("low%d", i)
					if rng.IntN(2) == 0 {
						id = pick()
					} else {
						ids = append(ids, id)
					}
					require.NoError(t, c.Add(ctx, nil, kind, id, raw(`{"low":1}`), later()))
				case 3:
					id := fmt.Sprintf("fin%d", i)
					ids = append(ids, id)
					require.NoError(t, c.AddFinished(ctx, nil, kind, id, nil))
				case 4, 5:
					jobs, err := c.AcceptBatch(ctx, kind, 1+rng.IntN(3), AcceptOptions{})
					ok(err)
					held = append(held, jobs...)
				case 6, 7, 8: // a held job ends: as the Runtime ends it, or by Finish, FinishAt or Update
					if len(held) == 0 {
						continue
					}
					j := held[0]
					held = held[1:]
					e, err := decodeEnvelope(j.Data)
					switch {
					case op == 6 && err == nil:
						en := &ending{job: j, stime: -1, e: e}
						switch rng.IntN(4) {
						case 0:
							e.Attempt++
							e.Outcome, e.FinishedAt = OutcomeCompleted, clock.Now().UnixMilli()
						case 1:
							e.failed(errors.New("no"), clock.Now())
							e.Outcome, e.FinishedAt = OutcomeDiscarded, clock.Now().UnixMilli()
						case 2:
							e.failed(errors.New("again"), clock.Now())
							en.stime = later()
						default: // snoozed: data kept
							en.stime = later()
							e = nil
						}
						if e != nil {
							en.data, err = e.encode()
							require.NoError(t, err)
						}
						// A hold that lapsed (the clock moved on) ends the
						// Runtime's write as it begins, and its commit might
						// land after the check below: the Runtime writes
						// nothing then.
						if d, ok := j.HoldDeadline(); ok && !d.After(clock.Now()) {
							continue
						}
						errs, err := c.endBatch([]*ending{en})
						require.NoError(t, err)
						ok(errs[0], ErrHalt)
					case op == 7:
						ok(c.FinishAt(ctx, nil, j, later(), nil), ErrHalt)
					case rng.IntN(2) == 0:
						ok(c.Update(ctx, nil, j, nil), ErrHalt)
						held = append(held, j)
					default:
						ok(c.Finish(ctx, nil, j, nil), ErrHalt)
					}
				case 9:
					ok(c.Resubmit(ctx, nil, &Job{Type: kind, ID: pick()}, later(), nil))
				case 10:
					_, err := c.Cancel(ctx, nil, kind, pick())
					ok(err)
				case 11:
					ok(c.RetryNow(ctx, nil, kind, pick()), ErrRunning)
				case 12: // another outcome written over a job's data
					var e envelope
					e.Args = json.RawMessage(`{"N":1}`)
					e.Outcome = []string{"", OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded}[rng.IntN(4)]
					d, err := e.encode()
					require.NoError(t, err)
					ok(c.SetData(ctx, nil, kind, pick(), d), ErrRunning)
				case 13:
					_, err := c.Reenqueue(ctx, nil, kind, pick())
					ok(err)
				case 14:
					ok(c.Remove(ctx, nil, kind, pick()))
				case 15: // the activity monitor takes back what no Update renewed between its checks
					for range 2 {
						_, _, err := monitor.Check(ctx)
						require.NoError(t, err)
					}
				case 16:
					if rng.IntN(8) == 0 { // past every retention
						clock.Advance(RetainDiscardedDefault + time.Hour)
						_, err := rt.Sweep(ctx)
						require.NoError(t, err)
					} else {
						clock.Advance(time.Second)
					}
				}
				want := scanCounts(t, ctx, c, kind)
				got, err := c.Counts(ctx, nil, kind)
				require.NoError(t, err)
				require.Equal(t, want, got, "after operation %d (%d)", i, op)
				feed.check(t, ctx, c, kind, fmt.Sprintf("after operation %d (%d)", i, op))
			}
		})
	}
}

// A store of layout 2 has no counts: Migrate counts its jobs once, after
// which Clients keep them; CheckLayout refuses it until then.
func TestMigrateCountsLayout2(t *testing.T) {
	b := setup(t)
	b.add(t, t1, "p", "", 0)
	b.add(t, t1, "r", "", 0)
	b.add(t, t2, "f", "", 0)
	b.accept(t, t1) // p or r
	j := b.accept(t, t2)
	require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
	want := map[string]JobCounts{t1: {Pending: 1, Running: 1}, t2: {Completed: 1}}
	// What layout 2 had: no counts, and its version.
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		tr.ClearRange(prefixRange(b.c.k.root, tuple.Tuple{keyCounts}))
		tr.Set(b.c.k.layout(), layoutValue(2))
		return nil, nil
	})
	require.NoError(t, err)

	c, err := New(b.db, Config{Clock: b.clock})
	require.NoError(t, err)
	err = c.CheckLayout(b.ctx)
	require.ErrorIs(t, err, ErrLayout)
	require.ErrorContains(t, err, "key layout 2")
	require.ErrorContains(t, err, "Migrate")

	require.NoError(t, c.Migrate(b.ctx))
	require.NoError(t, c.Migrate(b.ctx), "again: nothing to do")
	require.NoError(t, c.CheckLayout(b.ctx))
	for typ, n := range want {
		got, err := c.Counts(b.ctx, nil, typ)
		require.NoError(t, err)
		require.Equal(t, n, got, typ)
	}
	// Kept from then on.
	require.NoError(t, c.Add(b.ctx, nil, t2, "f", nil, 0))
	got, err := c.Counts(b.ctx, nil, t2)
	require.NoError(t, err)
	require.Equal(t, JobCounts{Pending: 1}, got)
}

func TestCountsInvalidKind(t *testing.T) {
	b := setup(t)
	_, err := b.c.Counts(b.ctx, nil, "")
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// envelopeOutcome reads what decodedOutcome decodes, for the Runtime's
// envelopes and for data made to look like their ends.
func TestEnvelopeOutcome(t *testing.T) {
	var cases []string
	fastOnes := map[string]bool{} // the Runtime's envelopes: a plain partition or none, a known outcome
	for _, args := range []string{`{}`, `null`, `1`, `"x"`, `{"outcome":"cancelled"}`, `"\",\"outcome\":\"discarded"`, `[1,{"a":"}"}]`} {
		for _, o := range []string{"", OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded, "other"} {
			for _, at := range []int64{0, 1700000000000} {
				for _, part := range []string{"", "t1", `a","outcome":"cancelled`, "<&>"} {
					e := envelope{Args: json.RawMessage(args), Attempt: 2, Outcome: o, FinishedAt: at, Partition: part,
						Errors: []AttemptError{{Error: `"outcome":"discarded"`}}}
					b, err := json.Marshal(e)
					require.NoError(t, err)
					cases = append(cases, string(b))
					if o != "" && o != "other" && (part == "" || part == "t1") {
						fastOnes[string(b)] = true
					}
				}
			}
		}
	}
	cases = append(cases, `{"args":1,"outcome":"cancelled","outcome":"completed"}`, `{"args":1,"outcome":"completed","outcome":"cancelled"}`,
		`{"outcome":"cancelled"}`, `{"x":{"args":1},"outcome":"cancelled"}`, `{"args":1,"outcome":"cancelled","finished_at":-1}`,
		`{"args":1,"x":"a,\"outcome\":\"cancelled"}`, `{"args":1, "outcome":"cancelled"}`, `{"args":1,"finished_at":3,"outcome":"discarded"}`,
		`{"args":1,"outcome":"cancelled","partition":"p","x":1}`, `{"args":{"a":1,"outcome":"cancelled","partition":"p"},"outcome":"completed"}`,
		`{"args":1,"outcome":"completed","partition":"p","partition":"q"}`, `{"args":1,"partition":"p","outcome":"cancelled"}`)
	for _, c := range cases {
		require.True(t, json.Valid([]byte(c)), c)
		want := decodedOutcome([]byte(c))
		o, ok := envelopeOutcome([]byte(c))
		if ok {
			require.Equal(t, want, o, c)
		}
		require.True(t, ok || !fastOnes[c], "the Runtime's envelope %s takes the fast path", c)
		require.Equal(t, want, countState(Finished, []byte(c)), c)
	}
}

// A transaction that sums its adds writes a key set after adds to it as
// set (the adds before are superseded), one set before adds as set plus
// them, one cleared after adds as cleared, and reads a key with the adds
// to it so far: a partition's count set exactly in a claim that added to
// it before stayed one too high.
func TestCoalescedAddsAndWrites(t *testing.T) {
	db := kvtest.NewDB(t)
	ctx := context.Background()
	k := func(s string) kv.Key { return kv.Key("coalesce/" + s) }
	_, err := kv.Transact(ctx, db, func(tr kv.Transaction) (any, error) {
		// From nothing, so that a retry after commit_unknown_result (the
		// store's faults) sums the same.
		tr.ClearRange(kv.KeyRange{Begin: k(""), End: k("\xff")})
		tr, flush := coalesceAdds(tr)
		defer flush()
		tr.Add(k("setAfter"), kv.Int64(5))
		tr.Set(k("setAfter"), kv.Int64(2))
		tr.Set(k("setBefore"), kv.Int64(2))
		tr.Add(k("setBefore"), kv.Int64(5))
		tr.Add(k("cleared"), kv.Int64(5))
		tr.Clear(k("cleared"))
		tr.Add(k("rangeCleared"), kv.Int64(5))
		tr.ClearRange(kv.KeyRange{Begin: k("r"), End: k("s")})
		tr.Add(k("read"), kv.Int64(3))
		v, err := tr.Get(k("read")).Get()
		if err != nil {
			return nil, err // a fault of the store's: retried
		}
		require.Equal(t, int64(3), kv.DecodeInt64(v), "a read sees the adds before it")
		tr.Add(k("read"), kv.Int64(1))
		return nil, nil
	})
	require.NoError(t, err)
	for key, want := range map[string]int64{"setAfter": 2, "setBefore": 7, "cleared": 0, "rangeCleared": 0, "read": 4} {
		v, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(k(key)).Get() })
		require.NoError(t, err)
		require.Equal(t, want, kv.DecodeInt64(v), key)
	}
}
