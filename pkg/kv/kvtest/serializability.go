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

var serializabilityTests = []conformanceTest{
	{"Cycle", testCycle},
	{"BoundedSet", testBoundedSet},
}

// Cycle workload parameters: a ring of cycleKeys keys, cycleWorkers
// goroutines each committing cycleTxPerWorker swaps.
const (
	cycleKeys        = 12
	cycleWorkers     = 4
	cycleTxPerWorker = 40
)

var errCycleCorrupt = errors.New("cycle: value is not a ring index")

func cycleKey(i int) kv.Key { return kv.Key(fmt.Sprintf("cycle/%03d", i)) }

func cycleNext(v []byte) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 || n >= cycleKeys {
		return 0, fmt.Errorf("%w: %q", errCycleCorrupt, v)
	}
	return n, nil
}

// checkCycle returns an error unless kvs, the whole ring read at one
// version, is a single cycle through every key.
func checkCycle(kvs []kv.KeyValue) error {
	if len(kvs) != cycleKeys {
		return fmt.Errorf("cycle: %d keys, want %d", len(kvs), cycleKeys)
	}
	next := make([]int, cycleKeys)
	for i, e := range kvs {
		n, err := cycleNext(e.Value)
		if err != nil {
			return err
		}
		next[i] = n
	}
	seen := make([]bool, cycleKeys)
	at := 0
	for range cycleKeys {
		if seen[at] {
			return fmt.Errorf("cycle: key %d reached twice: ring split", at)
		}
		seen[at] = true
		at = next[at]
	}
	if at != 0 {
		return fmt.Errorf("cycle: walk did not return to the start")
	}
	return nil
}

// testCycle is FoundationDB's Cycle workload: a ring of keys, each holding
// the index of the next. Each transaction takes a ring segment a→b→c→d and
// reorders it to a→c→b→d. Every such swap keeps the ring one cycle, but only
// if the transactions are serializable: two swaps that both read a stale
// segment would split or corrupt it. A reader checks the whole ring at a
// single read version while the writers run, and once at the end.
func testCycle(t *testing.T, open OpenFunc) {
	db := open(t)
	ctx := context.Background()
	seed := testSeed(t)

	_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		for i := range cycleKeys {
			tr.Set(cycleKey(i), []byte(strconv.Itoa((i+1)%cycleKeys)))
		}
		return nil, nil
	})
	require.NoError(t, err)

	ring := kv.KeyRange{Begin: cycleKey(0), End: cycleKey(cycleKeys)}
	checkRing := func() error {
		_, err := db.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) {
			kvs, err := tr.GetRange(ring, kv.RangeOptions{}).GetSliceWithError()
			if err != nil {
				return nil, err
			}
			return nil, checkCycle(kvs)
		})
		return err
	}

	swap := func(rng *rand.Rand) error {
		a := rng.IntN(cycleKeys)
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			b, err := cycleNext(tr.Get(cycleKey(a)).MustGet())
			if err != nil {
				return nil, err
			}
			c, err := cycleNext(tr.Get(cycleKey(b)).MustGet())
			if err != nil {
				return nil, err
			}
			d, err := cycleNext(tr.Get(cycleKey(c)).MustGet())
			if err != nil {
				return nil, err
			}
			tr.Set(cycleKey(a), []byte(strconv.Itoa(c)))
			tr.Set(cycleKey(c), []byte(strconv.Itoa(b)))
			tr.Set(cycleKey(b), []byte(strconv.Itoa(d)))
			return nil, nil
		})
		return err
	}

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
	for w := range cycleWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range cycleTxPerWorker {
				if err := swap(rng); err != nil {
					report(fmt.Errorf("worker %d: %w", w, err))
					return
				}
			}
		}()
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			if err := checkRing(); err != nil {
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
	require.NoError(t, checkRing(), "seed %d", seed)
}

// Bounded set workload parameters.
const (
	boundedSetMax         = 10
	boundedSetWorkers     = 4
	boundedSetTxPerWorker = 15
)

// testBoundedSet checks phantom protection under concurrency: each
// transaction counts the members of a set with a range read and adds a
// member of its own only while there are fewer than boundedSetMax. No key
// is shared, so only the range conflict stops two transactions that both
// saw boundedSetMax-1 members from both adding one.
func testBoundedSet(t *testing.T, open OpenFunc) {
	db := open(t)
	ctx := context.Background()
	set, err := kv.PrefixRange([]byte("set/"))
	require.NoError(t, err)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range boundedSetWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range boundedSetTxPerWorker {
				member := kv.Key(fmt.Sprintf("set/%d-%d", w, i))
				_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
					kvs, err := tr.GetRange(set, kv.RangeOptions{}).GetSliceWithError()
					if err != nil {
						return nil, err
					}
					if len(kvs) < boundedSetMax {
						tr.Set(member, nil)
					}
					return nil, nil
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, readAll(t, db, set), boundedSetMax)
}
