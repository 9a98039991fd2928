// Package kv is fdbrep's storage API: the subset of FoundationDB's client API
// that fdbrep uses, expressed as Go interfaces so that two backends can sit
// behind it.
//
//   - The embedded backend (package kv/embedded) is the default. It runs in
//     process on a durable local store and keeps FoundationDB's semantics:
//     strictly serializable optimistic transactions with read and write
//     conflict ranges, versionstamps, watches, atomic operations, FDB's size
//     limits (the transaction size counted as FoundationDB 7.3's client
//     counts it) and its five second transaction lifetime, and FDB's error
//     codes, names and messages.
//   - The FoundationDB backend (package kv/fdbkv, build tag "fdb") adapts
//     github.com/apple/foundationdb/bindings/go.
//
// # What the conformance suite proves
//
// The conformance suite (package kv/kvtest) runs on the embedded backend, on
// it under fault injection (package kv/faultkv), and on a FoundationDB
// cluster when one is configured. Passing it on the embedded backend shows
// that code keeps FoundationDB's transaction semantics as far as the suite
// exercises them: serializability, conflict ranges, read-your-writes,
// versionstamps, watches, atomic operations, limits, the retry loop and the
// error predicates. It does not prove that code works on a FoundationDB
// cluster: package kv/embedded lists every known difference (latency,
// errors only a cluster produces, watch behaviour, recoveries). Three test
// modes narrow the gap; the whole suite can run under each:
//
//   - FDBREP_KV_FAULTS (package kv/faultkv): the errors of a loaded or
//     failing cluster, commit_unknown_result after real commits above all.
//   - FDBREP_KV_LATENCY (Latency): every read and commit of an embedded
//     store waits as across a network (1 ms a read, 4 ms a commit with "1"),
//     so serial reads run into the five second lifetime as on FoundationDB.
//   - FDBREP_KV_BUDGET (Budget): a transaction over 1 MB written or read, or
//     open over 1 s, fails with a *BudgetError naming where it was created,
//     and fails the test that ran it (through kvtest).
//
// Every opener of an embedded store reads FDBREP_KV_LATENCY and
// FDBREP_KV_BUDGET (kvtest.NewDB and `fdbrep serve` alike), unless it sets
// the options explicitly.
//
// Write every transaction as FoundationDB demands:
//
//   - Keep it small: at most MaxTransactionSize (10,000,000) bytes as
//     FoundationDB counts them (mutations, read and write conflict ranges,
//     each with its overhead), keys of at most 10,000 bytes, values of at
//     most 100,000 bytes, and at most five seconds between the read version
//     and the commit. FoundationDB advises far less: under 1 MB and 1 s.
//   - Issue independent reads before waiting on them: on FoundationDB every
//     read is a network round trip.
//   - Do no I/O inside a transaction function: the retry loop may run it many
//     times.
//   - Make it idempotent: after commit_unknown_result (1021) the retry loop
//     runs the function again although the first attempt may have committed.
//   - Return FDB errors unwrapped from the function (or let MustGet panic with
//     them): the retry loop only retries errors it recognises as Error.
//   - Call GetVersionstamp before Commit; do nothing with a transaction while
//     its commit is in flight (used_during_commit, 2017).
//   - A loop that retries on its own, outside Run, backs off with Backoff as
//     FoundationDB's OnError would, so that it does not hammer a loaded
//     cluster.
//   - Page work that grows with the data across transactions: Pages (a
//     page read and handled per transaction, the cursor moving only past
//     committed pages) and ReadPages (handled after the read); Batch and
//     TransactBatch size batches that shrink when transactions fail.
//
// # Operations
//
// Probe checks that a freshly opened store answers (opening FoundationDB
// contacts nobody). Health reports whether a store can commit (the embedded
// store refuses commits while its disk is full; see ErrStorageFull).
//
// # Transactors
//
// Helpers should be written against Transactor or ReadTransactor. Given a
// Database, such a helper runs in its own retry loop; given a Transaction, it
// joins the caller's transaction, so several helpers commit atomically:
//
//	func setOne(t kv.Transactor, key kv.Key, value []byte) error {
//		_, err := t.Transact(ctx, func(tr kv.Transaction) (any, error) {
//			tr.Set(key, value)
//			return nil, nil
//		})
//		return err
//	}
//
// A helper joined to a caller's transaction cannot see its retries or its
// commit; Transaction.Locals can: values kept there (a UUID it drew) live
// as long as the Transaction, across the retries of its loop, so a run
// after commit_unknown_result makes the same choice, and OnCommit hooks run
// once the attempt that added them commits (logs and counters of what the
// transaction did), never for an attempt that failed; those of an attempt
// whose commit is unknown run only if a retry finds its writes and says so
// (Locals.Adopt).
//
// # Futures
//
// Reads return futures, as in FoundationDB, so that many reads can be issued
// before the first is waited for. On the embedded backend futures are
// usually ready at once; on FoundationDB issuing reads before waiting on them
// saves round trips. Futures must not outlive their transaction.
package kv
