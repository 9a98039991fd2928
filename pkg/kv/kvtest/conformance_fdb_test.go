//go:build fdb

package kvtest_test

import (
	"os"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestConformanceFoundationDB runs the suite on a real FoundationDB cluster
// named by FDB_CLUSTER_FILE, each subtest in a tenant of its own (the
// cluster must allow tenants); it is skipped when the variable is unset.
func TestConformanceFoundationDB(t *testing.T) {
	if os.Getenv("FDB_CLUSTER_FILE") == "" {
		t.Skip("FDB_CLUSTER_FILE is not set: make test-fdb runs this on a throwaway cluster (scripts/with-fdb.sh)")
	}
	kvtest.RunConformance(t, kvtest.NewTenantDB)
}
