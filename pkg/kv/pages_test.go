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
		{"a failed commit is read again", 25, 10, 1, []int{10, 10, 10, 5}},
		{"an empty range", 0, 10, -1, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, rng := pagesDB(t, tc.keys)
			var sizes []int
			attempts := map[string]int{}
			err := kv.Pages(ctx, db, rng, tc.limit, func(tr kv.Transaction, page []kv.KeyValue) (bool, error) {
				sizes = append(sizes, len(page))
				for _, e := range page {
					tr.Clear(e.Key) // the page's writes
				}
				if len(page) > 0 {
					first := string(page[0].Key)
					attempts[first]++
					if tc.failPage >= 0 && first == fmt.Sprintf("pages/%03d", tc.failPage*tc.limit) && attempts[first] == 1 {
						return false, kv.Error{Code: kv.CodeNotCommitted}
					}
				}
				return false, nil
			})
			require.NoError(t, err)
			require.Equal(t, tc.wantSizes, sizes)
			left, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
				return tr.GetRange(rng, kv.RangeOptions{}).GetSliceWithError()
			})
			require.NoError(t, err)
			require.Empty(t, left, "every page's clears committed")
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
