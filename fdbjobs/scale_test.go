package fdbjobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// attemptsDB counts the attempts and commits of the read-write
// transactions run through it (FoundationDB's conflicts are what make a
// transaction run again; the embedded store resolves them as its
// resolvers do).
type attemptsDB struct {
	kv.Database
	attempts, commits atomic.Int64
}

func (d *attemptsDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	v, err := d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) {
		d.attempts.Add(1)
		return f(tr)
	})
	if err == nil {
		d.commits.Add(1)
	}
	return v, err
}

// A hundred nodes with four acceptors each burn down one type's queue: the
// shards keep their acceptors apart, so few transactions run twice (the
// issue's goal: at most 1.1 attempts per committed transaction), and every
// job runs exactly once.
func TestHundredNodes(t *testing.T) {
	nodes, acceptors, jobs, batch := 100, 4, 40_000, 10
	// The simulation proper is on the embedded store, whose resolver
	// counts conflicts as FoundationDB's. Under the race detector (which
	// slows and reorders the 400 goroutines many times over) and on a real
	// FoundationDB on this machine's cores, the jobs must still run once
	// each, but the count of attempts says more about the goroutines'
	// scheduling than about the shards: it is logged, not bounded. Under
	// injected storage faults (FDBREP_KV_FAULTS) every fault is one more
	// attempt, so the count is logged there too.
	_, faults, err := faultkv.FromEnv()
	require.NoError(t, err)
	simulated := !testing.Short() && !testutil.Race && !faults && !kvtest.OnFoundationDB(t)
	if !simulated {
		jobs = 4_000
	}
	// 400 acceptors on this machine's two cores, beside the other
	// packages' tests: a transaction may wait longer than a second for a
	// core (the latency pass once saw 1.24 s). Their sizes stay checked.
	kvtest.ExemptFromBudgetDuration(t)
	b := setup(t)
	// As many shards as acceptors (doc.go, "Shards"): each node owns four,
	// one for each of its acceptors, which take from others' only when
	// their node's have nothing more due. 100 jobs a shard: a burn-down's
	// end, when idle nodes help and meet, is a tenth of it.
	const shards = 400
	require.NoError(t, b.c.SetTypeShards(b.ctx, nil, t1, shards))
	for start := 0; start < jobs; start += 5000 {
		var page []NewJob
		for i := start; i < min(jobs, start+5000); i++ {
			page = append(page, NewJob{ID: fmt.Sprintf("job-%06d", i)})
		}
		require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, page))
	}

	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
	}
	db := &attemptsDB{Database: b.db}
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		wg   sync.WaitGroup
	)
	errc := make(chan error, nodes*acceptors)
	for i := range nodes {
		c, err := New(db, Config{Clock: b.clock, Members: func() (string, []string) { return names[i], names }})
		require.NoError(t, err)
		for range acceptors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, err := c.AcceptBatch(b.ctx, t1, batch, AcceptOptions{MaxScheduledTime: 1})
					if err != nil {
						if !errors.Is(err, ErrNotFound) {
							errc <- err
						}
						return
					}
					items := make([]Completion, len(got))
					mu.Lock()
					for k, j := range got {
						runs[j.ID]++
						items[k] = Completion{Job: j}
					}
					mu.Unlock()
					errs, err := c.FinishBatch(b.ctx, nil, items)
					if err != nil {
						errc <- err
						return
					}
					for _, e := range errs {
						if e != nil {
							errc <- e
							return
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	require.Len(t, runs, jobs, "every job ran")
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	n, err := b.c.PendingCount(b.ctx, nil, t1, 1, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	ratio := float64(db.attempts.Load()) / float64(db.commits.Load())
	t.Logf("%d nodes x %d acceptors, %d shards, %d jobs in batches of %d: %d transactions, %.3f attempts per committed transaction",
		nodes, acceptors, shards, jobs, batch, db.commits.Load(), ratio)
	if simulated {
		require.LessOrEqual(t, ratio, 1.1)
	}
	b.requireClean(t)
}
