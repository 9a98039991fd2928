//go:build fdb

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
)

// fdbBuild reports whether the binary has the FoundationDB backend.
const fdbBuild = true

// openFDB opens the FoundationDB cluster named by clusterFile, in tenant
// unless it is empty (every transaction starts with
// fdbkv.TransactionTimeoutDefault), and probes it:
// opening contacts nobody, so a wrong cluster file or a cluster that is
// down would otherwise show only as requests that hang. The node fails to
// start with an error that says what to check; the container's restart
// policy tries again.
func openFDB(clusterFile, tenant string) (kv.Database, error) {
	db, err := fdbkv.OpenWithOptions(clusterFile, fdbkv.Options{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "fdbrep: waiting for %v (at most %v)\n", db, kv.ProbeTimeoutDefault)
	if err := kv.Probe(context.Background(), db, kv.ProbeTimeoutDefault); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}
