// Package embedded is fdbrep's default storage backend: an in-process,
// durable store that implements kv.Database with FoundationDB's transaction
// semantics on top of pebble (github.com/cockroachdb/pebble/v2), which
// provides the storage only: a log-structured key-value store with
// snapshots, atomic write batches and a write-ahead log.
//
//	db, err := embedded.Open(embedded.Options{Dir: "/var/lib/fdbrep"})
//	...
//	defer db.Close()
//	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) { ... })
//
// Options.InMemory keeps everything in memory (pebble's in-memory file
// system) on the same code path, for tests. Only one process can open a
// directory at a time: a second Open fails at once on pebble's lock file.
// pebble runs with an explicit format major version (upgrading pebble never
// ratchets a store by accident), a block cache of Options.CacheSize
// (CacheSizeDefault, 64 MiB), memtables of Options.MemTableSize
// (MemTableSizeDefault, 16 MiB) and bloom filters on every level. DB.Stats
// reports the commit pipeline's counters (batches, commits, conflicts, WAL
// syncs, conflict history size).
//
// # Transactions
//
// Transactions are optimistic and strictly serializable, as in
// FoundationDB:
//
//   - Read version. A transaction reads at the newest published version,
//     taken at its first read: a pebble snapshot shared, with a reference
//     count, by every transaction that reads at that version, so getting a
//     read version costs a few atomic operations.
//   - Buffered writes and read-your-writes. Writes go to a sorted buffer
//     (sets, clears, cleared ranges, atomic operations on an unknown stored
//     value) and a mutation log. Reads merge the snapshot with the buffer,
//     point reads and ranges alike, in both directions, with limits and key
//     selectors. Reading a key written by SetVersionstampedValue, or one
//     that a pending SetVersionstampedKey could produce, fails with
//     accessed_unreadable (1036), snapshot reads too, and so does the
//     transaction's commit afterwards, as in FoundationDB 7.3.
//   - Conflict ranges. Reads add read conflict ranges covering exactly what
//     they examined: a point read adds the key (present or not); a range
//     read adds its range, cut at the last key returned when a limit stops
//     it; a key selector adds the keys between its reference key and its
//     result. Snapshot reads add nothing, nor do reads answered from the
//     transaction's own writes. Writes add write conflict ranges; a
//     versionstamped key adds the range its final key can fall in, from the
//     first versionstamp of the version after the read version, as
//     FoundationDB's client does (keys committed at the read version are
//     not in it).
//
// # Commit pipeline
//
// Commit hands the transaction (read version, coalesced read and write
// conflict ranges, mutation log) to a queue served by two goroutines:
//
//   - The leader (sequencer and resolver) takes every queued transaction,
//     up to Options.MaxBatchTxns and MaxBatchBytes, as one batch with one
//     commit version, and checks each in order against the conflict
//     history: an ordered map of disjoint key intervals to the version that
//     last wrote them, kept back to the oldest read version still in use
//     (transactions hold their snapshot until resolved). A transaction that
//     read a range written after its read version fails with not_committed
//     (1020); an accepted one's write ranges go into the history at once,
//     so later transactions of the same batch conflict with it too. The
//     accepted transactions' mutations are replayed in order into one
//     pebble batch, atomic operations evaluated against the state that
//     batch sees (the store plus earlier transactions of the batch), and
//     each gets its versionstamp: the 8-byte big-endian commit version and
//     the 2-byte big-endian order within the batch. The batch also records
//     the commit version under "\xff\xff" (out of reach of transactions), so
//     versions and versionstamps keep increasing across restarts. The
//     leader writes the batch without waiting for the WAL sync, takes a
//     pebble snapshot of exactly that state, and hands both to the syncer.
//   - The syncer (group commit) syncs the WAL once for every batch handed to
//     it, and only after the sync returns publishes the batch's snapshot as
//     the new read version, fires the watches the batch triggered, and
//     acknowledges its transactions.
//
// Durability rule: pebble makes a batch visible to its readers before its
// WAL sync, so transactions never read pebble's live state, only published
// snapshots; a commit is acknowledged, and visible to any reader, only once
// it is durable. While one sync runs the leader prepares the next batch, so
// one sync covers all the commits that arrived during the previous one.
//
// Commit versions advance with the wall clock, about a million per second
// as in FoundationDB, and always by at least one per batch.
//
// # Limits and errors
//
// FoundationDB's limits and error codes, checked where FoundationDB checks
// them: keys over 10,000 bytes (key_too_large, 2102), values over 100,000
// bytes (value_too_large, 2103; for versionstamped operations the operand
// with its 4-byte offset), writes to keys at or after "\xff"
// (key_outside_legal_range, 2004), inverted exact ranges (inverted_range,
// 2005), negative range limits (range_limits_invalid, 2012), and
// transactions over 10,000,000 bytes (transaction_too_large, 2101) counted
// as FoundationDB 7.3's client counts them at commit: the mutations its
// read-your-writes layer would send (one clear per maximal cleared range, a
// key's later set replacing its earlier writes, consecutive atomic
// operations merged) at 56 bytes each plus keys and parameters, and the
// coalesced read and write conflict ranges at 32 bytes each plus their keys
// (size.go: a commit far from the limits takes an upper bound instead).
// Write methods return no error, so an invalid write fails the commit with
// its code. A transaction older than the transaction lifetime
// (five seconds) fails reads and, if it read anything, its commit with
// transaction_too_old (1007); so does a commit whose read version the
// conflict history has forgotten. SetTimeout fails operations with
// transaction_timed_out (1031) after the given time since creation or
// Reset, watches included. Both the lifetime and timeouts are measured on
// Options.Clock, the real clock unless a test passes a fake one; commit
// versions and OnError's backoff always follow the real clock. Cancel
// fails operations with transaction_cancelled (1025) and is a no-op after a
// successful commit. Once Commit is called, every operation, GetVersionstamp
// included, fails with used_during_commit (2017) until Reset or OnError;
// one issued while the commit is in flight also fails the commit's future
// with it (Cancel with transaction_cancelled), although the commit goes on
// and may happen, as on FoundationDB. OnError retries what FoundationDB's
// onError retries (kv.OnErrorRetries) after its backoff (kv.Backoff):
// 10 ms fixed after transaction_too_old and future_version, otherwise a
// random delay under a limit that starts at 10 ms and doubles up to
// SetMaxRetryDelay (one second by default; 30 s after proxy memory limit
// errors), until SetRetryLimit.
//
// # Watches
//
// A watch reads the key as the transaction sees it, adding a read conflict
// range on it as FoundationDB does (so a transaction with writes that sets
// a watch conflicts with a concurrent write of the key), and is armed when
// the transaction commits (a read-only transaction commits at once): it
// fires as soon as a committed state holds a different value, at once if
// the commit itself changed it. Writing the same value does not fire it; a
// change undone within one batch may be missed, as FoundationDB allows. A
// watch fails with the commit's error if the commit fails, with
// transaction_cancelled if its transaction is reset or cancelled before
// committing, with transaction_timed_out at the transaction's timeout, and
// with too_many_watches (1032) beyond Options.MaxWatches outstanding
// watches.
//
// # Storage failures
//
// A full disk (ENOSPC, EDQUOT) or a disk that fails writes does not hang
// the store and does not flood the log. The file system under pebble
// (healthfs.go) does not hand a failed write to pebble, which would stop
// the process (WAL, MANIFEST) or retry a failed flush in a tight loop: the
// write waits and is retried, with a delay growing to one second, until it
// succeeds. Meanwhile Health reports the store unhealthy (an error wrapping
// kv.ErrStorageFull for a full disk, and kv.Error io_error, 1510), commits
// fail at once with that error (not retryable: they did not happen), and
// the commits that were in flight fail with commit_unknown_result (they
// may still happen). Reads go on. When space returns, the waiting writes
// complete, the commits in flight finish, Health is nil again and commits
// are accepted: nothing acknowledged is lost. pebble's background errors
// (a failed compaction) make Health report io_error for
// Options.StorageErrorWindow, or until a flush or compaction succeeds.
// Storage trouble is logged at most once per Options.ErrorLogInterval and
// kind, with a count of what was suppressed. A failed fsync is not retried
// (the kernel may have dropped the data): pebble stops the process, and the
// WAL replays on the next Open. Close does not wait for writes that wait
// for the disk.
//
// # Latency and budget
//
// Options.Latency (by default FDBREP_KV_LATENCY) makes reads and commits
// wait as across a network (see kv.Latency): a read's future becomes ready
// one read latency after it was issued (plus one for the read version on a
// transaction's first read, and one per 80,000 bytes returned), a range
// read waits once per batch, a commit with writes waits the commit latency.
// Reads issued together overlap. Options.Budget (by default
// FDBREP_KV_BUDGET) fails an attempt that reads or commits more bytes, or
// stays open longer, than the budget with a *kv.BudgetError naming the call
// site that created the transaction (see kv.Budget), and reports it to
// Options.OnBudgetExceeded.
//
// # Differences from a FoundationDB cluster
//
// Each is a way for code to pass here and fail on FoundationDB, or the
// reverse:
//
//   - One process, one disk: no replication, no failover. A crash loses no
//     acknowledged commit, but the store is unavailable until reopened.
//     After a FoundationDB recovery every transaction in flight fails
//     (transaction_too_old, commit_unknown_result, not_committed) and
//     versions jump by about 100 million; here they do not.
//   - Commit results are exact: commit_unknown_result (1021) happens only
//     when the disk stopped taking writes during the commit. FoundationDB
//     returns it on any proxy or network failure, and may report
//     not_committed for transactions that did not logically conflict (with
//     several resolvers).
//   - Latency: without the latency mode every read is a memory access, so
//     serial reads that are instant here take a round trip each on
//     FoundationDB. The latency mode is an approximation: fixed delays,
//     batches of rows rather than FoundationDB's byte-sized ones, no
//     queueing.
//   - Errors a loaded cluster returns are never produced here: future_version
//     (1009), process_behind (1037), database_locked (1038),
//     cluster_version_changed (1039), commit_proxy_memory_limit_exceeded
//     (1042), batch_transaction_throttled (1051),
//     grv_proxy_memory_limit_exceeded (1078), tag_throttled (1213),
//     proxy_tag_throttled (1223). Package kv/faultkv injects the commonest
//     (FDBREP_KV_FAULTS).
//   - The transaction lifetime is measured in time from when the
//     transaction took its read version, not by the version distance from
//     the newest commit (5,000,000 versions), and both reads and commits
//     past it fail: on FoundationDB a commit past five seconds fails too,
//     but reads often still succeed while the storage servers keep the
//     version (seen on 7.3.79 at 5.5 s), and may fail early around
//     recoveries.
//   - Read versions are the newest durable commit version; a read-only
//     transaction's read version may therefore stay the same while nothing
//     commits (FoundationDB's keep advancing).
//   - OnError's backoff after tag_throttled ignores the server's throttle
//     time (fdbrep sets no tags).
//   - Watches: a watch fires only when the transaction commits, also when
//     the transaction itself later writes a different value to the key
//     (FoundationDB fires it at the write); FoundationDB watches may fail
//     with storage errors (future_version, transaction_too_old), fall back
//     to polling about once a second when a storage server has too many
//     watches, and fire spuriously; here a watch fails only as listed under
//     Watches. The limit of 10,000 outstanding watches is per DB here and
//     per FoundationDB database handle there, which fdbkv shares among the
//     Opens of one cluster file in a process.
//   - The transaction size follows FoundationDB's client in the cases the
//     write map's rules cover (see size.go); corner cases of its write map
//     around versionstamped keys (earlier writes in the range a
//     versionstamped key may land in, which FoundationDB sends early) may
//     count a few bytes differently.
//   - Options that are not in kv.TransactionOptions (priorities, tags,
//     read-your-writes disable, system key access) do not exist; keys from
//     "\xff" on are not readable.
//   - After a CompareAndClear in a transaction, FoundationDB's
//     read-your-writes cache counts its key as present when it resolves a
//     key selector that moves from key to key (an offset other than 1),
//     whatever the key's value (seen on 7.3.79: with keys a, d and x and a
//     CompareAndClear of the absent key c, the second key from b resolves
//     to d, not x); here only keys that exist count. fdbrep uses no CompareAndClear, and the conformance
//     suite's model keeps the two apart.
package embedded
