package control

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// SchedulerLimitDefault is the page size of SchedulerJobs and
// SchedulerDocs when limit is negative (CouchDB's default is 100).
const SchedulerLimitDefault = 100

// HistoryEntry is a job history event as the scheduler views show it.
type HistoryEntry struct {
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
	Reason    string `json:"reason,omitempty"`
}

// JobInfo is one entry of GET /_scheduler/jobs (and /_scheduler/jobs/{id}).
type JobInfo struct {
	ID        *string         `json:"id"`
	Database  *string         `json:"database"`
	DocID     *string         `json:"doc_id"`
	Source    *string         `json:"source"`
	Target    *string         `json:"target"`
	State     string          `json:"state"`
	Info      json.RawMessage `json:"info"`
	User      *string         `json:"user"`
	History   []HistoryEntry  `json:"history"`
	StartTime string          `json:"start_time"`
	Node      *string         `json:"node"`
	PID       *string         `json:"pid"`
	// JobID is fdbrep's job id (not in CouchDB's reply).
	JobID string `json:"job_id"`
}

// JobList is GET /_scheduler/jobs.
type JobList struct {
	TotalRows int       `json:"total_rows"`
	Offset    int       `json:"offset"`
	Jobs      []JobInfo `json:"jobs"`
}

// DocInfo is one entry of GET /_scheduler/docs.
type DocInfo struct {
	ID          *string         `json:"id"`
	Database    string          `json:"database"`
	DocID       string          `json:"doc_id"`
	Source      *string         `json:"source"`
	Target      *string         `json:"target"`
	SourceProxy *string         `json:"source_proxy"`
	TargetProxy *string         `json:"target_proxy"`
	State       string          `json:"state"`
	Info        json.RawMessage `json:"info"`
	ErrorCount  int             `json:"error_count"`
	LastUpdated string          `json:"last_updated"`
	StartTime   string          `json:"start_time"`
	Node        *string         `json:"node"`
	PID         *string         `json:"pid"`
}

// DocList is GET /_scheduler/docs[/{db}].
type DocList struct {
	TotalRows int       `json:"total_rows"`
	Offset    int       `json:"offset"`
	Docs      []DocInfo `json:"docs"`
}

// ActiveTask is a replication entry of GET /_active_tasks: the job and
// its counters (engine.Stats, under CouchDB's names). PID, CouchDB's
// Erlang process id, is the job's id here: what names the running job
// across the cluster (clients such as Fauxton expect a string).
type ActiveTask struct {
	Type               string  `json:"type"`
	Node               string  `json:"node"`
	PID                *string `json:"pid"`
	ProcessStatus      string  `json:"process_status"`
	User               *string `json:"user"`
	ReplicationID      string  `json:"replication_id"`
	Database           *string `json:"database"`
	DocID              *string `json:"doc_id"`
	Source             string  `json:"source"`
	Target             string  `json:"target"`
	Continuous         bool    `json:"continuous"`
	CheckpointInterval int64   `json:"checkpoint_interval"`
	StartedOn          int64   `json:"started_on"`
	UpdatedOn          int64   `json:"updated_on"`
	engine.Stats
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func history(d *replicator.JobData) []HistoryEntry {
	out := make([]HistoryEntry, 0, len(d.History))
	for _, h := range d.History {
		out = append(out, HistoryEntry{Timestamp: replicator.FormatMillis(h.Timestamp), Type: h.Type, Reason: h.Reason})
	}
	return out
}

// info is CouchDB's "info": the stats for pending and running jobs, the
// state info otherwise.
func info(d *replicator.JobData) json.RawMessage {
	switch d.State {
	case replicator.StatePending, replicator.StateRunning:
		b, _ := json.Marshal(d.Stats)
		return b
	}
	if len(d.StateInfo) == 0 {
		return json.RawMessage("null")
	}
	return d.StateInfo
}

func endpoints(d *replicator.JobData) (src, tgt, sp, tp *string) {
	if d.Rep == nil {
		return nil, nil, nil, nil
	}
	return strp(d.Rep.Source.Redacted()), strp(d.Rep.Target.Redacted()),
		strp(replicator.RedactURL(d.Rep.Source.Proxy)), strp(replicator.RedactURL(d.Rep.Target.Proxy))
}

// asSeen is a job's data as the views show it: a job whose data says
// running while fdbjobs has it pending was re-enqueued (by the activity
// monitor after its node died, or by the node on restart) and is pending,
// with no node, until a node takes it.
func asSeen(st fdbjobs.State, d *replicator.JobData) *replicator.JobData {
	if d.State != replicator.StateRunning || st == fdbjobs.Running {
		return d
	}
	x := *d
	x.State, x.Node = replicator.StatePending, ""
	return &x
}

func jobInfo(d *replicator.JobData, jobID string) JobInfo {
	src, tgt, _, _ := endpoints(d)
	return JobInfo{
		ID: strp(d.RepID), Database: strp(d.DBName), DocID: strp(d.DocID),
		Source: src, Target: tgt, State: d.State, Info: info(d), User: strp(d.RepUser),
		History: history(d), StartTime: replicator.FormatMillis(d.StartTime), Node: strp(nodeIfRunning(d)), JobID: jobID,
	}
}

func nodeIfRunning(d *replicator.JobData) string {
	if d.State == replicator.StateRunning {
		return d.Node
	}
	return ""
}

func docInfo(d *replicator.JobData) DocInfo {
	src, tgt, sp, tp := endpoints(d)
	return DocInfo{
		ID: strp(d.RepID), Database: d.DBName, DocID: d.DocID, Source: src, Target: tgt,
		SourceProxy: sp, TargetProxy: tp, State: d.State, Info: info(d), ErrorCount: d.ErrorCount,
		LastUpdated: replicator.FormatMillis(d.LastUpdated), StartTime: replicator.FormatMillis(d.StartTime), Node: strp(nodeIfRunning(d)),
	}
}

func page[T any](all []T, limit, skip int) ([]T, int, error) {
	if skip < 0 {
		return nil, 0, replicator.NewReason(replicator.ErrBadQuery, "skip not in range of [0,infinity]")
	}
	if limit < 0 {
		limit = SchedulerLimitDefault
	}
	off := min(skip, len(all))
	end := min(len(all), off+limit)
	return all[off:end], off, nil
}

// SchedulerJobs lists the jobs that are not finished (pending, running,
// crashing; not documents that failed to parse), sorted by id, as GET /_scheduler/jobs. limit < 0 means
// SchedulerLimitDefault.
func (p *Plane) SchedulerJobs(ctx context.Context, limit, skip int) (JobList, error) {
	var all []JobInfo
	err := p.store.FoldJobs(ctx, func(id string, st fdbjobs.State, d *replicator.JobData) error {
		if st != fdbjobs.Finished && d.State != replicator.StateFailed && d.State != replicator.StateCompleted {
			all = append(all, jobInfo(asSeen(st, d), id))
		}
		return nil
	})
	if err != nil {
		return JobList{}, err
	}
	sort.Slice(all, func(i, j int) bool { return sortID(all[i]) < sortID(all[j]) })
	pg, off, err := page(all, limit, skip)
	if err != nil {
		return JobList{}, err
	}
	return JobList{TotalRows: len(all), Offset: off, Jobs: nonNil(pg)}, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func sortID(j JobInfo) string {
	if j.ID != nil {
		return *j.ID
	}
	return j.JobID
}

// SchedulerJob returns one job in any state (finished transient jobs
// while they are retained), by replication id (a space stands for "+") or
// job id, or ErrNotFound.
func (p *Plane) SchedulerJob(ctx context.Context, id string) (JobInfo, error) {
	jobID, err := p.resolveID(ctx, id)
	if err != nil {
		return JobInfo{}, err
	}
	d, st, err := p.store.Job(ctx, p.store.DB, jobID)
	if err != nil {
		return JobInfo{}, err
	}
	if d == nil {
		return JobInfo{}, replicator.NewReason(replicator.ErrNotFound, "missing")
	}
	return jobInfo(asSeen(st, d), jobID), nil
}

// resolveID maps a replication id to its job id through the mapping, or
// returns id itself.
func (p *Plane) resolveID(ctx context.Context, id string) (string, error) {
	id = strings.ReplaceAll(id, " ", "+")
	if id == "" {
		return "", replicator.NewReason(replicator.ErrNotFound, "missing")
	}
	return kv.ReadTransact(ctx, p.store.DB, func(tr kv.ReadTransaction) (string, error) {
		owner, err := p.store.RepIDOwner(tr, id)
		if err != nil || owner == "" {
			return id, err
		}
		return owner, nil
	})
}

// States a scheduler docs query may filter on.
var docStates = []string{replicator.StatePending, replicator.StateRunning, replicator.StateCrashing, replicator.StateCompleted, replicator.StateFailed}

// SchedulerDocs lists the persistent jobs in all states, as GET
// /_scheduler/docs (db "" for every _replicator database) or
// /_scheduler/docs/{db}, sorted by database and document id. With docID
// set it returns that document's job alone, or ErrNotFound. states filters
// (empty means all); an unknown state is ErrBadQuery.
func (p *Plane) SchedulerDocs(ctx context.Context, db, docID string, states []string, limit, skip int) (DocList, error) {
	want := map[string]bool{}
	for _, s := range states {
		ok := false
		for _, k := range docStates {
			ok = ok || s == k
		}
		if !ok {
			return DocList{}, replicator.NewReason(replicator.ErrBadQuery, "Unknown states [%s]. Choose from: [%s]", s, strings.Join(docStates, ", "))
		}
		want[s] = true
	}
	if db != "" && !repdb.IsReplicatorDB(db) {
		return DocList{}, replicator.NewReason(replicator.ErrNotFound, "%s is not a _replicator database", db)
	}
	if docID != "" {
		di, err := p.SchedulerDoc(ctx, db, docID)
		if err != nil {
			return DocList{}, err
		}
		return DocList{TotalRows: 1, Docs: []DocInfo{di}}, nil
	}
	current := map[string]string{} // db name -> registered uuid
	var all []DocInfo
	err := p.store.FoldJobs(ctx, func(id string, st fdbjobs.State, d *replicator.JobData) error {
		d = asSeen(st, d)
		if d.Transient() || (db != "" && d.DBName != db) || (len(want) > 0 && !want[d.State]) {
			return nil
		}
		u, ok := current[d.DBName]
		if !ok {
			u, _ = p.store.ReadRegisteredDB(ctx, d.DBName)
			current[d.DBName] = u
		}
		if u != d.DBUUID {
			return nil // a deleted database's job awaiting cleanup
		}
		all = append(all, docInfo(d))
		return nil
	})
	if err != nil {
		return DocList{}, err
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Database != all[j].Database {
			return all[i].Database < all[j].Database
		}
		return all[i].DocID < all[j].DocID
	})
	pg, off, err := page(all, limit, skip)
	if err != nil {
		return DocList{}, err
	}
	return DocList{TotalRows: len(all), Offset: off, Docs: nonNil(pg)}, nil
}

// SchedulerDoc returns the job of one _replicator document, or
// ErrNotFound.
func (p *Plane) SchedulerDoc(ctx context.Context, db, docID string) (DocInfo, error) {
	missing := replicator.NewReason(replicator.ErrNotFound, "missing")
	if !repdb.IsReplicatorDB(db) {
		return DocInfo{}, missing
	}
	u, err := p.store.ReadRegisteredDB(ctx, db)
	if err != nil {
		return DocInfo{}, err
	}
	if u == "" {
		return DocInfo{}, missing
	}
	d, st, err := p.store.Job(ctx, p.store.DB, replicator.DocJobID(u, docID))
	if err != nil {
		return DocInfo{}, err
	}
	if d == nil {
		return DocInfo{}, missing
	}
	return docInfo(asSeen(st, d)), nil
}

// ActiveTasks lists the running replications of the whole cluster, as
// GET /_active_tasks shows them.
func (p *Plane) ActiveTasks(ctx context.Context) ([]ActiveTask, error) {
	out := []ActiveTask{}
	err := p.store.FoldJobs(ctx, func(id string, st fdbjobs.State, d *replicator.JobData) error {
		if st != fdbjobs.Running || d.State != replicator.StateRunning || d.Rep == nil {
			return nil
		}
		ci := d.Rep.CheckpointInterval
		if ci == 0 {
			ci = engine.CheckpointIntervalDefault.Milliseconds()
		}
		out = append(out, ActiveTask{
			Type: "replication", Node: d.Node, PID: strp(id), ProcessStatus: "running", User: strp(d.RepUser),
			ReplicationID: d.RepID, Database: strp(d.DBName), DocID: strp(d.DocID),
			Source: d.Rep.Source.Redacted(), Target: d.Rep.Target.Redacted(), Continuous: d.Rep.Continuous,
			CheckpointInterval: ci, StartedOn: d.LastStart / 1000, UpdatedOn: d.LastUpdated / 1000,
			Stats: d.Stats,
		})
		return nil
	})
	return out, err
}
