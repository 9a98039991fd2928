package embedded

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

const cycleNodes = 16

func cycleKey(i int) kv.Key { return kv.Key(fmt.Sprintf("cycle/%02d", i)) }

// readNext reads node i's successor.
func readNext(tr kv.ReadTransaction, i int) (int, error) {
	v, err := tr.Get(cycleKey(i)).Get()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

// checkCycle verifies that following successors from 0 visits every node
// once and comes back.
func checkCycle(tr kv.ReadTransaction) error {
	seen := map[int]bool{}
	at := 0
	for range cycleNodes {
		if seen[at] {
			return fmt.Errorf("node %d visited twice", at)
		}
		seen[at] = true
		next, err := readNext(tr, at)
		if err != nil {
			return err
		}
		at = next
	}
	if at != 0 || len(seen) != cycleNodes {
		return fmt.Errorf("cycle broken: ended at %d after visiting %d nodes", at, len(seen))
	}
	return nil
}

// TestCycle is FoundationDB's Cycle workload: concurrent transactions
// rotate three links of a ring; any lost update or non-serializable
// interleaving breaks the ring. Readers check it concurrently.
func TestCycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		disk bool
	}{{"memory", false}, {"disk", true}} {
		t.Run(tc.name, func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			var db *DB
			if tc.disk {
				db = openDir(t, t.TempDir())
				t.Cleanup(func() { require.NoError(t, db.Close()) })
			} else {
				db = openMem(t)
			}
			_, err := db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
				for i := range cycleNodes {
					tr.Set(cycleKey(i), []byte(strconv.Itoa((i+1)%cycleNodes)))
				}
				return nil, nil
			})
			require.NoError(t, err)

			const workers, txns = 8, 40
			var wg sync.WaitGroup
			stop := make(chan struct{})
			readerErr := make(chan error, 1)
			go func() {
				defer close(readerErr)
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := db.ReadTransact(t.Context(), func(tr kv.ReadTransaction) (any, error) {
						return nil, checkCycle(tr)
					})
					if err != nil {
						readerErr <- err
						return
					}
				}
			}()
			for w := range workers {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
				wg.Go(func() {
					for range txns {
						r := rng.IntN(cycleNodes)
						_, err := db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
							r2, err := readNext(tr, r)
							if err != nil {
								return nil, err
							}
							r3, err := readNext(tr, r2)
							if err != nil {
								return nil, err
							}
							r4, err := readNext(tr, r3)
							if err != nil {
								return nil, err
							}
							tr.Set(cycleKey(r), []byte(strconv.Itoa(r3)))
							tr.Set(cycleKey(r3), []byte(strconv.Itoa(r2)))
							tr.Set(cycleKey(r2), []byte(strconv.Itoa(r4)))
							return nil, nil
						})
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			require.NoError(t, <-readerErr)
			_, err = db.ReadTransact(t.Context(), func(tr kv.ReadTransaction) (any, error) {
				return nil, checkCycle(tr)
			})
			require.NoError(t, err)
		})
	}
}
