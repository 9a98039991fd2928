//go:build fdb

package kvtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
)

func init() {
	openTenant = openFDBTenant
	newProcessTenant = func(t testing.TB) (string, string) { return clusterFile(), newTenant(t, adminDB(t)) }
	if os.Getenv(EnvBackend) == BackendFDB {
		// Start FoundationDB's network thread now, outside any test: a
		// test in a testing/synctest bubble (cmd/internal/sim) must not
		// own a goroutine that runs for the life of the process.
		admin, adminErr = fdbkv.Open(clusterFile())
	}
}

// tenantPrefix begins the name of every tenant the test helpers create.
const tenantPrefix = "fdbrep-test/"

var (
	adminMu    sync.Mutex
	admin      kv.Database // the cluster without a tenant, to manage tenants; kept for the process
	adminErr   error       // opening it failed
	adminReady bool        // it answered a probe
	keyedMu    sync.Mutex
	keyed      = map[string]string{} // OpenDiskDB's directories and their tenants
)

// clusterFile is the cluster file of EnvBackend=fdb.
func clusterFile() string { return os.Getenv("FDB_CLUSTER_FILE") }

// adminDB returns the cluster's database without a tenant, checking once
// that the cluster answers.
func adminDB(t testing.TB) kv.Database {
	t.Helper()
	adminMu.Lock()
	defer adminMu.Unlock()
	if admin == nil && adminErr == nil {
		admin, adminErr = fdbkv.Open(clusterFile())
	}
	require.NoError(t, adminErr)
	if !adminReady {
		if err := kv.Probe(context.Background(), admin, 0); err != nil {
			t.Fatalf("kvtest: %s=%s: %v", EnvBackend, BackendFDB, err)
		}
		adminReady = true
	}
	return admin
}

// openFDBTenant opens a database in a tenant: a new one for key "", else
// the tenant of key, created by the first test that opens it and deleted
// when that test ends.
func openFDBTenant(t testing.TB, key string) kv.Database {
	t.Helper()
	a := adminDB(t)
	name := ""
	if key != "" {
		keyedMu.Lock()
		name = keyed[key]
		keyedMu.Unlock()
	}
	if name == "" {
		name = newTenant(t, a)
		if key != "" {
			keyedMu.Lock()
			keyed[key] = name
			keyedMu.Unlock()
			t.Cleanup(func() {
				keyedMu.Lock()
				delete(keyed, key)
				keyedMu.Unlock()
			})
		}
	}
	db, err := fdbkv.OpenWithOptions(clusterFile(), fdbkv.Options{Tenant: name})
	require.NoError(t, err)
	closeOnCleanup(t, db)
	return db
}

// newTenant creates a tenant named after t and deletes it, keys first,
// when t ends.
func newTenant(t testing.TB, a kv.Database) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	test := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(test) > 100 {
		test = test[:100]
	}
	name := tenantPrefix + test + "/" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fdbkv.CreateTenant(ctx, a, name); err != nil {
		t.Fatalf("kvtest: creating tenant %q: %v (the cluster must allow tenants: fdbcli configure tenant_mode=optional_experimental)", name, err)
	}
	t.Cleanup(func() { dropTenant(t, a, name) })
	return name
}

// dropTenant clears the tenant's keys and deletes it.
func dropTenant(t testing.TB, a kv.Database, name string) {
	db, err := fdbkv.OpenWithOptions(clusterFile(), fdbkv.Options{Tenant: name})
	if err != nil {
		t.Errorf("kvtest: opening tenant %q to delete it: %v", name, err)
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last error
	for range 5 { // a write that was still in flight may land after the clear
		if _, last = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			tr.ClearRange(kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")})
			return nil, nil
		}); last != nil {
			continue
		}
		if last = fdbkv.DeleteTenant(ctx, a, name); last == nil {
			return
		}
	}
	t.Errorf("kvtest: deleting tenant %q: %v", name, last)
}

// NewTenantDB opens a database in a new tenant of the FoundationDB cluster
// FDB_CLUSTER_FILE names (whatever EnvBackend says), emptied and deleted
// when the test ends: the conformance suite's databases on FoundationDB.
func NewTenantDB(t testing.TB) kv.Database {
	t.Helper()
	return openFDBTenant(t, "")
}
