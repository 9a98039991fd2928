// Package repdb stores replicator databases in the kv store: the database
// registry, documents with their revisions, _local documents, the changes
// feed and the watches longpoll feeds wait on. api_frontend nodes serve
// CouchDB's document API from it; replication nodes write a job's terminal
// state into its document through it (Store implements
// replicator.DocUpdater), in the transaction that finishes the job. It
// imports nothing of the replicator or of the HTTP API, so both roles can
// use it and neither drags the other in.
//
// # Names
//
// fdbrep serves only replicator databases: "_replicator", or a CouchDB
// database name ending in "/_replicator" (IsReplicatorDB).
//
// # Documents
//
// A document is a JSON object with a revision "N-<md5>": the digest of the
// previous revision, the deletion flag and the canonical body, so the same
// edit retried yields the same revision. Each document keeps one branch of
// history (its last MaxRevHistory revisions). A deleted document keeps a
// tombstone and may be recreated without a revision. _local documents have
// revisions "0-N", no history and no changes rows.
//
// Writes go through Store.Write, one transaction each: base revision
// check, new revision, counters, the changes row moved to the write's
// versionstamp, and the caller's hook (the replicator's job change) in the
// same transaction. A write retried after commit_unknown_result finds the
// revision its earlier attempt committed and reports it.
//
// # Key layout
//
// Under the store's subspace (SubspaceDefault is ("frontend"), the name of
// the package that used to hold it, kept so existing data stays readable):
//
//	("db", db)                 -> dbMeta JSON
//	("doc", db, id)            -> record JSON of a live document
//	("tomb", db, id)           -> record JSON of a deleted document (no body)
//	("local", db, id)          -> record JSON of a _local document
//	("docseq", db, id)         -> 10-byte versionstamp of the document's last change
//	("seq", db, versionstamp)  -> change row JSON: the changes feed
//	("count", db, "doc"|"del") -> little-endian int64 counters (atomic adds)
//	("feed", db)               -> versionstamp of the last write (longpoll feeds watch it)
//
// Live and deleted documents live in separate ranges so that _all_docs is
// a plain range read; the changes feed holds one row per document, at the
// versionstamp of its last write.
//
// # Errors
//
// Functions return the sentinels of errors.go (wrapped with %w) or kv
// errors; the HTTP API maps them to CouchDB replies in one place.
package repdb
