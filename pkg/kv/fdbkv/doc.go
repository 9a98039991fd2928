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
//     shared retry loop: context cancellation is kv.Run's, while whether to
//     retry, the backoff, the retry limit and the timeout are FoundationDB's
//     own OnError (which the embedded backend imitates). RunRead commits
//     read-only transactions too; on FoundationDB that is a local no-op.
//   - Every transaction starts with a timeout, TransactionTimeoutDefault
//     unless OpenWithOptions says otherwise, so that an unreachable cluster
//     shows as transaction_timed_out (1031) instead of a hang; Reset sets it
//     again. It also ends the watches a transaction set (see
//     TransactionTimeoutDefault). Open contacts nobody: kv.Probe checks that
//     the cluster answers, and the Database's String names its cluster file
//     for Probe's error.
//   - Range iterators follow kv's contract (Advance moves, Get returns the
//     current entry, false after an error was reported once), not the
//     binding's, whose Get moves.
//   - Cancel is a no-op after a successful commit, so that the retry loop's
//     clean-up does not cancel the watches the transaction set.
//   - Operations on a transaction after its Database was closed fail with
//     kv.ErrDatabaseClosed at commit; creating one fails at once. Creating a
//     transaction and closing the last Database of a handle exclude each
//     other, so no transaction is created on a destroyed handle.
//   - Tenants: with Options.Tenant every transaction runs in that tenant, a
//     key space of its own that reads as a whole database; CreateTenant and
//     DeleteTenant manage them (the cluster must allow tenants).
//   - A failed kv.Probe says what to check (Explain): the cluster file
//     missing, unreadable or malformed, the tenant missing or tenants not
//     allowed, the coordinators not taking connections, or taking them while
//     the database does not answer (never created, or recovering).
//   - Mutual TLS: Options.TLS names the client's certificate, key and CA
//     (empty ones come from libfdb_c's FDB_TLS_* variables) and how often
//     libfdb_c rereads them (TLSRefreshDefault). They are network options,
//     set once for the process by the first Open; a later Open that asks
//     for others fails with ErrTLSChanged. Open checks the files (readable,
//     the key the certificate's, within its validity, a CA) and refuses a
//     cluster file with :tls coordinators and no certificate (ErrTLS); a
//     probe that times out on :tls coordinators shakes hands with one to
//     tell a wrong CA from a certificate the cluster refuses.
//   - Watches: FoundationDB's default of 10,000 outstanding watches counts
//     per handle, shared by every Open of one cluster file in the process;
//     the max_watches database option is not exposed.
//
// The binding's extra features (tenants, locality, database options, size
// estimates) are not part of kv and are not exposed.
package fdbkv
