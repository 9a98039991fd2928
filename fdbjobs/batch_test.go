package fdbjobs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestAddBatch(t *testing.T) {
	b := setup(t)
	ctx, c := b.ctx, b.c
	// Jobs in each state before the batch: finished, pending, running.
	b.add(t, t1, "fin", `{"old":1}`, 0)
	require.NoError(t, c.Finish(ctx, nil, b.accept(t, t1), nil))
	b.add(t, t1, "run", `{"old":2}`, 0)
	running := b.accept(t, t1)
	b.add(t, t1, "pend", `{"old":3}`, 7)
	before := b.pendingCounter(t, t1)

	require.NoError(t, c.AddBatch(ctx, nil, t1, []NewJob{
		{ID: "new1", Data: raw(`{"n":1}`)},
		{ID: "new2", ScheduledTime: 3},
		{ID: "fin", Data: raw(`{"new":1}`), ScheduledTime: 4},
		{ID: "run", Data: raw(`{"new":2}`), ScheduledTime: 5},
		{ID: "pend", Data: raw(`{"new":3}`), ScheduledTime: 7},
	}))
	require.Equal(t, `{"n":1}`, b.data(t, t1, "new1"))
	require.Equal(t, "{}", b.data(t, t1, "new2"))
	require.Equal(t, int64(3), b.stime(t, t1, "new2"))
	require.Equal(t, Pending, b.state(t, t1, "fin"), "a finished job is resubmitted, as by Add")
	require.Equal(t, `{"new":1}`, b.data(t, t1, "fin"))
	require.Equal(t, Running, b.state(t, t1, "run"))
	require.Equal(t, `{"old":2}`, b.data(t, t1, "run"), "a running job keeps its data")
	require.Equal(t, `{"old":3}`, b.data(t, t1, "pend"), "a job pending at the same time is left alone")
	cnt, err := c.PendingCount(ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 4, cnt)
	after := b.pendingCounter(t, t1)
	require.Equal(t, kv.Int64(1+kv.DecodeInt64(before)), after, "one wake-up per batch")

	require.NoError(t, c.Update(ctx, nil, running, nil))
	require.True(t, running.Resubmitted)
	require.Equal(t, int64(5), running.ScheduledTime)
	require.NoError(t, c.Finish(ctx, nil, running, nil))
	require.Equal(t, Pending, b.state(t, t1, "run"), "Finish re-enqueues the resubmitted job")
	require.Equal(t, kv.Int64(2+kv.DecodeInt64(before)), b.pendingCounter(t, t1))
}

func TestAddBatchRefusals(t *testing.T) {
	b := setup(t)
	ctx, c := b.ctx, b.c
	many := make([]NewJob, MaxBatch+1)
	for i := range many {
		many[i].ID = fmt.Sprintf("j%d", i)
	}
	for name, tc := range map[string]struct {
		typ  string
		jobs []NewJob
		want error
	}{
		"empty":        {t1, nil, ErrInvalidArgument},
		"too many":     {t1, many, ErrInvalidArgument},
		"no type":      {"", []NewJob{{ID: j1}}, ErrInvalidArgument},
		"no id":        {t1, []NewJob{{ID: j1}, {}}, ErrInvalidArgument},
		"twice":        {t1, []NewJob{{ID: j1}, {ID: j2}, {ID: j1}}, ErrInvalidArgument},
		"bad data":     {t1, []NewJob{{ID: j1, Data: raw(`{1:2}`)}}, ErrInvalidData},
		"bad stime":    {t1, []NewJob{{ID: j1, ScheduledTime: -1}}, ErrInvalidArgument},
		"no timeout":   {"untyped", []NewJob{{ID: j1}}, ErrNoTypeTimeout},
		"data too big": {t1, []NewJob{{ID: j1, Data: raw(`"` + string(make([]byte, MaxDataSize)) + `"`)}}, ErrDataTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, c.AddBatch(ctx, nil, tc.typ, tc.jobs), tc.want)
		})
	}
	cnt, err := c.PendingCount(ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Zero(t, cnt, "a refused batch adds nothing")
}

// A blocked acceptor wakes on an AddBatch as on an Add.
func TestAddBatchWakesAcceptors(t *testing.T) {
	b := setup(t)
	got := make(chan []*Job, 1)
	errc := make(chan error, 1)
	go func() {
		jobs, err := b.c.AcceptBatch(b.ctx, t1, 10, AcceptOptions{Timeout: time.Hour})
		errc <- err
		got <- jobs
	}()
	require.NoError(t, b.clock.BlockUntilContext(b.ctx, 1))
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: j1}, {ID: j2}}))
	require.NoError(t, <-errc)
	require.NotEmpty(t, <-got)
}

// Finishing every job of one AcceptBatch in one FinishBatch clears the
// call's claim record (once) and the jobs' ACTIVITY keys.
func TestFinishBatchReleasesSharedClaim(t *testing.T) {
	b := setup(t)
	jobs := make([]NewJob, 20)
	for i := range jobs {
		jobs[i].ID = fmt.Sprintf("j%02d", i)
	}
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, jobs))
	for {
		accepted, err := b.c.AcceptBatch(b.ctx, t1, 8, AcceptOptions{})
		if err != nil {
			require.ErrorIs(t, err, ErrNotFound)
			break
		}
		require.Equal(t, 1, b.count(t, keyLeases), "one lease per Accept call")
		items := make([]Completion, len(accepted))
		for i, j := range accepted {
			items[i] = Completion{Job: j}
		}
		errs, err := b.c.FinishBatch(b.ctx, nil, items)
		require.NoError(t, err)
		require.Equal(t, make([]error, len(items)), errs)
		b.requireClean(t)
	}
	for _, j := range jobs {
		require.Equal(t, Finished, b.state(t, t1, j.ID))
	}
}

// pageCounter counts the transactions (retry loops) run through it.
type pageCounter struct {
	kv.Database
	n atomic.Int64
}

func (d *pageCounter) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	d.n.Add(1)
	return d.Database.Transact(ctx, f)
}

// setupBudget is setup on a store that fails any transaction reading or
// writing over 1 MB, whatever FDBREP_KV_BUDGET says. (Its 1 s is left to
// the FDBREP_KV_BUDGET pass: under the race detector on a loaded machine a
// page of 500 jobs can take that long.)
func setupBudget(t *testing.T) *bundle {
	budget := kv.Budget{Bytes: kv.DefaultBudget().Bytes}
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true, Budget: &budget})
	c, err := New(db, Config{})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, t1, 2*time.Second))
	return &bundle{c: c, db: db, ctx: ctx}
}

// AddBatch in its own transactions pages by jobs and bytes, each page
// within FoundationDB's advice, and wakes acceptors once per page.
func TestAddBatchPages(t *testing.T) {
	b := setupBudget(t)
	data := raw(`"` + strings.Repeat("x", 1000) + `"`)
	jobs := make([]NewJob, MaxBatch)
	for i := range jobs {
		jobs[i] = NewJob{ID: fmt.Sprintf("j%05d", i), Data: data}
	}
	pc := &pageCounter{Database: b.db}
	require.NoError(t, b.c.AddBatch(b.ctx, pc, t1, jobs))
	pages := pc.n.Load()
	require.Greater(t, pages, int64(MaxBatch/AddPageJobs), "the bytes cut pages shorter than AddPageJobs")
	require.Less(t, pages, int64(2*MaxBatch*len(data)/AddPageBytes))
	cnt, err := b.c.PendingCount(b.ctx, nil, t1, 0, MaxBatch+1)
	require.NoError(t, err)
	require.Equal(t, MaxBatch, cnt)
	require.Equal(t, kv.Int64(pages), b.pendingCounter(t, t1), "one wake-up per page")

	// Small jobs: pages of AddPageJobs.
	for i := range jobs {
		jobs[i] = NewJob{ID: fmt.Sprintf("s%05d", i)}
	}
	pc.n.Store(0)
	require.NoError(t, b.c.AddBatch(b.ctx, pc, t1, jobs))
	require.Equal(t, int64(MaxBatch/AddPageJobs), pc.n.Load())
}

// A page whose reads keep failing (a loaded cluster's process_behind, one
// read in a hundred here) is retried with half its jobs each time, down to
// 50, so a batch of full pages, which would seldom commit (0.99^500 <
// 0.007), gets through, every job added once.
func TestAddBatchPagesShrinkUnderReadErrors(t *testing.T) {
	b := setupBudget(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	faulty := faultkv.Wrap(b.db, faultkv.Options{Seed: seed, ProcessBehind: 0.01, CommitUnknownResult: 0.1})
	c, err := New(faulty, Config{})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	jobs := make([]NewJob, 3*AddPageJobs)
	for i := range jobs {
		jobs[i] = NewJob{ID: fmt.Sprintf("j%05d", i)}
	}
	pc := &pageCounter{Database: faulty}
	require.NoError(t, c.AddBatch(b.ctx, pc, t1, jobs))
	cnt, err := b.c.PendingCount(b.ctx, nil, t1, 0, len(jobs)+1)
	require.NoError(t, err)
	require.Equal(t, len(jobs), cnt)
	st, _ := faultkv.StatsOf(faulty)
	require.Positive(t, st.ProcessBehind, "reads failed")
	require.Greater(t, pc.n.Load(), int64(3), "pages shrank")
}

// Fresh jobs are written without reading their rows: one whose id exists
// replaces that job (its worker's Update is halted), where one without Fresh is
// resubmitted as Add does; a page retried after commit_unknown_result reads
// the rows and leaves alone what its first commit added and a worker took.
func TestAddBatchFresh(t *testing.T) {
	// No injected faults: a failed first attempt would read the rows.
	b := setupBudget(t)
	b.add(t, t1, "run", `{"old":1}`, 0)
	running := b.accept(t, t1)
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{
		{ID: "new", Data: raw(`{"n":1}`), Fresh: true},
		{ID: "run", Data: raw(`{"new":1}`), ScheduledTime: 3, Fresh: true},
	}))
	require.Equal(t, `{"n":1}`, b.data(t, t1, "new"))
	require.Equal(t, Pending, b.state(t, t1, "run"), "replaced, not flagged for resubmission")
	require.Equal(t, `{"new":1}`, b.data(t, t1, "run"))
	require.ErrorIs(t, b.c.Update(b.ctx, nil, running, nil), ErrHalt)

	idb := &interleaveDB{Database: b.db}
	c, err := New(idb, Config{})
	require.NoError(t, err)
	require.NoError(t, c.CheckLayout(b.ctx)) // before any interleaving
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, t2, time.Minute))
	idb.between = func() {
		jobs, err := b.c.AcceptBatch(b.ctx, t2, 2, AcceptOptions{})
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		require.NoError(t, b.c.Finish(b.ctx, nil, jobs[0], nil))
	}
	require.NoError(t, c.AddBatch(b.ctx, nil, t2, []NewJob{{ID: j1, Fresh: true}, {ID: j2, Fresh: true}}))
	cnt, err := b.c.PendingCount(b.ctx, nil, t2, 0, 0)
	require.NoError(t, err)
	require.Zero(t, cnt, "the retried page must not re-enqueue the jobs its first commit added")
	active, err := b.c.ActiveJobIDs(b.ctx, nil, t2)
	require.NoError(t, err)
	require.Len(t, active, 1, "one job still running, untouched")
}

// Rows of existing jobs larger than planned cut a page short, and the
// pages after it are smaller.
func TestAddBatchPageCutByExistingRows(t *testing.T) {
	b := setupBudget(t)
	big := raw(`"` + strings.Repeat("x", 30_000) + `"`)
	jobs := make([]NewJob, 20)
	for i := range jobs {
		jobs[i] = NewJob{ID: fmt.Sprintf("j%02d", i), Data: big}
	}
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, jobs))
	for taken := 0; taken < len(jobs); { // in two accepts: 600 kB of data
		running, err := b.c.AcceptBatch(b.ctx, t1, len(jobs), AcceptOptions{})
		require.NoError(t, err)
		taken += len(running)
	}

	// Adding them again with small data plans one page; each job's row is
	// read and written again with its 30 kB of data (it is running).
	again := make([]NewJob, len(jobs))
	for i, j := range jobs {
		again[i] = NewJob{ID: j.ID, ScheduledTime: 9}
	}
	pc := &pageCounter{Database: b.db}
	require.NoError(t, b.c.AddBatch(b.ctx, pc, t1, again))
	require.Greater(t, pc.n.Load(), int64(2))
	for _, j := range jobs {
		r, err := b.c.readJob(b.ctx, nil, t1, j.ID)
		require.NoError(t, err)
		require.Equal(t, Running, r.state)
		require.True(t, r.resubmit, j.ID)
		require.Equal(t, int64(9), r.stime)
	}
}

// Joined to a caller's transaction, AddBatch takes one page at most.
func TestAddBatchInCallersTransaction(t *testing.T) {
	b := setupBudget(t)
	jobs := func(n, size int, prefix string) []NewJob {
		out := make([]NewJob, n)
		for i := range out {
			out[i] = NewJob{ID: fmt.Sprintf("%s%04d", prefix, i), Data: raw(`"` + strings.Repeat("x", size) + `"`)}
		}
		return out
	}
	for name, batch := range map[string][]NewJob{
		"too many jobs":  jobs(AddPageJobs+1, 1, "a"),
		"too many bytes": jobs(5, MaxDataSize-10, "b"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
				return nil, b.c.AddBatch(b.ctx, tr, t1, batch)
			})
			require.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
	_, err := b.db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
		return nil, b.c.AddBatch(b.ctx, tr, t1, jobs(AddPageJobs, 1, "c"))
	})
	require.NoError(t, err)
	cnt, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Equal(t, AddPageJobs, cnt)
}

// An AcceptBatch of large jobs takes those whose data fit claimBytesMax
// (at least one), and leaves the others pending for the next accepts: its
// transaction stays small whatever n is.
func TestAcceptBatchBoundsBytes(t *testing.T) {
	b := setup(t)
	const size, n = 60_000, 20
	per := claimBytesMax / size
	data := raw(`{"pad":"` + strings.Repeat("x", size-10) + `"}`)
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{ID: fmt.Sprintf("big%02d", i), Data: data}
	}
	require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, jobs))
	seen := map[string]bool{}
	for len(seen) < n {
		got, err := b.c.AcceptBatch(b.ctx, t1, n, AcceptOptions{})
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), per, "an accept takes no more than its bytes allow")
		require.Equal(t, min(per, n-len(seen)), len(got))
		for _, j := range got {
			require.False(t, seen[j.ID], "job %s taken twice", j.ID)
			seen[j.ID] = true
			require.Equal(t, Running, b.state(t, t1, j.ID))
		}
	}
	left, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Zero(t, left)
}
