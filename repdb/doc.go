// Package repdb stores replicator databases in the kv store: the database
// registry, documents with their revision trees, _local documents, the
// changes feed and the watches waiting feeds use. api_frontend nodes serve
// CouchDB's document and replication API from it; replication nodes write
// a job's terminal state into its document through it (Store implements
// replicator.DocUpdater), in the transaction that finishes the job. It
// imports nothing of the replicator or of the HTTP API, so both roles can
// use it and neither drags the other in.
//
// # Names
//
// fdbrep serves only replicator databases: "_replicator", or a CouchDB
// database name ending in "/_replicator" (IsReplicatorDB).
//
// # Documents and revisions
//
// A document is a JSON object with a revision tree, as in CouchDB, so that
// replicator databases can be replicated in and out with their history
// and conflicts. Revisions are "N-id". A new edit (Write) extends a leaf:
// the winner, a conflict, or the winning deletion when a deleted document
// is recreated; its id is the md5 of the previous revision, the deletion
// flag and the canonical body, so the same edit retried yields the same
// revision. A replicated revision (WriteReplicated, new_edits=false) is
// stored with the id and history it comes with, merged into the tree
// (RevTree.Merge). The winning revision is CouchDB's: a live leaf before a
// deleted one, then the highest position, then the highest id. Only leaves
// keep a body, as in a compacted CouchDB database.
//
// Trees are bounded: each branch keeps its RevsLimit (1000, CouchDB's
// default revs_limit) newest revisions, and a tree must encode in
// MaxTreeBytes, so it fits one value; a larger one is stemmed to half as
// many revisions per branch until it fits (ErrTooLarge when its leaves
// alone do not: thousands of conflicts).
//
// Every write is one transaction: the document's winner and tree are
// read, the new tree computed, the caller's hook run with the old and new
// winners (the replicator's job change, so a document and its job commit
// together; it may ask for the replicator's stale "_replication_*" fields
// to go), and then the records, tree, counters and changes row written. A
// write retried after commit_unknown_result finds its revision in the tree
// and reports success. A deleted document keeps its tree. _local
// documents have revisions "0-N", no tree and no changes rows.
//
// # Reads
//
// Reading a document's winner is one read of its record. Reads that need
// history or other leaves (OpenRevs, ReadRevs, RevsDiff, and AllDocs,
// Lookup and Feed with their Conflicts options) read the tree too, only
// for documents whose record says they have more than one leaf when they
// can. Reads that may cover a whole database (AllDocs, Feed) page through
// transactions of at most scanPageRows rows; requests that list documents
// (ReadRevs, RevsDiff, Lookup) read at most pageDocs per transaction; and
// every page stops once it has read pageBudget bytes (see pages.go).
//
// # Security objects
//
// Each database has CouchDB's security object (Security: "admins" and
// "members", each with "names" and "roles"), stored whole in one value
// and replaced in one transaction (SetSecurity). ParseSecurity applies
// CouchDB's checks and IsAdmin, IsMember and Public its rules: an empty
// "members" makes the database public. The HTTP API decides what each
// user may do with them.
//
// # Key layout
//
// Under the store's subspace (SubspaceDefault is ("frontend"), the name of
// the package that used to hold it, kept so existing data stays readable):
//
//	("db", db)                 -> dbMeta JSON
//	("doc", db, id)            -> record JSON of the winning revision, when live
//	("tomb", db, id)           -> record JSON of the winning revision, when every leaf is deleted
//	("tree", db, id)           -> revision tree JSON (see below)
//	("leaf", db, id, rev)      -> record JSON of a leaf that does not win (a conflict, a deleted branch)
//	("local", db, id)          -> record JSON of a _local document
//	("docseq", db, id)         -> 10-byte versionstamp of the document's last change
//	("seq", db, versionstamp)  -> change row JSON: the changes feed
//	("count", db, "doc"|"del") -> little-endian int64 counters (atomic adds)
//	("feed", db)               -> versionstamp of the last write (waiting feeds watch it)
//	("sec", db)                -> the security object's JSON, as set (absent: {})
//	("secw", db)               -> the token of the SetSecurity call that last wrote it
//
// A record is {"rev", "body", "deleted" (leaf records), "leaves" (the
// winner's: the number of leaves when more than one)}. A tree is
// {"n": [[parent, "id"(, 1)], ...]}: the revisions in position order,
// parent the index of the parent revision or, for a root, minus its
// position, and 1 marking a deleted leaf. A change row is {"id", "rev",
// "deleted", "leaves"}: the winner after the document's last write.
//
// Documents written before trees existed have a record with "revs" (their
// one branch, newest first, up to 20) and no tree key: they are read as
// that branch, and their next write stores the tree and drops "revs".
//
// Live and deleted winners live in separate ranges so that _all_docs is a
// plain range read; the changes feed holds one row per document, at the
// versionstamp of its last write.
//
// # Errors
//
// Functions return the sentinels of errors.go (wrapped with %w) or kv
// errors; the HTTP API maps them to CouchDB replies in one place.
package repdb
