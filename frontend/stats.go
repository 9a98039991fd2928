package frontend

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/fdbrep/fdbrep/internal/health"
)

// httpStats counts requests like CouchDB's couchdb.httpd* metrics.
type httpStats struct {
	mu       sync.Mutex
	requests int64
	methods  map[string]int64
	statuses map[int]int64
}

func newHTTPStats() *httpStats {
	return &httpStats{methods: map[string]int64{}, statuses: map[int]int64{}}
}

func (h *httpStats) record(method string, status int) {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "COPY", "OPTIONS":
	default:
		method = "OTHER" // bounded label set
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	h.methods[method]++
	h.statuses[status]++
}

func (h *httpStats) snapshot() (int64, map[string]int64, map[int]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]int64, len(h.methods))
	for k, v := range h.methods {
		m[k] = v
	}
	st := make(map[int]int64, len(h.statuses))
	for k, v := range h.statuses {
		st[k] = v
	}
	return h.requests, m, st
}

func counter(v int64, desc string) map[string]any {
	return map[string]any{"value": v, "type": "counter", "desc": desc}
}

func (s *Server) checkNode(w http.ResponseWriter, r *http.Request) bool {
	node, he := pathVar(r, "node")
	if he != nil {
		writeError(w, he)
		return false
	}
	if node != "_local" && node != s.opts.NodeName {
		writeError(w, notFound("no such node: "+node))
		return false
	}
	return true
}

// RoleMetrics is CouchDB's role of read-only metrics users: they may read
// /_node/{node}/_stats and _prometheus.
const RoleMetrics = "_metrics"

// requireMetrics answers 401 unless the user is a server admin or has
// RoleMetrics.
func requireMetrics(w http.ResponseWriter, r *http.Request) bool {
	if u := userFrom(r); u.IsAdmin() || u.HasRole(RoleMetrics) {
		return true
	}
	writeError(w, newError(http.StatusUnauthorized, "unauthorized", "You are not a server admin or read-only metrics user"))
	return false
}

// handleStats answers GET /_node/{node}/_stats[/{path}]: the node's
// metrics, or the subtree a path names (null when it names none), as
// CouchDB does.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	if !requireMetrics(w, r) || !s.checkNode(w, r) {
		return
	}
	path, he := pathVar(r, "path")
	if he != nil {
		writeError(w, he)
		return
	}
	writeJSON(w, http.StatusOK, health.StatsPath(s.StatsJSON(), path))
}

// StatsJSON returns the node's metrics in the shape of CouchDB's
// /_node/_local/_stats.
func (s *Server) StatsJSON() map[string]any {
	total, methods, statuses := s.stats.snapshot()
	ms := map[string]any{}
	for k, v := range methods {
		ms[k] = counter(v, "number of HTTP "+k+" requests")
	}
	ss := map[string]any{}
	for k, v := range statuses {
		ss[strconv.Itoa(k)] = counter(v, fmt.Sprintf("number of HTTP %d responses", k))
	}
	out := map[string]any{
		"couchdb": map[string]any{
			"httpd":                 map[string]any{"requests": counter(total, "number of HTTP requests")},
			"httpd_request_methods": ms,
			"httpd_status_codes":    ss,
		},
	}
	if s.opts.Metrics != nil {
		out["couch_replicator"] = s.opts.Metrics.StatsJSON()
	}
	return out
}

func (s *Server) handlePrometheus(w http.ResponseWriter, r *http.Request) {
	if !requireMetrics(w, r) || !s.checkNode(w, r) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(s.Prometheus()))
}

// Prometheus returns the node's metrics in Prometheus' text format, with
// CouchDB's metric names.
func (s *Server) Prometheus() string {
	total, methods, statuses := s.stats.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP couchdb_httpd_requests_total HTTP requests\n# TYPE couchdb_httpd_requests_total counter\ncouchdb_httpd_requests_total %d\n", total)
	writeFamily(&b, "couchdb_httpd_request_methods", "HTTP requests by method", "method", methods, func(k string) string { return strconv.Quote(k) })
	writeFamily(&b, "couchdb_httpd_status_codes", "HTTP replies by status", "code", statuses, func(k int) string { return `"` + strconv.Itoa(k) + `"` })
	if s.opts.Metrics != nil {
		b.WriteString(s.opts.Metrics.Prometheus())
	}
	return b.String()
}

// writeFamily writes one Prometheus counter family with a label, in label
// order. Its name is CouchDB's, without the "_total" of the convention.
func writeFamily[K cmp.Ordered](b *strings.Builder, name, help, label string, counts map[K]int64, quote func(K) string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(b, "%s{%s=%s} %d\n", name, label, quote(k), counts[k])
	}
}
