package replicator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// docCalls records what a Lifecycle writes into documents, once the
// transaction commits (under storage faults an attempt may run again).
type docCalls struct{ calls []string }

func (d *docCalls) record(tr kv.Transaction, call string) {
	tr.Locals().OnCommit(func() { d.calls = append(d.calls, call) })
}

func (d *docCalls) DocCompleted(_ context.Context, tr kv.Transaction, db, doc string, stats json.RawMessage) error {
	d.record(tr, "completed "+db+"/"+doc+" "+string(stats))
	return nil
}

func (d *docCalls) DocFailed(_ context.Context, tr kv.Transaction, db, doc, reason string) error {
	d.record(tr, "failed "+db+"/"+doc+" "+reason)
	return nil
}

func (d *docCalls) ReplicationDocIDs(kv.ReadTransaction, string, string, int) ([]string, string, error) {
	return nil, "", nil
}

func (d *docCalls) RewriteBodies(kv.Transaction, string, string, func(string, map[string]any) (map[string]any, bool, error)) (bool, error) {
	return false, nil
}

// The table of doc.go, "Transitions": each kind applied to a document's
// job through Lifecycle.Apply leaves the job in its state, in its fdbjobs
// state and due time, with its history events, its document written for
// the terminal ones, and names its counters.
func TestTransitions(t *testing.T) {
	const db, doc = "_replicator", "d1"
	at := time.UnixMilli(5_000_000)
	backoff := func(n int, jitter float64) time.Duration { return time.Duration(n) * time.Minute }
	for _, tc := range []struct {
		c        Change
		state    string
		st       fdbjobs.State
		due      int64 // the job's scheduled time when pending again
		events   []string
		counters []string
		doc      string
	}{
		{Change{Kind: Started, At: at, Node: "n2"}, StateRunning, fdbjobs.Running, 0, []string{EventStarted}, nil, ""},
		{Change{Kind: Heartbeat, At: at}, StateRunning, fdbjobs.Running, 0, []string{EventStarted}, nil, ""},
		{Change{Kind: Crashed, At: at, Tag: "http_error", Reason: "boom", Priority: 7},
			StateCrashing, fdbjobs.Pending, at.UnixMilli() + time.Minute.Milliseconds(),
			[]string{EventPending, EventCrashed, EventStarted}, []string{MetricJobsCrashes, MetricJobsStops}, ""},
		{Change{Kind: Failed, At: at, Tag: "db_not_found", Reason: "gone"}, StateFailed, fdbjobs.Finished, 0,
			[]string{EventCrashed, EventStarted}, []string{MetricJobsFailed, MetricJobsStops, MetricDocsFailedUpdates},
			"failed _replicator/d1 gone"},
		{Change{Kind: Completed, At: at}, StateCompleted, fdbjobs.Finished, 0,
			[]string{EventStopped, EventStarted}, []string{MetricJobsCompleted, MetricJobsStops, MetricDocsCompletedUpdates},
			`completed _replicator/d1 {"bulk_get_attempts":0,"bulk_get_docs":0,"changes_pending":null,"doc_write_failures":0,"docs_read":3,"docs_written":3,"missing_revisions_found":3,"revisions_checked":3,"start_time":"1970-01-01T00:16:40Z"}`},
		{Change{Kind: Requeued, At: at, Reason: "rotation", Priority: 3, STime: 6_000_000}, StatePending, fdbjobs.Pending, 6_000_000,
			[]string{EventPending, EventStopped, EventStarted}, []string{MetricJobsStops}, ""},
		{Change{Kind: PutBack}, StatePending, fdbjobs.Pending, 1_000, nil, []string{MetricJobsStops}, ""},
		{Change{Kind: Parked, At: at, Reason: "parked: idle", Priority: 3,
			Park: &ParkInfo{Since: at.UnixMilli(), Through: "42", Group: "http://src/ user=u", SourceDB: "a", SweepAt: 9_000_000}},
			StateParked, fdbjobs.Pending, 9_000_000, []string{EventStopped, EventStarted}, []string{MetricJobsParks, MetricJobsStops}, ""},
		{Change{Kind: HeldBack, At: at, Priority: 3, STime: 7_000_000}, StatePending, fdbjobs.Pending, 7_000_000, nil,
			[]string{MetricJobsHeldBack, MetricJobsStops}, ""},
	} {
		t.Run(tc.c.Kind.String(), func(t *testing.T) {
			ctx := context.Background()
			s, jobs, kdb := setupStore(t)
			docs := &docCalls{}
			l := Lifecycle{Store: s, Docs: docs, MaxHistory: 10, HealthThreshold: time.Hour, Backoff: backoff}
			id, job, d := acceptDocJob(t, s, jobs, kdb, db, doc)
			apply := func(c Change) {
				// Each attempt starts from d, as a worker's does.
				x, err := kv.Transact(ctx, kdb, func(tr kv.Transaction) (*JobData, error) {
					x := d.Clone()
					x.Stats.DocsRead, x.Stats.DocsWritten, x.Stats.RevisionsChecked, x.Stats.MissingRevisionsFound = 3, 3, 3, 3
					return x, l.Apply(ctx, tr, job, x, c)
				})
				require.NoError(t, err)
				d = x
			}
			if tc.c.Kind != PutBack && tc.c.Kind != Started && tc.c.Kind != HeldBack {
				apply(Change{Kind: Started, At: at.Add(-time.Minute), Node: "n1"})
			}
			apply(tc.c)

			got, st, err := s.Job(ctx, nil, id)
			require.NoError(t, err)
			require.Equal(t, tc.state, got.State)
			require.Equal(t, tc.st, st)
			var events []string
			for _, e := range got.History {
				events = append(events, e.Type)
			}
			require.Equal(t, tc.events, events)
			require.Equal(t, tc.counters, l.Counters(got, tc.c))
			if tc.doc == "" {
				require.Empty(t, docs.calls)
			} else {
				require.Equal(t, []string{tc.doc}, docs.calls)
			}
			if st == fdbjobs.Pending {
				j, err := jobs.Accept(ctx, JobType, fdbjobs.AcceptOptions{MaxScheduledTime: 1 << 50})
				require.NoError(t, err)
				require.Equal(t, tc.due, j.ScheduledTime)
			}
			if tc.c.Kind == Parked {
				// The park added its group's watch.
				st, _, err := jobs.Job(ctx, nil, WatchType, WatchJobID(tc.c.Park.Group))
				require.NoError(t, err)
				require.Equal(t, fdbjobs.Pending, st)
				unwatched, err := s.Unwatched(ctx)
				require.NoError(t, err)
				require.Empty(t, unwatched)
			}
			node := map[Kind]string{Started: "n2", Heartbeat: "n1"}[tc.c.Kind]
			require.Equal(t, node, got.Node, "the node, kept while running")
			if tc.c.Kind == HeldBack {
				// Held since then, due at its turn; a start clears it.
				require.Equal(t, [2]int64{at.UnixMilli(), 7_000_000}, [2]int64{got.HeldSince, got.HeldUntil})
				x := got.Clone()
				l.Transform(x, Change{Kind: Started, At: at, Node: "n1"})
				require.Zero(t, x.HeldSince+x.HeldUntil)
			}
			if tc.c.Kind == Crashed || tc.c.Kind == Failed {
				require.Equal(t, tc.c.Reason, got.LastError)
				require.Equal(t, 1, got.ErrorCount)
				require.JSONEq(t, `{"error":"`+tc.c.Tag+`","reason":"`+tc.c.Reason+`"}`, string(got.StateInfo))
			}
		})
	}
}

// A job whose database was deleted and re-created under the same name
// while it ran (its node did not notice: no watch, no heartbeat) completes
// without writing its state into the new database's document of the same
// id: Lifecycle writes a terminal state only while the document is its
// job's (OwnsDoc).
func TestTerminalStateSkipsRecreatedDatabase(t *testing.T) {
	const db, doc = "g/_replicator", "zz"
	ctx := context.Background()
	s, jobs, kdb := setupStore(t)
	docs := &docCalls{}
	l := Lifecycle{Store: s, Docs: docs, MaxHistory: 10, HealthThreshold: time.Hour}
	_, job, d := acceptDocJob(t, s, jobs, kdb, db, doc)
	_, err := kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) {
		if _, err := s.UnregisterDB(tr, db); err != nil {
			return nil, err
		}
		_, err := s.DBUUID(tr, db) // re-created: a new identity
		return nil, err
	})
	require.NoError(t, err)
	_, err = kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) {
		return nil, l.Apply(ctx, tr, job, d.Clone(), Change{Kind: Completed, At: time.UnixMilli(5_000_000)})
	})
	require.NoError(t, err)
	require.Empty(t, docs.calls, "the new database's document got the old job's state")
}

// A job forgets its errors at a heartbeat or a crash once it has run
// HealthThreshold since its last start, and only then; a crash's backoff
// follows its error count.
func TestTransitionHealing(t *testing.T) {
	l := Lifecycle{MaxHistory: 5, HealthThreshold: time.Minute,
		Backoff: func(n int, jitter float64) time.Duration {
			return time.Duration(n)*time.Second + time.Duration(jitter*1000)*time.Millisecond
		}}
	start := time.UnixMilli(10_000_000)
	for _, tc := range []struct {
		name       string
		kind       Kind
		ran        time.Duration // since the last start
		errors     int
		wantErrors int
		wantLast   string
		wantRetry  int64 // after At, ms
	}{
		{"heartbeat healed", Heartbeat, 2 * time.Minute, 3, 0, "", 0},
		{"heartbeat not yet", Heartbeat, 30 * time.Second, 3, 3, "earlier", 0},
		{"heartbeat at the threshold", Heartbeat, time.Minute, 3, 3, "earlier", 0},
		{"crash healed", Crashed, 2 * time.Minute, 3, 1, "now", 1_500},
		{"crash not yet", Crashed, 30 * time.Second, 3, 4, "now", 4_500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &JobData{State: StateRunning, LastStart: start.UnixMilli(), ErrorCount: tc.errors, LastError: "earlier"}
			at := start.Add(tc.ran)
			l.Transform(x, Change{Kind: tc.kind, At: at, Reason: "now", Jitter: 0.5})
			require.Equal(t, tc.wantErrors, x.ErrorCount)
			require.Equal(t, tc.wantLast, x.LastError)
			if tc.kind == Crashed {
				require.Equal(t, at.UnixMilli()+tc.wantRetry, x.RetryAt)
			}
		})
	}
	require.False(t, Healed(0, start, time.Minute), "a job that never started")
}

// The changes no node makes with a held job: Transform makes them, Apply
// refuses them.
func TestTransformOthers(t *testing.T) {
	at := time.UnixMilli(7_000)
	l := Lifecycle{MaxHistory: 5}
	added := &JobData{Rep: &Spec{}}
	l.Transform(added, Change{Kind: Added, At: at})
	require.Equal(t, &JobData{Rep: &Spec{}, State: StatePending, StartTime: 7_000, LastUpdated: 7_000,
		History: []HistoryEvent{{Type: EventAdded, Timestamp: 7_000}}}, added)

	bad := &JobData{Rep: &Spec{}}
	l.Transform(bad, Change{Kind: Added, At: at, Reason: "no source"})
	require.Equal(t, &JobData{State: StateFailed, StartTime: 7_000, LastUpdated: 7_000, LastError: "no source",
		StateInfo: StateInfo("bad_rep_doc", "no source"), History: []HistoryEvent{{Type: EventAdded, Timestamp: 7_000}}}, bad)

	crashing := &JobData{State: StateCrashing, ErrorCount: 2, RetryAt: 9_000, LastUpdated: 1_000}
	l.Transform(crashing, Change{Kind: BackoffEnded, At: at})
	require.Equal(t, &JobData{State: StateCrashing, ErrorCount: 2, RetryAt: 7_000, LastUpdated: 1_000}, crashing)

	running := &JobData{State: StateRunning, Node: "n1", LastUpdated: 1_000}
	l.Transform(running, Change{Kind: TakenBack})
	require.Equal(t, &JobData{State: StatePending, Node: "n1", LastUpdated: 1_000}, running)

	parked := &JobData{State: StateParked, Parked: &ParkInfo{Since: 1_000, Through: "5"}, LastUpdated: 1_000}
	l.Transform(parked, Change{Kind: Woken, At: at, Reason: "its source changed"})
	require.Equal(t, &JobData{State: StatePending, LastUpdated: 7_000, LastWoken: 7_000, WakeCause: "its source changed",
		History: []HistoryEvent{{Type: EventPending, Timestamp: 7_000, Reason: "its source changed"}}}, parked)

	for _, k := range []Kind{Added, BackoffEnded, TakenBack, Woken} {
		require.ErrorContains(t, l.Apply(context.Background(), nil, nil, &JobData{}, Change{Kind: k}), "not made to a held job")
	}
}

// The collision rule: a table of who holds the replication id.
func TestCollide(t *testing.T) {
	docJob := func(owner, db, doc string) *JobData { return &JobData{DBName: db, DocID: doc, DocOwner: owner} }
	transient := func(user string) *JobData { return &JobData{RepUser: user} }
	for _, tc := range []struct {
		name      string
		x, holder *JobData
		kind      Kind
		reason    string
	}{
		{"another user's document", docJob("bob", "a/_replicator", "x"), docJob("eve", "b/_replicator", "h"), Crashed,
			"Replication `r1` is already running as another user's replication; retrying later"},
		{"another user's transient", docJob("bob", "a/_replicator", "x"), transient("eve"), Crashed,
			"Replication `r1` is already running as another user's transient replication; retrying later"},
		{"a document beside a transient", docJob("bob", "a/_replicator", "x"), transient("bob"), Crashed,
			"Replication `r1` is already running as a transient replication (job h1); retrying later"},
		{"two transients", transient("bob"), transient("bob"), Failed,
			"Replication `r1` is already running as a transient replication (job h1); retrying later"},
		{"a transient beside a document", transient("bob"), docJob("bob", "b/_replicator", "h"), Failed,
			"Replication `r1` already started, triggered by document `h` from db `b/_replicator`"},
		{"two documents", docJob("", "a/_replicator", "x"), docJob("", "b/_replicator", "h"), Failed,
			"Replication `r1` specified by document `x` already started, triggered by document `h` from db `b/_replicator`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, reason := Collide(tc.x, tc.holder, "h1", "r1")
			require.Equal(t, tc.kind, kind)
			require.Equal(t, tc.reason, reason)
		})
	}
}

// Unwatched lists the groups whose parked jobs have no watch pending or
// running: a park through Lifecycle adds the watch, a job parked without
// one (written by hand here) is listed until its group's watch exists.
func TestUnwatched(t *testing.T) {
	ctx := context.Background()
	s, jobs, kdb := setupStore(t)
	for _, id := range []string{"t1", "t2"} {
		_, err := kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) {
			return nil, s.AddJob(ctx, tr, id, nil, &JobData{RepUser: "u", State: StatePending}, 1, time.Hour)
		})
		require.NoError(t, err)
		job, err := jobs.Accept(ctx, JobType, fdbjobs.AcceptOptions{MaxScheduledTime: 2})
		require.NoError(t, err)
		d, err := DecodeJobData(job.Data)
		require.NoError(t, err)
		d.State, d.Parked = StateParked, &ParkInfo{Group: "http://" + id + "/", SourceDB: "db", SweepAt: 1 << 40}
		_, err = kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) { return nil, s.ResubmitJob(ctx, tr, job, d, 1<<40) })
		require.NoError(t, err)
	}
	unwatched, err := s.Unwatched(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"http://t1/", "http://t2/"}, unwatched)
	_, err = kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) { return nil, s.ensureWatch(ctx, tr, "http://t1/") })
	require.NoError(t, err)
	unwatched, err = s.Unwatched(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"http://t2/"}, unwatched)
}

// setupStore returns a Store on a fresh store with its types registered
// (job timeout an hour), its job layer client and the store.
// acceptDocJob adds the pending job of document doc of database db
// (scheduled at 1,000) and accepts it: its id, the held job and its data.
func acceptDocJob(t *testing.T, s *Store, jobs *fdbjobs.Client, kdb kv.Database, db, doc string) (string, *fdbjobs.Job, *JobData) {
	t.Helper()
	ctx := context.Background()
	var id string
	_, err := kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) {
		uuid, err := s.DBUUID(tr, db)
		if err != nil {
			return nil, err
		}
		id = DocJobID(uuid, doc)
		d := &JobData{DBName: db, DBUUID: uuid, DocID: doc, State: StatePending, StartTime: 1_000_000}
		return nil, s.AddJob(ctx, tr, id, nil, d, 1_000, time.Hour)
	})
	require.NoError(t, err)
	job, err := jobs.Accept(ctx, JobType, fdbjobs.AcceptOptions{MaxScheduledTime: 2_000})
	require.NoError(t, err)
	d, err := DecodeJobData(job.Data)
	require.NoError(t, err)
	return id, job, d
}

func setupStore(t *testing.T) (*Store, *fdbjobs.Client, kv.Database) {
	t.Helper()
	kdb := kvtest.NewDB(t)
	jobs, err := fdbjobs.New(kdb, fdbjobs.Config{})
	require.NoError(t, err)
	s := NewStore(kdb, jobs, nil)
	_, err = s.Setup(context.Background(), time.Hour, 0)
	require.NoError(t, err)
	return s, jobs, kdb
}

// OwnerRunning leaves out the job it is asked about: a start whose
// earlier attempt committed unseen (commit_unknown_result) finds its own
// running key and must not count it against its owner's limit, which
// would hold the job back from the run it just started.
func TestOwnerRunningLeavesOutTheStartingJob(t *testing.T) {
	s, jobs, kdb := setupStore(t)
	ctx := context.Background()
	start := func(doc string) string {
		var id string
		_, err := kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) {
			uuid, err := s.DBUUID(tr, "_replicator")
			if err != nil {
				return nil, err
			}
			id = DocJobID(uuid, doc)
			d := &JobData{DBName: "_replicator", DBUUID: uuid, DocID: doc, DocOwner: "bob", State: StatePending}
			return nil, s.AddJob(ctx, tr, id, nil, d, 1_000, time.Hour)
		})
		require.NoError(t, err)
		job, err := jobs.Accept(ctx, JobType, fdbjobs.AcceptOptions{MaxScheduledTime: 2_000})
		require.NoError(t, err)
		require.Equal(t, id, job.ID)
		d, err := DecodeJobData(job.Data)
		require.NoError(t, err)
		d.State, d.Node = StateRunning, "n1"
		_, err = kv.Transact(ctx, kdb, func(tr kv.Transaction) (any, error) { return nil, s.UpdateJob(ctx, tr, job, d) })
		require.NoError(t, err)
		return id
	}
	running := func(limit int, except string) int {
		n, err := kv.ReadTransact(ctx, kdb, func(tr kv.ReadTransaction) (int, error) { return s.OwnerRunning(tr, "bob", limit, except) })
		require.NoError(t, err)
		return n
	}
	a := start("a")
	require.Equal(t, 1, running(1, ""))
	require.Zero(t, running(1, a), "the starting job counted itself")
	b := start("b")
	for _, tc := range []struct {
		limit  int
		except string
		want   int
	}{{1, "", 1}, {2, "", 2}, {1, a, 1}, {2, a, 1}, {2, b, 1}, {3, "other", 2}} {
		require.Equal(t, tc.want, running(tc.limit, tc.except), "limit %d except %q", tc.limit, tc.except)
	}
}
