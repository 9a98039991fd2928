package replicator

import (
	"context"
	"fmt"
	"strings"
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
	_, err = s.Setup(ctx, time.Hour)
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
			d := &JobData{DBName: "big/_replicator", DBUUID: uuid, DocID: doc, State: StatePending, FilterCode: code}
			return nil, s.AddJob(ctx, tr, DocJobID(uuid, doc), nil, d, 0, time.Hour)
		})
		require.NoError(t, err)
	}

	p, err := s.DocsPage(ctx, DocsQuery{Limit: n})
	require.NoError(t, err)
	require.Len(t, p.Jobs, n)
	require.Equal(t, n, p.Total)
	for i, j := range p.Jobs {
		require.Equal(t, fmt.Sprintf("d%02d", i), j.Data.DocID)
	}
	jp, err := s.JobsPage(ctx, "", "", n, 0)
	require.NoError(t, err)
	require.Len(t, jp.Jobs, n)

	// The backfill of a store that predates the index.
	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.ClearRange(subspaceRange(s.entries))
		tr.Clear(s.indexVersionKey())
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
	removed, err := s.RemoveDeletedDBJobs(ctx, "n1", time.Now, time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, n, removed)
	left, err := jobs.ReadJobs(ctx, nil, JobType, []string{DocJobID(uuid, "d00"), DocJobID(uuid, "d59")})
	require.NoError(t, err)
	require.Equal(t, fdbjobs.NotFound, left[0].State)
	require.Equal(t, fdbjobs.NotFound, left[1].State)
}
