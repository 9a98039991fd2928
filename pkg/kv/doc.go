// Package kv is fdbrep's storage API: the subset of FoundationDB's client API
// that fdbrep uses, expressed as Go interfaces so that two backends can sit
// behind it.
//
//   - The embedded backend (package kv/embedded) is the default. It runs in
//     process on a durable local store and keeps FoundationDB's semantics:
//     strictly serializable optimistic transactions with read and write
//     conflict ranges, versionstamps, watches, atomic operations, FDB's size
//     limits and its five second transaction lifetime, and FDB's error codes.
//   - The FoundationDB backend (package kv/fdbkv, build tag "fdb") adapts
//     github.com/apple/foundationdb/bindings/go.
//
// Code that passes the conformance suite (package kv/kvtest) on the embedded
// backend is expected to be correct on FoundationDB, so write every
// transaction as FoundationDB demands:
//
//   - Keep it small: at most 10,000,000 bytes of mutations, keys of at most
//     10,000 bytes, values of at most 100,000 bytes, and at most five seconds
//     between the read version and the commit.
//   - Do no I/O inside a transaction function: the retry loop may run it many
//     times.
//   - Make it idempotent: after commit_unknown_result (1021) the retry loop
//     runs the function again although the first attempt may have committed.
//   - Return FDB errors unwrapped from the function (or let MustGet panic with
//     them): the retry loop only retries errors it recognises as Error.
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
// # Futures
//
// Reads return futures, as in FoundationDB, so that many reads can be issued
// before the first is waited for. On the embedded backend futures are
// usually ready at once; on FoundationDB issuing reads before waiting on them
// saves round trips. Futures must not outlive their transaction.
package kv
