package kvtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// CycleOptions size the Cycle workload. A zero field takes its default,
// the conformance suite's size.
type CycleOptions struct {
	Keys        int // keys in the ring (12)
	Workers     int // goroutines committing swaps concurrently (4)
	TxPerWorker int // swaps each worker commits (40)
}

func (o CycleOptions) withDefaults() CycleOptions {
	for _, f := range []struct {
		v   *int
		def int
	}{{&o.Keys, 12}, {&o.Workers, 4}, {&o.TxPerWorker, 40}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return o
}

var errCycleCorrupt = errors.New("cycle: value is not a ring index")

// Cycle runs FoundationDB's Cycle workload on db, which must not hold keys
// under "cycle/": a ring of keys, each holding the index of the next. Each
// transaction takes a ring segment a→b→c→d and reorders it to a→c→b→d.
// Every such swap keeps the ring one cycle, but only if the transactions
// are serializable: two swaps that both read a stale segment would split or
// corrupt it. While the workers run, a reader checks the whole ring at a
// single read version, through a range read and by walking it with point
// reads; it checks it once more at the end. The seed of the workers'
// choices is logged (FDBREP_KVTEST_SEED replays it).
func Cycle(t *testing.T, db kv.Database, o CycleOptions) {
	t.Helper()
	o = o.withDefaults()
	ring := cycleRing{o.Keys}
	ctx := context.Background()
	seed := Seed(t)

	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		for i := range ring.n {
			tr.Set(ring.key(i), []byte(strconv.Itoa((i+1)%ring.n)))
		}
		return nil, nil
	})
	require.NoError(t, err)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		writers = make(chan struct{})
	)
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w := range o.Workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range o.TxPerWorker {
				if err := ring.swap(ctx, db, rng.IntN(ring.n)); err != nil {
					report(fmt.Errorf("worker %d: %w", w, err))
					return
				}
			}
		})
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			if err := ring.check(ctx, db); err != nil {
				report(fmt.Errorf("reader: %w", err))
				return
			}
			select {
			case <-writers:
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(writers)
	<-readerDone
	require.Empty(t, errs, "seed %d", seed)
	require.NoError(t, ring.check(ctx, db), "seed %d", seed)
}

// cycleRing is the ring of n keys of the Cycle workload.
type cycleRing struct{ n int }

func (r cycleRing) key(i int) kv.Key { return kv.Key(fmt.Sprintf("cycle/%03d", i)) }

// next decodes the index a key holds.
func (r cycleRing) next(v []byte) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 || n >= r.n {
		return 0, fmt.Errorf("%w: %q", errCycleCorrupt, v)
	}
	return n, nil
}

// swap reorders the segment a→b→c→d of the ring to a→c→b→d in one
// transaction.
func (r cycleRing) swap(ctx context.Context, db kv.Database, a int) error {
	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		b, err := r.next(tr.Get(r.key(a)).MustGet())
		if err != nil {
			return nil, err
		}
		c, err := r.next(tr.Get(r.key(b)).MustGet())
		if err != nil {
			return nil, err
		}
		d, err := r.next(tr.Get(r.key(c)).MustGet())
		if err != nil {
			return nil, err
		}
		tr.Set(r.key(a), []byte(strconv.Itoa(c)))
		tr.Set(r.key(c), []byte(strconv.Itoa(b)))
		tr.Set(r.key(b), []byte(strconv.Itoa(d)))
		return nil, nil
	})
	return err
}

// check reads the whole ring at one read version, with a range read and by
// walking it with point reads, and returns an error unless it is a single
// cycle through every key.
func (r cycleRing) check(ctx context.Context, db kv.Database) error {
	_, err := db.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) {
		kvs, err := tr.GetRange(kv.KeyRange{Begin: r.key(0), End: r.key(r.n)}, kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		if len(kvs) != r.n {
			return nil, fmt.Errorf("cycle: %d keys, want %d", len(kvs), r.n)
		}
		next := make([]int, r.n)
		for i, e := range kvs {
			if next[i], err = r.next(e.Value); err != nil {
				return nil, err
			}
		}
		if err := r.walk(func(i int) (int, error) { return next[i], nil }); err != nil {
			return nil, fmt.Errorf("range read: %w", err)
		}
		if err := r.walk(func(i int) (int, error) { return r.next(tr.Get(r.key(i)).MustGet()) }); err != nil {
			return nil, fmt.Errorf("point reads: %w", err)
		}
		return nil, nil
	})
	return err
}

// walk follows the ring from key 0 with next and returns an error unless
// it visits every key once and comes back.
func (r cycleRing) walk(next func(i int) (int, error)) error {
	seen := make([]bool, r.n)
	at := 0
	for range r.n {
		if seen[at] {
			return fmt.Errorf("cycle: key %d reached twice: ring split", at)
		}
		seen[at] = true
		n, err := next(at)
		if err != nil {
			return err
		}
		at = n
	}
	if at != 0 {
		return fmt.Errorf("cycle: walk did not return to the start")
	}
	return nil
}
