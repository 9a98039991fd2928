// Package kvtest holds the storage layer's test support: the helpers every
// package's tests open databases with, and the conformance suite every kv
// backend must pass.
//
// # Test databases
//
// NewDB opens an empty in-memory embedded store (package kv/embedded) for
// one test and closes it in t.Cleanup; NewDiskDB does the same on disk in a
// t.TempDir(), and OpenDiskDB in a given directory for reopen tests. When
// the environment variable FDBREP_KV_FAULTS enables fault injection (see
// faultkv.FromEnv; CI runs the whole suite a second time with
// FDBREP_KV_FAULTS=1), the store is wrapped by faultkv, the seed is logged
// with the value of FDBREP_KV_FAULTS that replays it, and the injected fault
// counts are logged when the test ends. Code under test must therefore
// survive not_committed, transaction_too_old, commit_unknown_result and
// commit_proxy_memory_limit_exceeded at any commit, transaction_too_old,
// process_behind and future_version at any read, grv_proxy_memory_limit
// and tag_throttled when getting a read version, and watches that fail.
//
// With FDBREP_KV_BACKEND=fdb (EnvBackend), in a test binary built with
// -tags fdb, they hand out databases on the FoundationDB cluster that
// FDB_CLUSTER_FILE names instead, each in a tenant of its own, created for
// the test and emptied and deleted when it ends (never by clearing the
// cluster): the cluster must allow tenants (fdbcli: configure
// tenant_mode=optional_experimental). make test-fdb runs the whole suite
// so on a throwaway cluster (scripts/with-fdb.sh). ProcessTenant gives a
// tenant to processes a test starts (fdbrep serve -backend fdb with
// [fdb] tenant).
//
// The stores read FDBREP_KV_LATENCY and FDBREP_KV_BUDGET (see package kv):
// with the latency mode serial reads cost what they cost on FoundationDB;
// with the budget check a transaction over 1 MB or 1 s fails with a
// *kv.BudgetError naming its call site and fails the test through
// t.Errorf. Tests that go over the budget on purpose call
// ExemptFromBudget; tests of hundreds of goroutines, whose transactions
// wait for a core, ExemptFromBudgetDuration (sizes stay checked);
// OpenEmbedded opens a store with given options and the
// same reporting, without fault injection.
//
// # Conformance
//
// RunConformance(t, open) checks a backend against FoundationDB's semantics:
// serializability (FoundationDB's Cycle workload and a phantom-sensitive
// bounded-set workload, both concurrent), read, range, limited-range,
// GetKey, phantom, snapshot and explicit conflict ranges, read-your-writes
// (also checked by a randomized model test of writes, clears, atomic
// operations, selectors and range options), key selectors and range options
// over many keys, versionstamps, watches, every atomic operation,
// FoundationDB's limits, transaction options, the shared retry loop
// (retries, panics, nesting, commit_unknown_result), context cancellation,
// read and commit versions and error classification. Each subtest opens its
// own database with open.
//
// Cycle, the suite's Cycle workload, is exported so that a backend's own
// tests can run it at other sizes.
//
// Randomized tests log their seed (Seed, which other storage tests use
// too); FDBREP_KVTEST_SEED=<seed> replays one, and FDBREP_KVTEST_TRACE=1
// makes the model test log every transaction.
//
// Tests that drive transactions by hand (two transactions racing for a
// conflict, say) cannot rely on the retry loop, so they run as scenarios: an
// unexpected retryable error, as fault injection produces, reruns the
// scenario on fresh keys (at most 200 times) instead of failing it. The
// suite therefore also holds on a faultkv-wrapped backend, which is how it
// checks that the wrapper keeps the semantics.
//
// On FoundationDB the suite accepts what FoundationDB may do where the
// embedded store is deliberately stricter (a read past the five-second
// lifetime may still be answered there), and its random model keeps apart
// what FoundationDB's read-your-writes cache resolves its own way
// (selectors after a CompareAndClear; see kv/embedded's differences).
//
// One subtest waits out the five second transaction lifetime; -short skips
// it. The suite has no timing thresholds: waits on signals are bounded only
// to turn a hang into a failure.
package kvtest
