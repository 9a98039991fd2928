// Package replicator is the shared core of fdbrep's CouchDB-compatible
// replication service on the fdbjobs job layer (the design of CouchDB
// 4.x's FDB replicator RFC): what a replication is (Spec, parsed and
// validated once by ParseSpec), how it is stored as a job (JobData,
// states, ids), the replicator's state in the store (Store: jobs, the
// replication id → job id subspace, database identities, fair-share
// usage), the cluster-wide settings (Config), the engine contract (Engine,
// Run) and the metrics. Two planes build on it and share nothing else:
//
//   - replicator/control, the control plane api_frontend nodes run: it
//     turns _replicator documents and POST /_replicate into jobs, inside
//     the callers' transactions, and serves the monitoring views; it never
//     contacts a replication endpoint;
//   - replicator/scheduler, what replication nodes run: acceptors, workers
//     running the protocol engine (replicator/engine), rotation, backoff,
//     retention.
//
// Neither imports net/http: the HTTP API is package frontend, wired to the
// control plane by cmd/fdbrep.
//
// # Jobs
//
// One fdbjobs job of type "rep_jobs" (activity timeout JobTimeout, 61 s)
// per replication. Its id is computed without network I/O: for a document,
// "<db instance uuid>|<doc id>" (the uuid is registered when the database
// is created, so a re-created database gets new jobs); for POST
// /_replicate, the MD5 of the server UUID, both endpoints (URL, user name,
// headers, never passwords), the user, continuous/create_target and the
// filter as written. Its data (JSON) holds the parsed replication (Spec,
// with credentials: job data is as secret as the documents), state,
// state_info, error_count, last_error, start_time, last_start,
// last_updated, node, rep_stats, job_history (newest first, MaxHistory
// entries), checkpoint_history (the result of a completed one-shot job),
// rep_id and the filter code it was computed with. Scheduled times are
// Unix milliseconds.
//
// States are the RFC's five; the fdbjobs state follows:
//
//	pending   -> fdbjobs pending (runnable: scheduled time in the past)
//	running   -> fdbjobs running
//	crashing  -> fdbjobs pending, scheduled in the future (backoff)
//	completed -> fdbjobs finished
//	failed    -> fdbjobs finished
//
// # Fair share
//
// Between _replicator databases (transient jobs form one more bucket,
// key ""), cluster-wide: see share.go. Shares per database in Config.Shares
// (default 100, 1..1000). Run time is charged per database; once per
// node interval (scheduler.Config.Interval) one node decays the usage
// (× UsageCoeff) and adds the charges.
// A job is enqueued (by the control plane) or re-enqueued (rotation, shutdown)
// with the scheduled time now - margin - FairShareWindow + FairShareWindow
// × p/pmax, where p = usage/shares: always runnable, but behind the jobs
// of databases that used less of their share, and moving forward as time
// passes. Acceptors taking the oldest runnable job first turns this into
// priority scheduling; with more jobs than capacity, run time tends to the
// ratio of the shares.
//
// # Key layout
//
// Under Config.Subspace (SubspaceDefault ("fdbrep_replicator")), besides
// the fdbjobs keys of type rep_jobs:
//
//	(1, RepID)           -> JobID     replication id owner
//	(2)                  -> UUID      server UUID (replication ids, job ids)
//	(3, DBName)          -> UUID      _replicator database identity
//	(4, DBUUID, DocID)   -> ""        jobs of a database (DBDeleted)
//	(5, ShareKey)        -> (float64) decayed usage, ms
//	(6, ShareKey)        -> int64 LE  charges since the last roll-up, atomic add
//	(7)                  -> (int64)   last usage period rolled up
//	(8, Token)           -> ""        charge applied (cleared right after)
//
// # Failure trade-offs
//
// Effects outside the store are at least once: a job re-run after its
// node died repeats work since its last checkpoint (the protocol makes
// that harmless). Monitoring may show a dead node's jobs running for up to
// two JobTimeouts. Passwords are stored in job data (nodes need them) but
// never appear in views, errors, logs or metrics.
//
// Metrics count commits, not attempts: counters move after a transaction
// committed (for DocWritten, DBCreated and DBDeleted, which run in the
// caller's transaction, once its commit succeeds, asynchronously right
// after). An attempt that committed although its commit reported
// commit_unknown_result is not counted; its retry counts what it does.
package replicator
