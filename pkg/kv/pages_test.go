package kv_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func pagesDB(t *testing.T, n int) (kv.Database, kv.KeyRange) {
	t.Helper()
	db := kvtest.NewDB(t)
	_, err := kv.Transact(context.Background(), db, func(tr kv.Transaction) (any, error) {
		for i := range n {
			tr.Set(kv.Key(fmt.Sprintf("pages/%03d", i)), []byte{byte(i)})
		}
		return nil, nil
	})
	require.NoError(t, err)
	rng, err := kv.PrefixRange([]byte("pages/"))
	require.NoError(t, err)
	return db, rng
}

// Pages hands each page to fn in its transaction, and a retried attempt
// gets the same page again: the cursor moves only past committed pages, so
// a page whose writes were lost is not skipped.
func TestPagesRetryReadsTheSamePage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		keys      int
		limit     int
		failPage  int // the page whose first attempt fails after fn ran (-1: none)
		wantSizes []int
	}{
		{"pages of the limit, then the rest", 25, 10, -1, []int{10, 10, 5}},
		{"an exact multiple ends with an empty page", 20, 10, -1, []int{10, 10, 0}},
		{"a failed commit is read again", 25, 10, 1, []int{10, 10, 5}},
		{"an empty range", 0, 10, -1, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, rng := pagesDB(t, tc.keys)
			// The pages, each as often as it was handed to fn (the
			// faults pass retries some attempts too).
			var firsts []string
			sizes := map[string]int{}
			attempts := map[string]int{}
			err := kv.Pages(ctx, db, rng, tc.limit, func(tr kv.Transaction, page []kv.KeyValue) (bool, error) {
				first := ""
				if len(page) > 0 {
					first = string(page[0].Key)
				}
				if attempts[first] == 0 {
					firsts = append(firsts, first)
				}
				attempts[first]++
				sizes[first] = len(page)
				for _, e := range page {
					tr.Set(append(kv.Key("done/"), e.Key...), nil) // the page's writes
				}
				if len(page) > 0 {
					if tc.failPage >= 0 && first == fmt.Sprintf("pages/%03d", tc.failPage*tc.limit) && attempts[first] == 1 {
						return false, kv.Error{Code: kv.CodeNotCommitted}
					}
				}
				return false, nil
			})
			require.NoError(t, err)
			var got []int
			for _, f := range firsts {
				got = append(got, sizes[f])
			}
			require.Equal(t, tc.wantSizes, got)
			if tc.failPage >= 0 {
				require.GreaterOrEqual(t, attempts[fmt.Sprintf("pages/%03d", tc.failPage*tc.limit)], 2, "the failed page was read again")
			}
			done, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
				r, err := kv.PrefixRange([]byte("done/pages/"))
				if err != nil {
					return nil, err
				}
				return tr.GetRange(r, kv.RangeOptions{}).GetSliceWithError()
			})
			require.NoError(t, err)
			require.Len(t, done, tc.keys, "every page's writes committed")
		})
	}
}

// ReadPages calls fn once per page, after its transaction, and stops when
// fn says so.
func TestReadPages(t *testing.T) {
	ctx := context.Background()
	db, rng := pagesDB(t, 25)
	var seen []byte
	require.NoError(t, kv.ReadPages(ctx, db, rng, 10, func(page []kv.KeyValue) (bool, error) {
		for _, e := range page {
			seen = append(seen, e.Value...)
		}
		return false, nil
	}))
	require.Len(t, seen, 25)
	for i, b := range seen {
		require.Equal(t, byte(i), b)
	}
	pages := 0
	require.NoError(t, kv.ReadPages(ctx, db, rng, 10, func(page []kv.KeyValue) (bool, error) {
		pages++
		return true, nil
	}))
	require.Equal(t, 1, pages, "stop ends the scan")
}
