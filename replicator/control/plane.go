package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
)

// Plane is the replicator's control plane, what api_frontend nodes run:
// it checks _replicator documents, creates and removes replication jobs as
// documents and databases change (inside the caller's transaction), serves
// POST /_replicate and the monitoring views. It never contacts a
// replication endpoint. It is safe for concurrent use and has no
// background work of its own; Replicate needs the fdbjobs Client to be
// started (it waits through subscriptions).
type Plane struct {
	store *replicator.Store
	cfg   replicator.Config
	m     *replicator.Metrics
	// live holds cfg with the settings SetConfig changes at run time.
	live atomic.Pointer[replicator.Config]

	setupMu    sync.Mutex
	serverUUID string

	members Membership // nil: jobs shown as the store has them
}

// New returns a control plane over store, which a process shares with its
// replication node (cmd/internal/node builds one). It validates cfg and
// does no I/O; the rep_jobs type and the server UUID are set up by Init or
// on first use.
func New(store *replicator.Store, cfg replicator.Config) (*Plane, error) {
	if store == nil {
		return nil, replicator.InvalidConfig("nil store")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plane{store: store, cfg: cfg, m: cfg.Metrics}
	p.live.Store(&cfg)
	return p, nil
}

// SetConfig changes, from now on, the settings of cfg that may change at
// run time: Shares, UsageCoeff, PriorityCoeff, FairShareWindow and StartupJitter (the
// enqueue times of new jobs), MaxHistory and ReplicateNoNodeTimeout (for
// the waits that start from then on), Protocols (for the documents and
// requests that come from then on), MaxUserConnectionTimeout and
// MaxReplicationsPerUser (for the writes from then on). The others keep
// their values from New. It validates cfg first.
func (p *Plane) SetConfig(cfg replicator.Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	next := p.cfg
	next.Shares, next.UsageCoeff, next.PriorityCoeff, next.FairShareWindow = cfg.Shares, cfg.UsageCoeff, cfg.PriorityCoeff, cfg.FairShareWindow
	next.StartupJitter, next.MaxHistory = cfg.StartupJitter, cfg.MaxHistory
	next.ReplicateNoNodeTimeout = cfg.ReplicateNoNodeTimeout
	next.Protocols = cfg.Protocols
	next.MaxUserConnectionTimeout, next.MaxReplicationsPerUser = cfg.MaxUserConnectionTimeout, cfg.MaxReplicationsPerUser
	p.live.Store(&next)
	return nil
}

// conf returns the configuration in effect (see SetConfig).
func (p *Plane) conf() *replicator.Config { return p.live.Load() }

// Metrics returns the counters the plane updates (shared with nodes of
// the same process when their Config names the same Metrics).
func (p *Plane) Metrics() *replicator.Metrics { return p.m }

// Init registers the rep_jobs type (with Config.JobTimeout) and creates or
// reads the server UUID. Call it at start-up; the other methods also do it
// on first use, and DocWritten registers the type inside the caller's
// transaction when that transaction's snapshot does not have it yet.
func (p *Plane) Init(ctx context.Context) error {
	_, err := p.setup(ctx)
	return err
}

// ServerUUID returns the installation's server UUID (the first input of
// replication ids and transient job ids), creating it on first use.
func (p *Plane) ServerUUID(ctx context.Context) (string, error) { return p.setup(ctx) }

// setup registers the job type and reads the server UUID, once.
func (p *Plane) setup(ctx context.Context) (string, error) {
	p.setupMu.Lock()
	defer p.setupMu.Unlock()
	if p.serverUUID != "" {
		return p.serverUUID, nil
	}
	u, err := p.store.Setup(ctx, p.cfg.JobTimeout, p.cfg.JobShards)
	if err != nil {
		return "", err
	}
	p.serverUUID = u
	return u, nil
}

// Doc is a replication document about to be written, parsed once by
// ParseDoc and carried to DocWritten.
type Doc struct {
	DB, ID string
	// State is the document's "_replication_state" ("" when absent), and
	// StateTime, StateReason and Stats its "_replication_state_time",
	// "_replication_state_reason" and "_replication_stats": what a
	// document marked completed or failed elsewhere shows of its end.
	State                  string
	StateTime, StateReason string
	Stats                  json.RawMessage
	// Owner is the document's "owner" ("" when absent).
	Owner string
	// Spec is the parsed replication; nil when it did not parse.
	Spec *replicator.Spec
	// Err is the parse failure (a document stored without validation,
	// by a writer with the _replicator role or a restore).
	Err error
	// Sealed is the document to store in place of the one written: its
	// credentials sealed (Config.Sealer); nil to store it as written.
	Sealed json.RawMessage
	// Ignored are the fields of CouchDB's the replication has that
	// fdbrep ignores (replicator.IgnoredFields), logged once it is added.
	Ignored []string
	// Limited: its writer is not a server admin, so the per-user limits
	// apply (replicator's doc.go, "Per-user limits").
	Limited bool
}

// DocRef is the database and document id d was parsed for.
func (d *Doc) DocRef() (db, docID string) { return d.DB, d.ID }

// Stored implements api.ParsedDoc.
func (d *Doc) Stored() json.RawMessage { return d.Sealed }

// ParseDoc parses a document of a _replicator database about to be
// written by writer (CouchDB's before_doc_update validation), and refuses
// endpoints and proxies written as addresses that Config.Addresses denies
// (it does no I/O: CheckEndpoints resolves names). A writer who is not a
// server admin is held to the per-user limits: a connection_timeout over
// MaxUserConnectionTimeout is refused here, and DocWritten counts the
// owner's replications. An error wrapping
// replicator.ErrForbidden means the write must be refused (403 with its
// Reason); the returned Doc records it either way, for writers that may
// store it. Documents carrying the replicator's own fields
// ("_replication_state" and the like) are checked like any other. Other
// databases and design and local documents give a Doc that DocWritten
// ignores.
//
// The result is a *Doc.
func (p *Plane) ParseDoc(db, docID string, raw json.RawMessage, writer api.User) (api.ParsedDoc, error) {
	d := &Doc{DB: db, ID: docID, Limited: !writer.IsAdmin()}
	if !repdb.IsReplicatorDB(db) || !repdb.IsReplicationDoc(docID) {
		return d, nil
	}
	var serr error // a Redacted credential, with the others sealed
	if s := p.cfg.Sealer; s != nil {
		sealed, err := replicator.SealJSON(s, raw, replicator.DocScope(db, docID))
		if sealed == nil {
			d.Err = replicator.NewReason(replicator.ErrForbidden, "a replication document must be a JSON object")
			if !errors.Is(err, replicator.ErrBadRequest) {
				d.Err = err // not sealed: refused (500), whoever writes it
			}
			return d, d.Err
		}
		d.Sealed, raw, serr = sealed, sealed, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		d.Err = replicator.NewReason(replicator.ErrForbidden, "a replication document must be a JSON object")
		return d, d.Err
	}
	if v, ok := obj["_replication_state"]; ok {
		_ = json.Unmarshal(v, &d.State)
	}
	if v, ok := obj["_replication_state_time"]; ok {
		_ = json.Unmarshal(v, &d.StateTime)
	}
	if v, ok := obj["_replication_state_reason"]; ok {
		_ = json.Unmarshal(v, &d.StateReason)
	}
	d.Stats = obj["_replication_stats"]
	if v, ok := obj["owner"]; ok {
		_ = json.Unmarshal(v, &d.Owner)
	}
	d.Spec, d.Err = replicator.ParseObject(obj)
	if d.Err == nil && d.Limited {
		if d.Err = p.conf().CheckUserSpec(d.Spec); d.Err != nil {
			d.Spec = nil
		}
	}
	if serr != nil {
		d.Spec, d.Err = nil, serr
	}
	if d.Err == nil {
		// As CouchDB's parse: an endpoint whose scheme is not allowed
		// makes an invalid document.
		if d.Err = p.conf().Protocols.Check(d.Spec, replicator.ErrForbidden); d.Err != nil {
			d.Spec = nil
		}
		// Literal addresses only: no I/O here (CheckEndpoints resolves).
		if d.Spec != nil {
			if err := d.Spec.CheckAddresses(context.Background(), p.cfg.Addresses, false); err != nil {
				d.Spec, d.Err = nil, err
			}
		}
	}
	d.Ignored = replicator.IgnoredFields(obj)
	switch {
	case d.State != "" && !knownDocState(d.State):
		return d, replicator.NewReason(replicator.ErrForbidden, "`_replication_state` is written by the replicator; %q is not one of its states", d.State)
	case d.Err == nil:
		return d, nil
	}
	return d, replicator.NewReason(replicator.ErrForbidden, "%s", replicator.Reason(d.Err))
}

// CheckEndpoints refuses a document ParseDoc accepted whose endpoint or
// proxy names resolve, now, only to addresses Config.Addresses denies
// (replicator.Spec.CheckAddresses): an error wrapping
// replicator.ErrForbidden, the field named, the addresses not. It looks
// names up (within couch.AddressLookupTimeoutDefault each): call it
// before the write's transaction. A name resolved differently later is
// refused by the replication node at connect.
func (p *Plane) CheckEndpoints(ctx context.Context, parsed api.ParsedDoc) error {
	d, ok := parsed.(*Doc)
	if !ok || d.Spec == nil || d.Err != nil {
		return nil
	}
	return d.Spec.CheckAddresses(ctx, p.cfg.Addresses, true)
}

func knownDocState(s string) bool {
	switch s {
	case replicator.StateCompleted, replicator.StateFailed, replicator.StatePending, replicator.StateRunning,
		replicator.StateCrashing, "triggered", "error":
		return true
	}
	return false
}

// DocWritten creates or replaces the job of a _replicator document whose
// winning revision is doc, in tr, the transaction that writes it, so both
// commit together. A document that did not parse gets a job in state
// failed with the parse error, visible in _scheduler/docs. An update that
// leaves the replication unchanged while its job is pending, running or
// crashing, or that only records the replicator's own terminal state,
// leaves the job alone. A document marked "_replication_state":
// "completed" or "failed" that has no job (one replicated or restored
// from another server) is not run again, as CouchDB does: it gets a job
// that ended (addEnded), shown as CouchDB shows it, which its later
// revisions still so marked replace.
// Any other update replaces the job (a running one is halted at its next
// heartbeat). restarted reports a new pending job: the replication will
// run (again), so the document's "_replication_*" fields are stale. Run
// again in the same transaction (a retry, also after
// commit_unknown_result) it gives the same outcome.
//
// parsed must come from ParseDoc (any other api.ParsedDoc is an error).
func (p *Plane) DocWritten(ctx context.Context, tr kv.Transaction, parsed api.ParsedDoc) (restarted bool, err error) {
	doc, ok := parsed.(*Doc)
	if !ok {
		return false, fmt.Errorf("control: DocWritten of a %T, not a document from ParseDoc", parsed)
	}
	if !repdb.IsReplicatorDB(doc.DB) || !repdb.IsReplicationDoc(doc.ID) {
		return false, nil
	}
	if _, err := p.setup(ctx); err != nil {
		return false, err
	}
	p.m.CountOnCommit(tr, replicator.MetricDocsDBChanges, 1)
	dbUUID, err := p.store.DBUUID(tr, doc.DB)
	if err != nil {
		return false, err
	}
	jobID := replicator.DocJobID(dbUUID, doc.ID)
	old, oldState, err := p.store.Job(ctx, tr, jobID)
	if err != nil {
		return false, err
	}
	spec, perr := doc.Spec, doc.Err
	if perr == nil && spec.Template != nil {
		return false, p.templateWritten(ctx, tr, doc, dbUUID, jobID, old)
	}
	if err := p.endTemplate(ctx, tr, doc.DB, doc.ID, jobID, "its document is no longer a template"); err != nil {
		return false, err
	}
	terminal := doc.State == replicator.StateCompleted || doc.State == replicator.StateFailed
	if terminal && (old == nil || old.EndedElsewhere) {
		// A finished replication from elsewhere (replicated or restored
		// from another server), or a later revision of one (a conflict
		// replicated in): not run, but shown as it ended.
		return false, p.addEnded(ctx, tr, jobID, old, doc, dbUUID, spec)
	}
	if old != nil {
		mine, _ := memo(tr, "job", jobID)
		same := perr == nil && replicator.SameReplication(old.Rep, spec)
		switch {
		case same && mine == strconv.FormatInt(old.StartTime, 10):
			// The job an earlier run of this transaction added (it may
			// have finished since): that run committed, with
			// commit_unknown_result, so its line and count were not
			// made. They are made now, once.
			if _, said := memo(tr, "said", jobID); !said {
				setMemo(tr, "said", jobID, "")
				p.added(jobID, doc, replicator.StatePending, nil, false)
			}
			return true, nil
		case same && (oldState != fdbjobs.Finished || terminal || old.State == replicator.StatePaused):
			return false, nil // unchanged (paused still), or the replicator recording its own result
		case perr != nil && old.Rep == nil && old.LastError == replicator.Reason(perr):
			return false, nil // the same parse failure
		}
	}
	if doc.Limited && perr == nil {
		if err := p.store.CheckUserCount(tr, p.conf(), doc.Owner, replicator.Counted(old, oldState, doc.Owner)); err != nil {
			return false, err
		}
	}
	now := p.cfg.Clock.Now()
	d := &replicator.JobData{Rep: spec, DocOwner: doc.Owner, DBName: doc.DB, DBUUID: dbUUID, DocID: doc.ID, UserLimited: doc.Limited}
	c := replicator.Change{Kind: replicator.Added, At: now}
	if perr != nil {
		c.Reason = replicator.Reason(perr) // failed from its start
	}
	replicator.Lifecycle{MaxHistory: p.conf().MaxHistory}.Transform(d, c)
	if perr == nil && spec.Paused {
		// Paused: kept as a finished job no node takes; a running one
		// stops at its next heartbeat, with a final checkpoint.
		d.State, d.StateInfo = replicator.StatePaused, replicator.PausedInfo(now)
		if old != nil && oldState == fdbjobs.Running {
			d.Node = old.Node // it ran there: a resume waits for that run's end (addJob)
		}
		if err := p.store.PauseJob(ctx, tr, jobID, old, d); err != nil {
			return false, err
		}
		if err := p.store.SetSchedule(ctx, tr, jobID, spec, old); err != nil {
			return false, err
		}
		tr.Locals().OnCommit(func() {
			p.cfg.Logger.Info().Str("job_id", jobID).Str("db", doc.DB).Str("doc_id", doc.ID).Bool("replaces_job", old != nil).
				Msg("replication paused by its document")
		})
		return false, nil
	}
	if err := p.addJob(ctx, tr, jobID, old, d); err != nil {
		return false, err
	}
	if perr != nil {
		spec = nil
	}
	if err := p.store.SetSchedule(ctx, tr, jobID, spec, old); err != nil {
		return false, err
	}
	setMemo(tr, "job", jobID, strconv.FormatInt(d.StartTime, 10))
	tr.Locals().OnCommit(func() { p.added(jobID, doc, d.State, perr, old != nil) })
	return perr == nil, nil
}

// addEnded records, as a finished job, the replication of a document that
// arrived marked completed or failed with no job here, in place of old
// (nil, or such a record of an earlier revision): the views show it as
// CouchDB shows such a document, from its fields (the state, its
// "_replication_stats" as a completed one's info, its
// "_replication_state_reason" as a failed one's error), as ended at its
// "_replication_state_time" (else now). No node runs it; a later write
// without the state runs it.
func (p *Plane) addEnded(ctx context.Context, tr kv.Transaction, jobID string, old *replicator.JobData, doc *Doc, dbUUID string, spec *replicator.Spec) error {
	at := p.cfg.Clock.Now()
	if t, err := time.Parse(time.RFC3339, doc.StateTime); err == nil {
		at = t
	}
	d := &replicator.JobData{Rep: spec, DocOwner: doc.Owner, DBName: doc.DB, DBUUID: dbUUID, DocID: doc.ID,
		State: doc.State, StartTime: replicator.Millis(at), LastUpdated: replicator.Millis(at), EndedElsewhere: true}
	if doc.State == replicator.StateCompleted {
		d.StateInfo = json.RawMessage("{}")
		if len(doc.Stats) > 0 && doc.Stats[0] == '{' {
			d.StateInfo = doc.Stats
			_ = json.Unmarshal(doc.Stats, &d.Stats)
		}
	} else {
		d.ErrorCount, d.LastError = 1, doc.StateReason
		d.StateInfo = replicator.StateInfo("error", doc.StateReason)
	}
	if old != nil {
		if err := p.store.RemoveJob(ctx, tr, jobID, old); err != nil {
			return err
		}
	}
	if err := p.store.AddFinishedJob(ctx, tr, jobID, d); err != nil {
		return err
	}
	tr.Locals().OnCommit(func() {
		p.cfg.Logger.Info().Str("job_id", jobID).Str("db", doc.DB).Str("doc_id", doc.ID).Str("state", doc.State).
			Msg("replication recorded as it ended elsewhere: its document arrived marked so; not run")
	})
	return nil
}

// added counts and logs the job a document added.
func (p *Plane) added(jobID string, doc *Doc, state string, perr error, replaces bool) {
	p.m.Add(replicator.MetricJobsAdds, 1)
	e := p.cfg.Logger.Info()
	if perr != nil {
		e = p.cfg.Logger.Warn().Str("reason", replicator.Reason(perr))
	}
	e = e.Str("job_id", jobID).Str("db", doc.DB).Str("doc_id", doc.ID)
	if doc.Owner != "" {
		e = e.Str("owner", doc.Owner)
	}
	e.Str("state", state).Bool("replaces_job", replaces).Msg("replication added by document")
	p.warnAdded(doc.Spec, doc.Ignored, func(e *zerolog.Event) *zerolog.Event {
		return e.Str("job_id", jobID).Str("db", doc.DB).Str("doc_id", doc.ID)
	})
}

// DocDeleted removes the job of a deleted _replicator document, in tr.
func (p *Plane) DocDeleted(ctx context.Context, tr kv.Transaction, db, docID string) error {
	if !repdb.IsReplicatorDB(db) || !repdb.IsReplicationDoc(docID) {
		return nil
	}
	if _, err := p.setup(ctx); err != nil {
		return err
	}
	p.m.CountOnCommit(tr, replicator.MetricDocsDBChanges, 1)
	dbUUID, err := p.store.DBUUID(tr, db)
	if err != nil {
		return err
	}
	jobID := replicator.DocJobID(dbUUID, docID)
	if err := p.endTemplate(ctx, tr, db, docID, jobID, "its document was deleted"); err != nil {
		return err
	}
	old, _, err := p.store.Job(ctx, tr, jobID)
	if err != nil || old == nil {
		return err
	}
	if err := p.store.RemoveJob(ctx, tr, jobID, old); err != nil {
		return err
	}
	if err := p.store.SetSchedule(ctx, tr, jobID, nil, old); err != nil {
		return err
	}
	p.m.CountOnCommit(tr, replicator.MetricJobsRemoves, 1)
	tr.Locals().OnCommit(func() {
		p.cfg.Logger.Info().Str("job_id", jobID).Str("db", db).Str("doc_id", docID).Msg("replication removed: its document was deleted")
	})
	return nil
}

// templateWritten makes the document doc, a template, follow its
// pattern, in tr: its replication job, if it was one before, is removed,
// and its template job (replicator.Store.PutTemplate) made or replaced.
// A node that takes the template job makes its replications.
func (p *Plane) templateWritten(ctx context.Context, tr kv.Transaction, doc *Doc, dbUUID, jobID string, old *replicator.JobData) error {
	if old != nil {
		if err := p.store.RemoveJob(ctx, tr, jobID, old); err != nil {
			return err
		}
		if err := p.store.SetSchedule(ctx, tr, jobID, nil, old); err != nil {
			return err
		}
	}
	t := &replicator.TemplateData{Rep: doc.Spec, DBName: doc.DB, DBUUID: dbUUID, DocID: doc.ID, DocOwner: doc.Owner, UserLimited: doc.Limited}
	wrote, err := p.store.Templates().Put(ctx, tr, jobID, t, p.cfg.JobTimeout)
	if err != nil || !wrote {
		return err
	}
	tr.Locals().OnCommit(func() {
		p.cfg.Logger.Info().Str("job_id", jobID).Str("db", doc.DB).Str("doc_id", doc.ID).Str("databases", doc.Spec.Template.Pattern()).
			Str("of", doc.Spec.Template.Side).Bool("replaces_replication", old != nil).
			Msg("replication template written by document: a replication node makes (or updates) its replications")
	})
	return nil
}

// endTemplate ends the template of document docID (job id jobID), if it
// is one, in tr, for why: a replication node removes its replications.
func (p *Plane) endTemplate(ctx context.Context, tr kv.Transaction, db, docID, jobID, why string) error {
	ended, err := p.store.Templates().End(ctx, tr, jobID, p.cfg.JobTimeout)
	if err != nil || !ended {
		return err
	}
	tr.Locals().OnCommit(func() {
		p.cfg.Logger.Info().Str("job_id", jobID).Str("db", db).Str("doc_id", docID).
			Msg("replication template ended, " + why + ": a replication node removes its replications")
	})
	return nil
}

// addJob replaces job jobID (old is its current data, nil when absent) by
// a pending job with data d, scheduled by fair share
// (replicator.Store.EnqueueJob).
func (p *Plane) addJob(ctx context.Context, tr kv.Transaction, jobID string, old, d *replicator.JobData) error {
	return p.store.EnqueueJob(ctx, tr, p.conf(), p.cfg.Clock.Now(), jobID, old, d)
}

// DBCreated gives a _replicator database a new identity (persistent job
// ids are its UUID and the document id), inside the transaction that
// creates the database. Run again in the same transaction (a retry, also
// after commit_unknown_result), it writes the same identity. Jobs of an
// earlier database of the same name, if it was never deleted, are retired
// as by DBDeleted and removed by the nodes. For a database that comes back
// with documents (a restore), call DocWritten for each document
// afterwards: they were never validated, and invalid ones become failed
// jobs.
func (p *Plane) DBCreated(ctx context.Context, tr kv.Transaction, dbName string) error {
	if !repdb.IsReplicatorDB(dbName) {
		return nil
	}
	u, ok := memo(tr, "db", dbName)
	if !ok {
		u = replicator.NewDBUUID()
		setMemo(tr, "db", dbName, u)
	}
	if err := p.store.RegisterDB(tr, dbName, u); err != nil {
		return err
	}
	p.m.CountOnCommit(tr, replicator.MetricDocsDBsCreated, 1)
	return nil
}

// DBDeleted retires a deleted _replicator database's identity, inside the
// transaction that deletes it: its documents leave _scheduler/docs at
// once, a database re-created under the name gets a new identity (which
// old jobs never write into), and the replication nodes remove the
// database's jobs at their next interval, however many
// (replicator.Retention.RemoveDeletedDBJobs); a running one halts at its next
// heartbeat. The deletion's transaction stays small and reads none of the
// jobs: removing them inline would conflict with their heartbeats.
func (p *Plane) DBDeleted(ctx context.Context, tr kv.Transaction, dbName string) error {
	if !repdb.IsReplicatorDB(dbName) {
		return nil
	}
	dbUUID, err := p.store.UnregisterDB(tr, dbName)
	if err != nil || dbUUID == "" {
		return err
	}
	p.m.CountOnCommit(tr, replicator.MetricDocsDBsDeleted, 1)
	return nil
}

// memoKey names what a function joining the caller's transaction chose or
// did in an earlier run of that transaction, kept in its kv.Locals, so that
// the same transaction run again (a retry, possibly after its earlier
// attempt committed with commit_unknown_result) gives the same outcome:
// DBCreated keeps the database UUID it chose ("db", name); DocWritten
// recognises the job it added ("job", id -> its start time) and says it
// once ("said", id).
type memoKey struct{ kind, name string }

func memo(tr kv.Transaction, kind, name string) (string, bool) {
	v, ok := tr.Locals().Value(memoKey{kind, name})
	s, _ := v.(string)
	return s, ok
}

func setMemo(tr kv.Transaction, kind, name, v string) {
	tr.Locals().SetValue(memoKey{kind, name}, v)
}
