package kvtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var serializabilityTests = []conformanceTest{
	onDB("Cycle", testCycle),
	onDB("BoundedSet", testBoundedSet),
}

func testCycle(t *testing.T, db kv.Database) { Cycle(t, db, CycleOptions{}) }

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
func testBoundedSet(t *testing.T, db kv.Database) {
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
