package kvtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestMain also checks that the backends leave no goroutines behind once
// every database is closed.
func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func TestNewDiskDBSurvivesReopen(t *testing.T) {
	t.Setenv(faultkv.EnvVar, "")
	dir := t.TempDir()
	db := kvtest.OpenDiskDB(t, dir)
	_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		tr.Set(kv.Key("k"), []byte("v"))
		return nil, nil
	})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	db = kvtest.OpenDiskDB(t, dir)
	v, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(kv.Key("k")).Get()
	})
	require.NoError(t, err)
	require.Equal(t, []byte("v"), v)
}

func TestNewDBHonoursFaultEnv(t *testing.T) {
	for _, tc := range []struct {
		env    string
		faults bool
	}{
		{"", false},
		{"0", false},
		{"1", true},
		{"seed=7,not_committed=0.5", true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(faultkv.EnvVar, tc.env)
			db := kvtest.NewDB(t)
			_, isFaulty := faultkv.StatsOf(db)
			require.Equal(t, tc.faults, isFaulty)
			_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
				tr.Set(kv.Key("k"), []byte("v"))
				return nil, nil
			})
			require.NoError(t, err)
		})
	}
}

func TestNewDBIsolatesTests(t *testing.T) {
	for range 2 {
		db := kvtest.NewDB(t)
		kvs, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
			return tr.GetRange(kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")}, kv.RangeOptions{}).GetSliceWithError()
		})
		require.NoError(t, err)
		require.Empty(t, kvs, "a new database is empty")
		_, err = db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
			tr.Set(kv.Key("k"), []byte("v"))
			return nil, nil
		})
		require.NoError(t, err)
	}
}

// ExemptFromBudgetDuration lifts the budget's duration and keeps its
// size: a slow transaction passes, a large one still fails.
func TestExemptFromBudgetDuration(t *testing.T) {
	t.Setenv(faultkv.EnvVar, "")
	t.Setenv(kv.EnvBudget, "bytes=500,duration=1ns")
	kvtest.ExemptFromBudgetDuration(t)
	var got []*kv.BudgetError
	db := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true,
		OnBudgetExceeded: func(e *kv.BudgetError) { got = append(got, e) }})
	write := func(n int) error {
		_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
			if _, err := tr.Get(kv.Key("k")).Get(); err != nil {
				return nil, err
			}
			time.Sleep(time.Millisecond) // well over 1ns
			tr.Set(kv.Key("k"), make([]byte, n))
			return nil, nil
		})
		return err
	}
	require.NoError(t, write(10), "slow but small")
	require.Empty(t, got)
	var be *kv.BudgetError
	require.ErrorAs(t, write(1000), &be, "over the size budget")
	require.Contains(t, be.Reason, "budget 500")
}
