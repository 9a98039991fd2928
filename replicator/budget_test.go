package replicator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// Pages of big jobs (60 kB of data each: a long filter function), their
// backfill and their removal stay within FoundationDB's advice of 1 MB
// read per transaction (the store fails any transaction over it): pages
// and batches stop early and go on in the next transaction.
func TestBigJobsStayInBudget(t *testing.T) {
	ctx := context.Background()
	budget := kv.DefaultBudget()
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true, Budget: &budget})
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	_, err = s.Setup(ctx, time.Hour, 0)
	require.NoError(t, err)
	const n = 60
	code := strings.Repeat("x", 60_000)
	var uuid string
	for i := 0; i < n; i++ {
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			var err error
			if uuid, err = s.DBUUID(tr, "big/_replicator"); err != nil {
				return nil, err
			}
			doc := fmt.Sprintf("d%02d", i)
			d := &JobData{DBName: "big/_replicator", DBUUID: uuid, DocID: doc, DocOwner: "o", State: StatePending, FilterCode: code}
			return nil, s.AddJob(ctx, tr, DocJobID(uuid, doc), nil, d, 0, time.Hour)
		})
		require.NoError(t, err)
	}

	p, err := s.views.DocsPage(ctx, DocsQuery{Limit: n})
	require.NoError(t, err)
	require.Len(t, p.Jobs, n)
	require.Equal(t, n, p.Total)
	for i, j := range p.Jobs {
		require.Equal(t, fmt.Sprintf("d%02d", i), j.Data.DocID)
	}
	jp, err := s.views.JobsPage(ctx, "", "", n, 0)
	require.NoError(t, err)
	require.Len(t, jp.Jobs, n)
	op, err := s.views.OwnerJobsPage(ctx, "o", "", "", n, 0)
	require.NoError(t, err)
	require.Len(t, op.Jobs, n)
	require.Equal(t, n, op.Total)

	// The backfill of a store that predates the index.
	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.ClearRange(subspaceRange(s.k.entries))
		tr.Clear(s.k.indexVersionKey())
		return nil, nil
	})
	require.NoError(t, err)
	fresh := NewStore(db, jobs, nil)
	require.NoError(t, fresh.buildIndex(ctx))

	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		_, err := s.UnregisterDB(tr, "big/_replicator")
		return nil, err
	})
	require.NoError(t, err)
	removed, err := s.retention.RemoveDeletedDBJobs(ctx, "n1", time.Now, time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, n, removed)
	left, err := jobs.ReadJobs(ctx, nil, JobType, []string{DocJobID(uuid, "d00"), DocJobID(uuid, "d59")})
	require.NoError(t, err)
	require.Equal(t, fdbjobs.NotFound, left[0].State)
	require.Equal(t, fdbjobs.NotFound, left[1].State)
}

// countingDB counts the transaction attempts run through it.
type countingDB struct {
	kv.Database
	attempts atomic.Int64
}

func (c *countingDB) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return c.Database.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) { c.attempts.Add(1); return f(tr) })
}

func (c *countingDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return c.Database.Transact(ctx, func(tr kv.Transaction) (any, error) { c.attempts.Add(1); return f(tr) })
}

// A user's _scheduler/jobs page and running jobs cost what they list, not
// the cluster's jobs: among 2,000 jobs of another user (300 of them
// running), each is one transaction reading under 64 kB, where a fold
// over every job (how users' pages were once cut) goes over that budget.
func TestOwnerPagesCostTheirRows(t *testing.T) {
	ctx := context.Background()
	var overs []*kv.BudgetError
	var mu sync.Mutex
	budget := kv.Budget{Bytes: 64_000}
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true, Budget: &budget, OnBudgetExceeded: func(e *kv.BudgetError) {
		mu.Lock()
		defer mu.Unlock()
		overs = append(overs, e)
	}})
	overBudget := func() int { mu.Lock(); defer mu.Unlock(); return len(overs) }
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	_, err = s.Setup(ctx, time.Hour, 0)
	require.NoError(t, err)

	const others, othersRunning, batch = 2000, 300, 10
	pad := strings.Repeat("x", 500)
	var alice []string // alice's job ids, in _scheduler/jobs order
	for i := 0; i < others; i += batch {
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			uuid, err := s.DBUUID(tr, "_replicator")
			if err != nil {
				return nil, err
			}
			for k := i; k < i+batch; k++ {
				doc := fmt.Sprintf("b%04d", k)
				d := &JobData{DBName: "_replicator", DBUUID: uuid, DocID: doc, DocOwner: "bob", State: StatePending, FilterCode: pad}
				stime := int64(1) << 50 // never accepted below
				if k < othersRunning {
					stime = 0
				}
				if err := s.AddJob(ctx, tr, DocJobID(uuid, doc), nil, d, stime, time.Hour); err != nil {
					return nil, err
				}
			}
			if i%400 == 0 { // alice's, among bob's: a document's and a POST /_replicate's
				doc := fmt.Sprintf("b%04da", i)
				d := &JobData{DBName: "_replicator", DBUUID: uuid, DocID: doc, DocOwner: "alice", State: StatePending}
				if err := s.AddJob(ctx, tr, DocJobID(uuid, doc), nil, d, 0, time.Hour); err != nil {
					return nil, err
				}
				id := fmt.Sprintf("t%04d", i)
				if err := s.AddJob(ctx, tr, id, nil, &JobData{RepUser: "alice", State: StatePending}, 0, time.Hour); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		require.NoError(t, err)
	}
	// Every job scheduled at 0 runs on n1 (rep ids keep the job id order).
	for {
		held, err := jobs.AcceptBatch(ctx, JobType, batch, fdbjobs.AcceptOptions{MaxScheduledTime: 1})
		if errors.Is(err, fdbjobs.ErrNotFound) {
			break
		}
		require.NoError(t, err)
		_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			for _, job := range held {
				d, err := DecodeJobData(job.Data)
				if err != nil {
					return nil, err
				}
				d.State, d.Node, d.RepID = StateRunning, "n1", "rep-"+job.ID
				if err := s.UpdateJob(ctx, tr, job, d); err != nil {
					return nil, err
				}
				if d.Owner() == "alice" {
					alice = append(alice, job.ID)
				}
			}
			return nil, nil
		})
		require.NoError(t, err)
	}
	sort.Slice(alice, func(i, k int) bool { return "rep-"+alice[i] < "rep-"+alice[k] })
	require.Len(t, alice, 10)
	require.Zero(t, overBudget(), "setting up")

	c := &countingDB{Database: db}
	s.db = c
	for _, tc := range []struct {
		name            string
		start, startJob string
		limit, skip     int
		want            []string
	}{
		{"first page", "", "", 3, 0, alice[:3]},
		{"skip", "", "", 2, 7, alice[7:9]},
		{"skip past the end", "", "", 2, 20, nil},
		{"start key", "rep-" + alice[4], alice[4], 3, 0, alice[4:7]},
		{"start key between alice's jobs", "rep-" + alice[4] + "~", "", 1, 1, alice[6:7]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := c.attempts.Load()
			p, err := s.views.OwnerJobsPage(ctx, "alice", tc.start, tc.startJob, tc.limit, tc.skip)
			require.NoError(t, err)
			require.Equal(t, nonNilIDs(tc.want), pageIDs(p))
			require.Equal(t, len(alice), p.Total)
			require.Equal(t, min(tc.skip, len(alice)), p.Offset)
			require.EqualValues(t, 1, c.attempts.Load()-before, "transactions")
			require.Zero(t, overBudget())
		})
	}
	before := c.attempts.Load()
	running, err := s.views.OwnerRunningJobs(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, running, len(alice))
	require.EqualValues(t, 1, c.attempts.Load()-before, "transactions")
	require.Zero(t, overBudget())

	// The contrast: reading every job to pick alice's breaks the budget.
	var be *kv.BudgetError
	require.ErrorAs(t, s.FoldJobs(ctx, func(string, fdbjobs.State, *JobData) error { return nil }), &be,
		"a fold over every job stays under the budget: the test proves nothing")
}
