package jobshttp

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
)

// The web page: server-rendered HTML under /_ui/ (see doc.go), with a few
// lines of script that refresh the counts. Actions are forms that POST;
// http.CrossOriginProtection refuses those another site's page sends.

//go:embed ui/*.html
var uiFiles embed.FS

var uiTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"esc":  url.PathEscape,
	"when": when,
	"json": prettyJSON,
	"lastError": func(errs []fdbjobs.AttemptError) string {
		if len(errs) == 0 {
			return ""
		}
		return errs[len(errs)-1].Error
	},
}).ParseFS(uiFiles, "ui/*.html"))

// uiPageSize is how many jobs a page of the jobs list shows.
const uiPageSize = 50

// uiStates are the states the jobs list offers, in order.
var uiStates = []string{fdbjobs.StateAvailable, fdbjobs.StateScheduled, fdbjobs.StateRetrying, fdbjobs.StateRunning,
	fdbjobs.OutcomeCompleted, fdbjobs.OutcomeCancelled, fdbjobs.OutcomeDiscarded}

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

func prettyJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// routeUI adds the web page's routes to mux.
func (h *handler) routeUI(mux *http.ServeMux) {
	get := func(pattern string, fn http.HandlerFunc) { mux.HandleFunc("GET "+pattern, fn) }
	post := func(pattern string, fn http.HandlerFunc) {
		mux.Handle("POST "+pattern, h.csrf.Handler(fn))
	}
	get("/_ui", func(w http.ResponseWriter, r *http.Request) { seeOther(w, "_ui/", http.StatusMovedPermanently) })
	get("/_ui/{$}", h.uiIndex)
	get("/_ui/k/{kind}", h.uiKind)
	get("/_ui/k/{kind}/j/{id}", h.uiJob)
	post("/_ui/k/{kind}/pause", h.uiKindAction)
	post("/_ui/k/{kind}/resume", h.uiKindAction)
	post("/_ui/k/{kind}/j/{id}/{action}", h.uiJobAction)
	post("/_ui/s/{name}/{action}", h.uiScheduleAction)
}

type kindRow struct {
	Kind   string
	Counts fdbjobs.JobCounts
	Paused bool
	Feed   time.Duration
	Limit  fdbjobs.Limit // its cluster-wide limit (zero: none)
	// PartLimit is its limit per partition (zero: none).
	PartLimit fdbjobs.Limit
	Managed   bool // read-only (Options.Managed)
}

// kindRow reads what the pages show of kind.
func (h *handler) kindRow(ctx context.Context, kind string) (kindRow, error) {
	row := kindRow{Kind: kind, Managed: h.managed(kind)}
	var err error
	if row.Counts, err = h.c.Counts(ctx, nil, kind); err != nil {
		return row, err
	}
	if row.Paused, err = h.c.Paused(ctx, nil, kind); err != nil {
		return row, err
	}
	if row.Feed, _, err = h.c.FeedKeep(ctx, nil, kind); err != nil {
		return row, err
	}
	if row.Limit, _, err = h.c.GetLimit(ctx, nil, kind); err != nil {
		return row, err
	}
	row.PartLimit, err = h.c.GetPartitionLimit(ctx, nil, kind)
	return row, err
}

func (h *handler) uiIndex(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	kinds, err := h.c.Types(ctx, nil)
	if err != nil {
		h.uiError(w, err)
		return
	}
	var rows []kindRow
	for _, k := range kinds {
		row, err := h.kindRow(ctx, k)
		if err != nil {
			h.uiError(w, err)
			return
		}
		rows = append(rows, row)
	}
	schedules, err := h.c.ListSchedules(ctx, "", 1000)
	if err != nil {
		h.uiError(w, err)
		return
	}
	managed := map[string]bool{}
	for _, k := range h.opts.Managed {
		managed[k] = true
	}
	h.render(w, "index.html", map[string]any{"Root": "../", "Kinds": rows, "Schedules": schedules, "Managed": managed})
}

func (h *handler) uiKind(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	kind := r.PathValue("kind")
	q := r.URL.Query()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		seeOther(w, "./"+url.PathEscape(kind)+"/j/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	state := q.Get("state")
	if state == "" {
		state = fdbjobs.StateAvailable
	}
	page, err := h.c.List(ctx, nil, fdbjobs.ListParams{Kind: kind, State: state, After: q.Get("after"), Limit: uiPageSize})
	if err != nil {
		h.uiError(w, err)
		return
	}
	row, err := h.kindRow(ctx, kind)
	if err != nil {
		h.uiError(w, err)
		return
	}
	h.render(w, "kind.html", map[string]any{"Root": "../../", "K": row, "State": state, "States": uiStates,
		"Jobs": page.Jobs, "Next": page.Next})
}

func (h *handler) uiJob(w http.ResponseWriter, r *http.Request) {
	job, err := h.c.GetJob(r.Context(), nil, r.PathValue("kind"), r.PathValue("id"))
	if err != nil {
		h.uiError(w, err)
		return
	}
	managed := h.managed(job.Kind)
	if managed {
		job.Args = nil // an application's own data: it shows them itself, its secrets hidden
	}
	h.render(w, "job.html", map[string]any{"Root": "../../../../", "Job": job, "Managed": managed,
		"Retryable":  !managed && job.State != fdbjobs.StateRunning && job.State != fdbjobs.StateAvailable,
		"Cancelable": !managed && job.State != fdbjobs.OutcomeCompleted && job.State != fdbjobs.OutcomeCancelled && job.State != fdbjobs.OutcomeDiscarded})
}

func (h *handler) uiKindAction(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	if h.refuseManaged(w, kind) {
		return
	}
	var err error
	if strings.HasSuffix(r.URL.Path, "/pause") {
		err = h.c.Pause(r.Context(), nil, kind)
	} else {
		err = h.c.Resume(r.Context(), nil, kind)
	}
	if err != nil {
		h.uiError(w, err)
		return
	}
	seeOther(w, "../"+url.PathEscape(kind), http.StatusSeeOther)
}

func (h *handler) uiJobAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	kind, id := r.PathValue("kind"), r.PathValue("id")
	if h.refuseManaged(w, kind) {
		return
	}
	back := "../" + url.PathEscape(id)
	var err error
	switch r.PathValue("action") {
	case "retry":
		err = h.c.RetryNow(ctx, nil, kind, id)
	case "cancel":
		_, err = h.c.Cancel(ctx, nil, kind, id)
	case "delete":
		err = h.c.Remove(ctx, nil, kind, id)
		back = "../../../" + url.PathEscape(kind)
	default:
		h.uiStatus(w, http.StatusNotFound, "no such action: retry, cancel or delete")
		return
	}
	if err != nil {
		h.uiError(w, err)
		return
	}
	seeOther(w, back, http.StatusSeeOther)
}

func (h *handler) uiScheduleAction(w http.ResponseWriter, r *http.Request) {
	ctx, name := r.Context(), r.PathValue("name")
	s, err := h.c.GetSchedule(ctx, nil, name)
	if err != nil {
		h.uiError(w, err)
		return
	}
	if h.refuseManaged(w, s.Kind) {
		return
	}
	switch r.PathValue("action") {
	case "pause":
		err = h.c.PauseSchedule(ctx, nil, name)
	case "resume":
		err = h.c.ResumeSchedule(ctx, nil, name)
	case "delete":
		err = h.c.DeleteSchedule(ctx, nil, name)
	default:
		h.uiStatus(w, http.StatusNotFound, "no such action: pause, resume or delete")
		return
	}
	if err != nil {
		h.uiError(w, err)
		return
	}
	seeOther(w, "../../", http.StatusSeeOther)
}

// seeOther redirects to rel, relative to the request's own URL: the
// browser resolves it against the path it asked for, whatever prefix the
// handler is mounted under (http.Redirect would resolve it against the
// path after http.StripPrefix).
func seeOther(w http.ResponseWriter, rel string, code int) {
	w.Header().Set("Location", rel)
	w.WriteHeader(code)
}

// managed reports whether kind's jobs are an application's own
// (Options.Managed): read-only here.
func (h *handler) managed(kind string) bool { return slices.Contains(h.opts.Managed, kind) }

// refuseManaged answers 403 for an action on a managed kind's job or
// schedule, and reports whether it did.
func (h *handler) refuseManaged(w http.ResponseWriter, kind string) bool {
	if !h.managed(kind) {
		return false
	}
	h.uiStatus(w, http.StatusForbidden, "the jobs of kind "+strconv.Quote(kind)+" are managed by their application: act on them through it")
	return true
}

func (h *handler) render(w http.ResponseWriter, name string, data map[string]any) {
	var b strings.Builder
	if err := uiTemplates.ExecuteTemplate(&b, name, data); err != nil {
		h.log.Error().Err(err).Str("page", name).Msg("jobshttp: a page failed to render")
		h.uiStatus(w, http.StatusInternalServerError, "the page failed to render; see the server's log")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	_, _ = w.Write([]byte(b.String()))
}

func (h *handler) uiError(w http.ResponseWriter, err error) {
	status, _, reason := classify(err)
	if errors.Is(err, fdbjobs.ErrNotFound) {
		status, reason = http.StatusNotFound, err.Error()
	}
	if status == http.StatusInternalServerError {
		h.log.Error().Err(err).Msg("jobshttp: the job store failed")
	}
	h.uiStatus(w, status, reason)
}

func (h *handler) uiStatus(w http.ResponseWriter, status int, reason string) {
	var b strings.Builder
	_ = uiTemplates.ExecuteTemplate(&b, "error.html", map[string]any{"Status": status, "Text": http.StatusText(status), "Reason": reason})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}
