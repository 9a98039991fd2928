package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// retryMode is how retryDB runs a transaction function.
type retryMode int

const (
	// afterCommit runs the function, commits, then runs it again in the
	// same transaction and commits again: what the retry loop does after a
	// commit that succeeded but reported commit_unknown_result.
	afterCommit retryMode = iota
	// afterConflict runs the function, discards the attempt (as after
	// not_committed) and runs it again in the same transaction.
	afterConflict
)

// retryDB makes every read-write transaction run its function twice (see
// retryMode), as the retry loop would: the second run is in the same
// Transaction after OnError with the matching error (its Locals kept).
// Each run uses the inner store's retry loop, so injected faults
// (FDBREP_KV_FAULTS=1) are retried as usual. between, if set, runs
// between the two.
type retryDB struct {
	kv.Database
	mode    retryMode
	between func()
}

func (d retryDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	tr, err := d.Database.CreateTransaction()
	if err != nil {
		return nil, err
	}
	defer tr.Cancel()
	same := func() (kv.Transaction, error) { return tr, nil }
	code := kv.CodeNotCommitted
	switch d.mode {
	case afterCommit:
		if _, err := kv.Run(ctx, same, f); err != nil {
			return nil, err
		}
		code = kv.CodeCommitUnknownResult
	case afterConflict:
		_, _ = f(tr) // discarded either way (an injected fault may end it early)
		tr.Locals().Failed(kv.Error{Code: code})
	}
	if d.between != nil {
		d.between()
	}
	if _, err := tr.OnError(kv.Error{Code: code}).Get(); err != nil {
		return nil, err
	}
	return kv.Run(ctx, same, f)
}

// newRetryPlane is a control plane on c's store whose transactions all run
// twice, with counters of its own.
func newRetryPlane(t *testing.T, c *replicatortest.Cluster, mode retryMode) *control.Plane {
	t.Helper()
	cfg := c.Config.Config
	cfg.Metrics = replicator.NewMetrics()
	p, err := control.New(replicator.NewStore(retryDB{Database: c.DB, mode: mode}, c.Jobs, nil), cfg)
	require.NoError(t, err)
	return p
}

func replicateBody(t *testing.T, v map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// writeDoc runs the control plane's document hooks in a transaction of db.
func writeDoc(t *testing.T, p *control.Plane, db kv.Transactor, repDB, id string, doc map[string]any) error {
	t.Helper()
	parsed, _ := p.ParseDoc(repDB, id, replicateBody(t, doc), api.Admin())
	ctx := context.Background()
	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		_, err := p.DocWritten(ctx, tr, parsed)
		return nil, err
	})
	return err
}

// Cancelling a POST /_replicate job whose transaction committed but
// reported commit_unknown_result reports it cancelled, not missing.
func TestCancelAfterUnknownCommit(t *testing.T) {
	c := replicatortest.NewCluster(t, 1, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	admin := replicator.UserCtx{Name: "adm", Roles: []string{"_admin"}}
	rep := map[string]any{"source": "http://h/cs", "target": "http://h/ct", "continuous": true}
	o, err := c.Plane.Replicate(ctx, replicateBody(t, rep), admin)
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)

	p := newRetryPlane(t, c, afterCommit)
	rep["cancel"] = true
	o, err = p.Replicate(ctx, replicateBody(t, rep), admin)
	require.NoError(t, err)
	require.Equal(t, api.Cancelled, o.Outcome, "%+v", o)
	require.EqualValues(t, 1, p.Metrics().Value(replicator.MetricJobsRemoves))

	// The job is gone: a second cancel finds nothing.
	_, err = p.Replicate(ctx, replicateBody(t, rep), admin)
	require.ErrorIs(t, err, replicator.ErrNotFound)
}

// DBCreated run again in the same transaction after a commit keeps the
// identity it registered.
func TestDBCreatedAfterUnknownCommit(t *testing.T) {
	c := replicatortest.NewCluster(t, 0, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	var seen []string
	_, err := retryDB{Database: c.DB, mode: afterCommit}.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if err := c.Plane.DBCreated(ctx, tr, "a/_replicator"); err != nil {
			return nil, err
		}
		u, err := c.Store.RegisteredDB(tr, "a/_replicator")
		if err == nil { // an injected read error ends the attempt
			seen = append(seen, u)
		}
		return nil, err
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(seen), 2)
	for _, u := range seen[1:] {
		require.Equal(t, seen[0], u)
	}
}

// The identity DBCreated chose survives its transaction's retry however
// many other transactions ran in between (a process-wide memo of 256
// entries, which it replaced, forgot it after 256 concurrent writes).
func TestDBCreatedAfterUnknownCommitUnderLoad(t *testing.T) {
	c := replicatortest.NewCluster(t, 0, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	between := func() {
		var g errgroup.Group
		g.SetLimit(16)
		for i := range 300 {
			g.Go(func() error {
				_, err := c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
					return nil, c.Plane.DBCreated(ctx, tr, fmt.Sprintf("load%03d/_replicator", i))
				})
				return err
			})
		}
		require.NoError(t, g.Wait())
	}
	var seen []string
	_, err := retryDB{Database: c.DB, mode: afterCommit, between: between}.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if err := c.Plane.DBCreated(ctx, tr, "a/_replicator"); err != nil {
			return nil, err
		}
		u, err := c.Store.RegisteredDB(tr, "a/_replicator")
		if err == nil { // an injected read error ends the attempt
			seen = append(seen, u)
		}
		return nil, err
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(seen), 2)
	for _, u := range seen[1:] {
		require.Equal(t, seen[0], u)
	}
}

// Counters count commits, not attempts.
func TestMetricsCountCommitsNotAttempts(t *testing.T) {
	c := replicatortest.NewCluster(t, 1, simengine.New(), replicatortest.Config())
	ctx := context.Background()

	// POST /_replicate whose first attempt conflicts.
	p := newRetryPlane(t, c, afterConflict)
	rep := map[string]any{"source": "http://h/ms", "target": "http://h/mt", "continuous": true}
	o, err := p.Replicate(ctx, replicateBody(t, rep), replicator.UserCtx{Name: "u"})
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome)
	require.EqualValues(t, 1, p.Metrics().Value(replicator.MetricJobsAdds))

	// A document write whose first attempt conflicts.
	err = writeDoc(t, c.Plane, retryDB{Database: c.DB, mode: afterConflict}, "_replicator", "d",
		replicatortest.RepDoc("http://h/ds", "http://h/dt", true))
	require.NoError(t, err)
	m := c.Plane.Metrics()
	if _, faults, _ := faultkv.FromEnv(); faults {
		// An injected commit_unknown_result after a commit that happened
		// leaves it uncounted: counters count commits known to have
		// happened, so at most once.
		require.LessOrEqual(t, m.Value(replicator.MetricJobsAdds), int64(1))
		require.LessOrEqual(t, m.Value(replicator.MetricDocsDBChanges), int64(1))
		return
	}
	// Counted by the commit, before Transact returned.
	require.EqualValues(t, 1, m.Value(replicator.MetricJobsAdds))
	require.EqualValues(t, 1, m.Value(replicator.MetricDocsDBChanges))
}

// A document write run again after its commit (commit_unknown_result)
// recognises the job its first run added even when that job has finished
// in between: the replication does not run a second time.
func TestDocWrittenAfterUnknownCommitJobFinished(t *testing.T) {
	eng := simengine.New()
	eng.OneShot = 20 * time.Millisecond
	c := replicatortest.NewCluster(t, 1, eng, replicatortest.Config())
	ctx := context.Background()
	parsed, _ := c.Plane.ParseDoc("_replicator", "o", replicateBody(t, replicatortest.RepDoc("http://h/os", "http://h/ot", false)), api.Admin())
	runs := 0
	_, err := retryDB{Database: c.DB, mode: afterCommit}.Transact(ctx, func(tr kv.Transaction) (any, error) {
		runs++
		if _, err := c.Plane.SchedulerDoc(ctx, "_replicator", "o"); err == nil {
			// An earlier run committed; its one-shot job completes before
			// this retry.
			c.WaitDocState("_replicator", "o", replicator.StateCompleted)
		}
		_, err := c.Plane.DocWritten(ctx, tr, parsed)
		return nil, err
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, runs, 2)
	_, st := c.JobSTime(c.DocJobID("_replicator", "o"))
	require.Equal(t, fdbjobs.Finished, st)
	require.Equal(t, replicator.StateCompleted, c.DocState("_replicator", "o").State)
	require.Equal(t, 1, eng.Starts("http://h/os/"))
}

// The first document write works even when the caller's transaction
// began before the job type was registered (a retry of the caller's loop
// at worst).
func TestDocWrittenRegistersTypeInCallersTransaction(t *testing.T) {
	c := replicatortest.NewCluster(t, 0, simengine.New(), replicatortest.Config())
	ctx := context.Background()
	parsed, err := c.Plane.ParseDoc("_replicator", "d", replicateBody(t, replicatortest.RepDoc("http://h/a", "http://h/b", true)), api.Admin())
	require.NoError(t, err)
	_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if _, err := tr.GetReadVersion().Get(); err != nil {
			return nil, err
		}
		_, err := c.Plane.DocWritten(ctx, tr, parsed)
		return nil, err
	})
	require.NoError(t, err)
	require.Equal(t, replicator.StatePending, c.DocState("_replicator", "d").State)
}

// Ending a crashing job's backoff, run again after a commit that reported
// commit_unknown_result, answers as its first attempt did, even when an
// acceptor took the job in between (a retry that read "running" answered
// a conflict).
func TestRetryJobAfterUnknownCommitJobStarted(t *testing.T) {
	eng := simengine.New()
	eng.Started.Init()
	cfg := replicatortest.Config()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	c := replicatortest.NewCluster(t, 1, eng, cfg)
	const src = "http://h/rs/"
	eng.SetFail(src, fmt.Errorf("%w: could not open %s", engine.ErrDBNotFound, src))
	c.PutDoc("_replicator", "r", replicatortest.RepDoc(src, "http://h/rt", true))
	id := c.DocJobID("_replicator", "r")
	c.WaitJob("crashing", id, func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && d.State == replicator.StateCrashing
	})
	eng.SetFail(src, nil)

	db := retryDB{Database: c.DB, mode: afterCommit, between: func() {
		c.WaitJob("running again", id, func(st fdbjobs.State, d *replicator.JobData) bool {
			return st == fdbjobs.Running && d != nil && d.State == replicator.StateRunning
		})
	}}
	ccfg := c.Config.Config
	ccfg.Metrics = replicator.NewMetrics()
	p, err := control.New(replicator.NewStore(db, c.Jobs, nil), ccfg)
	require.NoError(t, err)
	r, err := p.RetryJob(context.Background(), api.Admin(), id)
	require.NoError(t, err)
	require.True(t, r.OK)
	// The job is marked running before its run starts: wait for the run.
	for eng.Starts(src) < 2 {
		testutil.WaitUntil(t, &eng.Started, "the second run", func(string) bool { return true })
	}
	require.Equal(t, 2, eng.Starts(src))
}

// A worker's crash, written again after a commit that reported
// commit_unknown_result, leaves the job where it is by then: an operator
// who ended its backoff in between (POST /_scheduler/jobs/{id}/_retry)
// does not see the job moved back to the end of its backoff by the
// worker's retry (it stayed pending, for the hour, with no node taking
// it).
func TestCrashWrittenAfterUnknownCommitBackoffEnded(t *testing.T) {
	cfg := replicatortest.Config()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	c := replicatortest.NewCluster(t, 0, simengine.New(), cfg)
	ctx := context.Background()
	c.PutDoc("_replicator", "r", replicatortest.RepDoc("http://h/cs", "http://h/ct", true))
	id := c.DocJobID("_replicator", "r")
	job, err := c.Jobs.Accept(ctx, replicator.JobType, fdbjobs.AcceptOptions{})
	require.NoError(t, err)
	require.Equal(t, id, job.ID)
	d, err := replicator.DecodeJobData(job.Data)
	require.NoError(t, err)

	var retried *replicator.JobData
	store := replicator.NewStore(retryDB{Database: c.DB, mode: afterCommit, between: func() {
		var err error
		retried, err = c.Store.EndBackoff(ctx, id, time.Now(), nil)
		require.NoError(t, err)
	}}, c.Jobs, nil)
	l := replicator.Lifecycle{Store: store, Backoff: func(int, float64) time.Duration { return time.Hour }}
	_, err = store.Transact(ctx, func(tr kv.Transaction) (any, error) {
		x := d.Clone()
		return nil, l.Apply(ctx, tr, job, x, replicator.Change{Kind: replicator.Crashed, At: time.Now(), Reason: "boom"})
	})
	require.NoError(t, err)
	require.NotNil(t, retried, "the backoff was ended between the attempts")
	stime, st := c.JobSTime(id)
	require.Equal(t, fdbjobs.Pending, st)
	require.Equal(t, retried.RetryAt, stime, "pending at the time the backoff was ended, not an hour on")
	got, _, err := c.Store.Job(ctx, nil, id)
	require.NoError(t, err)
	require.Equal(t, retried.RetryAt, got.RetryAt)
}
