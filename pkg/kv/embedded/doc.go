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
// (CacheSizeDefault, 64 MiB) and bloom filters on every level. DB.Stats
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
//     accessed_unreadable (1036).
//   - Conflict ranges. Reads add read conflict ranges covering exactly what
//     they examined: a point read adds the key (present or not); a range
//     read adds its range, cut at the last key returned when a limit stops
//     it; a key selector adds the keys between its reference key and its
//     result. Snapshot reads add nothing, nor do reads answered from the
//     transaction's own writes. Writes add write conflict ranges; a
//     versionstamped key adds the range its final key can fall in.
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
// bytes (value_too_large, 2103), more than 10,000,000 bytes of mutations and
// write conflict ranges (transaction_too_large, 2101), writes to keys at or
// after "\xff" (key_outside_legal_range, 2004), inverted exact ranges
// (inverted_range, 2005). Write methods return no error, so an invalid
// write fails the commit with its code. A transaction older than the
// transaction lifetime (five seconds) fails reads and, if it read anything,
// its commit with transaction_too_old (1007); so does a commit whose read
// version the conflict history has forgotten. SetTimeout fails operations
// with transaction_timed_out (1031) after the given time since creation or
// Reset, watches included. Both the lifetime and timeouts are measured on
// Options.Clock, the real clock unless a test passes a fake one; commit
// versions and OnError's backoff always follow the real clock. Cancel
// fails operations with transaction_cancelled (1025) and is a no-op after a
// successful commit. Operations after Commit fail with used_during_commit
// (2017) until Reset or OnError. OnError retries retryable errors after FoundationDB's
// backoff: starting at 10 ms, doubling, capped by SetMaxRetryDelay (one
// second by default), with full jitter, until SetRetryLimit.
//
// # Watches
//
// A watch remembers the key's value as its transaction sees it when Watch
// is called, and is armed when the transaction commits (a read-only
// transaction commits at once): it fires as soon as a committed state holds
// a different value, at once if the commit itself changed it. Writing the
// same value does not fire it; a change undone within one batch may be
// missed, as FoundationDB allows. A watch fails with the commit's error if
// the commit fails, with transaction_cancelled if its transaction is reset
// or cancelled before committing, with transaction_timed_out at the
// transaction's timeout, and with too_many_watches (1032) beyond
// Options.MaxWatches outstanding watches.
//
// # Differences from a FoundationDB cluster
//
//   - One process, one disk: no replication, no failover. A crash loses no
//     acknowledged commit, but the store is unavailable until reopened.
//   - Commit results are exact: commit_unknown_result (1021) happens only
//     when the store fails to write or sync a batch, after which every
//     commit fails with ErrStoreFailed until the DB is reopened.
//   - The transaction lifetime is measured from when the transaction took
//     its read version, not by the version distance from the newest commit.
//   - Read versions are the newest durable commit version; a read-only
//     transaction's read version may therefore stay the same while nothing
//     commits (FoundationDB's keep advancing).
//   - Options that are not in kv.TransactionOptions (priorities, tags,
//     read-your-writes disable, system key access) do not exist; keys from
//     "\xff" on are not readable.
//   - Large scans are read in growing batches from the snapshot; each batch
//     sees the transaction's writes as they are at that moment.
package embedded
