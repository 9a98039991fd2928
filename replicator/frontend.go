package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// dbJobsInlineRemoveLimit is how many jobs DBDeleted removes inside the
// caller's transaction; the replication nodes' cleanup removes the rest.
const dbJobsInlineRemoveLimit = 100

// Frontend is the api_frontend side of the replicator: it validates
// _replicator documents, creates and removes replication jobs as documents
// and databases change (inside the caller's transaction), serves POST
// /_replicate and the monitoring views. It never contacts a replication
// endpoint. It is safe for concurrent use and has no background work of
// its own; Replicate needs the fdbjobs Client to be started (it waits
// through subscriptions).
type Frontend struct {
	db   kv.Database
	jobs *fdbjobs.Client
	cfg  Config
	k    keys
	m    *Metrics

	setupMu    sync.Mutex
	serverUUID string

	memo txMemo // what DBCreated and DocWritten did, by transaction
}

// NewFrontend returns a Frontend. It validates cfg and does no I/O; the
// rep_jobs type timeout and the server UUID are set up on first use.
func NewFrontend(db kv.Database, jobs *fdbjobs.Client, cfg Config) (*Frontend, error) {
	if db == nil || jobs == nil {
		return nil, fmt.Errorf("%w: nil database or jobs client", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Frontend{db: db, jobs: jobs, cfg: cfg, k: newKeys(cfg.Subspace), m: cfg.Metrics}, nil
}

// Metrics returns a snapshot of this process's replicator counters.
func (f *Frontend) Metrics() []Metric { return f.m.Snapshot() }

// Init registers the rep_jobs type (with Config.JobTimeout) and creates or
// reads the server UUID. Call it at start-up; the other methods also do it
// on first use, and DocWritten registers the type inside the caller's
// transaction when that transaction's snapshot does not have it yet.
func (f *Frontend) Init(ctx context.Context) error {
	_, err := f.setup(ctx)
	return err
}

// setup registers the job type and reads the server UUID, once.
func (f *Frontend) setup(ctx context.Context) (string, error) {
	f.setupMu.Lock()
	defer f.setupMu.Unlock()
	if f.serverUUID != "" {
		return f.serverUUID, nil
	}
	u, err := ensureSetup(ctx, f.db, f.jobs, f.k, f.cfg)
	if err != nil {
		return "", err
	}
	f.serverUUID = u
	return u, nil
}

// ensureSetup sets the rep_jobs type timeout (if it differs) and returns
// the server UUID.
func ensureSetup(ctx context.Context, db kv.Database, jobs *fdbjobs.Client, k keys, cfg Config) (string, error) {
	cur, err := jobs.TypeTimeout(ctx, nil, JobType)
	if err != nil || cur != cfg.JobTimeout {
		if err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
			return "", err
		}
		if err := jobs.SetTypeTimeout(ctx, nil, JobType, cfg.JobTimeout); err != nil {
			return "", err
		}
	}
	return getServerUUID(ctx, db, k)
}

// IsReplicatorDB reports whether name is a _replicator database: exactly
// "_replicator" or ending in "/_replicator".
func IsReplicatorDB(name string) bool {
	return name == "_replicator" || strings.HasSuffix(name, "/_replicator")
}

// ignoredDoc reports design and local documents, which never define
// replications.
func ignoredDoc(docID string) bool {
	return strings.HasPrefix(docID, "_design/") || strings.HasPrefix(docID, "_local/")
}

// ValidateDoc checks a document about to be written to a _replicator
// database, as CouchDB's before_doc_update does: an error wrapping
// ErrForbidden (answer 403 with Reason(err)) rejects the write. Design and
// local documents, deleted documents, documents already marked
// "_replication_state": "failed", databases that are not _replicator
// databases and writers with the _replicator role are not checked. A
// writer other than an admin may only write documents whose owner is
// themselves (PrepareDoc fills in a missing owner).
func (f *Frontend) ValidateDoc(dbName, docID string, doc json.RawMessage, user UserCtx) error {
	_, err := f.PrepareDoc(dbName, docID, doc, user)
	return err
}

// PrepareDoc is ValidateDoc returning the document to store: with "owner"
// set to the writer's name when it was missing (or null, for admins).
func (f *Frontend) PrepareDoc(dbName, docID string, doc json.RawMessage, user UserCtx) (json.RawMessage, error) {
	if !IsReplicatorDB(dbName) || ignoredDoc(docID) {
		return doc, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(doc, &obj); err != nil || obj == nil {
		return nil, newReason(ErrForbidden, "a replication document must be a JSON object")
	}
	if user.HasRole("_replicator") {
		return doc, nil
	}
	out := doc
	owner, hasOwner := obj["owner"]
	switch {
	case !hasOwner || isNull(owner):
		if user.Name != "" {
			obj["owner"], _ = json.Marshal(user.Name)
			out, _ = json.Marshal(obj)
		}
	default:
		var o string
		if json.Unmarshal(owner, &o) != nil {
			return nil, newReason(ErrForbidden, "`owner` must be a string")
		}
		if o != user.Name && !user.IsAdmin() {
			return nil, newReason(ErrForbidden, "Can't update replication documents from other users.")
		}
	}
	if v, ok := obj["_deleted"]; ok && string(v) == "true" {
		return out, nil
	}
	if st := replicationState(obj); st == StateFailed {
		return out, nil
	} else if st != "" && !knownDocState(st) {
		return nil, newReason(ErrForbidden, "`_replication_state` is written by the replicator; %q is not one of its states", st)
	}
	if _, err := parseSpec(obj); err != nil {
		return nil, newReason(ErrForbidden, "%s", Reason(err))
	}
	return out, nil
}

func replicationState(obj map[string]json.RawMessage) string {
	var s string
	if v, ok := obj["_replication_state"]; ok {
		_ = json.Unmarshal(v, &s)
	}
	return s
}

func knownDocState(s string) bool {
	switch s {
	case StateCompleted, StateFailed, StatePending, StateRunning, StateCrashing, "triggered", "error":
		return true
	}
	return false
}

// DocWritten creates, replaces or removes the job of a _replicator
// document. Call it inside the transaction that writes the document (doc
// nil or "_deleted": true for a deletion) so both commit together; it
// ignores other databases and design and local documents. A document that
// does not parse (it bypassed ValidateDoc, e.g. a restored database) gets
// a job in state failed with the parse error, visible in _scheduler/docs.
// An update that leaves the replication unchanged while its job is
// pending, running or crashing, or that only records the replicator's own
// terminal state, leaves the job alone; any other update replaces the job
// (a running one is halted at its next heartbeat).
func (f *Frontend) DocWritten(ctx context.Context, tr kv.Transaction, dbName, docID string, doc json.RawMessage) error {
	if !IsReplicatorDB(dbName) || ignoredDoc(docID) {
		return nil
	}
	if _, err := f.setup(ctx); err != nil {
		return err
	}
	f.countOnCommit(tr, MetricDocsDBChanges)
	dbUUID, err := f.k.dbUUID(tr, dbName)
	if err != nil {
		return err
	}
	jobID := persistentJobID(dbUUID, docID)
	var obj map[string]json.RawMessage
	deleted := doc == nil
	if !deleted {
		if json.Unmarshal(doc, &obj) != nil || obj == nil {
			obj = map[string]json.RawMessage{}
		}
		if v, ok := obj["_deleted"]; ok && string(v) == "true" {
			deleted = true
		}
	}
	old, oldState, err := readJob(ctx, f.jobs, tr, jobID)
	if err != nil {
		return err
	}
	if deleted {
		if old != nil {
			if err := removeJob(ctx, f.jobs, f.k, tr, jobID, old); err != nil {
				return err
			}
			f.countOnCommit(tr, MetricJobsRemoves)
		}
		return nil
	}
	spec, perr := parseSpec(obj)
	if old != nil {
		docState := replicationState(obj)
		mine, _ := f.memo.get(tr, "job:"+jobID)
		switch {
		case perr == nil && sameReplication(old.Rep, spec) && mine == strconv.FormatInt(old.StartTime, 10):
			return nil // the job an earlier run of this transaction added (it may have finished since)
		case perr == nil && sameReplication(old.Rep, spec) &&
			(oldState != fdbjobs.Finished || docState == StateCompleted || docState == StateFailed):
			return nil // unchanged, or the replicator recording its own result
		case perr != nil && old.Rep == nil && old.LastError == Reason(perr):
			return nil // the same parse failure
		}
	}
	now := f.cfg.Clock.Now()
	d := &jobData{Rep: spec, DBName: dbName, DBUUID: dbUUID, DocID: docID, State: StatePending,
		StartTime: ms(now), LastUpdated: ms(now)}
	if perr != nil {
		d.Rep, d.State = nil, StateFailed
		d.LastError = Reason(perr)
		d.StateInfo = stateInfoOf("bad_rep_doc", Reason(perr))
	}
	d.addHistory(f.cfg.MaxHistory, historyEvent{Type: EventAdded, Timestamp: ms(now)})
	if err := f.addJob(ctx, tr, jobID, old, d); err != nil {
		return err
	}
	f.memo.put(tr, "job:"+jobID, strconv.FormatInt(d.StartTime, 10))
	f.countOnCommit(tr, MetricJobsAdds)
	return nil
}

// addJob replaces job jobID (old is its current data, nil when absent) by
// a pending job with data d.
func (f *Frontend) addJob(ctx context.Context, tr kv.Transaction, jobID string, old *jobData, d *jobData) error {
	if old != nil {
		if err := removeJob(ctx, f.jobs, f.k, tr, jobID, old); err != nil {
			return err
		}
	}
	usage, err := readUsage(tr, f.k)
	if err != nil {
		return err
	}
	stime := f.cfg.enqueueTime(f.cfg.Clock.Now(), usage, d.shareKey())
	if _, err := f.jobs.TypeTimeout(ctx, tr, JobType); errors.Is(err, fdbjobs.ErrNotFound) {
		// The caller's snapshot predates the type's registration.
		if err := f.jobs.SetTypeTimeout(ctx, tr, JobType, f.cfg.JobTimeout); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := f.jobs.Add(ctx, tr, JobType, jobID, d.encode(), stime); err != nil {
		return err
	}
	if d.DBUUID != "" {
		tr.Set(f.k.dbJobKey(d.DBUUID, d.DocID), nil)
	}
	return nil
}

// readJob returns a job's data and fdbjobs state in tr, or nil when absent.
func readJob(ctx context.Context, jobs *fdbjobs.Client, tr kv.ReadTransactor, jobID string) (*jobData, fdbjobs.State, error) {
	raw, err := jobs.JobData(ctx, tr, JobType, jobID)
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := jobs.JobState(ctx, tr, JobType, jobID)
	if err != nil {
		return nil, 0, err
	}
	d, err := decodeJobData(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("replicator: job %q: bad data: %v", jobID, err)
	}
	return d, st, nil
}

// removeJob removes a job with its replication id mapping (if it still
// points to the job) and its database index entry.
func removeJob(ctx context.Context, jobs *fdbjobs.Client, k keys, tr kv.Transaction, jobID string, d *jobData) error {
	if err := jobs.Remove(ctx, tr, JobType, jobID); err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
		return err
	}
	if d != nil && d.RepID != "" {
		if err := clearRepID(tr, k, d.RepID, jobID); err != nil {
			return err
		}
	}
	if d != nil && d.DBUUID != "" {
		tr.Clear(k.dbJobKey(d.DBUUID, d.DocID))
	}
	return nil
}

// clearRepID clears the replication id mapping if it names jobID.
func clearRepID(tr kv.Transaction, k keys, repID, jobID string) error {
	v, err := tr.Get(k.repIDKey(repID)).Get()
	if err != nil {
		return err
	}
	if string(v) == jobID {
		tr.Clear(k.repIDKey(repID))
	}
	return nil
}

// DBCreated gives a _replicator database a new identity (persistent job
// ids are its UUID and the document id), inside the transaction that
// creates the database. Run again in the same transaction (a retry, also
// after commit_unknown_result), it writes the same identity. Jobs of an earlier database of the same name are
// orphaned and removed by the nodes' cleanup. For a database that comes
// back with documents (a restore), call DocWritten for each document
// afterwards: they were never validated, and invalid ones become failed
// jobs.
func (f *Frontend) DBCreated(ctx context.Context, tr kv.Transaction, dbName string) error {
	if !IsReplicatorDB(dbName) {
		return nil
	}
	u, ok := f.memo.get(tr, "db:"+dbName)
	if !ok {
		u = newDBUUID(dbName)
		f.memo.put(tr, "db:"+dbName, u)
	}
	tr.Set(f.k.dbKey(dbName), []byte(u))
	f.countOnCommit(tr, MetricDocsDBsCreated)
	return nil
}

// DBDeleted removes the jobs of a deleted _replicator database, inside the
// transaction that deletes it: up to dbJobsInlineRemoveLimit of them at
// once, the rest through the replication nodes' periodic cleanup (their
// database identity is gone, so they no longer run).
func (f *Frontend) DBDeleted(ctx context.Context, tr kv.Transaction, dbName string) error {
	if !IsReplicatorDB(dbName) {
		return nil
	}
	v, err := tr.Get(f.k.dbKey(dbName)).Get()
	if err != nil || v == nil {
		return err
	}
	dbUUID := string(v)
	tr.Clear(f.k.dbKey(dbName))
	removed := 0
	kvs, err := tr.GetRange(prefixRange(f.k.dbJobs, tuple.Tuple{dbUUID}), kv.RangeOptions{Limit: dbJobsInlineRemoveLimit}).GetSliceWithError()
	if err != nil {
		return err
	}
	for _, e := range kvs {
		t, err := f.k.dbJobs.Unpack(e.Key)
		if err != nil || len(t) != 2 {
			continue
		}
		docID, _ := t[1].(string)
		jobID := persistentJobID(dbUUID, docID)
		old, _, err := readJob(ctx, f.jobs, tr, jobID)
		if err != nil {
			return err
		}
		if err := removeJob(ctx, f.jobs, f.k, tr, jobID, old); err != nil {
			return err
		}
		tr.Clear(e.Key)
		removed++
	}
	f.countOnCommit(tr, MetricDocsDBsDeleted)
	f.countOnCommitN(tr, MetricJobsRemoves, removed)
	return nil
}

// countOnCommit adds one to the counter name once tr commits: a
// transaction function may run several times (retries), and only the
// attempt that commits counts. The commit's versionstamp future resolves
// without error for that attempt only. An attempt that committed but
// reported commit_unknown_result does not count; its retry counts what it
// does itself (see doc.go, "Failure trade-offs").
func (f *Frontend) countOnCommit(tr kv.Transaction, name string) { f.countOnCommitN(tr, name, 1) }

func (f *Frontend) countOnCommitN(tr kv.Transaction, name string, n int) {
	countOnCommit(f.m, tr, name, n)
}

func countOnCommit(m *Metrics, tr kv.Transaction, name string, n int) {
	if n <= 0 {
		return
	}
	vs := tr.GetVersionstamp()
	go func() {
		if _, err := vs.Get(); err == nil {
			m.add(name, int64(n))
		}
	}()
}

// txMemoMax bounds txMemo: retries of one transaction follow each other
// closely, so only recent entries matter.
const txMemoMax = 256

// txMemo remembers, per transaction, what a function joining the caller's
// transaction chose or did in an earlier run, so that the same transaction
// run again (a retry, possibly after its earlier attempt committed with
// commit_unknown_result) gives the same outcome: retry loops reuse their
// Transaction. DBCreated keeps the database UUID it chose ("db:" + name);
// DocWritten recognises the job it added ("job:" + id -> its start time).
type txMemo struct {
	mu    sync.Mutex
	m     map[txMemoKey]string
	order []txMemoKey
}

type txMemoKey struct {
	tr  kv.Transaction
	key string
}

func (c *txMemo) get(tr kv.Transaction, key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[txMemoKey{tr, key}]
	return v, ok
}

func (c *txMemo) put(tr kv.Transaction, key, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := txMemoKey{tr, key}
	if c.m == nil {
		c.m = map[txMemoKey]string{}
	}
	if _, ok := c.m[k]; !ok {
		c.order = append(c.order, k)
	}
	c.m[k] = v
	for len(c.order) > txMemoMax {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

// errorBody is CouchDB's error reply.
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func reply(status int, v any) (int, json.RawMessage, error) {
	b, err := json.Marshal(v)
	return status, b, err
}

func errReply(status int, tag, reason string) (int, json.RawMessage, error) {
	return reply(status, errorBody{Error: tag, Reason: reason})
}

var _ = http.StatusOK
