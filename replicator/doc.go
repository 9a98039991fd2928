// Package replicator is the shared core of fdbrep's CouchDB-compatible
// replication service on the fdbjobs job layer (the design of CouchDB
// 4.x's FDB replicator RFC): what a replication is (Spec, parsed and
// validated once by ParseSpec), how it is stored as a job (JobData,
// states, ids), the replicator's state in the store (Store: jobs and the
// view index kept with them, the replication id → job id subspace,
// database identities, its keys in storekeys.go; beside it Views, Shares,
// Reseal, Retention, Progress, FailedDocs, Webhooks and Templates, see
// "Store"), the cluster-wide settings
// (Config), the engine contract (Engine, Run) and the metrics. Two planes
// build on it, and neither imports the other:
//
//   - replicator/control, the control plane api_frontend nodes run: it
//     turns _replicator documents and POST /_replicate into jobs, inside
//     the callers' transactions, and serves the monitoring views; it never
//     contacts a replication endpoint;
//   - replicator/scheduler, what replication nodes run: acceptors, workers
//     running the protocol engine (replicator/engine), rotation, backoff,
//     retention.
//
// Neither imports net/http: the HTTP API is package frontend, whose ports
// (in package api's types) the control plane satisfies; cmd/internal/wire
// plugs it in, and cmd/internal/node builds both for fdbrep serve.
//
// # Jobs
//
// One fdbjobs job of type "rep_jobs" (activity timeout JobTimeout, 61 s)
// per replication. Its id is computed without network I/O: for a document,
// "<db instance uuid>|<doc id>" (the uuid is registered when the database
// is created, so a re-created database gets new jobs); for POST
// /_replicate, the MD5 of the server UUID, both endpoints (URL, user name,
// headers, never passwords), the user, continuous/create_target, and
// doc_ids, selector, filter, query_params, since_seq and winning_revs_only
// as written (TransientJobID). Its data (JSON, JobData) holds the parsed
// replication (Spec, with credentials: job data is as secret as the
// documents), its user and owner, the document's database and id, state,
// state_info, error_count, last_error, retry_at, start_time, last_start,
// last_updated, node, rep_stats, sync, job_history (newest first,
// MaxHistory entries), checkpoint_history (the result of a completed
// one-shot job), rep_id and base_id, the filter code they were computed
// with, and the fair-share priority. Scheduled times are Unix
// milliseconds.
//
// States are the RFC's five; the fdbjobs state follows:
//
//	pending   -> fdbjobs pending (runnable: scheduled time in the past)
//	running   -> fdbjobs running
//	crashing  -> fdbjobs pending, scheduled in the future (backoff)
//	completed -> fdbjobs finished
//	failed    -> fdbjobs finished
//
// and fdbrep's own, which the views show running (docs/COMPAT.md,
// "Parked replications"):
//
//	parked    -> fdbjobs pending, scheduled at its sweep (see "Parking")
//
// and paused (StatePaused; the views show it paused): fdbjobs finished,
// written by the control plane (a document's "paused": true, or
// POST /_scheduler/jobs/{id}/_pause) through Store.PauseJob, never by a
// node; a node whose run it was stops that run with a final checkpoint.
// Resumed, the control plane adds it again, pending.
//
// # Transitions
//
// A node changes a job it holds only through Lifecycle.Apply, with a
// Change of one Kind, which sets the state, the fdbjobs operation, the
// history events (newest last) and the counters counted once it commits
// (transition.go's table, checked by TestTransitions):
//
//	started    running    Update                        started            -
//	heartbeat  (kept)     Update                        -                  -
//	crashed    crashing   FinishAt RetryAt              crashed, pending   crashes, stops
//	failed     failed     Finish, then the document     crashed            failed, stops
//	completed  completed  Finish, then the document     stopped            completed, stops
//	requeued   pending    FinishAt fair-share time      stopped, pending   stops
//	put back   (kept)     FinishAt scheduled time       -                  stops
//	parked     parked     FinishAt its sweep time       stopped            parks, stops
//	held back  (kept)     FinishAt its turn             -                  held_back, stops
//
// A crash or a heartbeat of a job that ran HealthThreshold since its last
// start forgets its errors first (Healed); a crash's backoff grows with
// its error count. A failed or completed document's job writes its state
// into its document when the document is still the job's, and counts
// docs.failed_state_updates or docs.completed_state_updates.
//
// A job about to start under a replication id that a live job (pending,
// running or parked, and its document's) holds does not start: Collide
// decides. Another user's job is not named and makes it crash (retry after
// its backoff); a document's job crashes beside a transient one; every
// other collision fails it, with CouchDB's reasons and the error tag
// duplicate_job. A holder that is finished, crashing, gone or of a
// deleted database is taken over; a parked one is not, as it keeps its id
// while it waits for its source and runs again from its checkpoint when
// woken.
//
// The other changes are not a node's, and Lifecycle.Transform makes them
// too, written by the Store: added (pending, or failed from its start,
// tag bad_rep_doc, for a document that did not parse; history added;
// the control plane's Store.AddJob), backoff ended (a crashing job due
// now, its error count kept: Store.EndBackoff) and taken back (a running
// job the job layer re-enqueued shows pending, its node kept as where it
// last ran: the Store's re-enqueue hook, "View index") and woken (a
// parked job pending at its fair-share place, history pending with the
// cause: Store.WakeJob). Removal (Store.RemoveJob) leaves no state.
//
// A held-back job (the per-user limit, below, or a host's budget) keeps
// its state and its history; its data says since when it is held, when it
// is due again, and for a budget which host (JobData.HeldSince, HeldUntil,
// HeldHost, which its start clears), and the views show it pending with
// the stall user_limit (StallUserLimit) or budget (StallBudget).
//
// # Budgets per host
//
// A running job's data names the hosts in whose budgets it holds a place
// (JobData.BudgetHosts, set by its Started change; the scheduler's doc.go,
// "Budgets per host"), and its view index entry (9) keeps them as an
// eleventh element while it runs. The places are the job layer's:
// partitions of JobType named by HostOf and HostUserOf, taken with Store.ClaimHosts
// (fdbjobs ClaimPlaces) and given back by the index when a write takes the
// job out of running (fdbjobs LeavePlaces, in that write's transaction),
// so every path that stops a job (its transitions, the re-enqueue hook, a
// removal) gives them back. The budgets of requests per second per host,
// and per host and user, are token buckets of the job layer too
// (RequestsKind, one per HostOf and per HostUserOf; HostPacer).
//
// # Templates
//
// A _replicator document whose source (or target) names a server and a
// pattern of its databases ({"url": ..., "databases": "userdb-*"} or
// {"regex": ...}; Spec.Template, template.go) is a template: the control
// plane makes it a job of type TemplateType (PutTemplate, in the
// document's write; an edit replaces that job, a deletion or an edit into
// a plain replication replaces it by one marked Ending: EndTemplate), and
// the replication node that holds it makes one replication job per
// matching database of the server (Spec.Child: the endpoint names the
// database, "{db}" in the other endpoint's URL is its name). Such a job
// (its JobData.TemplateDB the database, DocID the template's) has the job
// id ChildJobID ("<db uuid>:<database>|<doc id>", which no document's is)
// and is listed by the view index under its template's document id with
// the database after a byte no document id holds (JobData.IndexDocID), so
// that the template's replications list after it, its database's removal
// removes them, and Children reads them in pages. They are replications
// like any other, except that none writes its state into the template's
// document. See the scheduler's doc.go, "Templates", for the node's part.
//
// # Per-user limits
//
// fdbrep holds the replications of users who are not server admins to
// limits CouchDB 3.x does not have (docs/COMPAT.md, "Per-user limits"),
// so that one user cannot keep the others' replications waiting. A job
// whose JobData.UserLimited is set was written by such a user: the write
// of its document that made the job (the HTTP API names the writer to
// Plane.ParseDoc) or its POST /_replicate. Server admins' replications,
// and jobs written before fdbrep had the limits, are not limited. The
// limits count against JobData.Owner: the document's owner (its writer,
// unless a database admin named another) or the user who posted.
//
//   - As it is written, by the control plane: connection_timeout at most
//     Config.MaxUserConnectionTimeout (CheckUserSpec), and at most
//     Config.MaxReplicationsPerUser unfinished replications per owner
//     (CheckUserCount: the owner's counter of the view index, 21, read as
//     a snapshot in the write's transaction; a write that replaces one of
//     the owner's unfinished jobs adds none).
//   - As it starts, on a replication node (the scheduler's doc.go, "Per-user
//     limits"): at most a share of max_jobs of an owner's jobs run at once,
//     cluster-wide, counted through the owner's running keys (22) in the
//     start's transaction; a job beyond it is held back (HeldBack, due
//     again after HeldTurn), and the owner's count of held-back jobs (28,
//     an atomic add) tells the nodes that run the owner's jobs that others
//     wait for a turn.
//
// # Parking
//
// A parked job (StateParked, JobData.Parked) is a continuous replication
// that caught up and gave its slot back until its source changes (the
// scheduler decides when: see its doc.go, "Parking"). It keeps the source
// sequence its last checkpoint covered, when it parked, its sweep time
// (its scheduled time in the job layer) and its source's watch group
// (WatchGroupOf: the server's URL without the database, with the user
// name and proxy that ask it; never a password or a header's value). The
// view index lists parked jobs by group and source database (key 25), so
// that a watch reads the parked jobs of its group, or of one database,
// in pages (ParkedPage) and wakes them (WakeJob). Fair share counts no
// parked job in jobs(Db): a parked job competes for no slot.
//
// # Credentials at rest
//
// With Config.Sealer (the operator's X25519 public key, [replicator]
// seal_public_key_file), the control plane seals every endpoint
// credential of a _replicator document or a POST /_replicate body before
// anything stores it (SealBody: a password in a URL or in auth.basic, each
// header value, a proxy's password; package seal, HPKE). The document is
// stored with them sealed (a Basic Authorization header becomes
// auth.basic, as the parser reads it), so its job data, which the parser
// derives from it, holds them sealed too; reads show each as "*****"
// (Redacted), to its owner as well, and a document written back as read
// keeps the credentials of the revision it replaces (the HTTP API puts
// them back). Each sealed value is bound to its place: the document (or
// the user who posted) and the field (DocScope, UserScope), so a value
// copied elsewhere does not open; and to where it is sent
// (couch.Destination: the scheme, host and port of its endpoint and of
// the endpoint's proxy, or of the proxy for a proxy's password), so that
// a reader shown "*****" (a user an admin gave a replication with a
// service account's password) cannot send it elsewhere: the HTTP API
// refuses a "*****" kept while an edit changes its destination (403
// naming the field), and a node opens a value for its destination only
// (Spec.Open: ErrCorrupt, the job fails). Values sealed before bindings
// existed open for any destination until the reseal pass (or their job's
// next start) binds them to the one they have then; the API's check
// covers them meanwhile. Without a sealing key credentials are stored as
// written and their owner reads them, as in CouchDB: nothing to keep from
// them. Only the replication node that runs a
// job opens them (Spec.Open, with Config.Opener), for the run alone: job
// data, logs and errors never hold them opened. A node without the key
// crashes such jobs with a reason naming the key, and says so once. A
// body sealed afresh seals differently each time: a POST /_replicate
// matches its running job with SameRequest (the credentials of a running
// transient job are kept, as CouchDB's replication id ignores them), and
// a document written with its credentials in the clear again replaces
// its job.
//
// Rotation: the replication nodes list the new private key first and the
// old ones after it ([replicator] seal_private_key_files), the frontends
// get the new public key. The replication nodes then move every credential
// stored to their current key (Reseal): a pass walks the _replicator
// documents, each with its job (or its template's data) in one
// transaction (a Resealer gives both the same new values, so
// SameReplication still matches them), then the transient jobs and
// templates' replications, then the webhooks' secrets, a page per transaction, resuming from its record (key
// 27) across intervals, nodes and restarts; credentials stored in the
// clear before a key was configured are sealed the same way, and values
// sealed before bindings existed are bound (a pass after an upgrade binds
// them; the next starts within ResealAgainDefault). A running job is its
// worker's to write: the worker moves its credentials, and its document's,
// as the job starts; a running template's node moves the template's data
// at its next wait on its server's feed. Bodies are rewritten in place
// (repdb.Store.RewriteBodies): no revision, no change in the feed, nothing
// a read shows. A pass that moved or held back anything is followed by
// another ResealRetryDefault later (a document written back as read while
// it was moved keeps the old values, say); once a clean pass (one that
// moved and held back nothing) that started after every frontend sealed to
// the new key has ended, the old key can be dropped. A document or job
// that cannot be moved (too large once sealed) is left whole, and the pass
// names it.
//
// # Fair share
//
// The fair-share RFC (seed 001) between _replicator databases (transient
// jobs form one more bucket, key ""), cluster-wide: the job layer's shares
// of run time (fdbjobs' usage.go: ChargeRunTime, RollUpUsage,
// RunTimeShares), configured by share.go with a partition per database.
// Shares per database in Config.Shares (default 100, 1..1000). Run time is
// charged per database; once per node interval (scheduler.Config.Interval)
// one node decays the usage (× UsageCoeff) and adds the charges. Nodes
// raise the priority of the jobs they run by usage × jobs / shares² every
// interval, every priority decays by PriorityCoeff per interval, and nodes
// stop their running jobs with the highest priority first. A pending job's
// priority is its scheduled time (the moment it would decay to 1, moved
// FairShareWindow into the past so that it is runnable at once); acceptors
// take the oldest first. With more jobs than capacity, run time tends to
// the ratio of the shares.
//
// # Webhooks
//
// A webhook (webhooks.go) hears its owner's replications' state changes
// (a server admin's: every replication's). The transaction that changes a
// replication's state (the index's) queues the change under the webhook
// and the replication, in commit order (the pair's next number), and makes sure
// that pair's delivery job (WebhookType) is pending or running; the
// delivery's worker (replicator/scheduler) posts the queued changes
// oldest first, clears each once taken, and ends its job in a
// transaction that finds the queue empty (EndDelivery). The invariant:
//
//	a (webhook, replication) with changes queued has a delivery job
//	pending or running
//
// holds because the end reads the queue and the queueing reads the job's
// row: a change committed after the end's read conflicts with the end,
// and an end committed first leaves the job finished, which the queueing
// sees and inserts again. TestWebhookDeliveryModel checks it, and the
// order of the deliveries, over random interleavings.
//
// # Store
//
// Store holds the jobs of both types (rep_jobs and rep_watch) and the
// view index, and is their only writer: every change of a job goes
// through its methods (jobwrite.go, queue.go, watch.go, park.go,
// backoff.go), which write the job's index entries in the same
// transaction. Its kv.Database and fdbjobs.Client are its own; it is a
// kv.Transactor, so a caller runs a transaction as kv.Transact(ctx,
// store, f) and calls the Store's methods in it. What only reads the
// index, or owns keys of its own, is a type beside it, one per file,
// which NewStore makes and the Store hands out by its name
// (store.Views()); each writes jobs through the Store, and the Store
// clears a removed job's keys of theirs:
//
//   - Views (pages.go): the views' pages and one job's view (Views.Job),
//     read from the index; it writes nothing;
//   - Shares (share.go): fair-share usage and charges (keys 5–8);
//   - Reseal (reseal.go, resealpass.go): the resealing of stored
//     credentials, and the pass's record (27);
//   - Retention (retention.go): the paced removal of the jobs of deleted
//     databases, whose marks it keeps (18), and of expired transient jobs;
//   - Progress (progress.go): the running jobs' live counters (23);
//   - FailedDocs (failed.go): the documents a job's targets refused (24);
//   - Webhooks (webhooks.go): the users' webhooks, the changes queued for
//     them, their delivery jobs and their receivers' health (29-34);
//   - Templates (template.go): the template documents' jobs and the
//     replications each makes (its children), written through the Store.
//
// The Store's own keys (the jobs' index, replication ids, databases) are
// built by storeKeys (storekeys.go).
//
// # Key layout
//
// Under the Store's subspace (SubspaceDefault ("fdbrep_replicator")), besides
// the fdbjobs keys of types rep_jobs (JobType, the replications, with its
// event feed: their state changes, changes.go), rep_watch (WatchType, the
// watches of parked replications), rep_template (TemplateType, the
// templates: template.go) and rep_trigger (TriggerType, the
// periods of scheduled replications, with their schedules "rep|JobID":
// schedule.go) and rep_webhook (WebhookType, the deliveries of webhooks,
// one per webhook and replication: webhooks.go):
//
//	(1, RepID)                  -> JobID     replication id owner
//	(2)                         -> UUID      server UUID (replication ids, job ids): [couchdb] uuid or made (EnsureServerUUID, Setup)
//	(3, DBName)                 -> UUID      _replicator database identity (registered instance)
//	(4, DBUUID, DocID)          -> ""        jobs of a database instance (docs view, deletion); a
//	                                         template's replication under JobData.IndexDocID
//	(5) to (8)                               fair-share usage before it moved to the job layer
//	                                         (fdbjobs keys 36 to 39 of rep_jobs); cleared by Setup
//	(9, JobID)                  -> (DBUUID, DBName, DocID, State, SortID, Node, Expires, Owner
//	                                         [, Group, SourceDB [, Hosts]]) the job's view index entry as last
//	                                         written; a parked job's ends with its watch group, a running
//	                                         job's that holds places in budgets with its hosts (space-separated)
//	(10, DBUUID, State, DocID)  -> ""        documents by view state (states=)
//	(11, SortID, JobID)         -> ""        unfinished jobs (_scheduler/jobs order)
//	(12, Node, JobID)           -> ""        running jobs by node (_active_tasks, restarts)
//	(13, LastUpdated, JobID)    -> ""        finished transient jobs by age, in older stores only
//	                                         (MoveExpiryKeys hands them to the job layer's retention)
//	(14, DBUUID, State)         -> int64 LE  documents of a database instance per state
//	(15, State)                 -> int64 LE  documents of registered databases per state
//	(16)                        -> int64 LE  unfinished jobs
//	(17, Node)                  -> int64 LE  running jobs of a node
//	(18, DBUUID)                -> (DBName, Holder, Until)
//	                                         a deleted database whose jobs the nodes remove
//	(19)                        -> (int64)   view index version built (backfill done)
//	(20, Owner, SortID, JobID)  -> ""        unfinished jobs by owner (a user's _scheduler/jobs)
//	(21, Owner)                 -> int64 LE  unfinished jobs of an owner
//	(22, Owner, Node, JobID)    -> ""        running jobs by owner (a user's _active_tasks)
//	(23, JobID, Node, Start)    -> JSON      a run's live counters and sync (RunProgress), one key per run
//	                                         (Node, Start: JobData.Node, LastStart), written by its node
//	(24, JobID)                 -> JSON      the last engine.RefusedDocsMax (100) documents the job's
//	                                         targets refused (FailedDoc), under 64 kB
//	(25, Group, SourceDB, JobID) -> ""       parked jobs by watch group and source database
//	(26)                        -> int64 LE  parked jobs (the jobs.parked gauge)
//	(27)                        -> JSON      the reseal pass: key, phase, place, holder and lease, counts
//	(28, Owner)                 -> int64 LE  the owner's jobs held back at the per-user limit, so far
//	(29, Owner, ID)             -> JSON      a webhook (Webhook)
//	(30, Owner, ID)             -> ""        a server admin's webhook, which hears every replication
//	(31, Owner, ID, JobID, N)   -> JSON      a change queued for a webhook, in commit order (N: key 34's)
//	(32, Owner, ID, JobID)      -> int64 LE  a webhook's delivery jobs (cleared when the layer removes one),
//	                                         with the changes dropped from their full queues
//	(33, Owner, ID)             -> JSON      a webhook's receiver's failures in a row (WebhookHealth)
//	(34, Owner, ID, JobID)      -> int64 LE  the number of the last change queued (cleared when its delivery ends)
//	(35, Host)                  -> int64 LE  the host's jobs held back by its budget, so far (HostOf)
//
// # View index
//
// _scheduler/docs, _scheduler/jobs and _active_tasks read keys 3, 4,
// 9–17 and 20–22 instead of every job, so a page costs what it lists;
// the progress of the running jobs listed (23) is read with their rows
// and shown when it names the job's current run and is newer than its
// data, and Views.Job (one job) also reads its refused documents (24). A
// job's removal clears its keys 23 and 24. A job's entry
// is derived from its fdbjobs state and data (its view state is AsSeen:
// a job whose data says running while fdbjobs has it pending shows
// pending; SortID is the rep id, else the job id, and empty once the job
// is finished or failed; Node only while running; Expires a finished
// transient job's last update; Owner is JobData.Owner, and an owner's
// keys (20–22) exist for owners other than ""). Every transaction that
// writes a job's row writes its entry through the Store: AddJob,
// RemoveJob, UpdateJob, FinishJob, ResubmitJob, the removals Retention
// paces (RemoveDeletedDBJobs), the job layer's sweeper through the
// Store's OnRemove (NewJobRuntime: finished transient jobs, which their
// entry marks for its retention with RetainTx), and, for the
// re-enqueues the job layer makes by itself (activity monitor, Reenqueue), the fdbjobs re-enqueue hook that
// NewStore installs, which also rewrites such a job's data to pending (its
// node kept as where it last ran). A write reads the job's last entry (9)
// and changes keys and counters only by the difference, with atomic adds:
// a transaction that runs again after commit_unknown_result finds the
// entry current and changes nothing. Finish-based writes index the row as
// it stands after the write (a Finish that recognised its own earlier
// commit writes nothing, and the job may have moved on). The
// all-databases counters (15) count the documents of registered instances
// only: RegisterDB and UnregisterDB move an instance's counts (14) in or
// out, and an entry write checks the registry in its transaction.
//
// Reads: _scheduler/docs walks the registered databases (3) in name order
// and, in each, (4) or, filtered by states, the union of (10) for those
// states, so a deleted database's documents never show; _scheduler/jobs
// reads (11); _active_tasks reads (12); a user who is not a server admin
// gets their own from (20) and (22); total_rows comes from the counters
// (14–16, 21). A page reads at most 100 jobs, and about 400 kB of their rows,
// per transaction (a bigger page spans transactions); skip costs
// keys-only reads, about 1,000 per transaction, except that whole
// databases are skipped by their counters; a start key (fdbrep's
// start_key) starts a page anywhere in O(1).
//
// Stores that predate the index, or hold an older version of it (19), are
// indexed by a one-time backfill at the first Setup (200 jobs, and about
// 400 kB of rows, per transaction), which also marks the databases of
// orphaned jobs as deleted. Version 2 added the owner keys (20–22): an
// entry of version 1 has no Owner and reads as owner "", so the backfill
// (or the job's next write) adds its owner's keys. Until a backfill is
// done, users' listings miss the jobs it has not reached.
//
// # Deleted databases
//
// Deleting a _replicator database (UnregisterDB, in the deletion's
// transaction) clears its registration, so its documents leave the views
// at once and a database re-created under the name gets a new identity,
// and marks it (18). Its running jobs stop as soon as their nodes hear of
// it (WatchRun's watch on the registration; at the latest at their next
// heartbeat, where UpdateJob halts them with ErrDBDeleted; a node that accepts one
// removes it), a finishing one writes nothing into the new database's
// document (OwnsDoc), and a new job does not count it as holding its
// replication id. Every node's interval step removes the jobs of marked
// databases, all of them, RemoveBatchDefault per transaction (halved while
// transactions conflict, fewer when their rows pass 400 kB), walking the database's documents from the last
// one down (acceptors take the oldest jobs first), with one node holding
// each database for DeletionLeaseDefault, renewed, so that nodes do not
// all remove the same jobs.
//
// # Failure trade-offs
//
// Effects outside the store are at least once: a job re-run after its
// node died repeats work since its last checkpoint (the protocol makes
// that harmless). A dead node's jobs stay running in the store until the
// fdbjobs activity monitor re-enqueues them, between one and about two
// JobTimeouts after their last heartbeat; the views of fdbrep serve
// (control.Plane.SetMembership) show them pending on no node (with
// info.stall node_down, or no_replication_node when no replication node
// is alive), and _active_tasks leaves them out, from the moment the
// node's membership record expires (cluster.NodeTimeoutDefault, 30 s
// after its last membership heartbeat), unless the member records cannot
// be read. The
// views are not one snapshot across pages (nor within a page of more than
// 100 rows or 400 kB), as CouchDB's are not; the
// transactions that maintain the index conflict with a database's
// deletion when they change one of its documents' states at the same
// moment (one of them retries). Passwords are stored in job data (nodes need them) but
// never appear in views, errors, logs or metrics.
//
// Metrics (metrics.go, counts.go) are CouchDB's couch_replicator
// counters under CouchDB's names, in _stats and Prometheus, with fdbrep's
// own: the jobs', documents' and checkpoints' from the planes, and the
// requests, connections and runs of EngineDefault's replications
// (Metrics.CountHTTP and CountRun), also per endpoint host in Prometheus
// for the first HostSeriesMax hosts.
//
// Metrics count commits, not attempts: counters move after a transaction
// committed (for DocWritten, DBCreated and DBDeleted, which run in the
// caller's transaction, once its commit succeeds: kv.Locals' after-commit
// hooks). An attempt that committed although its commit reported
// commit_unknown_result is not counted; its retry counts what it does.
package replicator
