package kv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestBatchSizes(t *testing.T) {
	tests := []struct {
		name  string
		batch kv.Batch
		ops   string // s: Shrink, g: Grow, f: Fit(3)
		want  []int  // Size after each op
	}{
		{"halves and doubles by default", kv.Batch{Max: 8}, "sssggg", []int{4, 2, 1, 2, 4, 8}},
		{"never below one", kv.Batch{Max: 2}, "sss", []int{1, 1, 1}},
		{"never above max", kv.Batch{Max: 8}, "gsgg", []int{8, 4, 8, 8}},
		{"AIMD: factor and increment", kv.Batch{Max: 1000, Factor: 0.75, Increment: 100}, "ssgggg",
			[]int{750, 562, 662, 762, 862, 962}},
		{"fit a byte-bound batch, then grow", kv.Batch{Max: 10, Increment: 4}, "fgg", []int{3, 7, 10}},
		{"a zero max is one", kv.Batch{}, "gs", []int{1, 1}},
		{"a first size above max", kv.Batch{Max: 10, First: 50, Increment: 1}, "sg", []int{25, 10}},
		{"never below min", kv.Batch{Max: 500, Min: 50}, "ssssg", []int{250, 125, 62, 50, 100}},
		{"fit below min stays there", kv.Batch{Max: 500, Min: 50}, "fsg", []int{3, 3, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.batch
			var got []int
			for _, op := range tt.ops {
				switch op {
				case 's':
					b.Shrink()
				case 'g':
					b.Grow()
				case 'f':
					b.Fit(3)
				}
				got = append(got, b.Size())
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestBatchRetry(t *testing.T) {
	conflict := kv.Error{Code: kv.CodeNotCommitted}
	tests := []struct {
		name   string
		err    error
		retry  bool // Retry returns nil
		shrunk bool
	}{
		{"a conflict shrinks and waits", conflict, true, true},
		{"too large shrinks at once", kv.Error{Code: kv.CodeTransactionTooLarge}, true, true},
		{"a timeout shrinks", kv.Error{Code: kv.CodeTransactionTimedOut}, true, true},
		{"a fatal store error is the loop's", kv.Error{Code: kv.CodeKeyTooLarge}, false, false},
		{"so is any other error", errors.New("decode"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := kv.Batch{Max: 8, Backoff: kv.Backoff{Max: -1}}
			err := b.Retry(context.Background(), tt.err)
			if tt.retry {
				require.NoError(t, err)
			} else {
				require.Equal(t, tt.err, err)
			}
			require.Equal(t, map[bool]int{true: 4, false: 8}[tt.shrunk], b.Size())
		})
	}

	t.Run("gives up after Attempts failures in a row", func(t *testing.T) {
		b := kv.Batch{Max: 8, Attempts: 3, Backoff: kv.Backoff{Max: -1}}
		ctx := context.Background()
		for range 3 {
			require.NoError(t, b.Retry(ctx, conflict))
		}
		err := b.Retry(ctx, conflict)
		require.ErrorIs(t, err, kv.ErrGaveUp)
		require.ErrorIs(t, err, conflict)
		require.EqualError(t, err, "gave up after 4 failed batches: "+conflict.Error())
		require.NoError(t, b.Retry(ctx, conflict), "the count starts again")
	})

	t.Run("a success starts the count again", func(t *testing.T) {
		b := kv.Batch{Max: 8, Attempts: 2, Backoff: kv.Backoff{Max: -1}}
		ctx := context.Background()
		for range 5 {
			require.NoError(t, b.Retry(ctx, conflict))
			require.NoError(t, b.Retry(ctx, conflict))
			b.Done()
		}
	})

	t.Run("ctx ended", func(t *testing.T) {
		b := kv.Batch{Max: 8}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.Equal(t, conflict, b.Retry(ctx, conflict))
		require.Equal(t, 8, b.Size())
	})
}

// attempts is a Transactor whose first failures attempts fail with a
// conflict.
type attempts struct {
	kv.Transactor
	failures int
}

func (a *attempts) Transact(_ context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	for i := 0; ; i++ {
		v, err := f(nil)
		if err != nil {
			return nil, err
		}
		if i >= a.failures {
			return v, nil
		}
	}
}

func TestTransactBatch(t *testing.T) {
	b := kv.Batch{Max: 16}
	var sizes []int
	f := func(_ kv.Transaction, n int) (int, error) {
		sizes = append(sizes, n)
		return n, nil
	}
	n, err := kv.TransactBatch(context.Background(), &attempts{failures: 2}, &b, f)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []int{16, 8, 4}, sizes, "each retried attempt halves the batch")
	require.Equal(t, 8, b.Size(), "a commit doubles it")

	sizes = nil
	_, err = kv.TransactBatch(context.Background(), &attempts{}, &b, f)
	require.NoError(t, err)
	require.Equal(t, []int{8}, sizes)
	require.Equal(t, 16, b.Size())

	fail := errors.New("fatal")
	_, err = kv.TransactBatch(context.Background(), &attempts{}, &b, func(kv.Transaction, int) (int, error) { return 0, fail })
	require.Equal(t, fail, err)
	require.Equal(t, 16, b.Size(), "a failed transaction does not grow it")
}
