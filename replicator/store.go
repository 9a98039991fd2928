package replicator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Key layout under the Store's subspace (see doc.go).
const (
	keyRepIDs     = 1 // (1, RepID) -> JobID
	keyServerUUID = 2 // (2) -> UUID text
	keyDBs        = 3 // (3, DBName) -> DB instance UUID text
	keyDBJobs     = 4 // (4, DBUUID, DocID) -> ""
	// Keys 5 to 8 held fair-share usage before it moved to the job layer
	// (fdbjobs keys 36 to 39); Setup clears what a store keeps of them.
	keyRetiredFirst = 5
	keyRetiredEnd   = 9

	// The view index (index.go).
	keyEntries      = 9  // (9, JobID) -> packed entry
	keyDocStates    = 10 // (10, DBUUID, State, DocID) -> ""
	keyUnfinished   = 11 // (11, SortID, JobID) -> ""
	keyRunning      = 12 // (12, Node, JobID) -> ""
	keyExpiry       = 13 // (13, LastUpdated, JobID) -> ""
	keyDBCounts     = 14 // (14, DBUUID, State) -> int64 LE
	keyDocCounts    = 15 // (15, State) -> int64 LE
	keyJobCount     = 16 // (16) -> int64 LE
	keyNodeCounts   = 17 // (17, Node) -> int64 LE
	keyDeletedDBs   = 18 // (18, DBUUID) -> (DBName, Holder, Until): deleted databases whose jobs go (Retention)
	keyIndexVersion = 19 // (19) -> (int64)
	keyOwnerJobs    = 20 // (20, Owner, SortID, JobID) -> ""
	keyOwnerCounts  = 21 // (21, Owner) -> int64 LE
	keyOwnerRunning = 22 // (22, Owner, Node, JobID) -> ""
	keyParked       = 25 // (25, Group, SourceDB, JobID) -> "": parked jobs by watch group (park.go)
	keyParkedCount  = 26 // (26) -> int64 LE: parked jobs
	keyReseal       = 27 // (27) -> JSON resealPass: the reseal pass (Reseal, resealpass.go)
	keyUserHeld     = 28 // (28, Owner) -> int64 LE: the owner's jobs held back at the per-user limit (userlimits.go)

	keyProgress   = 23 // (23, JobID, Node, Start) -> JSON RunProgress (progress.go)
	keyFailedDocs = 24 // (24, JobID) -> JSON []FailedDoc (failed.go)

	// Webhooks (webhooks.go).
	keyWebhooks          = 29 // (29, Owner, ID) -> JSON Webhook
	keyWebhooksAll       = 30 // (30, Owner, ID) -> "": the webhooks of every replication's changes
	keyWebhookQueue      = 31 // (31, Owner, ID, JobID, N) -> JSON: queued changes
	keyWebhookDeliveries = 32 // (32, Owner, ID, JobID) -> int64 LE: delivery jobs, their dropped changes
	keyWebhookHealth     = 33 // (33, Owner, ID) -> JSON WebhookHealth
	keyWebhookSeqs       = 34 // (34, Owner, ID, JobID) -> int64 LE: the queue's last number
	keyHostHeld          = 35 // (35, Host) -> int64 LE: the host's jobs held back by its budget (hosts.go)
)

// Store is the replicator's state in the kv store, shared by the control
// plane and the replication nodes: the replication jobs (fdbjobs jobs of
// JobType, their data a JobData) and the watch jobs (WatchType), the view
// index kept with them, and the replicator's own keys (replication id
// owners, database identities). It is the only writer of the jobs and the
// index (see doc.go, "Store"); Views, Shares, Reseal, Retention, Progress
// and FailedDocs, which it hands out, are the concepts beside it. Every
// method taking a transaction joins it and follows the kv rules; the
// others run their own transactions. A Store is a kv.Transactor over its
// database: kv.Transact(ctx, store, f) runs f in a transaction of its own,
// in which the caller calls the Store's methods.
type Store struct {
	db   kv.Database
	jobs *fdbjobs.Client

	k storeKeys

	indexed atomic.Bool // the index version was seen built (Setup)

	// The concepts beside the jobs, each with its keys (see their types),
	// made by NewStore.
	views     *Views
	shares    *Shares
	retention *Retention
	reseal    *Reseal
	failed    *FailedDocs
	progress  *Progress
	webhooks  *Webhooks
	templates *Templates
}

// NewStore returns the store of the replicator's keys under sub (nil means
// SubspaceDefault) and of jobs. It installs the Store's re-enqueue hook for
// JobType on jobs (fdbjobs.Client.SetReenqueueHook), which keeps the view
// index true when the activity monitor or Reenqueue takes a job back.
func NewStore(db kv.Database, jobs *fdbjobs.Client, sub subspace.Subspace) *Store {
	if sub == nil {
		sub = SubspaceDefault
	}
	s := &Store{db: db, jobs: jobs, k: storeKeys{root: sub,
		repIDs: sub.Sub(keyRepIDs), dbs: sub.Sub(keyDBs), dbJobs: sub.Sub(keyDBJobs),
		entries: sub.Sub(keyEntries), docStates: sub.Sub(keyDocStates), unfinished: sub.Sub(keyUnfinished),
		running: sub.Sub(keyRunning), expiry: sub.Sub(keyExpiry), dbCounts: sub.Sub(keyDBCounts),
		ownerJobs: sub.Sub(keyOwnerJobs), ownerRunning: sub.Sub(keyOwnerRunning),
		parked: sub.Sub(keyParked)}}
	s.views = &Views{s: s}
	s.templates = &Templates{s: s}
	s.shares = &Shares{s: s}
	s.retention = &Retention{s: s, marks: sub.Sub(keyDeletedDBs)}
	s.reseal = &Reseal{s: s, key: sub.Pack(tuple.Tuple{keyReseal})}
	s.failed = &FailedDocs{s: s, sub: sub.Sub(keyFailedDocs)}
	s.progress = &Progress{s: s, sub: sub.Sub(keyProgress)}
	s.webhooks = &Webhooks{s: s, hooks: sub.Sub(keyWebhooks), all: sub.Sub(keyWebhooksAll), queue: sub.Sub(keyWebhookQueue),
		deliveries: sub.Sub(keyWebhookDeliveries), health: sub.Sub(keyWebhookHealth), seqs: sub.Sub(keyWebhookSeqs), clock: time.Now}
	jobs.SetReenqueueHook(JobType, s.reenqueued)
	return s
}

// Views returns the views' reader of the index.
func (s *Store) Views() *Views { return s.views }

// Shares returns the cluster's fair-share usage.
func (s *Store) Shares() *Shares { return s.shares }

// Retention returns the removal of the jobs no longer kept.
func (s *Store) Retention() *Retention { return s.retention }

// Reseal returns the resealing of the credentials the store holds.
func (s *Store) Reseal() *Reseal { return s.reseal }

// Progress returns the running jobs' live counters.
func (s *Store) Progress() *Progress { return s.progress }

// FailedDocs returns the jobs' failed documents.
func (s *Store) FailedDocs() *FailedDocs { return s.failed }

// Transact runs f in a transaction of the store's database (kv.Transactor):
// kv.Transact(ctx, store, f) is the typed form.
func (s *Store) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return s.db.Transact(ctx, f)
}

// ReadTransact runs f in a read transaction of the store's database
// (kv.ReadTransactor): kv.ReadTransact(ctx, store, f) is the typed form.
func (s *Store) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return s.db.ReadTransact(ctx, f)
}

func prefixRange(ss subspace.Subspace, t tuple.Tuple) kv.KeyRange {
	p := ss.Pack(t)
	return kv.KeyRange{Begin: kv.Key(append(append([]byte{}, p...), 0x00)), End: kv.Key(append(append([]byte{}, p...), 0xff))}
}

func subspaceRange(ss subspace.Subspace) kv.KeyRange {
	b, e := ss.FDBRangeKeys()
	return kv.KeyRange{Begin: b, End: e}
}

// Setup registers the rep_jobs type with jobTimeout and its queue's
// shards (each when it differs; shards 0 leaves them as they are), and
// the watch type (WatchType) with jobTimeout, turns on the feed of the
// replications' state changes (changes.go), builds the view index if the store
// predates it (buildIndex) and returns the installation's server UUID,
// creating it on first use (it is an input of replication ids and
// transient job ids).
func (s *Store) Setup(ctx context.Context, jobTimeout time.Duration, shards int) (string, error) {
	cur, err := s.jobs.TypeTimeout(ctx, nil, JobType)
	if err != nil || cur != jobTimeout {
		if err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
			return "", err
		}
		if err := s.jobs.SetTypeTimeout(ctx, nil, JobType, jobTimeout); err != nil {
			return "", err
		}
	}
	if err := s.setupWatches(ctx, jobTimeout); err != nil {
		return "", err
	}
	if err := s.templates.setup(ctx, jobTimeout); err != nil {
		return "", err
	}
	if err := s.setupChanges(ctx); err != nil {
		return "", err
	}
	if err := s.setupTriggers(ctx, jobTimeout); err != nil {
		return "", err
	}
	if err := s.setupWebhooks(ctx, jobTimeout); err != nil {
		return "", err
	}
	if n, err := s.jobs.TypeShards(ctx, nil, JobType); err != nil {
		return "", err
	} else if shards > 0 && n != shards {
		if err := s.jobs.SetTypeShards(ctx, nil, JobType, shards); err != nil {
			return "", err
		}
	}
	fresh := uuid.New()
	id := fmt.Sprintf("%x", fresh[:])
	id, err = kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		v, err := tr.Get(s.k.serverUUIDKey()).Get()
		if err != nil {
			return "", err
		}
		if v != nil {
			return string(v), nil
		}
		tr.Set(s.k.serverUUIDKey(), []byte(id))
		return id, nil
	})
	if err != nil {
		return "", err
	}
	_, err = kv.Transact(ctx, s.db, func(tr kv.Transaction) (struct{}, error) {
		tr.ClearRange(kv.KeyRange{Begin: s.k.root.Pack(tuple.Tuple{keyRetiredFirst}), End: s.k.root.Pack(tuple.Tuple{keyRetiredEnd})})
		return struct{}{}, nil
	})
	if err != nil {
		return "", err
	}
	return id, s.buildIndex(ctx)
}

// EnsureServerUUID makes want the installation's server UUID (Setup then
// returns it): a store without one takes it; a store that holds it goes
// on; a store that holds another is refused with ErrServerUUID, unless
// replace is set, which replaces it (and so every replication id: each
// replication then starts again without its checkpoints, unless it finds
// some under its new id). It returns the UUID the store held before ("" if
// none).
func (s *Store) EnsureServerUUID(ctx context.Context, want string, replace bool) (string, error) {
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		v, err := tr.Get(s.k.serverUUIDKey()).Get()
		if err != nil {
			return "", err
		}
		had := string(v)
		if had != "" && had != want && !replace {
			return had, fmt.Errorf("%w: it holds %s, [couchdb] uuid is %s: changing it changes every replication id, "+
				"so every replication starts again without its checkpoints; to change it on purpose, stop every node and "+
				"start one with -replace-uuid ([couchdb] replace_uuid = true), or remove [couchdb] uuid to keep the store's",
				ErrServerUUID, had, want)
		}
		if had != want {
			tr.Set(s.k.serverUUIDKey(), []byte(want))
		}
		return had, nil
	})
}

// Job returns a job's data and fdbjobs state with one read, or nil when
// the job does not exist.
func (s *Store) Job(ctx context.Context, tr kv.ReadTransactor, jobID string) (*JobData, fdbjobs.State, error) {
	st, raw, err := s.jobs.Job(ctx, tr, JobType, jobID)
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	d, err := DecodeJobData(raw)
	if err != nil {
		// %v: corrupt data must not look like a retryable kv error.
		return nil, 0, fmt.Errorf("replicator: job %q: bad data: %v", jobID, err)
	}
	return d, st, nil
}

// RepIDOwner returns the job that holds replication id repID, or "".
func (s *Store) RepIDOwner(tr kv.ReadTransaction, repID string) (string, error) {
	v, err := tr.Get(s.k.repIDKey(repID)).Get()
	return string(v), err
}

// ClaimRepID makes jobID the holder of repID.
func (s *Store) ClaimRepID(tr kv.Transaction, repID, jobID string) {
	tr.Set(s.k.repIDKey(repID), []byte(jobID))
}

// ClearRepID clears the replication id mapping if it names jobID.
func (s *Store) ClearRepID(tr kv.Transaction, repID, jobID string) error {
	owner, err := s.RepIDOwner(tr, repID)
	if err != nil {
		return err
	}
	if owner == jobID {
		tr.Clear(s.k.repIDKey(repID))
	}
	return nil
}

// DBUUID returns the instance UUID of a _replicator database, registering
// a new one if the database has none yet (a database the control plane
// never saw created).
func (s *Store) DBUUID(tr kv.Transaction, dbName string) (string, error) {
	v, err := tr.Get(s.k.dbKey(dbName)).Get()
	if err != nil {
		return "", err
	}
	if v != nil {
		return string(v), nil
	}
	id := NewDBUUID()
	return id, s.RegisterDB(tr, dbName, id)
}

// NewDBUUID returns a fresh database identity (random: a re-created
// database gets a new one).
func NewDBUUID() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:])
}

// RegisterDB makes dbUUID the identity of database dbName, in tr. An
// identity the name had before is retired first, as by UnregisterDB (its
// jobs are removed by the nodes). Registering the current identity again
// changes nothing.
func (s *Store) RegisterDB(tr kv.Transaction, dbName, dbUUID string) error {
	old, err := s.RegisteredDB(tr, dbName)
	if err != nil || old == dbUUID {
		return err
	}
	if old != "" {
		if _, err := s.UnregisterDB(tr, dbName); err != nil {
			return err
		}
	}
	tr.Set(s.k.dbKey(dbName), []byte(dbUUID))
	return s.moveDocCounts(tr, dbUUID, 1)
}

// UnregisterDB forgets database dbName's identity, in tr, and returns it
// ("" when the name had none). Its documents' jobs leave the
// all-databases counters at once and are marked for removal
// (keyDeletedDBs), which the replication nodes do
// (Retention.RemoveDeletedDBJobs). It reads the instance's counters: a job
// of the database changing state at the same time makes one of the two
// transactions retry.
func (s *Store) UnregisterDB(tr kv.Transaction, dbName string) (string, error) {
	dbUUID, err := s.RegisteredDB(tr, dbName)
	if err != nil || dbUUID == "" {
		return "", err
	}
	if err := s.moveDocCounts(tr, dbUUID, -1); err != nil {
		return "", err
	}
	tr.Clear(s.k.dbKey(dbName))
	return dbUUID, s.retention.markDeleted(tr, dbUUID, dbName)
}

// moveDocCounts adds (sign 1) or subtracts (-1) the per-state document
// counts of database instance dbUUID to or from the all-databases counts:
// those count the documents of registered instances only.
func (s *Store) moveDocCounts(tr kv.Transaction, dbUUID string, sign int64) error {
	keys := make([]kv.Key, len(viewStates))
	for i, st := range viewStates {
		keys[i] = s.k.dbCountKey(dbUUID, st)
	}
	ns, err := readCounters(tr, keys)
	if err != nil {
		return err
	}
	for i, n := range ns {
		if n != 0 {
			tr.Add(s.k.docCountKey(viewStates[i]), kv.Int64(sign*n))
		}
	}
	return nil
}

// viewStates are the states a job has in the view index: the RFC's five,
// parked (which the views show as running; see doc.go, "Parking") and
// paused.
var viewStates = []string{StatePending, StateRunning, StateCrashing, StateCompleted, StateFailed, StateParked, StatePaused}

// ViewStates returns the states of the view index, in CouchDB's order,
// then parked and paused.
func ViewStates() []string { return append([]string(nil), viewStates...) }

// RegisteredDB returns a database's identity in tr, or "" when it has
// none.
func (s *Store) RegisteredDB(tr kv.ReadTransaction, dbName string) (string, error) {
	v, err := tr.Get(s.k.dbKey(dbName)).Get()
	return string(v), err
}

// ReadRegisteredDB is RegisteredDB in a transaction of its own.
func (s *Store) ReadRegisteredDB(ctx context.Context, dbName string) (string, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (string, error) {
		return s.RegisteredDB(tr, dbName)
	})
}

// dbJobIDs returns up to limit document ids of the jobs of database
// instance dbUUID before document id before, highest first ("" and first:
// from the end), with their (4) keys.
func (s *Store) dbJobIDs(tr kv.ReadTransaction, dbUUID, before string, first bool, limit int) (docIDs []string, keys []kv.Key, err error) {
	rng := prefixRange(s.k.dbJobs, tuple.Tuple{dbUUID})
	if !first {
		rng.End = s.k.dbJobKey(dbUUID, before)
	}
	kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: limit, Reverse: true}).GetSliceWithError()
	if err != nil {
		return nil, nil, err
	}
	for _, e := range kvs {
		t, err := s.k.dbJobs.Unpack(e.Key)
		if err != nil || len(t) != 2 {
			continue
		}
		docID, _ := t[1].(string)
		docIDs, keys = append(docIDs, docID), append(keys, e.Key)
	}
	return docIDs, keys, nil
}

// FoldJobs visits every replication job whose data decodes (paging across
// transactions, as fdbjobs.FoldJobs): for the index backfill and for
// tests; nothing a request or an interval does reads every job.
func (s *Store) FoldJobs(ctx context.Context, fn func(id string, st fdbjobs.State, d *JobData) error) error {
	return s.jobs.FoldJobs(ctx, JobType, func(j fdbjobs.JobInfo) error {
		d, err := DecodeJobData(j.Data)
		if err != nil {
			return nil // not ours to judge; skip
		}
		return fn(j.ID, j.State, d)
	})
}
