package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
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

// ActiveTask is a replication entry of GET /_active_tasks.
type ActiveTask struct {
	Type                  string  `json:"type"`
	Node                  string  `json:"node"`
	PID                   *string `json:"pid"`
	ProcessStatus         string  `json:"process_status"`
	User                  *string `json:"user"`
	ReplicationID         string  `json:"replication_id"`
	Database              *string `json:"database"`
	DocID                 *string `json:"doc_id"`
	Source                string  `json:"source"`
	Target                string  `json:"target"`
	Continuous            bool    `json:"continuous"`
	CheckpointInterval    int64   `json:"checkpoint_interval"`
	StartedOn             int64   `json:"started_on"`
	UpdatedOn             int64   `json:"updated_on"`
	RevisionsChecked      int64   `json:"revisions_checked"`
	MissingRevisionsFound int64   `json:"missing_revisions_found"`
	DocsRead              int64   `json:"docs_read"`
	DocsWritten           int64   `json:"docs_written"`
	DocWriteFailures      int64   `json:"doc_write_failures"`
	BulkGetDocs           int64   `json:"bulk_get_docs"`
	BulkGetAttempts       int64   `json:"bulk_get_attempts"`
	ChangesPending        *int64  `json:"changes_pending"`
	CheckpointedSourceSeq string  `json:"checkpointed_source_seq,omitempty"`
	SourceSeq             string  `json:"source_seq,omitempty"`
	ThroughSeq            string  `json:"through_seq,omitempty"`
}

func isoMS(t int64) string {
	if t <= 0 {
		return ""
	}
	return time.UnixMilli(t).UTC().Format("2006-01-02T15:04:05Z")
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (d *jobData) history() []HistoryEntry {
	out := make([]HistoryEntry, 0, len(d.History))
	for _, h := range d.History {
		out = append(out, HistoryEntry{Timestamp: isoMS(h.Timestamp), Type: h.Type, Reason: h.Reason})
	}
	return out
}

// info is CouchDB's "info": the stats for pending and running jobs, the
// state info otherwise.
func (d *jobData) info() json.RawMessage {
	switch d.State {
	case StatePending, StateRunning:
		b, _ := json.Marshal(d.Stats)
		return b
	}
	if len(d.StateInfo) == 0 {
		return json.RawMessage("null")
	}
	return d.StateInfo
}

func (d *jobData) endpoints() (src, tgt, sp, tp *string) {
	if d.Rep == nil {
		return nil, nil, nil, nil
	}
	return strp(d.Rep.Source.Redacted()), strp(d.Rep.Target.Redacted()),
		strp(redactURL(d.Rep.Source.Proxy)), strp(redactURL(d.Rep.Target.Proxy))
}

func (d *jobData) jobInfo(jobID string) JobInfo {
	src, tgt, _, _ := d.endpoints()
	return JobInfo{
		ID: strp(d.RepID), Database: strp(d.DBName), DocID: strp(d.DocID),
		Source: src, Target: tgt, State: d.State, Info: d.info(), User: strp(d.RepUser),
		History: d.history(), StartTime: isoMS(d.StartTime), Node: strp(d.nodeIfRunning()), JobID: jobID,
	}
}

func (d *jobData) nodeIfRunning() string {
	if d.State == StateRunning {
		return d.Node
	}
	return ""
}

func (d *jobData) docInfo() DocInfo {
	src, tgt, sp, tp := d.endpoints()
	return DocInfo{
		ID: strp(d.RepID), Database: d.DBName, DocID: d.DocID, Source: src, Target: tgt,
		SourceProxy: sp, TargetProxy: tp, State: d.State, Info: d.info(), ErrorCount: d.ErrorCount,
		LastUpdated: isoMS(d.LastUpdated), StartTime: isoMS(d.StartTime), Node: strp(d.nodeIfRunning()),
	}
}

// foldJobs visits every replication job with decoded data.
func foldJobs(ctx context.Context, jobs *fdbjobs.Client, fn func(id string, st fdbjobs.State, d *jobData) error) error {
	return jobs.FoldJobs(ctx, JobType, func(j fdbjobs.JobInfo) error {
		d, err := decodeJobData(j.Data)
		if err != nil {
			return nil // not ours to judge; skip
		}
		return fn(j.ID, j.State, d)
	})
}

func page[T any](all []T, limit, skip int) ([]T, int, error) {
	if skip < 0 {
		return nil, 0, newReason(ErrBadQuery, "skip not in range of [0,infinity]")
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
func (f *Frontend) SchedulerJobs(ctx context.Context, limit, skip int) (JobList, error) {
	var all []JobInfo
	err := foldJobs(ctx, f.jobs, func(id string, st fdbjobs.State, d *jobData) error {
		if st != fdbjobs.Finished && d.State != StateFailed && d.State != StateCompleted {
			all = append(all, d.jobInfo(id))
		}
		return nil
	})
	if err != nil {
		return JobList{}, err
	}
	sort.Slice(all, func(i, j int) bool { return sortID(all[i]) < sortID(all[j]) })
	p, off, err := page(all, limit, skip)
	if err != nil {
		return JobList{}, err
	}
	return JobList{TotalRows: len(all), Offset: off, Jobs: nonNil(p)}, nil
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
func (f *Frontend) SchedulerJob(ctx context.Context, id string) (JobInfo, error) {
	jobID, err := f.resolveID(ctx, id)
	if err != nil {
		return JobInfo{}, err
	}
	d, _, err := readJob(ctx, f.jobs, f.db, jobID)
	if err != nil {
		return JobInfo{}, err
	}
	if d == nil {
		return JobInfo{}, newReason(ErrNotFound, "missing")
	}
	return d.jobInfo(jobID), nil
}

// resolveID maps a replication id to its job id through the mapping, or
// returns id itself.
func (f *Frontend) resolveID(ctx context.Context, id string) (string, error) {
	id = strings.ReplaceAll(id, " ", "+")
	if id == "" {
		return "", newReason(ErrNotFound, "missing")
	}
	return kv.ReadTransact(ctx, f.db, func(tr kv.ReadTransaction) (string, error) {
		v, err := tr.Get(f.k.repIDKey(id)).Get()
		if err != nil {
			return "", err
		}
		if v != nil {
			return string(v), nil
		}
		return id, nil
	})
}

// States a scheduler docs query may filter on.
var docStates = []string{StatePending, StateRunning, StateCrashing, StateCompleted, StateFailed}

// SchedulerDocs lists the persistent jobs in all states, as GET
// /_scheduler/docs (db "" for every _replicator database) or
// /_scheduler/docs/{db}, sorted by database and document id. With docID
// set it returns that document's job alone, or ErrNotFound. states filters
// (empty means all); an unknown state is ErrBadQuery.
func (f *Frontend) SchedulerDocs(ctx context.Context, db, docID string, states []string, limit, skip int) (DocList, error) {
	want := map[string]bool{}
	for _, s := range states {
		ok := false
		for _, k := range docStates {
			ok = ok || s == k
		}
		if !ok {
			return DocList{}, newReason(ErrBadQuery, "Unknown states [%s]. Choose from: [%s]", s, strings.Join(docStates, ", "))
		}
		want[s] = true
	}
	if db != "" && !IsReplicatorDB(db) {
		return DocList{}, newReason(ErrNotFound, "%s is not a _replicator database", db)
	}
	if docID != "" {
		di, err := f.SchedulerDoc(ctx, db, docID)
		if err != nil {
			return DocList{}, err
		}
		return DocList{TotalRows: 1, Docs: []DocInfo{di}}, nil
	}
	current := map[string]string{} // db name -> registered uuid
	var all []DocInfo
	err := foldJobs(ctx, f.jobs, func(id string, st fdbjobs.State, d *jobData) error {
		if d.transient() || (db != "" && d.DBName != db) || (len(want) > 0 && !want[d.State]) {
			return nil
		}
		u, ok := current[d.DBName]
		if !ok {
			u, _ = f.registeredDB(ctx, d.DBName)
			current[d.DBName] = u
		}
		if u != d.DBUUID {
			return nil // a deleted database's job awaiting cleanup
		}
		all = append(all, d.docInfo())
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
	p, off, err := page(all, limit, skip)
	if err != nil {
		return DocList{}, err
	}
	return DocList{TotalRows: len(all), Offset: off, Docs: nonNil(p)}, nil
}

func (f *Frontend) registeredDB(ctx context.Context, name string) (string, error) {
	return kv.ReadTransact(ctx, f.db, func(tr kv.ReadTransaction) (string, error) {
		v, err := tr.Get(f.k.dbKey(name)).Get()
		return string(v), err
	})
}

// SchedulerDoc returns the job of one _replicator document, or
// ErrNotFound.
func (f *Frontend) SchedulerDoc(ctx context.Context, db, docID string) (DocInfo, error) {
	if !IsReplicatorDB(db) {
		return DocInfo{}, newReason(ErrNotFound, "missing")
	}
	u, err := f.registeredDB(ctx, db)
	if err != nil {
		return DocInfo{}, err
	}
	if u == "" {
		return DocInfo{}, newReason(ErrNotFound, "missing")
	}
	d, _, err := readJob(ctx, f.jobs, f.db, persistentJobID(u, docID))
	if err != nil {
		return DocInfo{}, err
	}
	if d == nil {
		return DocInfo{}, newReason(ErrNotFound, "missing")
	}
	return d.docInfo(), nil
}

// ActiveTasks lists the running replications of the whole cluster, as
// GET /_active_tasks shows them.
func (f *Frontend) ActiveTasks(ctx context.Context) ([]ActiveTask, error) {
	out := []ActiveTask{}
	err := foldJobs(ctx, f.jobs, func(id string, st fdbjobs.State, d *jobData) error {
		if st != fdbjobs.Running || d.State != StateRunning || d.Rep == nil {
			return nil
		}
		s := d.Stats
		ci := d.Rep.CheckpointInterval
		if ci == 0 {
			ci = 30000
		}
		out = append(out, ActiveTask{
			Type: "replication", Node: d.Node, ProcessStatus: "running", User: strp(d.RepUser),
			ReplicationID: d.RepID, Database: strp(d.DBName), DocID: strp(d.DocID),
			Source: d.Rep.Source.Redacted(), Target: d.Rep.Target.Redacted(), Continuous: d.Rep.Continuous,
			CheckpointInterval: ci, StartedOn: d.LastStart / 1000, UpdatedOn: d.LastUpdated / 1000,
			RevisionsChecked: s.RevisionsChecked, MissingRevisionsFound: s.MissingRevisionsFound,
			DocsRead: s.DocsRead, DocsWritten: s.DocsWritten, DocWriteFailures: s.DocWriteFailures,
			BulkGetDocs: s.BulkGetDocs, BulkGetAttempts: s.BulkGetAttempts, ChangesPending: s.ChangesPending,
			CheckpointedSourceSeq: s.CheckpointedSourceSeq, SourceSeq: s.SourceSeq, ThroughSeq: s.ThroughSeq,
		})
		return nil
	})
	return out, err
}

var _ = errors.Is
