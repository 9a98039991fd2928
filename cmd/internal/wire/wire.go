// Package wire connects the HTTP API (package frontend) to the
// replicator's control plane (package replicator/control): the ports
// frontend.Replicator and frontend.Scheduler implemented with a
// control.Plane, and the plane's metrics as frontend.MetricsSource. It is
// the only code that connects the two, so the HTTP package links no
// replicator and the control plane speaks no HTTP; the packages that
// build a node (cmd/internal/node, for the fdbrep binary, and the
// benchmarks) import both to construct them and call Frontend. Its tests
// run the whole service (HTTP API, control plane, replication node, real
// peers) in one process.
package wire

import (
	"context"
	"encoding/json"

	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
)

// Frontend sets opts' ports to p: document checks and job changes
// (Replicator), POST /_replicate and the views (Scheduler), and the
// replicator's metrics (Metrics).
func Frontend(opts *frontend.Options, p *control.Plane) {
	a := planeAdapter{p}
	opts.Replicator, opts.Scheduler, opts.Metrics = a, a, p.Metrics()
}

// planeAdapter implements frontend.Replicator and frontend.Scheduler with a
// control.Plane. Errors pass through: the control plane's carry CouchDB
// tags (frontend.TaggedError), which the frontend maps to statuses.
type planeAdapter struct{ p *control.Plane }

func userCtx(u *frontend.User) replicator.UserCtx {
	if u == nil {
		return replicator.UserCtx{Roles: []string{}}
	}
	return replicator.UserCtx{Name: u.Name, Roles: append([]string{}, u.Roles...)}
}

func (a planeAdapter) ParseDoc(db, docID string, doc json.RawMessage) (frontend.ParsedDoc, error) {
	return a.p.ParseDoc(db, docID, doc)
}

func (a planeAdapter) DocWritten(ctx context.Context, tr kv.Transaction, doc frontend.ParsedDoc) (bool, error) {
	return a.p.DocWritten(ctx, tr, doc.(*control.Doc))
}

func (a planeAdapter) DocDeleted(ctx context.Context, tr kv.Transaction, db, docID string) error {
	return a.p.DocDeleted(ctx, tr, db, docID)
}

func (a planeAdapter) DBCreated(ctx context.Context, tr kv.Transaction, db string) error {
	return a.p.DBCreated(ctx, tr, db)
}

func (a planeAdapter) DBDeleted(ctx context.Context, tr kv.Transaction, db string) error {
	return a.p.DBDeleted(ctx, tr, db)
}

func (a planeAdapter) Replicate(ctx context.Context, body json.RawMessage, user *frontend.User) (frontend.ReplicateResult, error) {
	o, err := a.p.Replicate(ctx, body, userCtx(user))
	if err != nil {
		return frontend.ReplicateResult{}, err
	}
	res := frontend.ReplicateResult{LocalID: o.LocalID, Checkpoint: o.Checkpoint, Tag: o.Tag, Reason: o.Reason}
	switch o.Kind {
	case control.Running:
		res.Outcome = frontend.ReplicateRunning
	case control.Completed:
		res.Outcome = frontend.ReplicateCompleted
	case control.Failed:
		res.Outcome = frontend.ReplicateFailed
	case control.Cancelled:
		res.Outcome = frontend.ReplicateCancelled
	}
	return res, nil
}

func (a planeAdapter) SchedulerJobs(ctx context.Context, q frontend.PageQuery) (any, error) {
	return a.p.SchedulerJobs(ctx, control.PageQuery(q))
}

func (a planeAdapter) SchedulerJob(ctx context.Context, id string) (any, error) {
	return a.p.SchedulerJob(ctx, id)
}

func (a planeAdapter) RetryJob(ctx context.Context, id, user string) (any, error) {
	return a.p.RetryJob(ctx, id, user)
}

func (a planeAdapter) SchedulerDocs(ctx context.Context, db string, states []string, q frontend.PageQuery) (any, error) {
	return a.p.SchedulerDocs(ctx, db, "", states, control.PageQuery(q))
}

func (a planeAdapter) SchedulerDoc(ctx context.Context, db, docID string) (any, error) {
	return a.p.SchedulerDoc(ctx, db, docID)
}

func (a planeAdapter) ActiveTasks(ctx context.Context) (any, error) {
	return a.p.ActiveTasks(ctx)
}

func (a planeAdapter) UserJobs(ctx context.Context, user string, q frontend.PageQuery) (any, error) {
	return a.p.UserJobs(ctx, user, control.PageQuery(q))
}

func (a planeAdapter) UserJob(ctx context.Context, user, id string) (any, error) {
	return a.p.UserJob(ctx, user, id)
}

func (a planeAdapter) UserActiveTasks(ctx context.Context, user string) (any, error) {
	return a.p.UserActiveTasks(ctx, user)
}
