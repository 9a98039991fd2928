package kvtest

import (
	"os"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
)

// EnvBackend names the environment variable that chooses the store
// NewDB, NewDiskDB and OpenDiskDB hand out: "embedded" (or unset), the
// embedded store; "fdb", a FoundationDB cluster, the one FDB_CLUSTER_FILE
// names (or the platform's default cluster file), each test in tenants of
// its own (see the package documentation). "fdb" needs a test binary built
// with the fdb tag (go test -tags fdb).
const EnvBackend = "FDBREP_KV_BACKEND"

// Backends of EnvBackend.
const (
	BackendEmbedded = "embedded"
	BackendFDB      = "fdb"
)

// openTenant opens a database in a tenant of its own on the FoundationDB
// cluster (see fdb.go, built with the fdb tag; nil without it). A non-empty
// key names a tenant that lives as long as the test that first opened it
// (OpenDiskDB's directory); "" is a new tenant per call.
var openTenant func(t testing.TB, key string) kv.Database

// Backend returns the backend EnvBackend chooses, failing t when it names
// none this test binary has.
func Backend(t testing.TB) string {
	t.Helper()
	switch b := os.Getenv(EnvBackend); b {
	case "", BackendEmbedded:
		return BackendEmbedded
	case BackendFDB:
		if openTenant == nil {
			t.Fatalf("kvtest: %s=%s needs a test binary built with the fdb tag (go test -tags fdb)", EnvBackend, b)
		}
		return BackendFDB
	default:
		t.Fatalf("kvtest: %s=%q: want %q or %q", EnvBackend, b, BackendEmbedded, BackendFDB)
		return ""
	}
}

// OnFoundationDB reports whether the test helpers hand out databases on
// FoundationDB (EnvBackend=fdb).
func OnFoundationDB(t testing.TB) bool {
	t.Helper()
	return Backend(t) == BackendFDB
}

// onFoundationDB reports whether db is a real FoundationDB's (package
// fdbkv marks its databases): the suite then accepts what FoundationDB
// may do and the embedded store, stricter, never does.
func onFoundationDB(db kv.Database) bool {
	_, ok := db.(interface{ FoundationDB() })
	return ok
}

// newProcessTenant creates a tenant for processes a test starts (fdb.go;
// nil without the fdb tag).
var newProcessTenant func(t testing.TB) (clusterFile, tenant string)

// ProcessTenant creates a tenant of the FoundationDB cluster for the
// processes a test starts (fdbrep serve -backend fdb with [fdb] tenant),
// emptied and deleted when the test ends, and returns the cluster file and
// the tenant's name. With EnvBackend=fdb only.
func ProcessTenant(t testing.TB) (clusterFile, tenant string) {
	t.Helper()
	if !OnFoundationDB(t) {
		t.Fatalf("kvtest: ProcessTenant needs %s=%s", EnvBackend, BackendFDB)
	}
	return newProcessTenant(t)
}

// PlainStoreOnly skips t, saying why, in the passes of make test that
// change the store (EnvBackend=fdb, faultkv.EnvVar, kv.EnvLatency): for a
// test whose subject does not depend on it (a browser's view of the API,
// response shapes beside CouchDB's), which those passes would repeat at
// the cost of minutes.
func PlainStoreOnly(t testing.TB, why string) {
	t.Helper()
	for _, env := range []string{faultkv.EnvVar, kv.EnvLatency} {
		if os.Getenv(env) != "" {
			t.Skipf("%s: runs in the pass on the plain store, not with %s", why, env)
		}
	}
	if OnFoundationDB(t) {
		t.Skipf("%s: runs in the pass on the plain store, not on FoundationDB", why)
	}
}
