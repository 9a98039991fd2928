// Package replicator is fdbrep's CouchDB-compatible replication service on
// the fdbjobs job layer (the design of CouchDB 4.x's FDB replicator RFC):
// api_frontend nodes create replication jobs, replication nodes run them,
// and all coordination goes through the shared store.
//
// # Two halves
//
// Frontend (NewFrontend) runs on api_frontend nodes and makes no outbound
// connection. It validates _replicator documents at write time
// (ValidateDoc/PrepareDoc: 403 with a readable reason), creates, replaces
// and removes jobs inside the caller's document-write transaction
// (DocWritten, DBCreated, DBDeleted), serves POST /_replicate (Replicate)
// and the monitoring views (SchedulerJobs, SchedulerJob, SchedulerDocs,
// ActiveTasks) from the job data, cluster-wide.
//
// Node (NewNode) runs on replication nodes: a job server that keeps at most
// MaxAcceptors acceptors waiting for runnable jobs and at most MaxJobs
// jobs running in steady state, runs each with an Engine (EngineDefault is
// package engine), and needs no inbound connection: terminal states reach
// the _replicator documents through the DocUpdater the frontend's document
// store implements, called in the job's finishing transaction.
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
// # Job server
//
// Acceptors take the runnable jobs with the oldest scheduled times: a
// bisection over fdbjobs pending counts (one snapshot read transaction,
// to Interval/50) finds the time T by which as many jobs are runnable as
// the acceptor may take, and an AcceptBatch bounded by T takes them (when
// acceptors of several nodes aim at the same jobs, the losers of the
// conflict retry and take what is left by T). With nothing runnable an acceptor waits on the
// queue's watch for up to a random part of StartupJitter. The pool holds
// at most MaxAcceptors acceptors, which between them may take the room
// left under MaxJobs (at most 25 jobs each at once, so a starting node
// fills quickly); an acceptor that gets jobs becomes their workers and the
// pool is topped up.
//
// Every Interval (plus up to a third, at random) the node: applies a configuration given to
// SetConfig; charges run time for fair share; stops the oldest continuous
// jobs beyond MaxJobs that ran at least MinRunTime (one-shot jobs only
// after MaxJobs was lowered, and after the continuous ones), each writing
// a final checkpoint and going back to pending; starts up to
// min(MaxChurn - jobs accepted in the last interval, MaxJobs + MaxChurn -
// acceptors' room - workers, runnable jobs) jobs' worth of extra
// acceptors, so that with more runnable jobs than capacity about MaxChurn
// jobs rotate every two intervals (jobs accepted in one interval count
// against the next one's churn, as in CouchDB); and
// removes finished transient jobs older than TransientJobMaxAge (and jobs
// of deleted _replicator databases) with their replication id mapping, at
// most every max(Interval, TransientJobMaxAge/10).
//
// # Job lifecycle
//
// Accepted, a job computes its replication id (the engine fetches a
// design document filter's code from the source), then in one transaction
// claims the id in the (replication id -> job id) subspace: if another job
// holds it and that job is pending or running, a transient holder makes
// this job crashing (a transient job: failed) and a persistent holder
// makes it failed ("Replication `<id>` specified by document ... already
// started, triggered by document ... from db ..."); a finished, crashing
// or missing holder is taken over. The same transaction marks the job
// running (history "started") as the fdbjobs heartbeat. While the engine
// runs, every checkpoint and every StatsUpdateInterval (capped at a third
// of JobTimeout) the stats are stored with fdbjobs.Update, the heartbeat
// that keeps the activity monitor away and the fence that stops a worker
// whose job was removed or replaced (ErrHalt: it stops writing at once).
// At each checkpoint a filtered replication recomputes its id; if it
// changed the job goes back to pending and runs again under the new id
// (stats and history reset, the old mapping cleared). A one-shot run that
// ends completes the job (state completed, state_info = stats,
// checkpoint_history = the final checkpoint, the document updated).
//
// # Errors and backoff
//
// A crash makes a persistent job crashing (history "crashed" with the
// reason, then "pending"), rescheduled at now + min(MinBackoff *
// 2^(errors-1), MaxBackoff) less up to a quarter at random; a job that ran
// longer than HealthThreshold since its last start is healed first (error
// count back to 0, also at heartbeats). A transient job that crashes
// fails, unless the error is the rate limiter's max_backoff. Node.Stop
// stops every job with a final checkpoint and re-enqueues it for another
// node at once. A stopping run keeps its heartbeat and gets
// min(2 s, ShutdownTimeout/2) for the final checkpoint; then its requests
// are cancelled (a peer that does not answer cannot hold the shutdown up)
// and the job is re-enqueued with the progress of its last checkpoint.
// ShutdownTimeout bounds the whole wait; a node that dies leaves
// its jobs running until the fdbjobs activity monitor re-enqueues them,
// between one and about two JobTimeouts after their last heartbeat.
//
// # Fair share
//
// Between _replicator databases (transient jobs form one more bucket,
// key ""), cluster-wide: see share.go. Shares per database in Config.Shares
// (default 100, 1..1000). Run time is charged per database; once per
// Interval one node decays the usage (× UsageCoeff) and adds the charges.
// A job is enqueued (by the frontend) or re-enqueued (rotation, shutdown)
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
// # Defaults
//
// max_jobs 500, max_churn 100, max_acceptors 2, interval 15 s, min_run_time
// 60 s, startup_jitter 5 s, min_backoff 32 s, max_backoff 2 days (at most
// 30 days), health_threshold 2 min, max_history 10, transient_job_max_age
// 24 h, job timeout 61 s, stats update interval 10 s, shutdown timeout 5 s,
// shares 100, usage_coeff 0.95, fair-share window 1 h. The *Default
// constants document each.
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
