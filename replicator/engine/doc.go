// Package engine performs CouchDB replications: it copies every leaf
// revision (conflicts and deletions included) of the documents of a source
// database to a target database, over HTTP, with the protocol of CouchDB's
// replicator, and records its progress in checkpoint documents so that a
// later run resumes where the last one stopped.
//
// # Using it
//
// A Replication is a replication specification, as the replicator package
// parses it from a _replicator document or a POST /_replicate body;
// Replication.Validate checks it with CouchDB's rules and messages.
// ReplicationID computes its id as CouchDB 3.5 does (repid.go), from the
// version 4 inputs — the installation's server UUID, each endpoint's user,
// host, port, path and headers (never the password), the filter (a
// selector normalized as Mango normalizes it; for a "ddoc/name" filter its
// source code, which FetchFilterCode reads from the source),
// winning_revs_only and since_seq — so that, with CouchDB's server UUID,
// a replication moved in from CouchDB finds the checkpoints CouchDB wrote.
// A run that finds none under its id looks under CheckpointIDs (CouchDB
// 3.5's where fdbrep's differs, and an earlier fdbrep's) and takes the
// first over, as CouchDB looks under its earlier ids; Run.Sync reports
// where it started (CheckpointStart), and FindCheckpoint finds that
// without running (a migration's dry run).
// Start runs a replication in the background; Run.Progress reports the
// counters, Options.OnCheckpoint is called at every checkpoint tick (the job
// layer's heartbeat), Run.Stop ends a run gracefully with a final checkpoint
// and Run.Wait returns the outcome, a one-shot replication's Result being
// shaped like CouchDB's _replicate reply.
//
// # Inside a run
//
// A Run owns the lifecycle (Start, Stop, Wait, Progress) and, once its setup
// has found the start sequence, divides the work among three roles, as
// CouchDB's replicator does (couch_replicator_scheduler_job,
// _changes_reader, _worker):
//
//   - the changesReader (changes.go) streams the source's changes feed into
//     a bounded channel of rows, and owns the seqTracker that orders the
//     batches taken from it;
//   - the workers (worker.go, write.go) take batches of rows in feed order
//     and replicate each, sharing the moving averages that decide whether to
//     skip _revs_diff or _bulk_get;
//   - the checkpointer (checkpoint.go) writes the checkpoint documents on its
//     ticker, at Stop and at the end, and keeps what Progress reports.
//
// Requests go through a transport (transport.go, pkg/couch underneath),
// which returns 2xx answers and turns every other status into the engine's
// one HTTP error type; the peer (peer.go) builds the protocol's calls on it.
// The engine's waits, ticks and timestamps, and pkg/couch's retry waits,
// are read from Options.Clock; network timeouts run on real time. The
// node's client settings (Options.Client: the TLS configuration, session or
// Basic authentication) apply to both endpoints of every run, and a
// replication's socket_options (Replication.SocketOptions) to both of its
// endpoints; a refused certificate fails the run with an ErrHTTP error
// that wraps couch.ErrTLS and names the setting to change; a connection to
// an address the node's policy refuses (ClientSettings.Addresses, checked
// after DNS at each connect) fails it with ErrAddressDenied
// (forbidden_address), naming the side, the address and the setting,
// without a retry or a packet sent. A request that
// gets no answer fails with an ErrHTTP error naming the side, its
// redacted URL and what failed ("source http://bob:*****@host/db/ refused
// the connection (POST /_session, 6 attempts)"). Options.LogFields name
// the job in every line of the run, its HTTP clients' included.
//
// Run.Sync says whether the run is in sync with its source and, if not,
// why (sync.go): the changes reader counts the rows it hands out, the
// workers the batches they finish and the documents the target refuses
// (Run.Refused keeps the last RefusedDocsMax), and the transports report
// every attempt (couch.Options.Observe), from which a closed list of
// stall reasons is kept, each cleared by the event that ends it (an
// answer from that peer, a document written, a row passing the filter).
// Probe (probe.go) tells whether a host that took no connection answers
// again; the scheduler uses it to end such crashes' backoffs.
//
// # The protocol
//
// A run verifies both databases (GET {db}/: 401 → ErrUnauthorized, 403 →
// ErrForbidden, each with the peer's reason, saying when its answer was
// to the session's login and naming an account CouchDB locked out as
// such; anything else → ErrDBNotFound): the source first, then, with
// create_target, creating the target (PUT, create_target_params as query
// string, unless it exists already), so that a source that cannot be
// opened leaves no target behind, as in CouchDB. It reads the checkpoint documents _local/<base id> of
// both sides and starts from their common ancestry (matching session ids in
// the two histories) or from since_seq or 0. It then reads the source's
// changes feed (feed=normal for one-shot runs, feed=continuous resumed from
// the last sequence seen whenever it ends or breaks; style=all_docs, or
// main_only with winning_revs_only; filtered by doc_ids, each id
// percent-decoded as CouchDB decodes it (%XX, and + for a space), selector,
// a design document filter with query_params, or _view), hands batches of
// worker_batch_size rows to worker_processes workers, and for each batch
// asks the target which revisions it lacks (_revs_diff), fetches them
// (_bulk_get with revs and latest, results matched by id and revision, never
// by position; documents with attachments and _bulk_get leftovers one by one
// with GET ?open_revs, whose reply may be JSON or multipart/mixed with
// multipart/related parts) and writes them with new_edits=false: plain
// documents through _bulk_docs (flushed early past 4 MiB, split in halves on
// 413), design documents and documents with attachments one by one with PUT
// (multipart/related when attachment bodies travel along).
//
// Batches are tracked in feed order: the checkpointable sequence
// (through_seq) is the last sequence of the longest run of finished batches,
// so a checkpoint never claims changes that are not on the target. Every
// checkpoint_interval, at the end of a one-shot run and on Stop, when
// through_seq moved, the engine checks that neither peer restarted
// (_ensure_full_commit's instance_start_time) and writes the same checkpoint
// document (session_id, source_last_seq, replication_id_version 4, history of
// at most 50 sessions, newest first) to the source and then the target. A
// feed that ends past its last row (a filtered one) moves through_seq to
// its last_seq, so the next run does not read the filtered changes again;
// a one-shot run that replicated no change answers no_changes all the same.
//
// # Defaults and trade-offs
//
// Tunables default to CouchDB's values (WorkerProcessesDefault and its
// siblings). A replication's node settings, which no document sets
// (RequestTimeout, MissingDocRetry and MaxDocIDLength: CouchDB's
// request_timeout, missing_doc_retry_msec and max_document_id_length,
// whose longer ids are skipped into doc_write_failures), are the job
// layer's to fill in; Options.Count is told of the run's events, and
// ClientSettings.Count of its requests, as CouchDB's couch_replicator
// stats count them. Requests go through pkg/couch: transport errors, 408 and 5xx are
// retried retries_per_request times (250 ms doubling), 429 backs off through
// the shared rate limiter and gives up with ErrMaxBackoff. A broken changes
// feed is resumed from its last sequence. The engine itself retries only
// replies cut while they are read (changes feeds, open_revs), never a
// request pkg/couch has given up on, so a dead or frozen peer fails the run
// after one retry budget per request rather than its square; cancelling the
// run's context, or the end of Stop's, ends every request at once. A document the target refuses with
// 401, 403 or 413 (or 415, or an attachment name error) is counted in
// doc_write_failures and skipped; any other write error stops the run with
// ErrBulkDocs or ErrDocWrite, so nothing is lost silently. A run that fails
// may have written documents past its last checkpoint; the next run transfers
// them again (writes with new_edits=false are idempotent), which is the cost
// of checkpointing only every checkpoint_interval.
//
// Two optimizations go beyond CouchDB's replicator. When the target holds no
// documents at all, _revs_diff is skipped from the start (everything is
// missing; the moving average of missing revisions re-checks within 37 s, as
// CouchDB does once a target proves empty), and a replication from sequence 0
// reads the feed with include_docs=true and writes first revisions (a single
// "1-" leaf without attachments, at most 16 KiB) straight from it, as
// PouchDB's replicator does with _all_docs; other revisions are fetched as
// usual. Unlike CouchDB, http and https endpoints never share an id.
//
// # Memory
//
// Whatever its peers send, a run holds no more of it than MemoryBound
// (456 MiB with the default tunables, more with more worker_processes and
// http_connections): no answer is read whole without a bound. An answer,
// or a part of one, over its limit fails the run with an
// http_request_failed error that names the limit (under the class of its
// step: changes_req_failed, revs_diff_failed, open_doc_revs_failed, …),
// which is not retried within the run (the peer would answer the same);
// the job layer treats it as any error of a peer (a _replicator
// document's job crashes and backs off), while the node and its other
// replications go on. The answers of a fixed shape (a
// database's info, _session, checkpoint documents, _ensure_full_commit,
// the replies to writes) are at most AnswerMax (4 MiB), the replies to
// _revs_diff and _bulk_docs AnswerMax more than their request, a
// session's login couch.LoginAnswerMax (1 MiB). Answers that may be
// large are streamed and bounded in parts: a changes row at ChangesRowMax
// (1 MiB; a feed read with include_docs is read again without the
// documents instead), the rows read ahead of the workers, or in their
// batches, at ChangesQueueMax (16 MiB, past which the feed waits), a
// _bulk_get result at LargeDocMin (1 MiB: the reply is written as it
// comes, and what a larger result kept it from bringing is fetched one
// document at a time), and one document's open_revs answer, with its
// attachments and what they decompress to for a pouchdb-server target
// (a decompression bomb stops there), at DocMax (64 MiB), as a design
// document read for its filter. Documents past LargeDocMin take turns,
// one at a time per run, from their fetch to their write, so that a run
// holds one large document at once rather than one per connection.
// Answers that drip (less than couch.StallBytes per connection_timeout
// of waiting) fail their request, changes feeds excepted: a feed's
// heartbeats look the same, and its memory is bounded all the same.
//
// # pouchdb-server peers
//
// pouchdb-server (express-pouchdb 4.2) is a supported peer, and the engine
// never sends what crashes or hangs it: selectors go in the query string
// (a POSTed _selector filter kills the server), latest=true is only asked for
// revisions the source's own feed listed, an empty _bulk_get is never sent
// (it never answers), create_target does not PUT a database that exists nor
// one it may not create (a non-admin PUT kills the server; _session tells), open_revs is accepted as JSON with inline base64
// attachments, _bulk_get results grouped per id and {"missing": rev} entries
// are understood, attachments are never sent gzip-encoded to it, and a PUT
// reply without "rev" counts as success. Since it builds a whole
// feed=normal reply before sending it, one-shot feeds from it are read in
// pages (limit = worker_batch_size × worker_processes), the next page
// being fetched while the workers replicate the last. Its continuous feeds never end;
// pkg/couch's inactivity timeout catches a silent peer.
package engine
