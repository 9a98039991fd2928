package replicator

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
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
// retryMode). Each run uses the inner store's retry loop, so injected
// faults (FDBREP_KV_FAULTS=1) are retried as usual.
type retryDB struct {
	kv.Database
	mode retryMode
}

func (d retryDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	tr, err := d.Database.CreateTransaction()
	if err != nil {
		return nil, err
	}
	defer tr.Cancel()
	same := func() (kv.Transaction, error) { return tr, nil }
	switch d.mode {
	case afterCommit:
		if _, err := kv.Run(ctx, same, f); err != nil {
			return nil, err
		}
	case afterConflict:
		_, _ = f(tr) // discarded either way (an injected fault may end it early)
	}
	tr.Reset()
	return kv.Run(ctx, same, f)
}

func newRetryFrontend(t *testing.T, c *cluster, mode retryMode) *Frontend {
	t.Helper()
	cfg := c.cfg
	cfg.Metrics = NewMetrics()
	fe, err := NewFrontend(retryDB{Database: c.db, mode: mode}, c.feJob, cfg)
	require.NoError(t, err)
	return fe
}

func replicateBody(t *testing.T, v map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// Cancelling a POST /_replicate job whose transaction committed but
// reported commit_unknown_result answers 200, not 404.
func TestCancelAfterUnknownCommit(t *testing.T) {
	c := newCluster(t, 1, newFakeEngine(), testConfig())
	ctx := context.Background()
	admin := UserCtx{Name: "adm", Roles: []string{"_admin"}}
	rep := map[string]any{"source": "http://h/cs", "target": "http://h/ct", "continuous": true}
	status, _, err := c.fe.Replicate(ctx, replicateBody(t, rep), admin)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)

	fe := newRetryFrontend(t, c, afterCommit)
	rep["cancel"] = true
	status, body, err := fe.Replicate(ctx, replicateBody(t, rep), admin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Contains(t, string(body), `"ok":true`)
	require.EqualValues(t, 1, fe.m.Value(MetricJobsRemoves))

	// The job is gone: a second cancel is a 404.
	status, _, err = fe.Replicate(ctx, replicateBody(t, rep), admin)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, status)
}

// DBCreated run again in the same transaction after a commit keeps the
// identity it registered.
func TestDBCreatedAfterUnknownCommit(t *testing.T) {
	c := newCluster(t, 0, newFakeEngine(), testConfig())
	ctx := context.Background()
	var seen []string
	_, err := retryDB{Database: c.db, mode: afterCommit}.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if err := c.fe.DBCreated(ctx, tr, "a/_replicator"); err != nil {
			return nil, err
		}
		v, err := tr.Get(c.fe.k.dbKey("a/_replicator")).Get()
		seen = append(seen, string(v))
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
	c := newCluster(t, 1, newFakeEngine(), testConfig())
	ctx := context.Background()

	// POST /_replicate whose first attempt conflicts.
	fe := newRetryFrontend(t, c, afterConflict)
	rep := map[string]any{"source": "http://h/ms", "target": "http://h/mt", "continuous": true}
	status, _, err := fe.Replicate(ctx, replicateBody(t, rep), UserCtx{Name: "u"})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
	require.EqualValues(t, 1, fe.m.Value(MetricJobsAdds))

	// A document write whose first attempt conflicts.
	raw := replicateBody(t, repDoc("http://h/ds", "http://h/dt", true))
	_, err = retryDB{Database: c.db, mode: afterConflict}.Transact(ctx, func(tr kv.Transaction) (any, error) {
		return nil, c.fe.DocWritten(ctx, tr, "_replicator", "d", raw)
	})
	require.NoError(t, err)
	waitFor(t, "adds counted", func() bool {
		return c.fe.m.Value(MetricJobsAdds) > 0 && c.fe.m.Value(MetricDocsDBChanges) > 0
	})
	require.EqualValues(t, 1, c.fe.m.Value(MetricJobsAdds))
	require.EqualValues(t, 1, c.fe.m.Value(MetricDocsDBChanges))
}

// A document write run again after its commit (commit_unknown_result)
// recognises the job its first run added even when that job has finished
// in between: the replication does not run a second time.
func TestDocWrittenAfterUnknownCommitJobFinished(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	ctx := context.Background()
	raw := replicateBody(t, repDoc("http://h/os", "http://h/ot", false))
	runs := 0
	_, err := retryDB{Database: c.db, mode: afterCommit}.Transact(ctx, func(tr kv.Transaction) (any, error) {
		runs++
		if _, err := c.fe.SchedulerDoc(ctx, "_replicator", "o"); err == nil {
			// An earlier run committed; its one-shot job completes before
			// this retry.
			c.waitDocState("_replicator", "o", StateCompleted)
		}
		return nil, c.fe.DocWritten(ctx, tr, "_replicator", "o", raw)
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, runs, 2)
	_, st := c.jobSTime(c.docJobID("_replicator", "o"))
	require.Equal(t, fdbjobs.Finished, st)
	require.Equal(t, StateCompleted, c.docState("_replicator", "o").State)
	require.Equal(t, 1, eng.startsOf("http://h/os/"))
}
