// Package fdbjobs is a distributed job layer on a FoundationDB-shaped store
// (package kv): the Go counterpart of CouchDB 4.x's couch_jobs. Jobs live in
// the database, so creating a job can commit atomically with the document
// write that asks for it, and any number of nodes can create, run and
// watch jobs without a coordinator.
//
// # Model
//
// A job has a type, an id, JSON data and a scheduled time (an integer
// count of Config.TimeUnit since the Unix epoch: seconds by default). It is pending, running or
// finished:
//
//	Add ──► pending ──Accept──► running ──Finish──► finished
//	           ▲                   │  │                 │
//	           └── activity monitor┘  └─Finish if       │
//	               (no Update for a    resubmitted,     │
//	                type timeout)      or FinishAt      │
//	           ▲────────────── Add / Resubmit ──────────┘
//
// Each type has an activity timeout (SetTypeTimeout). A worker that
// accepted a job holds it through a lock (a random token chosen per Accept
// call plus the job's index in the batch). Update is the heartbeat and the
// fence: called at least once per type timeout, and in every transaction in
// which the worker writes anything for the job, it checks the lock and
// returns ErrHalt when the job was removed, re-enqueued or taken by another
// worker, so writes by a worker that lost its job never commit. Each job
// therefore runs on at most one worker at a time, as far as the database is
// concerned; effects outside the database are at-least-once.
//
// # API
//
//   - Types: SetTypeTimeout, TypeTimeout, ClearTypeTimeout, Types.
//   - Creation: Add (creates, or resubmits an existing job), AddBatch (Add
//     for up to MaxBatch jobs, paged into transactions of at most
//     AddPageJobs jobs and about AddPageBytes), AddFinished (a job created
//     finished), Remove, Job, JobData, JobState, ReadJobs, ActiveJobIDs,
//     PendingCount, DueTime, FoldJobs. All but FoldJobs take a
//     kv.Transactor (nil for a transaction of their own, or the caller's;
//     AddBatch then takes one page at most).
//   - Hooks: SetReenqueueHook lets a type's owner update its keys (and the
//     job's data) where the layer re-enqueues jobs (monitor, Reenqueue).
//   - Listing and counts: List pages through a kind's jobs in one state
//     (available, scheduled, retrying, pending, running, completed,
//     cancelled, discarded), each page from the index that holds the
//     state, with an opaque cursor; Counts reads the jobs per state from
//     the COUNTS keys that every write of a row keeps (writeRow, clearRow).
//   - Metrics: NewMetrics, a prometheus.Collector of a Client's and its
//     Runtimes' counters and histograms per kind, and the store's counts.
//   - Processing: Accept and AcceptBatch (blocking with a timeout, woken
//     by a watch within milliseconds of an Add), Update, Finish, FinishAt
//     (Finish that leaves the job pending at a time of the worker's: its
//     own resubmit, fenced), Resubmit, UpdateBatch and FinishBatch;
//     WatchHold (whether the worker still holds its job, and a watch on
//     its row: a worker hears within milliseconds that its job was
//     removed or taken, instead of at its next Update).
//   - Subscriptions: Subscribe, Subscription.Wait / WaitState / Unsubscribe,
//     WaitAny. They work from any node, not only the one running the job.
//   - Event feed: SetFeed, DisableFeed, FeedKeep, ReadFeed, Feed (a
//     FeedReader), EmitEvent, PruneFeed: a kind's job events, in commit
//     order (see "Event feed").
//   - Limits: SetLimit, ClearLimit, GetLimit: a kind's cluster-wide limit of
//     running jobs and starts per second, which Runtimes share as leases (see
//     "Limits"); ErrCapacityLapsed. SetPartitionLimit, ClearPartitionLimit,
//     GetPartitionLimit: the same for each partition (InsertOptions.Partition;
//     see "Partitions"); ClaimPlaces, LeavePlaces, TakeTokens for own loops.
//     Fair shares: SetFairShareMode (of starts or run time),
//     SetPartitionWeight; ChargeRunTime, RollUpUsage, RunTimeShares.
//   - Services: Client.Start / Stop run one activity monitor per type and,
//     for subscriptions, one notifier per type.
//   - Runtime: typed workers on the calls above. A job's arguments are a Go
//     type with a Kind (JobArgs; the kind is the job's type); AddWorker
//     registers a Worker[T] for them in a Workers registry with its
//     WorkerOptions (Concurrency, Timeout, MaxAttempts, RetryPolicy, Fetchers,
//     FetchBatch, OldestFirst, and Manual for a worker that holds and ends its
//     jobs itself); Client.Insert and InsertMany add such jobs (InsertOptions:
//     id, ScheduledAt, MaxAttempts, Priority, Partition, Unique), in the
//     caller's transaction if given; a Runtime (NewRuntime, Start, Stop,
//     StopAndCancel) accepts them in batches up to each kind's Concurrency,
//     renews each running job's hold every Timeout / HeartbeatFraction, watches
//     its row once it has run WatchHoldAfter, ends the Work's ctx when the job
//     is taken from it (ErrHalt) or its hold lapses (ErrHoldLapsed), and writes
//     the attempt's end in one transaction fenced by the job's lock: finished
//     (OutcomeCompleted), pending again at the RetryPolicy's time
//     (RetryPolicyDefault: attempt⁴ s, ±10%), or finished as OutcomeDiscarded
//     after MaxAttempts, at once for Permanent errors and arguments that do not
//     decode. Snooze puts a job back without counting an attempt; a panic is
//     the attempt's error, a panic of the arguments' decoding too. Cancel, from
//     any node and in the caller's transaction, finishes a pending or running
//     job as OutcomeCancelled and takes its lock away (its Work's ctx ends,
//     cause ErrCancelled); RetryNow makes a finished or waiting job due now.
//     InsertOptions.Unique inserts nothing when a job with the same key (kind,
//     arguments, period) is in the states it names, and returns that job's id
//     (River's unique jobs). Finished jobs are kept for their outcome's
//     retention (RetainCompletedDefault and RetainCancelledDefault a day,
//     RetainDiscardedDefault a week, or RetainForever), then removed by every
//     Runtime's sweeper of the kind (Runtime.Sweep, SweepPeriod). The job's
//     data is an envelope of its arguments and attempts (JobOutcome reads it);
//     the last ErrorHistoryMax errors are kept. An attempt whose node died is
//     not counted: the activity monitor hands the job back as it was.
//     WorkMiddleware (RuntimeOptions and WorkerOptions.Middleware) wraps each
//     attempt, and insert hooks (AddInsertHook) run in the transactions of
//     Insert and InsertMany.
//
// # Key layout
//
// Every key is a tuple under Config.Subspace (SubspaceDefault is ("fdbjobs")):
//
//	(1, Type, JobID)              DATA: (Seq, Token, Index, STime, Resubmit,
//	                              PrevToken, PrevIndex, Data, AddToken, Shard)
//	(2, Type, Shard, STime, JobID) PENDING: the job's row when it has at
//	                              most 256 bytes, else "" — the queue's
//	                              shards, each in scheduled-time order;
//	                              Shard is a queue shard: a shard's lane
//	                              for a priority (see "Priorities")
//	(3, Type)                     WATCHES_PENDING: int64 LE counter, atomic
//	                              add 1 by every transaction that enqueues
//	                              jobs of the type; blocked acceptors
//	                              watch it
//	(5, Type)                     ACTIVITY_TIMEOUT: (Milliseconds); the set
//	                              of these keys is the set of types
//	(6, Type, Shard, Versionstamp, Token) LEASES: (Index, JobID, ...) —
//	                              written by each Accept call that took
//	                              jobs (all of them) and each Update call's
//	                              heartbeat (the jobs it renewed, per Accept
//	                              token), keyed by that commit's
//	                              versionstamp, under its first job's shard
//	(8)                           TYPES_VERSION: int64 LE counter bumped by
//	                              SetTypeTimeout, ClearTypeTimeout and
//	                              SetTypeShards;
//	                              started Clients watch it
//	(9, Type)                     SHARDS: (Count, High) — the shards new jobs
//	                              go to, and the most there have been
//	                              (absent: ShardsDefault for both)
//	(10)                          LAYOUT: (LayoutVersion) — see CheckLayout
//	(11, Type)                    PAUSED: 0x01 while the type is paused
//	                              (Pause); every accept transaction reads
//	                              it, and only Pause and Resume write it
//	(12, Type, Key)               UNIQUE: (JobID, Period) — the job a unique
//	                              insert (InsertOptions.Unique) with that
//	                              key made; read and written by such
//	                              inserts alone
//	(13, Type, Outcome, At, JobID) RETAIN: "" or (JobID, ...) — runtime jobs finished with Outcome
//	                              at or before At (Unix ms): JobID alone, or the jobs the value lists,
//	                              one entry per outcome for the jobs one completer transaction ends (at
//	                              most 8,000 bytes of ids); for the Runtimes' sweepers
//	                              (WorkerOptions.Retain…) and List's finished states
//	(14, Type, State, Shard)      COUNTS: int64 LE counter — the jobs of the type in State (pending,
//	                              running, completed, cancelled, discarded) whose queue shard modulo 8
//	                              is Shard; every write of a row (writeRow) or removal (clearRow) that
//	                              changes what it counts as adds -1 and +1 in its commit, summed per
//	                              key in batches; Counts sums them
//	(15, Name)                    SCHEDULE: the schedule's record (JSON:
//	                              kind, arguments, period, policies, next
//	                              and last period, last job)
//	(16, Kind, Next, Name)        SCHEDULE_DUE: "" — an active schedule's
//	                              next period (Unix ms), for the Runtimes'
//	                              schedule loops; moved in the commit that
//	                              changes the record's next period
//	(17, Kind)                    FEED: (KeepMillis) while the kind's event
//	                              feed is on (SetFeed); in the types the
//	                              type-check loop reads
//	(18, Kind, Versionstamp)      FEED_EVENTS: ((JobID, Event, AtMillis[, Data]), …) — the events of
//	                              one commit of the kind (of a batch, up to 8,000 bytes a key), keyed by
//	                              the commit's versionstamp and the key's number in it (no key that
//	                              every event writes)
//	(19, Kind)                    FEED_PRUNED: the place (14 bytes: a key's
//	                              versionstamp and an event's number in it)
//	                              of the last event pruned (byte max), or
//	                              past every event of DisableFeed's commit
//	(20, Type)                    LANES: one byte, bit p-1 (3+p: fair lane)
//	                              set once a job of priority p was added
//	                              (atomic or); the lanes of the pending queue
//	                              an accept reads ("Priorities", "Fair shares")
//	(21, Kind)                    LIMIT: (Running, PerSecondMicro) — the
//	                              kind's cluster-wide limit (SetLimit; 0:
//	                              none of that kind); read by the type-check
//	                              loop and the Runtimes' renewals
//	(22, Kind, Node)              CAPACITY: (Grant, Want, Versionstamp, RateGrant, RateWant) (rates
//	                              in millionths of a start per second) — a Runtime's lease of the
//	                              limit (see "Limits"), written by its renewals (the commit's
//	                              versionstamp), read by every renewal of the kind
//	(23, Kind, Node)              CAPACITY_FENCE: "" while the lease is
//	                              held: written when it is made, cleared
//	                              when it is given or taken back; read by
//	                              the Runtime's own accepts
//	(24, Kind)                    PARTITION_LIMIT: (N, R) — the kind's limit
//	                              of one partition's running jobs and
//	                              its starts per second in millionths
//	                              (SetPartitionLimit); read by the
//	                              type-check loop and by each claim
//	(25, Kind, Partition, JobID)  PARTITION_RUNNING: "" — a place taken
//	                              (see "Partitions"): written by the
//	                              job's claim, cleared by its end
//	(26, Kind, Partition, JobID)  PARTITION_WAITING: (Looks, Since) — a job that found its
//	                              partition full (Looks times since last woken, the first at Since, µs)
//	(27, Kind, Partition)         PARTITION_HINT: int64 LE counter — jobs may wait: added to by each
//	                              claim that makes one wait, cleared by a wake that finds none
//	(28, Kind, Partition)         PARTITION_COUNT: int64 LE counter — the partition's
//	                              PARTITION_RUNNING entries and leased places, or more: kept by the
//	                              claims, ends and sweeps that change them, set by a claim that
//	                              counted them; absent or below 0: not known. Kept at 0 once idle
//	(29, Kind, Partition)         PARTITION_CLAIM: never written — the
//	                              claims of the partition add a read and
//	                              a write conflict range on it
//	(30, Kind, Partition)         PARTITION_STARTS: int64 LE — the theoretical time of the
//	                              partition's next start (µs since the epoch) under a limit of starts
//	                              per second; written by each claim that takes a start (one key per
//	                              partition that started under it), and by each TakeTokens of the
//	                              bucket (Kind, Partition)
//	(31, Kind, Partition, Since, JobID) PARTITION_QUEUE: "" — the waiting
//	                              jobs in the order they came
//	(32, Kind)                    FAIR: "" by starts, ("run_time") by run time; absent: off
//	(33, Kind, Partition)         WEIGHT: (Weight) — SetPartitionWeight's
//	(34, Kind, Partition)         TAG: int64 LE — the partition's last fair
//	                              tag, ns (atomic max by insert pages)
//	(35, Type, Versionstamp, Token) LEASE_TOUCHED: "" — a lease's row was
//	                              written, not by an end that knew it ("Leases")
//	(36, Kind, Partition)         USAGE: (Millis, Runs, AtMillis) — decayed as of AtMillis
//	(37, Kind, Partition)         CHARGE: int64 LE — run time since the last fold, ms
//	(38, Kind)                    USAGE_PERIOD: (AtMillis, IntervalMillis, Coeff, TotalMillis,
//	                              TotalRuns, Cursor, Token, Cleared) — the last roll-up
//	(39, Kind, AtMillis, Token)   CHARGE_TOKEN: "" — a charge page committed
//	(40, Kind, Partition)         CHARGE_RUNS: int64 LE — runs since the last fold
//	(41, Kind, Partition, Node)   PARTITION_LEASED: int64 LE — the places a Runtime holds
//	                              (its lease of the kind's capacity, Node): its claims and sweeps'
//	(42, Kind, Node)              PARTITION_RECALL: int64 LE counter — added to by claims that make
//	                              a job wait where the Runtime holds places; it watches it
//
// Keys 4 and 7 held an activity clock and claim records in layout 1 and
// are no longer written. Keys 15, 16, 20 to 27 and 31 came without a new
// layout: a store without them has no schedules, priorities or limits,
// which a node of a release before them does not take or follow (it
// handles a job of another priority as any: its row names its pending
// key); waiting entries without Since are woken after those in it. Key 35
// came with layout 4 (see LayoutVersion), keys 36 to 42 without one (a node
// of a release before 41 that counts a full partition counts its entries
// alone: until every node upgrades, a partition may run past its limit).
//
// In DATA, Seq is 0 for a pending job, nil for a finished one and, for a
// running one, the versionstamp of the lease that last granted it (both written
// in the same commit with versionstamped operations). Token is nil unless
// running. PrevToken/PrevIndex name the lock of the last Finish, so that a
// Finish retried after commit_unknown_result recognises its own commit. Data is
// the job's JSON. AddToken is the token of the last Add or Resubmit call that
// changed the job, so that such a call retried after commit_unknown_result
// recognises its own commit instead of resubmitting the job again. Shard is the
// shard of the job's pending key, drawn when it was created from its id (its
// partition, under a limit per partition) (FNV-1a modulo the type's Count) and
// kept for its life.
//
// # Shards
//
// A type's pending queue is split into shards (ShardsDefault, SetTypeShards,
// or raised by a Runtime's Start to the nodes Members names): a new job's
// shard is its id's, or its partition's where the kind has a limit per
// partition (NewJob.Partition), kept in its row; its pending key is there,
// in scheduled-time order. Each shard is owned by one of the nodes that
// Members names, by rendezvous hashing of (node, type, shard) with bounded
// load: every node owns as many shards as another, give or take one;
// every node computes the same owners from the same list, and when a node
// comes or goes few shards besides its own change hands. A node's accepts
// take from the shards it owns, and its acceptors each from a different
// shard (they mark the shard they read, in memory), so acceptors meet only
// when membership views differ for a moment, or when an idle node helps: a
// node with nothing due in its own shards takes from the others. Nothing is written per shard besides
// pending keys: no counter or head key that every accept touches.
//
// Lowering the count loses no job: jobs keep their shard, and acceptors
// and PendingCount cover every shard up to High, the most it has had.
//
// # Accepting
//
// A scheduled Accept reads, as a snapshot, the first n due pending keys of the
// first shard that its node owns and that no other acceptor of the node is
// reading (its own shards start at a random one each time); when that shard has
// fewer than n, it reads the other shards not being read on the node at once,
// 32 at most per transaction (a type with more goes on in the Accept's next
// transactions: no accept transaction grows with the shards, and so with the
// cluster), and fills the batch from them: its node's own from their head,
// then, only if none of its own shards has anything more due, other nodes' from
// the end of what they have due (so that a helping node and the shard's owner
// take from opposite ends), chosen at random. An Accept that looks again after
// finding nothing reads the shards at once, as many a transaction. A look over
// several transactions that found nothing compares the type's pending counter
// as its last transaction reads it (where it sets its watch) with its first
// reading, and looks again when a job was enqueued meanwhile, so it never waits
// with a job due in a shard it read before. A started Client's Accept takes the
// type's timeout and shard counts from what its type-check loop last read (it
// watches TYPES_VERSION), so no key is read by every accept of a type; one not
// started reads them. It claims each run of keys with one read conflict range
// and one range clear: two acceptors conflict only when they take from the same
// end of a shard at once, and then the loser's retry tries that shard last. A
// NoSchedule Accept takes the pending key next to a random point of a shard
// (O(1), for random-looking ids scheduled at 0). With nothing pending, the same
// transaction sets a watch on the type's pending counter and Accept waits on
// it: no polling. A commit of the same Client that makes a job pending (Add,
// AddBatch, Resubmit, a Finish that re-enqueues, Reenqueue, the activity
// monitor; in its own transaction, not the caller's) also wakes that Client's
// waiting acceptors at once, without waiting for the watch to fire, which on
// FoundationDB takes a few milliseconds after the commit.
//
// # Pending keys
//
// A pending job's row and its PENDING key change together: every write that
// makes a row pending at a scheduled time sets that key, every write that takes
// it out of that state (Accept, Remove, a resubmit to another time) clears it,
// and a write of a row that stays pending (SetData) sets the key again (an Add
// or Resubmit at the same time changes nothing). So a conflict on a pending key
// covers its row: Accept adds a read conflict on the keys it takes and reads
// their rows as a snapshot. The key's value is the row itself when the row has
// at most 256 bytes (written in the same commit, so always the row's current
// value), and Accept then takes the row from the key it read, with no read of
// its own: one round trip less per accept, and one read less per job; a larger
// row is read. The bound keeps small what an Accept that reads several shards
// at once reads and does not take.
//
// Order: a shard's owner takes its jobs in scheduled-time order (a job added
// with an earlier time than the ones being taken is next); a node helping takes
// the latest due ones of the shard. Across shards there is no global order: a
// node takes from its own shards before others', so a job due in a busy shard
// may wait while another node's acceptors take later jobs from theirs, at most
// until its shard's owner has taken the jobs ahead of it in that shard, or
// another node runs out of its own. PendingCount counts across every shard, and
// DueTime finds how far the earliest n due jobs of all shards reach.
//
// # Priorities
//
// A job has a priority, PriorityHighest (1, the default) to
// PriorityLowest (4), River's convention. Each priority has a lane of its
// own in every shard: the pending keys of a job of priority p in shard s
// are in queue shard s + (p-1) × ShardsMax (the row's Shard), so a
// priority costs nothing where it is not used, and a lane is a shard to
// every key that names one; ownership, claiming, leases and counts go by
// the base shard. LANES (20, Type) has bit p-1 set once a job of priority
// p was added (an atomic or in that add's transaction, with a bump of
// TYPES_VERSION, once per type and priority); an accept reads the lanes
// of each shard it reads in the same round trip, so a type whose jobs all
// have the default priority reads what it read before priorities.
//
// Order within a shard: an accept merges its lanes by handicapped due
// time, the scheduled time plus (p-1) × Config.PriorityAging
// (PriorityAgingDefault, a minute), ties to the higher priority. Among due
// jobs the higher priorities go first, and the bound on a lower one's wait
// follows: a due job of priority p is taken no later than any job of a
// higher priority q that became due more than (p-q) × PriorityAging after
// it, so a steady stream of higher-priority jobs delays it by at most that
// much. A node helping with another node's shard (which takes from the end
// of what is due) takes the lanes in priority order. Across shards, as for
// due times, there is no order by default; a Runtime's OldestFirst kind
// has one: each fetch first finds the n jobs of least handicapped due time
// across every shard and lane (one snapshot read of their heads), then
// takes jobs up to that handicapped time, each lane up to it less its
// handicap. A job keeps its priority when it is retried, snoozed,
// re-enqueued or resubmitted; an Add or Insert of an existing job with a
// priority changes it. The first job of a new priority reaches acceptors
// of other Clients once their type-check loop reads LANES (it watches
// TYPES_VERSION) and wakes them; those of the adding Client, which knows
// it, at once.
//
// # Limits
//
// SetLimit gives a kind a cluster-wide limit: at most Running of its jobs
// run at once across every Runtime, at most PerSecond start per second, or
// both. Each Runtime that works the kind holds a lease of part of it, its
// grants, and takes jobs only within them: its slots (the lesser of its
// Concurrency and its grant of running jobs) and a token bucket of its rate
// (a second's worth, at least one start; a fetcher reserves starts before
// its accept and gives back those it did not make). A Runtime renews its
// lease about eight times per the kind's Timeout, in one transaction that
// reads the limit and every lease of the kind (not as a snapshot, so that
// two renewals conflict and each grant is within what the others left) and
// writes its own, stamped with the commit's version: its grant is what is
// free, at most its max-min fair part of the limit (filled up evenly, each
// Runtime getting no more than it wants), and never less than the jobs it
// runs; rates the same way. A Runtime with jobs running wants its
// Concurrency and the whole rate; an idle one, one slot and a hundredth of
// the rate, and it renews at once (50 ms after its last renewal at the
// soonest) when that slot is taken, so that a burst finds it asking for its
// Concurrency one transaction later. So no key is written by every accept:
// accepts read their own Runtime's fence key (a conflict with a Runtime that
// took the lease back, not with its own renewals), write nothing for it.
//
// Failure: a lease is the Runtime's for half the Timeout from the start
// of the renewal that wrote it; when it cannot renew by then, it takes no
// more jobs and ends its running jobs' ctx (cause ErrCapacityLapsed: the
// jobs are handed back, no attempt counted; a Manual kind's worker holds
// its jobs itself). A renewal clears the leases written before a version
// its Runtime read a Timeout ago (by its own clock: no clock is compared
// across nodes), so a Runtime that died gives its part back within a
// Timeout. A Runtime that stops gives it back at once, after its jobs
// ended. Changes: a Runtime sees a new or changed limit through its
// Client's type-check loop (within about a second) and takes its share at
// its next renewal; a lowered limit stops no running job. Only Runtimes
// follow a limit: the lower-level Accept and AcceptBatch do not.
//
// # Partitions
//
// A job inserted with InsertOptions.Partition (kept in its envelope) belongs to
// that partition of its kind; SetPartitionLimit lets at most N jobs of one
// partition run at once across every Runtime. Before calling the workers, a
// Runtime's fetcher gives each partitioned job a place its Runtime holds unused
// there (below; the job starts at once), or one its claim takes, fenced by each
// job's lock (Client.claimPartitions; the claims of a kind's fetches that come
// while one runs share the next transaction, up to FetchBatch jobs). A claim reads
// the limit and each partition's PARTITION_COUNT (a snapshot read: ends do not
// conflict with claims) and hint. A count below N grants the place and adds to the
// count. A count absent, below 0, or at N makes the claim read the
// PARTITION_RUNNING entries (N + 32 at most) and the Runtimes' PARTITION_LEASED
// records instead, clear the entries of jobs no longer running and the records of
// Runtimes whose lease of the kind's capacity is gone, and set the count to what
// it found. With fewer than N then it grants the place (an entry of the job's own
// counts as one). Otherwise it writes the job's PARTITION_WAITING entry (counting
// the looks that found the partition full) and PARTITION_QUEUE place, adds to the
// hint and to PARTITION_RECALL of each Runtime holding places there, and sends the
// job back until the kind's Timeout from now, doubled per earlier look up to
// PartitionRecheckMax (FinishAt: not an attempt). A place freed wakes the pending
// job that has waited longest (PARTITION_QUEUE, 8 looked at; none left clears the
// hint) to now, in the transaction that frees it: waiting jobs get places in the
// order they came. A raised or cleared limit wakes them all, 200 per transaction.
//
// Places leased (placelease.go): under a limit of running jobs alone, a place a
// Runtime's claim grants a job of its node's own shards is the Runtime's,
// counted in its PARTITION_LEASED record of the partition (set from what it
// knows, so a claim retried after commit_unknown_result leases nothing twice),
// and stays its own when the job ends, for its next job of the partition: most
// starts and ends write nothing for it. Its sweeper (every second) gives back,
// fenced by the lease, the places unused since its last sweep (and for 10 s
// after a claim failed, those its late commit counted), and, where jobs wait (a
// claim of its own made one wait, a grant saw the hint, or its PARTITION_RECALL
// moved), every place as it comes free; each place given back wakes a waiter
// (32 at most per transaction), until a wake finds none waiting or a sweep
// reads the hint unset. A place is reused only under the limit it was counted
// under (as the Client read it); a changed limit, or a lapsed lease, sends the
// places back as they come free; a Runtime that stops gives back all of them
// before its lease. For a job taken from another node's shard, under a limit of
// starts too, for Manual kinds and through ClaimPlaces, a place is the job's
// own PARTITION_RUNNING entry, cleared by its end (endBatchIn, CompleteTx's)
// or, for a job taken from its Runtime without one, by a transaction of its own
// unless it runs again (releasePartition). A limit of starts per second
// (PerSecond) is a generic cell rate per partition, a token bucket kept as one
// time, PARTITION_STARTS, read and written by the claims (takeStart): each
// start moves it on by 1/PerSecond from it or from now, whichever is later, and
// a start is free while it is within (max(1, PerSecond) - 1)/PerSecond of now
// (by the claiming node's clock). A job that finds no start free goes back to
// the queue (not an attempt) until the next one, at most PartitionRecheckMax
// later. The ranges read are the tuple subspaces of (Kind, Partition), apart
// from a partition whose name extends another's. ClaimPlaces and LeavePlaces
// serve own loops.
//
// Invariant: at any moment the jobs of one partition that run past their
// claim are at most the limit in force at their claims: each claim decides,
// in a transaction that conflicts with every other claim of the partition
// (PARTITION_CLAIM), from a count that is at least the entries and leased
// places (each added adds to it, each cleared takes from it, and a count set
// is what a transaction read that conflicts with any change of them; a claim
// retried after commit_unknown_result may add twice, which only makes the
// count high until it is counted again), or from them; a job's entry outlives
// its run, and a Runtime's jobs use no more places than its record holds (its
// sweeps lower what it knows before they write; a claim whose fence fails
// grants none), which others clear only a Timeout after its last renewal,
// half a Timeout after its lease lapsed and stopped its jobs. Liveness: a
// waiting job is woken by the next place freed in its partition (a Runtime
// holding places learns of it within its claim, by its recall's watch, or
// within a second of hints), or looks again at the latest PartitionRecheckMax
// later; places held by a node that died are found by the first claim that
// finds the partition full once another Runtime of the kind cleared its lease
// (a Timeout on), and wake as many waiters. TestPartitionLimitAcrossNodes
// checks both with eight nodes under the faults, latency and FoundationDB
// passes; TestPlaceLeaseModel with Runtimes dying and leases lapsing.
//
// Invariant (starts): over any window of W seconds, a partition's jobs take at
// most PerSecond × W + max(1, PerSecond) starts, give or take the nodes' clock
// skew: its claims are serial, and each start moves PARTITION_STARTS on by
// 1/PerSecond (a claim retried after commit_unknown_result may take a start
// twice: fewer starts, never more). Liveness: a job sent back for a start
// looks again when one is free. TestPartitionStartsModel checks both.
//
// Cost: none for a start or an end that reuses a leased place; a claim per
// fetch that found none (point reads per partition under the limit, its
// running set and records at it), a sweep for places given back. Claims of
// one partition conflict with each other only (no key is written by every
// claim of a kind). A waiting job costs an accept and a claim per look.
//
// # Fair shares
//
// With SetFairShare, Insert's due partitioned jobs are queued by start-time
// fair queueing (fair.go): an insert page reads where the fair lanes are
// served (the median tag of their first jobs), each partition's WEIGHT and
// TAG; a job's tag is the later of the two plus 1 µs / weight, its
// scheduled time the tag's TimeUnit, its drawn id starts with the tag, and
// it waits in its shard's fair lane (3+p), which accepts take after the
// jobs due by the clock (enqueued again, a job leaves it). Invariant: in a
// fair lane each partition's jobs lie as densely as its weight, whatever
// their rates, so its starts go by weight; one that had none starts where
// the lane is (TestFairShareModel). Cost: per such page, reads of each
// fair lane's head, two per partition and an atomic max; no conflict.
// By run time (FairShareRunTime), a start moves its partition's tag by
// 1 µs × its mean run time over the kind's (USAGE, USAGE_PERIOD's totals) /
// weight, from its priority's least head (fairCreditMax behind the median
// at most); its accepts merge the first jobs of the node's shards.
// Usage (usage.go): Runtimes add their jobs' run time and runs to
// CHARGE (ChargeRunTime, once whatever the retries); RollUpUsage, from every
// Runtime each ChargeInterval, takes the period (its key conflicts;
// the token tells a retry) and folds CHARGE into USAGE by pages that
// conflict with the adds they clear; USAGE decays lazily. Invariant: each
// run charged counts once in USAGE (TestRunTimeUsageStore under faults), so
// run time goes by weight once the means are known (TestFairShareRunTimeModel).
//
// # Leases
//
// A running job is held under a lease: the LEASES key its row's Seq names,
// whose entries list it under its lock, by which the monitor finds a dead
// worker's jobs; no key is written by every accept or heartbeat. A job
// leaves its lease when it finishes, is lost (removed, re-enqueued) or
// renewed by Update, which grants it a newer lease (in its base shard
// too). The worker's Client counts the jobs of each lease it still holds
// (Job's lease) and clears the key in the transaction in which the last
// one leaves; a lease it could not clear that way (a job abandoned, or an
// Update or Finish joined to a caller's transaction, whose commit the job
// layer cannot see) is cleared by the activity monitor once older than a
// type timeout. A worker never clears a lease that still holds a job: the
// count goes down only after the commit in which a job left, and a job
// whose leaving is uncertain keeps counting; the monitor clears a lease in
// the transaction that re-enqueues the jobs it still holds.
//
// A worker knows its jobs' rows as its Accept wrote them; any other write of
// a running row (Cancel, Resubmit, Remove, the monitor, an Update, an end that
// read it; not a claim sending its job back, whose row no end takes as known
// after it) sets its lease's LEASE_TOUCHED key. An end's first attempt, in a
// transaction of its own, reads the lease's two keys, not the rows: lease
// there and untouched, it writes the rows it knows (the reads conflict with
// later touches). Invariant: an end writes a row unread only if the store
// holds it as known (TestEndsTakeKnownRows, TestKnownEnd…).
//
// # Activity monitor
//
// See ActivityMonitor: a dead worker's job is pending again one to a bit
// over two type timeouts after its last Update (database versions, not clocks).
//
// # Holding a job
//
// A worker holds a job it accepted for as long as it keeps the activity
// monitor away, but it cannot see the monitor: a worker cut off from the
// store (the cluster down, a firewall between them) keeps running while
// its Updates fail, and the monitor of another node may re-enqueue the job
// and a third worker start it. Job.HoldDeadline says until when the worker
// can be sure that has not happened, and the worker must have stopped
// acting on the job by then: its deadline is the start of the Accept, or
// of the last transaction that renewed the hold (Job.Renewing) and is known
// to have committed, plus the type timeout over HoldFraction.
//
// The timing argument. Let s be the start of that transaction on the
// worker's clock, and c the moment its commit took effect (its commit
// version u, the version of the lease it wrote); s <= c. The monitor
// re-enqueues the job at a check k only if the database version it read at
// check k-1 was at least u, so that read happened after c; and checks are at least a type timeout T apart
// on the monitor's timer, so the re-enqueue, and any other worker's start,
// happens after c + T >= s + T. A worker that stops by s + T/HoldFraction
// thus stops T/2 before that, which covers the time it needs to stop (its
// requests cancelled), the two timers' drift, and a type timeout lowered
// while it ran (the deadline keeps the timeout of the Accept). An attempt
// that failed with commit_unknown_result may have committed later than s,
// which only moves c and the re-enqueue later. A worker that cannot renew
// its hold thus gives the job up before anyone else can have it: a job
// never runs on two workers at once, whichever of them is cut off.
//
// A cut that drops packets does not make transactions fail: they wait out
// their timeout, longer than the hold. Job.HoldContext bounds a renewal,
// or any wait on the outside world for the job, by the deadline, so that
// the worker is back in time to stop.
//
// # Notifications
//
// A notifier per type per node watches the rows of the jobs subscribed on
// that node (up to NotifierWatchMax of them; the others are read every
// NotifierPoll); when one changes (at most once per NotifierHoldoff) the
// notifier reads every subscribed job and queues an event per
// subscription whose job changed state or, when running, was updated,
// never dropped while it is open (Unsubscribe drops the queued ones).
//
// # Runtime invariants
//
// A Runtime's loops (fetchers, runners, job keepers, completers, sweepers) keep
// these, which TestRuntimeModel checks against a reference over a seeded
// stream of inserts, cancels, pauses and resumes, under injected faults
// and latency too:
//   - Safety: an attempt's end is written only under the job's lock, so a
//     job that Cancel reported cancelled ends cancelled (its worker's
//     outcome is dropped), and a job never has more attempts than its
//     MaxAttempts; no accept that commits after Pause takes a job.
//   - Liveness: every job inserted ends (completed, discarded or
//     cancelled) once its kind is not paused and some Runtime works it;
//     outcomes and attempt counts are those its worker's answers give.
//   - Stop leaves nothing running: its fetchers end first, then its jobs
//     (within the grace, or cancelled and handed back) and their runners,
//     then its completers (every end queued for them written), its lease
//     loops (their leases given back) and chargers (run time written).
//
// A Runtime's lease loops (one per kind, limits.go) keep these, which
// TestLimitModel checks over a seeded stream of renewals, jobs starting
// and ending, the clock moving, Runtimes dying and the limit raised, and
// TestLimitAcrossNodes with eight Runtimes at work:
//   - Safety: the jobs of a kind running across the Runtimes are at most
//     its limit (a lowered limit: once the jobs above it ended); over any
//     window of W seconds they start at most PerSecond × (W + 1) jobs and
//     one per Runtime (TestLimitRateModel).
//   - Liveness: a Timeout after a Runtime died its part is free again, and
//     the live Runtimes' grants then add up to the limit, or to all they
//     want.
//
// # Schedules
//
// A Schedule (PutSchedule) inserts a job of its kind every period: Every
// (whole multiples since the Unix epoch) or a Cron expression in a
// TimeZone. Every Runtime runs one schedule loop for its kinds, without a
// leader: at the next period it read in the SCHEDULE_DUE index, at least
// every SchedulePoll (a second; at once for this Client's own changes),
// it reads the due entries without conflicts and takes them, in a random
// order, in transactions of up to 50 schedules (8 at once) that read
// their records with conflicts, insert the periods' jobs (200 or a few
// more) and move the next periods on.
// Overlap (allow, skip, queue) and CatchUp (one, none, all within a
// window) say what happens while the last job is unfinished and after
// periods were missed. Idle, a Runtime reads one range per kind and
// second. The loop keeps these, which TestScheduleModel checks over a
// simulated day with three nodes whose clocks are skewed, which die and
// come back, and schedules of every policy created, changed, paused,
// resumed and deleted at random, under injected faults and latency too:
//   - Safety: no period gets two jobs (the commit that inserts a period's
//     job moves the record past it; two nodes conflict on the record, and
//     a retry after commit_unknown_result finds it moved); no job is for
//     a time that is not one of its schedule's periods or that no node's
//     clock had reached; a skip or queue schedule has at most one
//     unfinished job.
//   - Liveness: after a node's pass at its clock's now, no schedule of its
//     kinds is due then but one that an Overlap queue holds; a CatchUpAll
//     schedule has a job for every period, however long its nodes were
//     down within its window.
//
// A node whose clock is ahead inserts a period's job that much early, and
// one behind, that much late; the period is still inserted once.
//
// # Event feed
//
// With SetFeed, every change of a kind's job's state writes an event in the
// transaction that makes it (writeRow and clearRow, where Counts are kept too):
// inserted, started, retried, completed, cancelled, discarded, removed;
// EmitEvent adds a kind's own. A commit's events of a kind are written under
// its versionstamp (a batch's together, a few keys at most), so the feed is in
// commit order across nodes and no key is written by every commit; a Seq is a
// key's versionstamp and the event's place in it. ReadFeed reads, in one
// snapshot, the events after a Seq: a commit it does not see has a higher
// versionstamp than every event it returns, so reading on from the last Seq
// misses nothing and repeats nothing (an event is written in the same commit as
// its change, so it is exactly once where the change is, also after
// commit_unknown_result). Every Runtime of the kind prunes events older than
// the feed's keep at each sweep, and moves FEED_PRUNED past them by an atomic
// byte max; a read from a Seq below it is ErrFeedPruned, so a reader that comes
// back too late is told it missed events. A FeedReader waits for new events:
// its Client's commits wake it at once, and it reads again every
// FeedPollDefault for the other Clients'. Clients write events from when their
// type-check loop reads SetFeed's change (a watch's delay); the Client that
// made it, at once. TestCountsFollowEveryTransition checks the feed against
// every job's state after each of a seeded stream of every transition, also
// under commit_unknown_result; TestFeed checks order, reading on, pruning and
// turning off.
//
// # Failure behaviour and idempotence
//
// Every transaction is small and retried by the kv retry loop, also after
// commit_unknown_result, when the previous attempt may have committed. Each
// operation gives the same outcome when its transaction body runs again after
// committing, even when other clients changed the job in between: Accept finds
// the lease of its token among those written since its first attempt's read
// version and returns the jobs it still holds; Update sees the heartbeat its
// earlier attempt wrote (the seq moved under its own lock) and writes no second
// one; Finish and FinishAt recognise their own commit through PrevToken and
// write nothing more (a job another client moved since stays where it is); Add
// and Resubmit recognise their own add token in the row and do not resubmit a
// job their first attempt enqueued and a worker took since (the pages of one
// AddBatch share one token); Remove reports success when an earlier attempt
// removed the job, and leaves alone a job added again since. Operations that
// join a caller's transaction run once per call of the caller's function: a
// caller whose function may run again after committing must make its own calls
// idempotent (for example, Add only if JobState says ErrNotFound, and treat
// ErrNotFound from Remove as done); Finish and FinishAt are safe to repeat
// there too (the row records the lock that finished it), and a repeated Update
// only writes one more heartbeat.
//
// The activity monitor, the notifier and FoldJobs size their batches by
// AIMD with a kv.Batch: a transaction_too_large, retryable error or
// timeout shrinks the batch by BatchFactor (backing off as OnError would
// after a retryable error), each full batch grows it by BatchIncrement,
// a batch that its byte budget ended sets the next one's size, and
// kv.BatchAttemptsDefault failed batches in a row end the loop with the
// last error.
package fdbjobs
