package control

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
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
	SyncInfo
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
// state info otherwise, with fdbrep's SyncInfo fields added to every
// object.
func info(d *replicator.JobData) json.RawMessage {
	switch d.State {
	case replicator.StatePending, replicator.StateRunning:
		b, _ := json.Marshal(struct {
			engine.Stats
			infoAdditions
		}{d.Stats, additions(d)})
		return b
	}
	if len(d.StateInfo) == 0 {
		return json.RawMessage("null")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(d.StateInfo, &obj) != nil || obj == nil {
		return d.StateInfo
	}
	extra, _ := json.Marshal(additions(d))
	var add map[string]json.RawMessage
	_ = json.Unmarshal(extra, &add)
	for k, v := range add {
		if _, ok := obj[k]; !ok {
			obj[k] = v
		}
	}
	b, _ := json.Marshal(obj)
	return b
}

// infoAdditions is what fdbrep adds to a job's info: SyncInfo, and in the
// views of one job, its failed documents.
type infoAdditions struct {
	SyncInfo
	// FailedDocs are the last engine.RefusedDocsMax documents the target
	// refused, oldest first (only in the views of one job: a page would
	// read up to 64 kB more per row).
	FailedDocs *[]FailedDocInfo `json:"failed_docs,omitempty"`
}

// FailedDocInfo is a document the target refused, as the views show it.
type FailedDocInfo struct {
	ID     string `json:"id"`
	Rev    string `json:"rev,omitempty"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Time   string `json:"time"`
}

func additions(d *replicator.JobData) infoAdditions {
	out := infoAdditions{SyncInfo: syncInfo(d)}
	if d.FailedDocs != nil {
		list := make([]FailedDocInfo, 0, len(*d.FailedDocs))
		for _, f := range *d.FailedDocs {
			list = append(list, FailedDocInfo{ID: f.ID, Rev: f.Rev, Status: f.Status, Error: f.Error, Reason: f.Reason,
				Time: replicator.FormatMillis(f.Time)})
		}
		out.FailedDocs = &list
	}
	return out
}

// SyncInfo is what fdbrep adds to every job's info and _active_tasks
// entry (docs/COMPAT.md, "Is it in sync?"): whether the job has caught up
// with its source, how fast it goes, and if it does not move, why.
type SyncInfo struct {
	// CaughtUp: the job has processed its source's changes up to the
	// source's update sequence when it last asked (a completed one-shot
	// job: true; a job that is not running: false).
	CaughtUp      bool    `json:"caught_up"`
	CaughtUpSince *string `json:"caught_up_since"`
	// LastProgress is when the job last finished a batch of changes.
	LastProgress *string `json:"last_progress"`
	// Throughput is revisions checked per second over the last minute
	// (0 when not running).
	Throughput float64 `json:"throughput"`
	// ETASec is the seconds until caught up at that rate: 0 when caught
	// up, null when unknown (no rate, or no pending count: the count of
	// the last checkpoint is spent while new changes are copied).
	ETASec *int64 `json:"eta_sec"`
	// Stall is null while the job progresses, or is idle and caught up.
	Stall *StallInfo `json:"stall"`
}

// StallInfo is why a job does not move: engine.Stall with its times
// formatted.
type StallInfo struct {
	Reason string  `json:"reason"`
	Detail string  `json:"detail"`
	Since  string  `json:"since"`
	Until  *string `json:"until,omitempty"`
}

// syncInfo is d's SyncInfo: its run's engine.Sync while it runs, what the
// state implies otherwise.
func syncInfo(d *replicator.JobData) SyncInfo {
	var y engine.Sync
	if d.Sync != nil {
		y = *d.Sync
	}
	out := SyncInfo{LastProgress: strp(replicator.FormatMillis(y.LastProgress))}
	if y.LastProgress == 0 {
		out.LastProgress = nil
	}
	switch d.State {
	case replicator.StateRunning:
		out.CaughtUp, out.Throughput = y.CaughtUp, roundRate(y.Throughput)
		if y.CaughtUp && y.CaughtUpSince != 0 {
			out.CaughtUpSince = strp(replicator.FormatMillis(y.CaughtUpSince))
		}
		switch p := d.Stats.ChangesPending; {
		case y.CaughtUp:
			zero := int64(0)
			out.ETASec = &zero
		case p != nil && *p > 0 && y.Throughput > 0:
			eta := int64(math.Ceil(float64(*p) / y.Throughput))
			out.ETASec = &eta
		}
		if y.Stall != nil {
			out.Stall = &StallInfo{Reason: y.Stall.Reason, Detail: y.Stall.Detail, Since: replicator.FormatMillis(y.Stall.Since)}
		}
	case replicator.StateCompleted:
		zero := int64(0)
		out.CaughtUp, out.ETASec = true, &zero
		out.CaughtUpSince = strp(replicator.FormatMillis(cmp.Or(y.CaughtUpSince, d.LastUpdated)))
	case replicator.StateCrashing:
		out.Stall = &StallInfo{Reason: engine.StallBackingOff, Detail: d.LastError, Since: replicator.FormatMillis(d.LastUpdated)}
		if d.RetryAt != 0 {
			out.Stall.Until = strp(replicator.FormatMillis(d.RetryAt))
		}
	}
	return out
}

// roundRate rounds a rate to two decimals.
func roundRate(r float64) float64 { return math.Round(r*100) / 100 }

func endpoints(d *replicator.JobData) (src, tgt, sp, tp *string) {
	if d.Rep == nil {
		return nil, nil, nil, nil
	}
	return strp(d.Rep.Source.Redacted()), strp(d.Rep.Target.Redacted()),
		strp(replicator.RedactURL(d.Rep.Source.Proxy)), strp(replicator.RedactURL(d.Rep.Target.Proxy))
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

// PageQuery is a page of a _scheduler listing.
type PageQuery struct {
	// Limit is the page size; < 0 means SchedulerLimitDefault.
	Limit int
	// Skip is how many rows to pass first (CouchDB's skip); it costs
	// keys-only reads of the index, so StartKey is the way to deep pages.
	Skip int
	// StartKey is where the page starts, inclusive (fdbrep's start_key):
	// [id] or [id, job_id] for SchedulerJobs (id: the row's "id", or its
	// "job_id" when "id" is null); [db] or [db, doc_id] for SchedulerDocs
	// of every database; [doc_id] for one database's.
	StartKey []string
}

// check validates q (its start key has at most maxKey elements) and fills
// in the default limit.
func (q PageQuery) check(maxKey int) (PageQuery, error) {
	if q.Skip < 0 {
		return q, replicator.NewReason(replicator.ErrBadQuery, "skip not in range of [0,infinity]")
	}
	if len(q.StartKey) > maxKey {
		return q, replicator.NewReason(replicator.ErrBadQuery, "start_key has %d elements; at most %d here", len(q.StartKey), maxKey)
	}
	if q.Limit < 0 {
		q.Limit = SchedulerLimitDefault
	}
	return q, nil
}

// key returns StartKey's element i, or "".
func (q PageQuery) key(i int) string {
	if i < len(q.StartKey) {
		return q.StartKey[i]
	}
	return ""
}

// SchedulerJobs lists the jobs that are not finished (pending, running,
// crashing; not documents that failed to parse), sorted by id (the
// replication id, or the job id before one is computed), as GET
// /_scheduler/jobs: a page read from the view index (Store.JobsPage).
func (p *Plane) SchedulerJobs(ctx context.Context, q PageQuery) (JobList, error) {
	q, err := q.check(2)
	if err != nil {
		return JobList{}, err
	}
	pg, err := p.store.JobsPage(ctx, q.key(0), q.key(1), q.Limit, q.Skip)
	if err != nil {
		return JobList{}, err
	}
	out := JobList{TotalRows: pg.Total, Offset: pg.Offset, Jobs: make([]JobInfo, 0, len(pg.Jobs))}
	seen := p.seer(ctx)
	for _, j := range pg.Jobs {
		out.Jobs = append(out.Jobs, jobInfo(seen(j.State, j.Data), j.ID))
	}
	return out, nil
}

// SchedulerJob returns one job in any state (finished transient jobs
// while they are retained), by replication id (a space stands for "+") or
// job id, or ErrNotFound.
func (p *Plane) SchedulerJob(ctx context.Context, id string) (JobInfo, error) {
	return p.job(ctx, id, func(*replicator.JobData) bool { return true })
}

// job returns the job id names if keep accepts it, else ErrNotFound.
func (p *Plane) job(ctx context.Context, id string, keep func(*replicator.JobData) bool) (JobInfo, error) {
	jobID, err := p.resolveID(ctx, id)
	if err != nil {
		return JobInfo{}, err
	}
	d, st, err := p.store.ViewJob(ctx, jobID)
	if err != nil {
		return JobInfo{}, err
	}
	if d == nil || !keep(d) {
		return JobInfo{}, replicator.NewReason(replicator.ErrNotFound, "missing")
	}
	return jobInfo(p.seer(ctx)(st, d), jobID), nil
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

// SchedulerDocs lists the persistent jobs in all states, as GET
// /_scheduler/docs (db "" for every _replicator database) or
// /_scheduler/docs/{db}, sorted by database and document id: a page read
// from the view index (Store.DocsPage). With docID set it returns that
// document's job alone, or ErrNotFound. states filters (empty means all);
// an unknown state is ErrBadQuery.
func (p *Plane) SchedulerDocs(ctx context.Context, db, docID string, states []string, q PageQuery) (DocList, error) {
	known := replicator.ViewStates()
	for _, s := range states {
		if !slices.Contains(known, s) {
			return DocList{}, replicator.NewReason(replicator.ErrBadQuery, "Unknown states [%s]. Choose from: [%s]", s, strings.Join(known, ", "))
		}
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
	maxKey := 2
	if db != "" {
		maxKey = 1
	}
	q, err := q.check(maxKey)
	if err != nil {
		return DocList{}, err
	}
	dq := replicator.DocsQuery{DB: db, States: slices.Compact(slices.Sorted(slices.Values(states))), Limit: q.Limit, Skip: q.Skip}
	if db == "" {
		dq.StartDB, dq.StartDoc = q.key(0), q.key(1)
	} else {
		dq.StartDoc = q.key(0)
	}
	pg, err := p.store.DocsPage(ctx, dq)
	if err != nil {
		return DocList{}, err
	}
	out := DocList{TotalRows: pg.Total, Offset: pg.Offset, Docs: make([]DocInfo, 0, len(pg.Jobs))}
	seen := p.seer(ctx)
	for _, j := range pg.Jobs {
		d := seen(j.State, j.Data)
		if len(states) > 0 && !slices.Contains(states, d.State) {
			continue // running by the index, on a node that died
		}
		out.Docs = append(out.Docs, docInfo(d))
	}
	return out, nil
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
	d, st, err := p.store.ViewJob(ctx, replicator.DocJobID(u, docID))
	if err != nil {
		return DocInfo{}, err
	}
	if d == nil {
		return DocInfo{}, missing
	}
	return docInfo(p.seer(ctx)(st, d)), nil
}

// ActiveTasks lists the running replications of the whole cluster, as
// GET /_active_tasks shows them, sorted by node and job id: read from the
// view index of running jobs (Store.RunningJobs), so it costs the running
// jobs, not all of them.
func (p *Plane) ActiveTasks(ctx context.Context) ([]ActiveTask, error) {
	jobs, err := p.store.RunningJobs(ctx, "")
	if err != nil {
		return nil, err
	}
	return p.activeTaskList(ctx, jobs, func(*replicator.JobData) bool { return true }), nil
}

// activeTaskList is the entries of the running jobs among jobs that keep
// accepts.
func (p *Plane) activeTaskList(ctx context.Context, jobs []replicator.PageJob, keep func(*replicator.JobData) bool) []ActiveTask {
	out := []ActiveTask{}
	seen := p.seer(ctx)
	for _, j := range jobs {
		if t, ok := activeTask(j.ID, j.State, j.Data); ok && keep(j.Data) && seen(j.State, j.Data).State == replicator.StateRunning {
			out = append(out, t)
		}
	}
	return out
}

// activeTask is the _active_tasks entry of a job, if it is running.
func activeTask(id string, st fdbjobs.State, d *replicator.JobData) (ActiveTask, bool) {
	if st != fdbjobs.Running || d.State != replicator.StateRunning || d.Rep == nil {
		return ActiveTask{}, false
	}
	ci := d.Rep.CheckpointInterval
	if ci == 0 {
		ci = engine.CheckpointIntervalDefault.Milliseconds()
	}
	return ActiveTask{
		Type: "replication", Node: d.Node, PID: strp(id), ProcessStatus: "running", User: strp(d.RepUser),
		ReplicationID: d.RepID, Database: strp(d.DBName), DocID: strp(d.DocID),
		Source: d.Rep.Source.Redacted(), Target: d.Rep.Target.Redacted(), Continuous: d.Rep.Continuous,
		CheckpointInterval: ci, StartedOn: d.LastStart / 1000, UpdatedOn: d.LastUpdated / 1000,
		Stats: d.Stats, SyncInfo: syncInfo(d),
	}, true
}
