package fdbjobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// testSeed returns FDBJOBS_SEED or a random seed, logged for replay.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("FDBJOBS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	t.Logf("seed %d (replay with FDBJOBS_SEED=%d)", seed, seed)
	return seed
}

// TestSimulatedNodes runs several nodes (each a Client with its own activity
// monitors and notifiers) and their workers on one database. Workers accept
// batches, heartbeat, finish, and sometimes crash (abandon a job, and later
// try to finish it as a zombie). Every worker writes its effects only in
// transactions fenced by Update or Finish. The model checks that each job
// ran on at most one worker at a time (a worker that updated a job still
// owns it when its Finish commits) and that every job's effect happened
// exactly once.
func TestSimulatedNodes(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	db := kvtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()

	const (
		typ      = "sim"
		nodes    = 3
		workers  = 2
		jobCount = 150
	)
	effects := subspaceFor("sim-effects")
	owners := subspaceFor("sim-owners")

	clients := make([]*Client, nodes)
	for i := range clients {
		c, err := New(db, Config{ActivityMonitorMaxJitter: 20 * time.Millisecond, NotifierHoldoff: time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(c.Stop)
		clients[i] = c
	}
	require.NoError(t, clients[0].SetTypeTimeout(ctx, nil, typ, 150*time.Millisecond))

	var finished, crashed, halted, lateFinished atomic.Int64
	allDone := make(chan struct{})
	var violations sync.Map
	var finishLog sync.Map // job id -> []string
	var logMu sync.Mutex
	noteFinish := func(job *Job, how string) {
		logMu.Lock()
		v, _ := finishLog.Load(job.ID)
		l, _ := v.([]string)
		finishLog.Store(job.ID, append(l, how+" "+job.Lock()))
		logMu.Unlock()
		if finished.Add(1) == jobCount {
			close(allDone)
		}
	}

	// fencedFinish finishes job, adding its effect and checking, when the
	// worker updated the job, that nobody else wrote the owner key since.
	fencedFinish := func(c *Client, job *Job, updated bool) error {
		_, err := c.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			owner, err := tr.Get(owners.Pack(tuple.Tuple{job.ID})).Get()
			if err != nil {
				return nil, err
			}
			if err := c.Finish(ctx, tr, job, raw(fmt.Sprintf(`{"by":%q}`, job.Lock()))); err != nil {
				return nil, err
			}
			if updated && string(owner) != job.Lock() {
				violations.Store(job.ID, fmt.Sprintf("owner %q at finish by %s", owner, job.Lock()))
			}
			// The effect is an idempotent write, as a caller's retry loop
			// may run this function again after its commit: the lock that
			// finished the job.
			tr.Set(effects.Pack(tuple.Tuple{job.ID, job.Lock()}), nil)
			return nil, nil
		})
		return err
	}
	fencedUpdate := func(c *Client, job *Job) error {
		_, err := c.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			if err := c.Update(ctx, tr, job, nil); err != nil {
				return nil, err
			}
			tr.Set(owners.Pack(tuple.Tuple{job.ID}), []byte(job.Lock()))
			return nil, nil
		})
		return err
	}

	var wg sync.WaitGroup
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	errc := make(chan error, nodes*workers)
	for n := range nodes {
		for w := range workers {
			wrng := rand.New(rand.NewPCG(seed, uint64(2+n*workers+w)))
			c := clients[n]
			wg.Add(1)
			go func() {
				defer wg.Done()
				var zombies []*Job
				for {
					jobs, err := c.AcceptBatch(workCtx, typ, 1+wrng.IntN(3), AcceptOptions{Timeout: WaitForever})
					if err != nil {
						if workCtx.Err() == nil {
							errc <- err
						}
						return
					}
					for _, job := range jobs {
						if wrng.IntN(10) == 0 {
							zombies = append(zombies, job) // crash: no more heartbeats
							crashed.Add(1)
							continue
						}
						updated, halted := false, false
						for range wrng.IntN(3) {
							if err := fencedUpdate(c, job); err != nil {
								if !errors.Is(err, ErrHalt) {
									errc <- err
									return
								}
								halted = true
								break
							}
							updated = true
						}
						if halted {
							continue
						}
						switch err := fencedFinish(c, job, updated); {
						case err == nil:
							noteFinish(job, "worker")
						case errors.Is(err, ErrHalt):
						default:
							errc <- err
							return
						}
					}
					// Zombies wake up now and then and try to finish late.
					keep := zombies[:0]
					for _, z := range zombies {
						if wrng.IntN(2) == 0 {
							keep = append(keep, z)
							continue
						}
						switch err := fencedFinish(c, z, false); {
						case err == nil:
							noteFinish(z, "zombie")
							lateFinished.Add(1)
						case errors.Is(err, ErrHalt):
							halted.Add(1)
						default:
							errc <- err
							return
						}
					}
					zombies = keep
				}
			}()
		}
	}

	// Create the jobs in batches, some in a caller's transaction.
	for i := 0; i < jobCount; {
		n := min(jobCount-i, 1+rng.IntN(10))
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			for k := range n {
				// This function may run again after its commit: add only
				// what is not there yet.
				c, id := clients[rng.IntN(nodes)], fmt.Sprintf("job-%04d", i+k)
				if _, err := c.JobState(ctx, tr, typ, id); !errors.Is(err, ErrNotFound) {
					if err != nil {
						return nil, err
					}
					continue
				}
				if err := c.Add(ctx, tr, typ, id, nil, 0); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		require.NoError(t, err)
		i += n
	}

	select {
	case <-allDone:
	case err := <-errc:
		t.Fatalf("worker: %v", err)
	case <-ctx.Done():
		t.Fatalf("only %d of %d jobs finished", finished.Load(), jobCount)
	}
	stopWork()
	wg.Wait()
	t.Logf("%d crashes; %d zombie finishes halted, %d went through before the monitor", crashed.Load(), halted.Load(), lateFinished.Load())
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	violations.Range(func(k, v any) bool {
		t.Errorf("job %v: %v", k, v)
		return true
	})

	finishLog.Range(func(k, v any) bool {
		if l := v.([]string); len(l) > 1 {
			t.Errorf("job %v finished %d times: %v", k, len(l), l)
		}
		return true
	})
	// Every job finished, its effect applied exactly once, and no running
	// bookkeeping left.
	b := &bundle{c: clients[0], db: db, ctx: ctx}
	n := 0
	require.NoError(t, clients[0].FoldJobs(ctx, typ, func(j JobInfo) error {
		n++
		v, _ := finishLog.Load(j.ID)
		require.Equal(t, Finished, j.State, "%s: finishes %v", j.ID, v)
		return nil
	}))
	require.Equal(t, jobCount, n)
	kvs, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.GetRange(effects, kv.RangeOptions{}).GetSliceWithError()
	})
	require.NoError(t, err)
	finishers := map[string][]string{}
	for _, e := range kvs {
		tup, err := effects.Unpack(e.Key)
		require.NoError(t, err)
		finishers[tup[0].(string)] = append(finishers[tup[0].(string)], tup[1].(string))
	}
	require.Len(t, finishers, jobCount)
	for id, locks := range finishers {
		require.Len(t, locks, 1, "job %s finished by %v", id, locks)
	}
	require.Zero(t, b.count(t, keyPending))
	b.requireClean(t)
}

// TestIdempotentUnderCommitUnknownResult runs every operation on a store
// where half the commits that happen report commit_unknown_result, so that
// transaction bodies run again after committing, and checks that each
// operation's outcome is that of a single run.
func TestIdempotentUnderCommitUnknownResult(t *testing.T) {
	seed := testSeed(t)
	db := faultkv.Wrap(kvtest.NewDB(t), faultkv.Options{Seed: seed, CommitUnknownResult: 0.5})
	c, err := New(db, Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	b := &bundle{c: c, db: db, ctx: ctx}
	require.NoError(t, c.SetTypeTimeout(ctx, nil, t1, time.Minute))

	for round := range 10 {
		ids := make([]string, 6)
		var batch []NewJob
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d-j%d", round, i)
			if i < 4 {
				batch = append(batch, NewJob{ID: ids[i], Data: raw(fmt.Sprintf(`{"i":%d}`, i))})
			} else {
				b.add(t, t1, ids[i], fmt.Sprintf(`{"i":%d}`, i), 0)
			}
		}
		require.NoError(t, c.AddBatch(ctx, nil, t1, batch))
		jobs, err := c.AcceptBatch(ctx, t1, 4, AcceptOptions{})
		require.NoError(t, err)
		require.Len(t, jobs, 4, "a retried accept returns what it claimed, no more")
		for range 2 {
			j := b.accept(t, t1)
			jobs = append(jobs, j)
		}
		seen := map[string]bool{}
		for _, j := range jobs {
			require.False(t, seen[j.ID], "job %s accepted twice", j.ID)
			seen[j.ID] = true
		}
		cnt, err := c.PendingCount(ctx, nil, t1, 0, 0)
		require.NoError(t, err)
		require.Zero(t, cnt)
		require.Equal(t, 3, b.count(t, keyLeases), "one lease per Accept call")

		for _, j := range jobs {
			require.NoError(t, c.Update(ctx, nil, j, raw(`{"u":1}`)))
		}
		require.Equal(t, 6, b.count(t, keyLeases), "one lease per committed heartbeat; the Accepts' leases gone with their last job")

		errs, err := c.FinishBatch(ctx, nil, []Completion{{Job: jobs[0]}, {Job: jobs[1]}})
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil}, errs)
		require.NoError(t, c.Finish(ctx, nil, jobs[2], nil))
		require.NoError(t, c.FinishAt(ctx, nil, jobs[3], 5, nil))
		require.Equal(t, Pending, b.state(t, t1, jobs[3].ID))
		require.EqualValues(t, 5, b.stime(t, t1, jobs[3].ID))
		require.NoError(t, c.Remove(ctx, nil, t1, jobs[4].ID))
		require.ErrorIs(t, c.Remove(ctx, nil, t1, jobs[4].ID), ErrNotFound)
		require.ErrorIs(t, c.Finish(ctx, nil, jobs[4], nil), ErrHalt)
		require.NoError(t, c.Finish(ctx, nil, jobs[5], nil))
		for _, j := range []*Job{jobs[0], jobs[1], jobs[2], jobs[5]} {
			require.Equal(t, Finished, b.state(t, t1, j.ID))
		}
		require.Equal(t, 1, b.count(t, keyPending))
		b.requireClean(t)
		require.NoError(t, c.Remove(ctx, nil, t1, jobs[3].ID))
	}
	st, _ := faultkv.StatsOf(db)
	t.Logf("faults: %s", st)
}

func subspaceFor(name string) subspace.Subspace { return subspace.Sub("fdbjobs-test", name) }

// interleaveDB runs the first attempt of each transaction function, commits
// it, runs between, and then reports commit_unknown_result, so that the
// function runs again after its commit with another client's change in
// between: the worst case of a retry. With beforeCommit, between runs
// after the first attempt's function and before its commit instead.
type interleaveDB struct {
	kv.Database
	between      func()
	beforeCommit bool
}

func (d *interleaveDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	first := true
	return d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) {
		v, err := f(tr)
		if err != nil || !first {
			return v, err
		}
		if d.beforeCommit {
			first = false
			d.between()
			return v, nil
		}
		if _, err := tr.Commit().Get(); err != nil {
			return nil, err
		}
		first = false
		if d.between != nil {
			d.between()
		}
		return nil, kv.Error{Code: kv.CodeCommitUnknownResult}
	})
}

func TestRetryAfterCommitWithProgressInBetween(t *testing.T) {
	setupPair := func(t *testing.T) (*bundle, *Client, *interleaveDB) {
		b := setup(t)
		idb := &interleaveDB{Database: b.db}
		c, err := New(idb, Config{Clock: b.clock})
		require.NoError(t, err)
		require.NoError(t, c.CheckLayout(b.ctx)) // before any interleaving
		return b, c, idb
	}
	t.Run("Add then accepted", func(t *testing.T) {
		b, c, idb := setupPair(t)
		var job *Job
		idb.between = func() { job = b.accept(t, t1) }
		require.NoError(t, c.Add(b.ctx, nil, t1, j1, nil, 0))
		require.NoError(t, b.c.Update(b.ctx, nil, job, nil))
		require.False(t, job.Resubmitted, "the retried Add must not resubmit the running job")
		require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
		require.Equal(t, Finished, b.state(t, t1, j1))
	})
	t.Run("AddBatch then accepted and finished", func(t *testing.T) {
		b, c, idb := setupPair(t)
		idb.between = func() {
			jobs, err := b.c.AcceptBatch(b.ctx, t1, 2, AcceptOptions{})
			require.NoError(t, err)
			require.Len(t, jobs, 2)
			require.NoError(t, b.c.Finish(b.ctx, nil, jobs[0], nil))
		}
		require.NoError(t, c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: j1}, {ID: j2}}))
		cnt, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
		require.NoError(t, err)
		require.Zero(t, cnt, "the retried AddBatch must not resubmit the jobs its commit added")
		active, err := b.c.ActiveJobIDs(b.ctx, nil, t1)
		require.NoError(t, err)
		require.Len(t, active, 1, "one job still running, untouched")
	})
	t.Run("Add then finished", func(t *testing.T) {
		b, c, idb := setupPair(t)
		idb.between = func() { require.NoError(t, b.c.Finish(b.ctx, nil, b.accept(t, t1), nil)) }
		require.NoError(t, c.Add(b.ctx, nil, t1, j1, nil, 0))
		require.Equal(t, Finished, b.state(t, t1, j1), "the retried Add must not re-enqueue the finished job")
	})
	t.Run("Resubmit then finished", func(t *testing.T) {
		b, c, idb := setupPair(t)
		b.add(t, t1, j1, "", 0)
		job := b.accept(t, t1)
		require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
		idb.between = func() { require.NoError(t, b.c.Finish(b.ctx, nil, b.accept(t, t1), nil)) }
		require.NoError(t, c.Resubmit(b.ctx, nil, job, 0, nil))
		require.Equal(t, Finished, b.state(t, t1, j1))
	})
	t.Run("Finish then accepted again", func(t *testing.T) {
		b, c, idb := setupPair(t)
		b.add(t, t1, j1, "", 0)
		job := b.accept(t, t1)
		b.add(t, t1, j1, "", 0) // resubmit: Finish makes it pending
		var job2 *Job
		idb.between = func() { job2 = b.accept(t, t1) }
		require.NoError(t, c.Finish(b.ctx, nil, job, nil), "the retried Finish recognises its commit")
		require.Equal(t, Running, b.state(t, t1, j1))
		require.NoError(t, b.c.Update(b.ctx, nil, job2, nil), "and leaves the new holder alone")
	})
	t.Run("FinishAt then resubmitted elsewhere", func(t *testing.T) {
		// The worker's retry must not move the job back to its own time:
		// another client (an operator ending a backoff) moved it since.
		b, c, idb := setupPair(t)
		b.add(t, t1, j1, "", 0)
		job := b.accept(t, t1)
		idb.between = func() { b.add(t, t1, j1, `{"retry":"now"}`, 5) }
		require.NoError(t, c.FinishAt(b.ctx, nil, job, 1000, raw(`{"retry":"later"}`)))
		require.Equal(t, Pending, b.state(t, t1, j1))
		require.EqualValues(t, 5, b.stime(t, t1, j1))
		require.Equal(t, `{"retry":"now"}`, b.data(t, t1, j1))
		require.Equal(t, 1, b.count(t, keyPending))
	})
	t.Run("Update then removed", func(t *testing.T) {
		b, c, idb := setupPair(t)
		b.add(t, t1, j1, "", 0)
		job := b.accept(t, t1)
		idb.between = func() { require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1)) }
		require.ErrorIs(t, c.Update(b.ctx, nil, job, nil), ErrHalt, "the job is gone by the retry")
		b.requireClean(t)
	})
	t.Run("Remove then added again", func(t *testing.T) {
		b, c, idb := setupPair(t)
		b.add(t, t1, j1, "", 0)
		idb.between = func() { b.add(t, t1, j1, `{"new":1}`, 0) }
		require.NoError(t, c.Remove(b.ctx, nil, t1, j1))
		require.Equal(t, `{"new":1}`, b.data(t, t1, j1), "the retried Remove leaves the new job alone")
	})
	t.Run("Accept then removed and added", func(t *testing.T) {
		b, c, idb := setupPair(t)
		b.add(t, t1, j1, "", 0)
		idb.between = func() {
			idb.between = nil
			require.NoError(t, b.c.Remove(b.ctx, nil, t1, j1))
		}
		_, err := c.Accept(b.ctx, t1, AcceptOptions{})
		require.ErrorIs(t, err, ErrNotFound, "the claim was removed; nothing else is pending")
		b.requireClean(t)
	})
	t.Run("AcceptBatch returns its claims", func(t *testing.T) {
		b, c, idb := setupPair(t)
		for i := range 5 {
			b.add(t, t1, fmt.Sprintf("j%d", i), "", 0)
		}
		idb.between = func() { idb.between = nil }
		jobs, err := c.AcceptBatch(b.ctx, t1, 3, AcceptOptions{})
		require.NoError(t, err)
		require.Len(t, jobs, 3)
		cnt, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
		require.NoError(t, err)
		require.Equal(t, 2, cnt)
		for _, j := range jobs {
			require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
		}
		b.requireClean(t)
	})
}
