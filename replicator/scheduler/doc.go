// Package scheduler is a replication node's job server, what nodes with
// the replication role run (Node): it accepts replication jobs from the
// cluster-wide fdbjobs queue, runs them with a replicator.Engine (the
// protocol engine by default), rotates continuous jobs when more are
// runnable than it may run, backs crashing jobs off, heals them, charges
// run time for fair share and removes expired transient jobs. Nodes share
// only the store: they need no connection to each other or to the
// api_frontend nodes, and open no listener. Terminal states reach the
// _replicator documents through a replicator.DocUpdater (repdb.Store), in
// the job's finishing transaction.
//
// A Node is made of parts. The Runtime of its jobs, the workers (with their
// fair-share priorities) and the interval step share Node.mu, whose
// comment (node.go) names the fields it guards; a function that must be
// called with it held ends in Locked. The parts that own their state,
// each behind its own mutex, are the fair-share charges and share table
// (charges.go), the host prober (hosts.go), the load publisher
// (balance.go), the progress registry (progress.go), the watches
// (watch.go: the Runtime of watch jobs, the watches running and recent,
// the rate of their exact checks), parking's feed checker and count of
// waiting jobs (parkpolicy.go), and the Runtime of the scheduled
// replications' Trigger jobs (triggers.go: an atomic pointer; each
// Trigger is one transaction of replicator.Store.Rerun, which starts the
// document's job again only when its last run has ended, so a scheduled
// replication never runs twice at once, whatever the periods and
// nodes). A part's lock is never held while
// Node.mu is taken, so a holder of Node.mu may call a part. The interval
// step's decisions (how many jobs the trim, the rotation and balance
// stop, and the node's share) are pure functions of the figures it reads
// (plan.go, table-tested); the step reads the figures and asks the least
// deserving workers to stop. A worker changes its job's state only
// through replicator.Lifecycle (replicator's doc.go, "Transitions").
//
// # Job server
//
// Replication jobs run on the job layer's Runtime (fdbjobs.Runtime, the
// one runner of the node's held jobs; runtime.go), as a Manual kind: the
// Runtime accepts and runs them, and each worker holds and ends its job
// itself, through replicator.Lifecycle. The Runtime's fetchers
// (MaxAcceptors) take the runnable jobs with the oldest scheduled times
// (WorkerOptions.OldestFirst): fdbjobs' DueTime (one snapshot read of
// every queue shard's head, in one round trip) finds the time T by which
// as many jobs are runnable as the fetcher may take (at most 25 at once,
// so a starting node fills quickly), and an AcceptBatch bounded by T
// takes them (when fetchers of several nodes aim at the same jobs, the
// losers of the conflict retry and take what is left by T). With nothing
// runnable a fetcher waits on the queue's watch, which wakes it when a
// job is enqueued, for up to min(StartupJitter, Interval), then looks
// again (a crashing job's backoff ends without a write).
//
// The node keeps one invariant (runtime.go, setTargetLocked), restored
// after every event that changes its terms: the node starting and every
// interval step (which applies a new MaxJobs and sets the node's share):
//
//	the Runtime's Concurrency == target
//
// where target is MaxJobs, or the node's share while it balances with
// others. The Runtime counts a job from its accept until its worker left
// (stopping ones too), so whenever a node runs fewer jobs than its target
// a fetcher is waiting, and a runnable job starts at once; and since the
// fetchers take no more than the room under the Concurrency, a node never
// runs more than MaxJobs (jobs a fetch took while the target was lowered
// go back to the queue, at their place, without running).
//
// Every Interval (plus up to a third, at random) the node: applies a
// configuration given to SetConfig; charges run time for fair share and
// adjusts the fair-share priorities of its jobs (replicator/share.go);
// stops at once the jobs beyond a lowered MaxJobs, all of them whatever
// MaxChurn (the least deserving continuous jobs, then one-shot jobs);
// gives the users held at the per-user limit their turns (below,
// "Per-user limits"); balances (below); rotates, while every node is
// full: it stops as many
// continuous jobs that ran at least MinRunTime as runnable jobs wait
// beyond its room, at most MaxChurn in all with the trim's, the least
// deserving first (the highest fair-share priority, then the oldest), each
// writing a final checkpoint and going back to the queue behind the jobs
// that waited, which take the slots it leaves; gives the Runtime its
// target (MaxChurn bounds what the step stops, never what the Runtime
// starts: after MaxJobs is raised it takes pending jobs into the new room
// at once); and removes, with their replication id mappings, every job of
// deleted _replicator databases (one node per database at a time, however
// many jobs: the step lasts as long as that takes), found through the
// store's view index (replicator.Retention.RemoveDeletedDBJobs), and
// hands an older store's expiry keys to the job layer (MoveExpiryKeys:
// the finished transient jobs older than TransientJobMaxAge are removed
// by the sweeper of the node's Runtime, about every Interval); and,
// on a node with private keys, walks up to ResealPagesDefault pages of the
// reseal pass (reseal.go): every _replicator document with its job, and
// every transient job, whose credentials are in the clear or sealed to
// another of the node's keys, moved to its current key (a document with
// its job in one transaction). The pass's place is one record in the
// store, held by one node at a time for two intervals; it starts when a
// node's current key is new to it, and again ResealAgainDefault after it
// ended (ResealRetryDefault when it moved or held back values). A running job's
// data is its worker's to write, so the pass leaves such a job, and its
// document, to it: a worker moves its job's credentials and its
// document's in the transaction that starts the job (initJob), fenced by
// the job's lock; a node gets a new key by restarting, which starts its
// jobs again. A node
// that starts takes back at once the jobs the index has running on a node
// of its name (an earlier run of it that died).
//
// A job of a deleted database is not run: a worker that accepts one
// removes it, and a running one stops as soon as it hears of the deletion
// (below, "Removed while running"; at the latest at its next heartbeat,
// replicator.ErrDBDeleted) and removes it; either kicks its node's
// interval step, so the rest go at once. A job that ends before noticing
// writes no state into a document of a database re-created under the same
// name, and a job of a deleted database holds no replication id.
//
// # Removed while running
//
// A worker follows its running job in the store (worker.watchRun,
// replicator.Store.WatchRun): a read transaction sets watches on the
// job's fdbjobs row and on its database's registration, and another one
// follows each time they fire (the worker's own heartbeats fire them
// too). When the store no longer gives the job to the worker (its
// document or database deleted, the replication cancelled, its document
// changed, the job taken over), the worker halts its run at once
// (runLoop.taken, engine Run.Halt): the feed and the reads in flight are
// cut, no write to the target starts from then on, and the writes already
// sent finish, within haltGraceDefault (5 s), so that the run's counters
// are what the target took. A heartbeat, which the fence refuses, then
// tells why; the stop is logged with those counters, and for a removed
// job they are stored (replicator.RunProgress.Ended) for whoever removed it:
// a POST /_replicate cancel waits for them (replicator.Progress.RunEnd) and
// answers with them. Invariant: a replication deleted or cancelled while
// it runs sends no write to its target after its node heard of it,
// within the store's watch latency of the removal's commit (milliseconds;
// the heartbeat, StatsUpdateInterval, is the fallback where a watch
// fails), unless the node lost the store, when its hold bounds the run.
// Cost: one read transaction per running job per heartbeat, and one or
// two watches per running job (FoundationDB allows 10,000 per client by
// default: a refused watch leaves that job to its heartbeat).
//
// # Job lifecycle
//
// Accepted, a job computes its replication id (the engine fetches a
// design document filter's code from the source), then in one transaction
// claims the id in the (replication id -> job id) subspace (repid.go,
// initJob). If another job holds it and that job is pending, running or
// parked (a parked replication keeps its id while it waits for its
// source) and, for a document's job, its database was not deleted: a holder
// owned by another user makes this job crashing, retried after its
// backoff, whatever their kinds, without naming the holder ("... is
// already running as another user's replication"); a transient holder
// makes a document's job crashing and a transient job failed; a
// document's job as holder makes this job failed ("Replication `<id>`
// specified by document ... already started, triggered by document ...
// from db ..."; for a transient job, without "specified by"). All carry
// the error tag duplicate_job. A finished, crashing or missing holder, or
// one of a deleted database, is taken over. The same transaction marks
// the job running (history "started") as the fdbjobs heartbeat. While the
// engine runs, every checkpoint and every StatsUpdateInterval (capped at
// Interval and at a third of JobTimeout) the stats are stored with
// fdbjobs.Update, the heartbeat that keeps the activity monitor away and
// the fence that stops a worker whose job was removed or replaced
// (ErrHalt: it stops writing at once).
// Each of those transactions renews the worker's hold on the job
// (fdbjobs.Job.HoldDeadline): a worker whose store took no heartbeat for
// half the job timeout (the node cut off from the store, the cluster down)
// cancels its run at once and writes nothing more ("replication stopped"
// at warn, jobs.holds_lost), before the activity monitor can hand the job
// to another node, which it does a job timeout after the last heartbeat:
// a job never runs on two nodes at once. A renewal, and a filter fetch at
// a checkpoint, wait no longer than the hold (a store behind a firewall
// rule does not fail: its transactions wait out a timeout far longer than
// the hold, and the run went on meanwhile); after each the worker checks
// the hold before anything else.
// At each checkpoint a filtered replication recomputes its id; if it
// changed the job goes back to pending and runs again under the new id
// (stats and history reset, the old mapping cleared). A one-shot run that
// ends completes the job (state completed, state_info = stats,
// checkpoint_history = the final checkpoint, the document updated), also
// when the node asked it to stop as it ended (its final checkpoint found
// the filter changed, a rotation, a shutdown): a run that replicated its
// whole feed (engine.Result.Completed) is not sent back to pending.
// The job's own writes (its start, and a run's end: completed, failed,
// crashing or back to pending) are tried again after any error but a
// halt, for as long as the worker holds the job, each attempt and each
// wait bounded by the hold: a write given up sooner would leave the job
// running with no worker until the activity monitor re-enqueues it, and a
// one-shot job whose run completed would run again. Once the hold has
// lapsed the worker writes nothing more ("replication stopped" at warn,
// jobs.holds_lost, for a run that started or whose start may have been
// stored: an attempt whose commit was unknown may have shown the job
// running here, though no run started) and the re-enqueue is the
// recovery: a run's end is lost only when the store took none of the
// worker's writes for half the job timeout.
//
// # Hosts that answer again
//
// A job that crashed because a request could not connect to its host
// (refused, no route, name not resolved: engine.UnreachableHost) is
// remembered by the node that crashed it, by host (hosts.go). At every
// interval the node probes each such host once (Engine.Probe: a GET of
// its root without credentials, any answer counts, at most 10 s), in a
// goroutine of its own, one round at a time; when a host answers, the
// backoff of its jobs ends at once (Store.EndBackoff, as
// POST /_scheduler/jobs/{id}/_retry: pending at now, as when a backoff
// runs out, the error count kept). Invariant: a job that crashed on a
// host that did not answer is pending without backoff within one
// interval (plus the probe) of the host answering again, as long as the
// node that crashed it runs; otherwise (that node gone, a proxy in the
// way, a crash of another kind) it waits out its backoff. The model test
// (cmd/internal/sim) checks it: its hosts that go down refuse
// connections, and its liveness bound for a host back up counts one
// interval, not a backoff.
//
// # Live progress
//
// Heartbeats store a job's counters every StatsUpdateInterval (10 s);
// between them the views would show a running job stand still. So each
// node also runs a progress loop (progress.go): every ProgressInterval
// (1 s) it reads the counters of its running jobs (engine Run.Progress)
// and writes those that changed since its last write, one value of about
// 400 bytes per job under key 23 (replicator.RunProgress, naming the run by
// its node and start), all in one transaction of blind writes (pages of
// 250 jobs): it reads nothing, so it conflicts with nothing, and running
// it again after commit_unknown_result writes the same values. The views
// (replicator.Views: pages and Job) show a running job's progress in
// place of its data's counters when it names the job's current run and
// is not older than the data (counters read in the millisecond the data
// was written count: a run's counters only grow); a run's progress is
// removed at the next tick after the run ends (its last counters are in
// the job's data by then; each run has a key of its own, so this never
// removes the progress of a run of the same job started since, on this
// node or another), and with the job. Cost: one transaction per node per second while any
// of its jobs moves, about 200 kB at MaxJobs 500 all busy, none while
// they are idle; heartbeats are unchanged. Invariant: the counters a run
// had ProgressInterval ago, plus one transaction, are what the views
// show of its job, while it runs on a node with its store (the model
// test, cmd/internal/sim, checks it through the API; a failed write is
// retried at the next tick).
//
// The same value carries the run's engine.Sync (caught up, last
// progress, throughput, stall), written when it changes, and heartbeats
// and the run's end keep it in the job's data, so that a job that is not
// running still shows when it last progressed. The views derive the
// backing_off stall of a crashing job from its data (JobData.RetryAt).
//
// # Errors and backoff
//
// A crash makes a persistent job crashing (history "crashed" with the
// reason, then "pending"), rescheduled at now + min(MinBackoff *
// 2^(errors-1), MaxBackoff) less up to a quarter at random; a job that ran
// longer than HealthThreshold since its last start is healed first (error
// count back to 0, also at heartbeats). A transient job that crashes
// fails, unless the error is the rate limiter's max_backoff (or its
// replication id is held by another user's job, above). Node.Stop
// stops every job with a final checkpoint and re-enqueues it for another
// node at once. A stopping run keeps its heartbeat and gets
// min(2 s, ShutdownTimeout/2) for the final checkpoint; then its requests
// are cancelled (a peer that does not answer cannot hold the shutdown up)
// and the job is re-enqueued with the progress of its last checkpoint.
// ShutdownTimeout bounds the whole wait; a node that dies leaves
// its jobs running until the fdbjobs activity monitor re-enqueues them,
// between one and about two JobTimeouts after their last heartbeat (the
// views show them pending as soon as the node's membership record
// expires, see control.Plane.SetMembership).
//
// # Balance
//
// With Config.Cluster (the node's cluster.Node; fdbrep serve sets it) the
// replication nodes balance their jobs through the store. Each node
// publishes its load (cluster.Load: the jobs it runs, those it is
// stopping included) in its membership record at every interval, after
// accepting jobs and as workers leave (coalesced, one write at a time).
// At every interval, after the trim, it reads the member records: the
// nodes alive with the replication role and their loads (its own counted
// exactly, a node without a load as 0), and counts the runnable pending
// jobs (up to the room the nodes' MaxJobs leave, at most 4,000: one range
// read of about 300 kB). Then:
//
//   - When the runnable jobs do not fit (running + pending >= nodes ×
//     MaxJobs, or 4,000 jobs wait) every node is full: no move, rotation
//     as above, a node that joins fills from the queue.
//   - Otherwise no rotation: every node's target is
//     (running + pending) / nodes, and its share ⌈target⌉. A node that runs
//     more than its share while it runs over 110% of the target, or some
//     node runs under 90% of it, moves the continuous jobs beyond its share
//     (at most MaxChurn, less the jobs the trim stopped; those that ran
//     MinRunTime; in rotation's order: the highest fair-share priority,
//     then the oldest): each writes a final checkpoint and goes back to
//     pending ("replication stopped", why "balance: moved to a node that
//     runs fewer jobs"), a line "replicator: moving jobs to nodes that run
//     fewer" gives the step's figures, and the jobs.moves metric counts
//     them. Until the next interval its Runtime takes from the
//     queue only up to its share, and while some node moves jobs the
//     others take up to a tenth above the target (a margin for loads
//     read a moment too low), rounded down, so that none fills to a load
//     that is out of balance itself, and at least their share: the jobs
//     moved go to the lighter nodes. A
//     load read further off (a node that accepted many jobs just before)
//     can leave a moved job under no node's share until the next
//     interval. One-shot jobs are never moved;
//     balanced nodes move nothing, and take new jobs wherever there is
//     room under MaxJobs (a burst starts at once; the next interval
//     moves continuous jobs if it left the nodes out of balance).
//
// Loads are read as the nodes last published them, so a move may be
// decided on a figure an accept ago; the next interval corrects it.
//
// # Per-user limits
//
// A job written by a user who is not a server admin (its data's
// UserLimited; replicator's doc.go, "Per-user limits") runs only while its
// owner runs fewer than the per-user limit in the whole cluster:
// MaxJobsPerUserPercent of the node's MaxJobs, rounded up, at least 1
// (Config.userLimit; 25%: 125 at the default max_jobs, 1 at max_jobs 3).
// A worker checks it before it computes the replication id (a user's
// filter is fetched from the source, which may not answer: heldAtStart,
// one range read of at most the limit of the owner's running keys) and
// again, exactly, in the start's transaction (initJob: the read conflicts
// with the starts and ends of the owner's other jobs only, so nodes that
// start two of the owner's jobs at once do not both pass). A job over
// the limit is held back without running (replicator.HeldBack): pending
// again after its turn, replicator.HeldTurn (an interval for each time
// the limit goes into the owner's other unfinished jobs beyond it, at
// least one: about the limit of an owner's waiting jobs come due per
// interval, so the checks cost what the limit allows, however many jobs
// the owner has), behind the jobs that wait, which take the slot; its
// view shows the stall user_limit until it starts. No key is written by
// the jobs that pass: the cost is one read per start of a limited job.
//
// Turns: a user beyond the limit whose running jobs are continuous would
// keep their slots, and its other jobs would wait for ever. So each
// interval step reads, in one snapshot read, the count of held-back jobs
// (replicator's key 28) of each user with continuous jobs here that ran
// MinRunTime, and for a user whose count grew since its last reading
// stops as many of those jobs (the least deserving first) as its share of
// the growth (in proportion to its jobs here among the limit), within
// what MaxChurn leaves after the trim; each writes a final checkpoint and
// goes back to the queue behind the user's held-back jobs (at their
// turn), or parks if it was caught up, and one of the held-back jobs
// takes the slot when it comes due. A user's replications so take turns
// as CouchDB's rotation turns all of them when more are runnable than it
// runs; other users are not touched. One-shot jobs are not stopped for
// turns (they end by themselves; one that stalls, below). Server admins'
// replications are not limited, so one person running many replications
// on their own cluster, as an admin, is never held back.
//
// # Budgets per host
//
// With MaxJobsPerHost above 0 ([replicator] max_jobs_per_host), a job
// starts only while fewer than that many replications with an endpoint on
// one of its hosts run in the whole cluster (replicator.HostOf: its
// source's and its target's scheme, name and port); with
// MaxJobsPerHostUser, likewise per host and user (replicator.HostUserOf:
// the user an endpoint logs in as). initJob, after the collision checks,
// takes a place in each of those partitions of the job layer in the
// start's transaction (replicator.Budgets.Places, Store.ClaimHosts,
// fdbjobs ClaimPlaces: all or none; the claims of one partition conflict
// with each other only), and the Started change records the partitions in
// the job's data (BudgetHosts), which the view index keeps in the running
// job's entry. A
// job whose host is full is held back (replicator.HeldBack with the host):
// pending, due again HeldByHostRecheck intervals later at the latest, its
// view showing the stall budget with the host, and entered in the host's
// waiting set. Every write that takes a job out of running (any
// transition, the re-enqueue of a dead node's job, a removal) goes through
// the view index, which gives its places back (fdbjobs LeavePlaces) and
// moves the host's first waiting job to due now, in that transaction. No
// key is written by the jobs of other hosts, and none by any job while the
// budget is 0.
//
// A run that started while its node had no budget takes its places at its
// next heartbeat once the node has one (the heartbeat's transaction claims
// them); one whose host is full then stops (stopHost) and goes back to the
// queue, where its start waits for a place. Turns, as the per-user limit's:
// a held-back job adds to its host's count (replicator's key 35), and each
// interval step (rotateHosts) stops, of the continuous jobs here that ran
// MinRunTime, as many of a host's as its share of the jobs held back since
// the last step (within what MaxChurn leaves), back in the queue
// HeldByHostRecheck intervals later (or parked, caught up); each stop
// wakes a held job, which takes the place. So a host's replications take
// turns when more want to run than its budget allows.
//
// With MaxRequestsPerHostPerSec above 0, the requests of the node's runs
// to each host wait for a token of the host's bucket (the node's
// replicator.HostPacer, engine.Options.Pace before each attempt): a job
// layer bucket per host (fdbjobs TakeTokens) holding a second's worth,
// from which each node takes a tenth of a second's worth at a time and
// spends it within a second. Over any window of W seconds the cluster's
// runs send a host at most MaxRequestsPerHostPerSec × (W + 1) requests,
// give or take the nodes' clock skew; the requests of the watches and of
// the checks after a park are not counted. MaxRequestsPerHostUserPerSec
// is the same for the requests to one host of the endpoints logging in as
// one user (a bucket per host and user): a request with a user waits for
// a token of each budget on. A change of the rates applies at once, to the
// next request of every run.
//
// # Stalled one-shot runs
//
// One-shot jobs are not rotated: their runs end by themselves. One whose
// peer never answers (a TCP listener that accepts and says nothing,
// connection_timeout up to an hour for server admins) would hold its slot
// for as long as its requests and their retries take, while others wait.
// So the progress loop, each ProgressInterval, finds the one-shot runs
// that made no progress (their counters unchanged, no batch finished:
// engine Sync.LastProgress) for OneShotStallPreempt ([replicator]
// one_shot_stall_preempt_sec, a minute; 0: never), and, when runnable jobs
// wait beyond the node's free slots (the count parking uses, after the
// idle jobs it parks), stops as many of them as wait, the longest stalled
// first: each writes a final checkpoint if it can within the stop grace,
// and goes back to the queue due at the moment its stop was asked, behind
// the jobs that waited, with no error counted (a run the stop cut short
// does not crash; jobs.preempted counts them). A POST /_replicate that
// started it goes on waiting: its job is pending, and runs again from its
// checkpoint when a slot frees. A run that progresses, however slowly, is
// never stopped.
//
// # Parking
//
// A continuous replication that has been caught up, with no change to
// copy, long enough (below, "When a replication parks") gives its slot
// back: its worker asks its run to stop (stopPark), the run writes its
// final checkpoint, and the job parks
// (replicator.Parked): pending in the job layer at its
// sweep time, ParkSweep (24 h) later, with the source sequence that
// checkpoint covered (Through) and its source's watch group and database
// (replicator.WatchGroupOf: the server, the user and the proxy that ask
// it). So a parked job holds no slot, no feed and no connection, and the
// fetchers, rotation and balance need no case of their own: they count
// only runnable pending jobs, and a parked job's scheduled time is in the
// future, as a crashing job's is. A stop that ran out of its grace
// before the final checkpoint, a replication that does not checkpoint
// (use_checkpoints false), one whose source URL names no database and a
// stalled one do not park.
//
// # When a replication parks
//
// Parking must never make a replication slower than CouchDB would: a
// parked job learns of a change within about a second where its watch
// follows its server's _db_updates feed, but only within a poll cycle
// (WatchPollInterval, a minute) where the server gives none (CouchDB 3.x
// without its _global_changes database, credentials that are not a
// server admin's, PouchDB). So a caught-up, idle, parkable job parks:
//
//   - while no job waits for a slot: after ParkAfter ([replicator]
//     park_after_sec, 5 minutes; 0: never), only where its group gives a
//     feed (Node.feedOK: the node asks each source server once, from the
//     feed's end, and remembers the answer for ten minutes). Without one
//     it keeps its slot and its feed, as in CouchDB: nothing waits for
//     the slot, and a poll would delay its changes;
//   - while jobs wait for a slot (the runnable pending jobs beyond the
//     node's free slots, counted by the progress loop each second while a
//     job idles: Node.giveWayWhileWaiting): after ParkWhenWaitingAfter
//     (park_when_waiting_after_sec, 2 s), as many of them as wait, the
//     longest idle first, so that the slots go to jobs with work within
//     seconds of the idle ones' work being done. Where its group gives no
//     feed, only when rotation would keep it out of a slot at least a poll
//     cycle (ceil(waiting / MaxChurn) intervals, and at least MinRunTime,
//     >= WatchPollInterval: Config.pollParkOK; with the defaults, a
//     minute both, whenever a job waits): its poll then never delays a
//     change longer than its turn in the rotation would.
//
// A parkable job that rotation (or a lower MaxJobs) stops while it is
// caught up (no change to copy, not stalled) parks after its final
// checkpoint under the same rule, however short its idle time: back in
// the queue it would only wait for a slot to find nothing to copy;
// otherwise it goes back to the queue. A job that balance moves is not
// parked: a lighter node runs it at once.
//
// The invariant: no change to a parked job's source is lost between its
// park and its wake, and a wake never touches a job that is not parked.
//
//   - Right after the park commits, the worker makes one exact check
//     (Engine.Pending: _changes?since=Through&limit=1 on the source) and
//     wakes the job when the source has a change after Through: a change
//     that came between the run's last read and the park. A source that
//     does not answer leaves the job parked (the sweep runs it).
//   - A wake (Store.WakeJob) reads the job in its transaction and changes
//     it only when it is parked and pending in the job layer: a job
//     already woken, running (its document changed, its sweep came) or
//     gone is left alone, and a park and a wake of the same job conflict
//     on its row, so one of them sees the other.
//   - A woken job is pending at its fair-share place (its priority when it
//     parked, as a stopped job keeps it); it starts from its checkpoint.
//   - Whatever happens to its wake, a parked job runs again at its sweep.
//
// A document edit, a deleted document or database, and a cancel reach a
// parked job as any pending one: its job is replaced or removed, and its
// watch index entry with it.
//
// # Watches
//
// The parked jobs of one watch group (one source server, user and proxy)
// share one watch: a job of the job layer's type replicator.WatchType,
// which the park of a job into the group adds when the group has none
// (replicator.Lifecycle, in the park's transaction), and which one
// replication node holds at a time, fenced by its job lock and its hold,
// and taken over by another when that node dies, is cut off or stops (the
// activity monitor re-enqueues it, or the node puts it back as it stops).
// A node works its watches on a job layer Runtime (fdbjobs.Runtime: the
// one runner of held watch jobs, which accepts them as they are due, holds
// and renews them, and ends them fenced by their lock), at most MaxWatches
// at once (a new MaxWatches applies at the next rescheduling step,
// Runtime.SetConcurrency), beside its MaxJobs slots. So the cost of
// watching grows with the source servers and users, not with the parked
// replications. A watch:
//
//   - follows the server's _db_updates feed with the source credentials
//     of one of its parked jobs, from the sequence it stored (a watch
//     taken over misses nothing the feed kept); a watch without one first
//     takes the feed's end, then makes the exact check of each parked job
//     of its group once (what changed before that end), then follows. For
//     each database the feed names it wakes that database's parked jobs
//     of the group. It asks the feed again every Interval (at most a
//     minute), writes the sequence at each heartbeat (Work.Update), and
//     ends once its group has no parked job (replicator.Store.EndWatch,
//     with the Runtime's Work.CompleteTx in the same transaction, which a
//     park into the group meanwhile makes it skip).
//   - polls where the feed is refused (401, 403: the credentials are not
//     a server admin's) or missing (404: CouchDB 3.x serves it only once
//     its _global_changes database exists; servers without it): one poll
//     cycle makes the exact check of every parked job of the group, at
//     the node's WatchPollRate for all its watches, then the watch is put
//     back (a Snooze: not an attempt), due again WatchPollInterval later,
//     so that polling watches
//     take turns in the node's MaxWatches; every few minutes it asks for
//     the feed again. The watch's data says which it does and why
//     (WatchData.Mode, Reason, Cause), the view of each of its parked jobs
//     shows it, the node's /_up counts its watches by mode and cause
//     (Node.Watches; no server named: /_up answers anyone), and the node
//     logs it once per watch run with what enables the feed.
//   - leaves the group's jobs parked, and asks again watchRetryWait later,
//     when the server does not answer: a source that is down wakes no job,
//     and its jobs wake when it answers again and shows their changes.
//
// CouchDB's _db_updates coalesces a database's updates (about half a
// second), may lose the last ones when a CouchDB node dies and may rewind
// after a restart: a lost update leaves a job parked until its sweep (or a
// later update of its database), a rewind only wakes jobs again (a woken
// job with nothing to copy parks again after ParkAfter). Writes to _local
// documents (checkpoints) do not appear in it, so replications do not
// wake each other through their checkpoints on a shared source.
//
// # Templates
//
// A template document (replicator's doc.go, "Templates") is a job of the
// job layer's type replicator.TemplateType, which one replication node
// holds at a time on a Runtime of its own (templates.go; at most
// MaxWatches at once, beside the watches), fenced by its lock and taken
// over when its node dies. Its work:
//
//   - an ending template (its document deleted or no longer a template)
//     or one whose database was deleted removes its replications, a page
//     per transaction, and ends in the transaction that finds none left
//     (Work.CompleteTx);
//   - otherwise, without a _db_updates sequence (a new template, or one
//     that polls), it takes the feed's end, lists the server's _all_dbs
//     (engine.AllDBs, pages of 1,000) and makes the replications what the
//     template says: replicator.Templates.PutChild for each matching database
//     (at most replicator.TemplateDatabasesDefault), RemoveChild for each
//     replication whose database is not listed; then it follows the feed
//     from that end, making the replication of a database created (once
//     _all_dbs lists it: the feed's rows of one database may come out of
//     order) and removing that of one deleted, and lists the server again
//     every templateRelist. A row it could not apply is read again. Where
//     the feed is refused or missing it lists the server again every
//     WatchPollInterval.
//
// Every write of its replications (templateBatch per transaction) reads
// its job's lock first (replicator.Store.Holds): a template replaced by an
// edit of its document, or taken over, writes nothing more. The
// invariant, at the end of each listing and after each feed row applied:
//
//	the template has a replication of exactly the matching databases the
//	server lists (the first TemplateDatabasesDefault of them, less those
//	its owner's limit refused), each as the template now says
//
// TestTemplate (cmd/internal/wire) checks it against CouchDB 3.5 as
// databases are created and deleted, and TestTemplateModel over random
// creations, deletions, edits and takeovers.
//
// # Logs
//
// Each event an operator cares about is one structured line with job_id,
// node (from the node's logger, see Config.NodeName), db and doc_id (or
// user, for a POST /_replicate job), and rep_id once the run computed it
// (a document's versions share its job id: rep_id tells their runs
// apart); endpoints appear only as redacted URLs. Info: "replication
// started" (source, target, continuous, worker_processes,
// worker_batch_size, http_connections, and taken_over_from when the job's
// last node died or resumed_after_restart when it was this node's),
// "replication completed" (docs_read, docs_written, doc_write_failures,
// missing_revisions_found, duration), "replication stopped" (why: rotation, shutdown, balance,
// filter change, deleted database, its job removed or changed by its
// document or replication, or re-enqueued or taken over elsewhere after
// the node's hold on it lapsed; at warn, its hold lapsed before it could
// renew it or store the run's end), "replication healed", "replication
// parked" (through_seq, idle, sweep_at), "replication woken" (cause). Warn: "replication
// crashed" (error, reason, error_count, retry_at, retry_in). Error:
// "replication failed" (error, reason). The control plane logs "replication added by document",
// "replication added by POST /_replicate", "replication removed: its
// document was deleted" and "replication cancelled by POST /_replicate"
// once their transaction commits. A dead node's jobs show up first in the
// job layer's line "fdbjobs: activity monitor re-enqueued running jobs",
// then as "replication started" with taken_over_from on the node that
// takes each one. The lines of a job's runs (the engine's, such as
// "replication setup failed", and its HTTP clients') carry job_id and db
// and doc_id (or user) too (engine.Options.LogFields).
//
// # Liveness
//
// What the loops above promise, checked by the model test
// (cmd/internal/sim: whole nodes in a testing/synctest bubble under random
// operations for simulated hours, replayable from its seed), with I the
// largest interval in effect (Interval plus its third of jitter), each
// bound counted from the last change of the cluster's shape (a node
// started, stopped or dead, a setting changed):
//
//   - Room: when the runnable jobs fit on the live replication nodes
//     (their MaxJobs in all), each starts within 2 I of becoming runnable
//     (added, its backoff over, its node gone: a stopped node's jobs at
//     once, a dead node's once the activity monitor re-enqueues them,
//     between one and about two JobTimeouts after their last heartbeat).
//   - Rotation: when they do not fit, each continuous job that waits for
//     its first run starts within ceil(MinRunTime / I) + ceil(waiting /
//     churn) + 2 intervals, plus a one-shot run's length for the runs
//     open when it came and one more for each slot's worth of one-shot
//     runs that start while it waits (one-shot jobs are not rotated: a
//     slot one takes frees when its run ends, or, for a run that makes no
//     progress, OneShotStallPreempt after its last progress plus a
//     ProgressInterval and a stop grace: the run's length in this bound
//     is at most that for a stalled one), where churn is what
//     the nodes can rotate per interval: their MaxChurn in all, or fewer
//     when MinRunTime is longer than the time the running jobs take to
//     come round (running × I / MinRunTime). This is first come, first
//     served: with fair share the queue's order follows the shares' usage
//     instead, by design. A job held back at the per-user limit (above)
//     is not runnable until its turn comes due, and these bounds apply
//     from then; while its user is at the limit its turn comes after the
//     user's own jobs rotate (a MinRunTime, then within MaxChurn per
//     interval), so the bounds do not count for it: they hold for the
//     replications of users under the limit and of server admins, which
//     the limit keeps from waiting behind one user's.
//   - Parking: a parked job holds no slot and is not waiting in these
//     bounds; woken (or at its sweep), it is runnable and they apply from
//     then. A change to its source that the check after its park sees
//     wakes it at once; a later one wakes it within the watch's latency:
//     the feed's (about a second) where the group's watch follows
//     _db_updates, else a poll cycle (WatchPollInterval plus the group's
//     parked jobs over the node's WatchPollRate), after a takeover or a
//     node's restart up to a JobTimeout more; and whatever the watches do,
//     within ParkSweep.
//   - Ends: a one-shot job that starts completes; a waiting POST
//     /_replicate returns its result; a job whose document or database
//     was deleted, or that was cancelled, sends no write after its node
//     heard of it through the store's watches ("Removed while running"),
//     and stops within one heartbeat at the latest (StatsUpdateInterval,
//     at most Interval and a third of JobTimeout).
//   - Reseal: a reseal pass (replicator.Reseal.Step, above) that starts
//     while no job whose credentials it moves runs ends within the sum
//     over the _replicator databases of floor(documents /
//     ResealPageDefault) + 1, plus floor(jobs / ResealPageDefault) + 1
//     pages (documents counting deleted ones; more pages while failing
//     transactions shrink them), ResealPagesDefault per interval step of
//     the node holding it, with every credential of the documents and
//     jobs it walked sealed to the current key (those sealed to a key no
//     node holds stay, and what it cannot move stays whole, named), each
//     document's job holding its document's values, and none lost; a
//     pass that moved or held back values is followed within
//     ResealRetryDefault by another, clean once nothing was written
//     meanwhile. Checked by replicator.TestResealModel, over random
//     writes, takes, ends (a worker writing back the data it took) and
//     deletions, two nodes taking turns.
//   - Safety: a node never runs more than its MaxJobs; a job never runs on
//     two nodes at once; a completed one-shot job never runs again (a run
//     whose completion its node could not store before its hold lapsed,
//     the node dead or cut off from the store, did not complete the job).
//
// # Defaults
//
// max_jobs 500, max_churn 100, max_acceptors 2, interval 15 s, min_run_time
// 60 s, startup_jitter 5 s, min_backoff 32 s, max_backoff 2 days (at most
// 30 days), health_threshold 2 min, max_history 10, transient_job_max_age
// 24 h, job timeout 61 s, stats update interval 10 s, progress interval
// 1 s, shutdown timeout 5 s, shares 100, usage_coeff 0.5, priority_coeff
// 0.98, fair-share window 24 h, park_after 5 min, park_sweep 24 h,
// max_watches 100, watch_poll_interval 60 s, watch_poll_rate 20,
// max_jobs_per_user_percent 25, max_jobs_per_host 0 (none),
// max_jobs_per_host_user 0 (none), max_requests_per_host_per_sec 0
// (none), max_requests_per_host_user_per_sec 0 (none),
// one_shot_stall_preempt 60 s.
// The *Default constants (here and in
// package replicator) document each.
package scheduler
