package replicator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Key layout under Config.Subspace (see doc.go).
const (
	keyRepIDs      = 1 // (1, RepID) -> JobID
	keyServerUUID  = 2 // (2) -> UUID text
	keyDBs         = 3 // (3, DBName) -> DB instance UUID text
	keyDBJobs      = 4 // (4, DBUUID, DocID) -> ""
	keyUsage       = 5 // (5, ShareKey) -> (float64 usage in ms)
	keyCharges     = 6 // (6, ShareKey) -> int64 LE ms, atomic add
	keyUsagePeriod = 7 // (7) -> (int64 period number)
	keyChargeToken = 8 // (8, Token) -> "": a charge transaction that committed
)

// Store is the replicator's state in the kv store, shared by the control
// plane and the replication nodes: the replication jobs (fdbjobs jobs of
// JobType, their data a JobData) and the replicator's own keys
// (replication id owners, database identities, fair-share usage). Every
// method taking a transaction joins it and follows the kv rules; the
// others run their own transactions.
type Store struct {
	DB   kv.Database
	Jobs *fdbjobs.Client

	root, repIDs, dbs, dbJobs, usage, charges subspace.Subspace
}

// NewStore returns the store of the replicator's keys under sub (nil means
// SubspaceDefault) and of jobs.
func NewStore(db kv.Database, jobs *fdbjobs.Client, sub subspace.Subspace) *Store {
	if sub == nil {
		sub = SubspaceDefault
	}
	return &Store{DB: db, Jobs: jobs, root: sub,
		repIDs: sub.Sub(keyRepIDs), dbs: sub.Sub(keyDBs), dbJobs: sub.Sub(keyDBJobs),
		usage: sub.Sub(keyUsage), charges: sub.Sub(keyCharges)}
}

func (s *Store) repIDKey(repID string) kv.Key { return s.repIDs.Pack(tuple.Tuple{repID}) }
func (s *Store) serverUUIDKey() kv.Key        { return s.root.Pack(tuple.Tuple{keyServerUUID}) }
func (s *Store) dbKey(name string) kv.Key     { return s.dbs.Pack(tuple.Tuple{name}) }
func (s *Store) dbJobKey(dbUUID, docID string) kv.Key {
	return s.dbJobs.Pack(tuple.Tuple{dbUUID, docID})
}
func (s *Store) usageKey(key string) kv.Key   { return s.usage.Pack(tuple.Tuple{key}) }
func (s *Store) chargesKey(key string) kv.Key { return s.charges.Pack(tuple.Tuple{key}) }
func (s *Store) periodKey() kv.Key            { return s.root.Pack(tuple.Tuple{keyUsagePeriod}) }
func (s *Store) chargeTokenKey(token string) kv.Key {
	return s.root.Pack(tuple.Tuple{keyChargeToken, token})
}

func prefixRange(ss subspace.Subspace, t tuple.Tuple) kv.KeyRange {
	p := ss.Pack(t)
	return kv.KeyRange{Begin: kv.Key(append(append([]byte{}, p...), 0x00)), End: kv.Key(append(append([]byte{}, p...), 0xff))}
}

func subspaceRange(ss subspace.Subspace) kv.KeyRange {
	b, e := ss.FDBRangeKeys()
	return kv.KeyRange{Begin: b, End: e}
}

// Setup registers the rep_jobs type with jobTimeout (when it differs) and
// returns the installation's server UUID, creating it on first use (it is
// an input of replication ids and transient job ids).
func (s *Store) Setup(ctx context.Context, jobTimeout time.Duration) (string, error) {
	cur, err := s.Jobs.TypeTimeout(ctx, nil, JobType)
	if err != nil || cur != jobTimeout {
		if err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
			return "", err
		}
		if err := s.Jobs.SetTypeTimeout(ctx, nil, JobType, jobTimeout); err != nil {
			return "", err
		}
	}
	fresh := uuid.New()
	id := fmt.Sprintf("%x", fresh[:])
	return kv.Transact(ctx, s.DB, func(tr kv.Transaction) (string, error) {
		v, err := tr.Get(s.serverUUIDKey()).Get()
		if err != nil {
			return "", err
		}
		if v != nil {
			return string(v), nil
		}
		tr.Set(s.serverUUIDKey(), []byte(id))
		return id, nil
	})
}

// Job returns a job's data and fdbjobs state with one read, or nil when
// the job does not exist.
func (s *Store) Job(ctx context.Context, tr kv.ReadTransactor, jobID string) (*JobData, fdbjobs.State, error) {
	st, raw, err := s.Jobs.Job(ctx, tr, JobType, jobID)
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

// AddJob replaces job jobID (old is its current data, nil when absent) by
// a pending job with data d scheduled at stime (Unix ms), in tr. A
// persistent job is also indexed under its database.
func (s *Store) AddJob(ctx context.Context, tr kv.Transaction, jobID string, old, d *JobData, stime int64, jobTimeout time.Duration) error {
	if old != nil {
		if err := s.RemoveJob(ctx, tr, jobID, old); err != nil {
			return err
		}
	}
	if _, err := s.Jobs.TypeTimeout(ctx, tr, JobType); errors.Is(err, fdbjobs.ErrNotFound) {
		// The caller's snapshot predates the type's registration.
		if err := s.Jobs.SetTypeTimeout(ctx, tr, JobType, jobTimeout); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := s.Jobs.Add(ctx, tr, JobType, jobID, d.Encode(), stime); err != nil {
		return err
	}
	if d.DBUUID != "" {
		tr.Set(s.dbJobKey(d.DBUUID, d.DocID), nil)
	}
	return nil
}

// RemoveJob removes a job with its replication id mapping (if it still
// points to the job) and its database index entry, in tr; d is its data
// (nil when unknown).
func (s *Store) RemoveJob(ctx context.Context, tr kv.Transaction, jobID string, d *JobData) error {
	if err := s.Jobs.Remove(ctx, tr, JobType, jobID); err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
		return err
	}
	if d != nil && d.RepID != "" {
		if err := s.ClearRepID(tr, d.RepID, jobID); err != nil {
			return err
		}
	}
	if d != nil && d.DBUUID != "" {
		tr.Clear(s.dbJobKey(d.DBUUID, d.DocID))
	}
	return nil
}

// RepIDOwner returns the job that holds replication id repID, or "".
func (s *Store) RepIDOwner(tr kv.ReadTransaction, repID string) (string, error) {
	v, err := tr.Get(s.repIDKey(repID)).Get()
	return string(v), err
}

// ClaimRepID makes jobID the holder of repID.
func (s *Store) ClaimRepID(tr kv.Transaction, repID, jobID string) {
	tr.Set(s.repIDKey(repID), []byte(jobID))
}

// ClearRepID clears the replication id mapping if it names jobID.
func (s *Store) ClearRepID(tr kv.Transaction, repID, jobID string) error {
	owner, err := s.RepIDOwner(tr, repID)
	if err != nil {
		return err
	}
	if owner == jobID {
		tr.Clear(s.repIDKey(repID))
	}
	return nil
}

// DBUUID returns the instance UUID of a _replicator database, registering
// a new one if the database has none yet (a database the control plane
// never saw created).
func (s *Store) DBUUID(tr kv.Transaction, dbName string) (string, error) {
	v, err := tr.Get(s.dbKey(dbName)).Get()
	if err != nil {
		return "", err
	}
	if v != nil {
		return string(v), nil
	}
	id := NewDBUUID()
	tr.Set(s.dbKey(dbName), []byte(id))
	return id, nil
}

// NewDBUUID returns a fresh database identity (random: a re-created
// database gets a new one).
func NewDBUUID() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:])
}

// SetDBUUID registers a database's identity.
func (s *Store) SetDBUUID(tr kv.Transaction, dbName, dbUUID string) {
	tr.Set(s.dbKey(dbName), []byte(dbUUID))
}

// ClearDB forgets a database's identity.
func (s *Store) ClearDB(tr kv.Transaction, dbName string) { tr.Clear(s.dbKey(dbName)) }

// RegisteredDB returns a database's identity in tr, or "" when it has
// none.
func (s *Store) RegisteredDB(tr kv.ReadTransaction, dbName string) (string, error) {
	v, err := tr.Get(s.dbKey(dbName)).Get()
	return string(v), err
}

// ReadRegisteredDB is RegisteredDB in a transaction of its own.
func (s *Store) ReadRegisteredDB(ctx context.Context, dbName string) (string, error) {
	return kv.ReadTransact(ctx, s.DB, func(tr kv.ReadTransaction) (string, error) {
		return s.RegisteredDB(tr, dbName)
	})
}

// DBJobs returns up to limit document ids of the jobs of database
// instance dbUUID, with the index keys to clear once they are removed.
func (s *Store) DBJobs(tr kv.ReadTransaction, dbUUID string, limit int) (docIDs []string, keys []kv.Key, err error) {
	kvs, err := tr.GetRange(prefixRange(s.dbJobs, tuple.Tuple{dbUUID}), kv.RangeOptions{Limit: limit}).GetSliceWithError()
	if err != nil {
		return nil, nil, err
	}
	for _, e := range kvs {
		t, err := s.dbJobs.Unpack(e.Key)
		if err != nil || len(t) != 2 {
			continue
		}
		docID, _ := t[1].(string)
		docIDs, keys = append(docIDs, docID), append(keys, e.Key)
	}
	return docIDs, keys, nil
}

// FoldJobs visits every replication job whose data decodes (paging across
// transactions, as fdbjobs.FoldJobs).
func (s *Store) FoldJobs(ctx context.Context, fn func(id string, st fdbjobs.State, d *JobData) error) error {
	return s.Jobs.FoldJobs(ctx, JobType, func(j fdbjobs.JobInfo) error {
		d, err := DecodeJobData(j.Data)
		if err != nil {
			return nil // not ours to judge; skip
		}
		return fn(j.ID, j.State, d)
	})
}
