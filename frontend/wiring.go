package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// WithReplicator wires a replicator.Frontend into opts: document
// validation and job creation (Replicator), the replication endpoints
// (Scheduler) and the replicator's metrics (Metrics).
func WithReplicator(opts *Options, f *replicator.Frontend) {
	a := &replicatorAdapter{f: f}
	opts.Replicator, opts.Scheduler, opts.Metrics = a, a, NewMetricsSource(f.Metrics)
}

// replicatorAdapter adapts replicator.Frontend to the frontend's
// interfaces: JSON bodies, query parsing and CouchDB error replies.
type replicatorAdapter struct {
	f *replicator.Frontend
}

func userCtx(u *User) replicator.UserCtx {
	if u == nil {
		return replicator.UserCtx{Roles: []string{}}
	}
	return replicator.UserCtx{Name: u.Name, Roles: append([]string{}, u.Roles...)}
}

func (a *replicatorAdapter) ValidateDoc(db, docID string, doc map[string]any, user *User) error {
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := a.f.ValidateDoc(db, docID, raw, userCtx(user)); err != nil {
		return errors.New(replicator.Reason(err))
	}
	return nil
}

func (a *replicatorAdapter) DocWritten(ctx context.Context, tr kv.Transaction, db, docID string, doc map[string]any) error {
	var raw json.RawMessage
	if doc != nil {
		var err error
		if raw, err = json.Marshal(doc); err != nil {
			return err
		}
	}
	return a.f.DocWritten(ctx, tr, db, docID, raw)
}

func (a *replicatorAdapter) DBCreated(ctx context.Context, tr kv.Transaction, db string) error {
	return a.f.DBCreated(ctx, tr, db)
}

func (a *replicatorAdapter) DBDeleted(ctx context.Context, tr kv.Transaction, db string) error {
	return a.f.DBDeleted(ctx, tr, db)
}

// replicatorError maps the replicator's sentinel errors to replies; other
// errors are internal (nil).
func replicatorError(err error) *httpError {
	reason := replicator.Reason(err)
	switch {
	case errors.Is(err, replicator.ErrNotFound):
		return notFound(reason)
	case errors.Is(err, replicator.ErrBadQuery):
		return queryParseError(reason)
	case errors.Is(err, replicator.ErrBadRequest), errors.Is(err, replicator.ErrNotReplicatorDB):
		return badRequest(reason)
	case errors.Is(err, replicator.ErrForbidden):
		return forbidden(reason)
	case errors.Is(err, replicator.ErrTooLarge):
		return newError(http.StatusRequestEntityTooLarge, "document_too_large", reason)
	case errors.Is(err, replicator.ErrUnauthorized):
		return newError(http.StatusUnauthorized, "unauthorized", reason)
	}
	return nil
}

func (a *replicatorAdapter) result(v any, err error) (int, any, error) {
	if err != nil {
		if he := replicatorError(err); he != nil {
			return he.status, map[string]string{"error": he.err, "reason": he.reason}, nil
		}
		return 0, nil, err
	}
	return http.StatusOK, v, nil
}

func (a *replicatorAdapter) Replicate(ctx context.Context, body map[string]any, user *User) (int, any, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	st, resp, err := a.f.Replicate(ctx, raw, userCtx(user))
	if err != nil {
		return a.result(nil, err)
	}
	return st, resp, nil
}

// pageParams parses limit and skip as CouchDB's scheduler endpoints do.
func pageParams(q url.Values) (limit, skip int, he *httpError) {
	limit, skip = -1, 0
	for _, p := range []struct {
		name string
		dst  *int
	}{{"limit", &limit}, {"skip", &skip}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, 0, queryParseError(p.name + " must be an integer")
		}
		if n < 0 {
			return 0, 0, queryParseError(p.name + " not in range of [0,infinity]")
		}
		*p.dst = n
	}
	return limit, skip, nil
}

func errReply(he *httpError) (int, any, error) {
	return he.status, map[string]string{"error": he.err, "reason": he.reason}, nil
}

func (a *replicatorAdapter) SchedulerJobs(ctx context.Context, q url.Values) (int, any, error) {
	limit, skip, he := pageParams(q)
	if he != nil {
		return errReply(he)
	}
	return a.result(a.f.SchedulerJobs(ctx, limit, skip))
}

func (a *replicatorAdapter) SchedulerJob(ctx context.Context, id string) (int, any, error) {
	return a.result(a.f.SchedulerJob(ctx, id))
}

func (a *replicatorAdapter) SchedulerDocs(ctx context.Context, db string, q url.Values) (int, any, error) {
	limit, skip, he := pageParams(q)
	if he != nil {
		return errReply(he)
	}
	var states []string
	if v := q.Get("states"); v != "" {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				states = append(states, s)
			}
		}
	}
	return a.result(a.f.SchedulerDocs(ctx, db, "", states, limit, skip))
}

func (a *replicatorAdapter) SchedulerDoc(ctx context.Context, db, docID string) (int, any, error) {
	return a.result(a.f.SchedulerDoc(ctx, db, docID))
}

func (a *replicatorAdapter) ActiveTasks(ctx context.Context) (int, any, error) {
	tasks, err := a.f.ActiveTasks(ctx)
	if tasks == nil && err == nil {
		tasks = []replicator.ActiveTask{}
	}
	return a.result(tasks, err)
}

// NewMetricsSource serves a replicator metrics snapshot function
// (replicator.Frontend.Metrics or replicator.Node.Metrics) as a
// MetricsSource.
func NewMetricsSource(snapshot func() []replicator.Metric) MetricsSource {
	return metricsSource(snapshot)
}

type metricsSource func() []replicator.Metric

// StatsJSON nests the replicator's metrics as CouchDB's _stats does:
// "couch_replicator.jobs.adds" becomes {"jobs": {"adds": {...}}}.
func (ms metricsSource) StatsJSON() map[string]any {
	out := map[string]any{}
	for _, m := range ms() {
		parts := strings.Split(strings.TrimPrefix(m.Name, "couch_replicator."), ".")
		node := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := node[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[p] = next
			}
			node = next
		}
		node[parts[len(parts)-1]] = map[string]any{"value": m.Value, "type": m.Type, "desc": m.Name}
	}
	return out
}

// Prometheus renders the metrics with CouchDB's Prometheus names
// (couchdb_couch_replicator_jobs_adds_total).
func (ms metricsSource) Prometheus() string {
	var b strings.Builder
	for _, m := range ms() {
		name := "couchdb_" + strings.ReplaceAll(m.Name, ".", "_")
		typ := "gauge"
		if m.Type == "counter" {
			name += "_total"
			typ = "counter"
		}
		fmt.Fprintf(&b, "# TYPE %s %s\n%s %d\n", name, typ, name, m.Value)
	}
	return b.String()
}
