//go:build fdb

package kvtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestConformanceFoundationDB runs the suite on a real FoundationDB cluster
// named by FDB_CLUSTER_FILE; it is skipped when the variable is unset or the
// cluster does not answer. Every subtest CLEARS THE WHOLE USER KEY SPACE of
// that cluster first: point it at a throwaway test cluster only.
func TestConformanceFoundationDB(t *testing.T) {
	clusterFile := os.Getenv("FDB_CLUSTER_FILE")
	if clusterFile == "" {
		t.Skip("FDB_CLUSTER_FILE is not set")
	}
	probe, err := fdbkv.Open(clusterFile)
	if err != nil {
		t.Skipf("FoundationDB cluster %s: %v", clusterFile, err)
	}
	reachable := clusterReachable(probe)
	require.NoError(t, probe.Close())
	if reachable != nil {
		t.Skipf("FoundationDB cluster %s does not answer: %v", clusterFile, reachable)
	}
	kvtest.RunConformance(t, func(t testing.TB) kv.Database {
		db, err := fdbkv.Open(clusterFile)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		_, err = db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
			tr.ClearRange(kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")})
			return nil, nil
		})
		require.NoError(t, err)
		return db
	})
}

// clusterReachable reads a read version with a timeout.
func clusterReachable(db kv.Database) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := db.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) {
		if t, ok := tr.(kv.Transaction); ok {
			if err := t.Options().SetTimeout(5000); err != nil {
				return nil, err
			}
		}
		return tr.GetReadVersion().Get()
	})
	return err
}
