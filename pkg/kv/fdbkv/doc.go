// Package fdbkv is fdbrep's FoundationDB backend: it adapts FoundationDB's Go
// binding (github.com/apple/foundationdb/bindings/go, client API version
// 730) to the interfaces of package kv.
//
// Everything but this file carries the build tag "fdb", because the binding
// is cgo code that needs FoundationDB's client library, libfdb_c, and its
// headers. Build with
//
//	go build -tags fdb ./...
//
// on a machine with FoundationDB's client package installed. The repository's
// `make fdb-check` builds and vets the tagged code against a compile-only
// stand-in for libfdb_c (scripts/fdbstub) that aborts if it is ever called;
// never run what it builds.
//
// # Behaviour
//
// Open selects API version 730 (once per process, as the binding demands;
// a process that already selected another version gets an error) and opens
// the cluster named by a cluster file, the platform default when the path
// is empty. The binding starts FoundationDB's network thread on the first
// Open and keeps it for the life of the process. Several Opens of the same
// cluster file share one FoundationDB handle, which is destroyed when the
// last of them is closed.
//
// Every kv method maps to the binding's method of the same name. The
// differences are:
//
//   - Errors: every fdb.Error is returned as kv.Error with the same code,
//     unwrapped, so kv's predicates and retry loop work unchanged. Panics
//     raised by MustGet carry a kv.Error.
//   - Futures: Done is implemented lazily, by a goroutine that blocks on the
//     binding's BlockUntilReady the first time Done is called. A watch that
//     never fires keeps that goroutine until the watch is cancelled, so
//     cancel watches you stop waiting for (kv.Await does).
//   - Transact and ReadTransact on a Database run kv.Run and kv.RunRead, the
//     shared retry loop, so context cancellation and the retry behaviour are
//     those of the embedded backend.
//   - Cancel is a no-op after a successful commit, so that the retry loop's
//     clean-up does not cancel the watches the transaction set.
//   - Operations on a transaction after its Database was closed fail with
//     kv.ErrDatabaseClosed at commit; creating one fails at once.
//
// The binding's extra features (tenants, locality, database options, size
// estimates) are not part of kv and are not exposed.
package fdbkv
