package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// SchedulerLimitDefault is the page size of SchedulerJobs and
// SchedulerDocs when limit is negative (CouchDB's default is 100).
const SchedulerLimitDefault = 100

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func history(d *replicator.JobData) []api.HistoryEntry {
	out := make([]api.HistoryEntry, 0, len(d.History))
	for _, h := range d.History {
		out = append(out, api.HistoryEntry{Timestamp: replicator.FormatMillis(h.Timestamp), Type: h.Type, Reason: h.Reason})
	}
	return out
}

// info is CouchDB's "info": the stats for pending and running jobs, the
// state info otherwise, with fdbrep's api.SyncInfo fields added to every
// object.
func info(d shown) json.RawMessage {
	switch d.State {
	case replicator.StatePending, replicator.StateRunning, replicator.StateParked:
		b, _ := json.Marshal(struct {
			api.Stats
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

// infoAdditions is what fdbrep adds to a job's info: api.SyncInfo, and in the
// views of one job, its failed documents.
type infoAdditions struct {
	api.SyncInfo
	// Parked says since when a parked job waits for its source to change,
	// and LastWoken when a job last woke from parking.
	Parked    *api.ParkInfo `json:"parked,omitempty"`
	LastWoken *api.WakeInfo `json:"last_woken,omitempty"`
	// FailedDocs are the last engine.RefusedDocsMax documents the target
	// refused, oldest first (only in the views of one job: a page would
	// read up to 64 kB more per row).
	FailedDocs *[]api.FailedDocInfo `json:"failed_docs,omitempty"`
	// Checkpoint is where the job's latest run started: from a
	// checkpoint, which, or from the start.
	Checkpoint *api.CheckpointInfo `json:"checkpoint,omitempty"`
}

func additions(d shown) infoAdditions {
	out := infoAdditions{SyncInfo: syncInfo(d.JobData, d.stall)}
	if p := d.Parked; p != nil && d.State == replicator.StateParked {
		out.Parked = &api.ParkInfo{Since: replicator.FormatMillis(p.Since), SweepAt: replicator.FormatMillis(p.SweepAt), Through: p.Through}
		if w := d.Watch; w != nil {
			out.Parked.Watch = &api.WatchInfo{Mode: w.Mode, Reason: w.Reason, Node: w.Node}
		}
	}
	if d.LastWoken > 0 {
		out.LastWoken = &api.WakeInfo{At: replicator.FormatMillis(d.LastWoken), Cause: d.WakeCause}
	}
	if d.Sync != nil {
		out.Checkpoint = d.Sync.Checkpoint
	}
	if d.FailedDocs != nil {
		list := make([]api.FailedDocInfo, 0, len(*d.FailedDocs))
		for _, f := range *d.FailedDocs {
			list = append(list, api.FailedDocInfo{ID: f.ID, Rev: f.Rev, Status: f.Status, Error: f.Error, Reason: f.Reason,
				Time: replicator.FormatMillis(f.Time)})
		}
		out.FailedDocs = &list
	}
	return out
}

// syncInfo is d's SyncInfo: its run's engine.Sync while it runs, what the
// state implies otherwise; stall, when not nil, is the membership's (see
// cast.show), which says more than the state's.
func syncInfo(d *replicator.JobData, stall *engine.Stall) api.SyncInfo {
	var y engine.Sync
	if d.Sync != nil {
		y = *d.Sync
	}
	out := api.SyncInfo{LastProgress: strp(replicator.FormatMillis(y.LastProgress))}
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
			out.Stall = &api.StallInfo{Reason: y.Stall.Reason, Detail: y.Stall.Detail, Since: replicator.FormatMillis(y.Stall.Since)}
		}
	case replicator.StateCompleted:
		zero := int64(0)
		out.CaughtUp, out.ETASec = true, &zero
		out.CaughtUpSince = strp(replicator.FormatMillis(cmp.Or(y.CaughtUpSince, d.LastUpdated)))
	case replicator.StateParked:
		// Caught up when it parked, and nothing since woke it.
		zero := int64(0)
		out.CaughtUp, out.ETASec = true, &zero
		out.CaughtUpSince = strp(replicator.FormatMillis(cmp.Or(y.CaughtUpSince, d.LastUpdated)))
	case replicator.StateCrashing:
		out.Stall = &api.StallInfo{Reason: engine.StallBackingOff, Detail: d.LastError, Since: replicator.FormatMillis(d.LastUpdated)}
		if d.RetryAt != 0 {
			out.Stall.Until = strp(replicator.FormatMillis(d.RetryAt))
		}
	case replicator.StatePending:
		if d.HeldUntil != 0 && d.HeldHost != "" {
			out.Stall = &api.StallInfo{Reason: replicator.StallBudget, Since: replicator.FormatMillis(d.HeldSince),
				Until: strp(replicator.FormatMillis(d.HeldUntil)), Host: d.HeldHost,
				Detail: budgetDetail(d.HeldHost)}
		} else if d.HeldUntil != 0 {
			out.Stall = &api.StallInfo{Reason: replicator.StallUserLimit, Since: replicator.FormatMillis(d.HeldSince),
				Until: strp(replicator.FormatMillis(d.HeldUntil)),
				Detail: "its user runs as many replications at once as a user who is not a server admin may " +
					"([replicator] max_jobs_per_user_percent of max_jobs): it runs when one of them stops or takes its turn"}
		}
	}
	if stall != nil {
		out.Stall = &api.StallInfo{Reason: stall.Reason, Detail: stall.Detail, Since: replicator.FormatMillis(stall.Since)}
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

// shownState is the state the views show for a job's: a parked job is
// running, as CouchDB shows a replication that waits on its changes feed
// (docs/COMPAT.md, "Parked replications").
func shownState(state string) string {
	if state == replicator.StateParked {
		return replicator.StateRunning
	}
	return state
}

func jobInfo(d shown, jobID string) api.JobInfo {
	src, tgt, _, _ := endpoints(d.JobData)
	return api.JobInfo{
		ID: strp(d.RepID), Database: strp(d.DBName), DocID: strp(d.DocID),
		Source: src, Target: tgt, State: shownState(d.State), Info: info(d), User: strp(d.RepUser),
		History: history(d.JobData), StartTime: replicator.FormatMillis(d.StartTime), Node: strp(nodeIfRunning(d.JobData)), JobID: jobID,
	}
}

func nodeIfRunning(d *replicator.JobData) string {
	if d.State == replicator.StateRunning {
		return d.Node
	}
	return ""
}

func docInfo(d shown) api.DocInfo {
	src, tgt, sp, tp := endpoints(d.JobData)
	return api.DocInfo{
		ID: strp(d.RepID), Database: d.DBName, DocID: d.DocID, Source: src, Target: tgt,
		SourceProxy: sp, TargetProxy: tp, State: shownState(d.State), Info: info(d), ErrorCount: d.ErrorCount,
		LastUpdated: replicator.FormatMillis(d.LastUpdated), StartTime: replicator.FormatMillis(d.StartTime), Node: strp(nodeIfRunning(d.JobData)),
		Owner: d.Owner(), Template: templateOf(d.JobData),
	}
}

// templateOf is the template part of the row of a template's replication.
func templateOf(d *replicator.JobData) *api.TemplateView {
	if d.TemplateDB == "" {
		return nil
	}
	return &api.TemplateView{Database: d.TemplateDB}
}

// templateDoc is the row of a template document: its template job as it
// stands (state running while a node follows its server, pending until
// one takes it, crashing while it cannot list or follow it).
func templateDoc(t *replicator.TemplateData, st fdbjobs.State) api.DocInfo {
	n := t.Databases
	v := &api.TemplateView{Databases: t.Rep.Template.Pattern(), Of: t.Rep.Template.Side, Replications: &n, Unmade: t.Unmade, UnmadeReason: t.UnmadeReason,
		Mode: t.Mode, Reason: t.Reason, Error: t.Error, Ending: t.Ending}
	if t.Listed > 0 {
		v.Listed = strp(replicator.FormatMillis(t.Listed))
	}
	state := replicator.StatePending
	switch {
	case t.Error != "":
		state = replicator.StateCrashing
	case st == fdbjobs.Running || t.Mode == replicator.WatchPoll:
		state, v.Node = replicator.StateRunning, t.Node
	}
	src, tgt := replicator.ShowTemplateURL(t.Rep.Source.Redacted()), replicator.ShowTemplateURL(t.Rep.Target.Redacted())
	var info json.RawMessage // CouchDB's null, or the error
	if t.Error != "" {
		info, _ = json.Marshal(map[string]string{"error": t.Error})
	}
	return api.DocInfo{Database: t.DBName, DocID: t.DocID, Source: &src, Target: &tgt, State: state, Info: info,
		LastUpdated: replicator.FormatMillis(t.Updated), StartTime: replicator.FormatMillis(t.Updated), Owner: t.DocOwner, Template: v}
}

// checkPage validates q (its start key has at most maxKey elements) and
// fills in the default limit.
func checkPage(q api.PageQuery, maxKey int) (api.PageQuery, error) {
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

// startKey returns q.StartKey's element i, or "".
func startKey(q api.PageQuery, i int) string {
	if i < len(q.StartKey) {
		return q.StartKey[i]
	}
	return ""
}

// SchedulerJobs lists the jobs that are not finished (pending, running,
// crashing; not documents that failed to parse), sorted by id (the
// replication id, or the job id before one is computed), as GET
// /_scheduler/jobs: a page read from the view index (Views.JobsPage).
// A server admin sees every job; another viewer sees their own (see
// userviews.go).
func (p *Plane) SchedulerJobs(ctx context.Context, viewer api.User, q api.PageQuery) (api.JobList, error) {
	owner, err := ownerOf(viewer)
	if err != nil {
		return api.JobList{}, err
	}
	if owner != "" {
		return p.userJobs(ctx, owner, q)
	}
	q, err = checkPage(q, 2)
	if err != nil {
		return api.JobList{}, err
	}
	pg, err := p.store.Views().JobsPage(ctx, startKey(q, 0), startKey(q, 1), q.Limit, q.Skip)
	if err != nil {
		return api.JobList{}, err
	}
	out := api.JobList{TotalRows: pg.Total, Offset: pg.Offset, Jobs: make([]api.JobInfo, 0, len(pg.Jobs))}
	seen := p.seer(ctx)
	for _, j := range pg.Jobs {
		out.Jobs = append(out.Jobs, jobInfo(seen(j.State, j.Data), j.ID))
	}
	return out, nil
}

// SchedulerJob returns one job in any state (finished transient jobs
// while they are retained), by replication id (a space stands for "+") or
// job id, or ErrNotFound. A server admin finds every job; another viewer
// only the jobs they own (ErrNotFound for the others, as for a job that
// does not exist).
func (p *Plane) SchedulerJob(ctx context.Context, viewer api.User, id string) (api.JobInfo, error) {
	owner, err := ownerOf(viewer)
	if err != nil {
		return api.JobInfo{}, err
	}
	j, err := p.job(ctx, id, func(d *replicator.JobData) bool { return owner == "" || d.Owner() == owner })
	if owner != "" {
		j = hideAddressDetail(j)
	}
	return j, err
}

// job returns the job id names if keep accepts it, else ErrNotFound.
func (p *Plane) job(ctx context.Context, id string, keep func(*replicator.JobData) bool) (api.JobInfo, error) {
	jobID, err := p.resolveID(ctx, id)
	if err != nil {
		return api.JobInfo{}, err
	}
	d, st, err := p.store.Views().Job(ctx, jobID)
	if err != nil {
		return api.JobInfo{}, err
	}
	if d == nil || !keep(d) {
		return api.JobInfo{}, replicator.NewReason(replicator.ErrNotFound, "missing")
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
	return kv.ReadTransact(ctx, p.store, func(tr kv.ReadTransaction) (string, error) {
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
// from the view index (Views.DocsPage). states filters (empty means all),
// whatever their case, as CouchDB; CouchDB 3.x's initializing and error
// select nothing (couchDocStates); an unknown state is ErrBadQuery.
func (p *Plane) SchedulerDocs(ctx context.Context, db string, states []string, q api.PageQuery) (api.DocList, error) {
	selected, err := selectStates(states)
	if err != nil {
		return api.DocList{}, err
	}
	none := len(states) > 0 && len(selected) == 0 // only states no document has here
	states = selected
	if db != "" && !repdb.IsReplicatorDB(db) {
		return api.DocList{}, replicator.NewReason(replicator.ErrNotFound, "%s is not a _replicator database", db)
	}
	maxKey := 2
	if db != "" {
		maxKey = 1
	}
	q, err = checkPage(q, maxKey)
	if err != nil {
		return api.DocList{}, err
	}
	if none {
		return api.DocList{Docs: []api.DocInfo{}}, nil
	}
	if slices.Contains(states, replicator.StateRunning) {
		states = append(slices.Clip(states), replicator.StateParked) // shown running
	}
	dq := replicator.DocsQuery{DB: db, States: slices.Compact(slices.Sorted(slices.Values(states))), Limit: q.Limit, Skip: q.Skip}
	if db == "" {
		dq.StartDB, dq.StartDoc = startKey(q, 0), startKey(q, 1)
	} else {
		dq.StartDoc = startKey(q, 0)
	}
	pg, err := p.store.Views().DocsPage(ctx, dq)
	if err != nil {
		return api.DocList{}, err
	}
	out := api.DocList{TotalRows: pg.Total, Offset: pg.Offset, Docs: make([]api.DocInfo, 0, len(pg.Jobs))}
	seen := p.seer(ctx)
	for _, j := range pg.Jobs {
		d := seen(j.State, j.Data)
		if len(states) > 0 && !slices.Contains(states, d.State) {
			continue // running by the index, on a node that died
		}
		info, err := p.withSchedule(ctx, docInfo(d), j.ID, d.JobData)
		if err != nil {
			return api.DocList{}, err
		}
		out.Docs = append(out.Docs, info)
	}
	return out, nil
}

// withSchedule adds to info, the row of job jobID with data d, its
// schedule when it is a scheduled replication: one read.
func (p *Plane) withSchedule(ctx context.Context, info api.DocInfo, jobID string, d *replicator.JobData) (api.DocInfo, error) {
	if d.Rep == nil || d.Rep.Schedule == nil {
		return info, nil
	}
	rs := d.Rep.Schedule
	v := &api.ScheduleView{Cron: rs.Cron, TZ: rs.TZ, Every: rs.Every}
	at := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		f := t.UTC().Format(time.RFC3339)
		return &f
	}
	s, err := p.store.ScheduleOf(ctx, nil, jobID)
	switch {
	case errors.Is(err, fdbjobs.ErrNotFound):
	case err != nil:
		return info, err
	default:
		v.Next = at(s.Next)
	}
	// Its last run: when this version of the job was added, by the
	// document's write or by the period that ran it; a period skipped as
	// a run was still going (the layer's schedule has it as its last) is
	// not a run.
	if d.StartTime > 0 {
		v.Last = at(time.UnixMilli(d.StartTime))
	}
	info.Schedule = v
	return info, nil
}

// couchDocStates are CouchDB 3.x's states of a document its replicator has
// not made a job of yet (initializing) or failed to (error: a replication
// it could not parse or whose filter it could not fetch, retried).
// _scheduler/docs accepts them as CouchDB does, and they select nothing:
// fdbrep makes a document's job in the write that stores it, and a
// replication that cannot start is crashing (or failed, when it does not
// parse).
var couchDocStates = []string{"initializing", "error"}

// selectStates checks a states filter of _scheduler/docs (extra none) or
// _scheduler/_changes (extra StateRemoved): each state a view state
// (replicator.ViewStates), one of extra or one of couchDocStates, whatever
// its case, as CouchDB. It returns the states that select something,
// lower case (none when the filter names only couchDocStates); an unknown
// state is ErrBadQuery naming it and the states to choose from.
func selectStates(states []string, extra ...string) ([]string, error) {
	known := slices.Concat(replicator.ViewStates(), extra)
	var selected []string
	for _, s := range states {
		s = strings.ToLower(s) // as CouchDB
		switch {
		case slices.Contains(known, s):
			selected = append(selected, s)
		case !slices.Contains(couchDocStates, s):
			return nil, replicator.NewReason(replicator.ErrBadQuery, "Unknown states [%s]. Choose from: [%s]",
				s, strings.Join(slices.Concat(couchDocStates, known), ", "))
		}
	}
	return selected, nil
}

// SchedulerDoc returns the job of one _replicator document, or
// ErrNotFound.
func (p *Plane) SchedulerDoc(ctx context.Context, db, docID string) (api.DocInfo, error) {
	missing := replicator.NewReason(replicator.ErrNotFound, "missing")
	if !repdb.IsReplicatorDB(db) {
		return api.DocInfo{}, missing
	}
	u, err := p.store.ReadRegisteredDB(ctx, db)
	if err != nil {
		return api.DocInfo{}, err
	}
	if u == "" {
		return api.DocInfo{}, missing
	}
	d, st, err := p.store.Views().Job(ctx, replicator.DocJobID(u, docID))
	if err != nil {
		return api.DocInfo{}, err
	}
	if d == nil {
		t, st, err := p.store.Templates().Get(ctx, nil, replicator.DocJobID(u, docID))
		if err != nil || t == nil || st == fdbjobs.Finished || t.Rep == nil || t.Rep.Template == nil {
			return api.DocInfo{}, cmp.Or(err, missing)
		}
		return templateDoc(t, st), nil
	}
	return p.withSchedule(ctx, docInfo(p.seer(ctx)(st, d)), replicator.DocJobID(u, docID), d)
}

// ActiveTasks lists the running replications of the whole cluster, as
// GET /_active_tasks shows them, sorted by node and job id: read from the
// view index of running jobs (Views.RunningJobs), so it costs the running
// jobs, not all of them. A server admin sees every running job; another
// viewer their own (see userviews.go).
func (p *Plane) ActiveTasks(ctx context.Context, viewer api.User) ([]api.ActiveTask, error) {
	owner, err := ownerOf(viewer)
	if err != nil {
		return nil, err
	}
	if owner != "" {
		return p.userActiveTasks(ctx, owner)
	}
	jobs, err := p.store.Views().RunningJobs(ctx, "")
	if err != nil {
		return nil, err
	}
	return p.activeTaskList(ctx, jobs, func(*replicator.JobData) bool { return true }), nil
}

// activeTaskList is the entries of the running jobs among jobs that keep
// accepts.
func (p *Plane) activeTaskList(ctx context.Context, jobs []replicator.PageJob, keep func(*replicator.JobData) bool) []api.ActiveTask {
	out := []api.ActiveTask{}
	seen := p.seer(ctx)
	for _, j := range jobs {
		if t, ok := activeTask(j.ID, j.State, j.Data); ok && keep(j.Data) && seen(j.State, j.Data).State == replicator.StateRunning {
			out = append(out, t)
		}
	}
	return out
}

// activeTask is the _active_tasks entry of a job, if it is running.
func activeTask(id string, st fdbjobs.State, d *replicator.JobData) (api.ActiveTask, bool) {
	if st != fdbjobs.Running || d.State != replicator.StateRunning || d.Rep == nil {
		return api.ActiveTask{}, false
	}
	ci := d.Rep.CheckpointInterval
	if ci == 0 {
		ci = engine.CheckpointIntervalDefault.Milliseconds()
	}
	return api.ActiveTask{
		Type: "replication", Node: d.Node, PID: strp(id), ProcessStatus: "running", User: strp(d.RepUser),
		ReplicationID: d.RepID, Database: strp(d.DBName), DocID: strp(d.DocID),
		Source: d.Rep.Source.Redacted(), Target: d.Rep.Target.Redacted(), Continuous: d.Rep.Continuous,
		CheckpointInterval: ci, StartedOn: d.LastStart / 1000, UpdatedOn: d.LastUpdated / 1000,
		Stats: d.Stats, SyncInfo: syncInfo(d, nil),
	}, true
}

// budgetDetail is the stall budget's detail for the budget's partition
// part (replicator.HostOf, HostUserOf).
func budgetDetail(part string) string {
	if replicator.IsHostUser(part) {
		return "the host and user " + part + " run as many replications at once as their budget allows " +
			"([replicator] max_jobs_per_host_user): it runs when one of them stops"
	}
	return "the host " + part + " runs as many replications at once as its budget allows " +
		"([replicator] max_jobs_per_host): it runs when one of them stops"
}
