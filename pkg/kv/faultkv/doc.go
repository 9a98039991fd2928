// Package faultkv wraps any kv.Database with seeded fault injection, so that
// tests exercise the paths FoundationDB takes under load and failures: the
// retry loop, OnError, and above all the re-run of a transaction function
// whose commit succeeded but reported commit_unknown_result.
//
//	db := faultkv.Wrap(embeddedDB, faultkv.DefaultOptions(seed))
//	... run the code under test against db ...
//	t.Logf("faults: %v", db.Stats())
//
// # Faults
//
// At the per-operation rates of Options (defaults in the …Default
// constants):
//
//   - Commit of a transaction with writes: not_committed (1020) or
//     transaction_too_old (1007) instead of committing, or
//     commit_unknown_result (1021) after the commit really succeeded, the
//     dangerous case: the retry loop runs the function again, so a function
//     that is not idempotent applies its effect twice.
//   - Get, GetKey and GetRange, on the transaction or its snapshot:
//     transaction_too_old (1007).
//   - Any read or the commit of a transaction that set a timeout with
//     Options().SetTimeout: transaction_timed_out (1031), which is not
//     retryable. Transactions without a timeout never get it, as in
//     FoundationDB.
//   - The errors of a loaded cluster, all retryable, which FoundationDB's
//     OnError (and so the retry loop, and kv.Backoff for loops of their
//     own) backs off from: process_behind (1037) and future_version (1009)
//     at any read; grv_proxy_memory_limit_exceeded (1078) and tag_throttled
//     (1213) at the first read of an attempt, which gets the read version;
//     commit_proxy_memory_limit_exceeded (1042) instead of a commit.
//   - Watches: too_many_watches (1032) or future_version (1009) instead of
//     waiting for a change, without failing the transaction. (FoundationDB's
//     watch_cancelled, 1029, never reaches callers: its client polls
//     instead.)
//
// Read-only transactions always commit, as in FoundationDB. Once a fault hits
// a transaction, its later reads and its commit fail with the same error
// until OnError or Reset, and its watches and versionstamp future fail with
// it, as after a failed commit.
//
// # Semantics kept
//
// Everything else is the wrapped database's: every method passes through,
// snapshots are wrapped too, nested Transact and ReadTransact on a wrapped
// transaction run the function in it (joining the caller's transaction),
// and DB.Transact and DB.ReadTransact run kv.Run and kv.RunRead over wrapped
// transactions, so injected errors go through the wrapped backend's OnError
// with its backoff, retry limit and timeout.
//
// # Determinism
//
// Each wrapper draws its decisions from its own math/rand/v2 source seeded
// with Options.Seed, under a mutex: a single-goroutine test sees the same
// faults for the same seed. Concurrent transactions interleave their draws,
// so which operation gets which fault then varies between runs. Stats counts
// what was injected, for tests to assert that faults did happen.
//
// # Environment
//
// FromEnv reads FDBREP_KV_FAULTS ("1" for the defaults, or
// "seed=N,commit_unknown=R,not_committed=R,too_old=R,read_too_old=R,timed_out=R,
// proxy_memory=R,process_behind=R,future_version=R,grv_memory=R,tag_throttled=R,watch=R");
// the test helper kvtest.NewDB uses it to run the whole suite under faults.
//
// A wrapper is a kv.Healther: Health is the wrapped database's.
package faultkv
