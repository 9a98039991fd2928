// Package soak is the black-box counterpart of the scheduler's model
// test (cmd/internal/sim), TestSoak: real fdbrep processes replicating
// between databases of a real Apache CouchDB 3.5, driven over HTTP by a seeded random stream
// of operations, and checked from outside (HTTP and the processes' JSON
// logs only) for the liveness and safety that replicator/scheduler's doc
// ("Liveness") promises. Two topologies, each a subtest: serve (one
// process with every role) and cluster (two api_frontend and two
// replication nodes in one process), both on an embedded store in a data
// directory that survives the SIGKILLs among the operations.
//
// Operations: _replicator documents created, updated and deleted
// (continuous and one-shot, some with failing endpoints: a source database
// that does not exist or a closed port; some with a selector or doc_ids),
// POST /_replicate one-shot (a client waits for the result) and continuous
// (cancelled later), replicator databases created and deleted, max_jobs
// and max_churn changed at run time for the whole cluster, and SIGKILLs of
// the process followed by a restart on the same data directory and
// address. A writer adds documents to the continuous replications' sources
// all along.
//
// A replication "version" is one write of a document, or one POST; each has
// a target database of its own, which names it in the logs and the views.
// The runs of every version are rebuilt from the log lines "replication
// started" / "stopped" / "completed" / "crashed" / "failed" (job_id, node),
// a kill closing the runs open at that moment. Checked while it runs, a few
// times per interval:
//
//   - Safety: no node runs more than max_jobs (per _scheduler/jobs and per
//     the logs; after max_jobs was lowered, the larger value holds for an
//     interval step, the stop grace and the slack); a version never runs
//     on two nodes at once (the stop line of one node may trail the start
//     line of another by soakLag: a node logs after its commit); a
//     retired version (its document updated or deleted, its database
//     deleted, its POST cancelled) never starts again after soakLag; a
//     completed one-shot version never starts again.
//   - Liveness: while the runnable versions are fewer than the nodes'
//     max_jobs in all, each runs within two interval steps of becoming
//     runnable; over capacity, each that never ran runs within the rotation
//     bound, ceil(min_run_time/interval) + ceil((demand - capacity)/churn) +
//     2 interval steps plus the length of a one-shot run. Both count
//     from the later of the moment the version became runnable (added, its
//     last run ended, its backoff over), the last kill's restart or
//     configuration change, and for a version that waited at a kill the
//     activity monitor's take-back (2 job timeouts: an acceptor may have
//     claimed it as the process died); plus soakSlack. A one-shot run ends
//     within soakOneShot; a waiting POST /_replicate answers within an
//     interval step and the slack of its job's end (or start, for a
//     continuous one), a connection error being expected only for a
//     request in flight at a kill.
//   - Views agree (a disagreement must last soakSettle): _scheduler/docs
//     (all databases, and one database's at each check) lists exactly the
//     documents that exist, with their current version's target;
//     _scheduler/jobs lists exactly the unfinished versions alive; the
//     jobs it shows running are those _active_tasks lists, and those the
//     logs have running, node for node; _active_tasks lists no retired
//     version. An answer of POST /_replicate (completed, running, failed)
//     has its job's log line within soakLag. A one-shot document version
//     whose run a kill ended counts as completed once _scheduler/docs
//     says its document completed: the node logs after its commit, and
//     the kill may fall in between.
//
// At the end, with max_jobs raised so that everything fits: every live
// continuous replication's target has exactly its source's documents (as
// its filter selects them) and runs, every working one-shot document
// completed with the same, every waiting POST answered (200 with ok for a
// one-shot that worked); no retired version's target holds a document
// written to its source more than an interval step and the slack after it
// was retired (a job that did not stop would have copied it: the node logs
// nothing when a heartbeat finds its job removed, so this is how a deleted
// document's job is seen to stop); every replicator database holds exactly
// the documents written, and its _scheduler/docs lists them.
//
// FDBREP_SOAK_DURATION is the time of operations, split between the two
// topologies (default soakDuration, for go test ./...; e.g. 30m for a
// soak, with a -timeout to match); FDBREP_SOAK_SEED replays a run's
// stream of choices (the processes' timing, and what depends on it, is not
// replayed). The bounds are the model's plus soakSlack: this test runs on
// loaded machines, and the model test (cmd/internal/sim) is the exact one.
package soak
