package node

import (
	"encoding/json"
	"net/http"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/internal/health"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// healthHandler serves, without authentication, GET /_up,
// /_node/_local/_stats[/{path}] and /_node/_local/_prometheus (the
// replicator's metrics; in _prometheus the job layer's too: nodeMetrics).
// It is meant for a loopback port of a replication-only node, which opens
// no other listener; never expose it beyond the host. It is
// not the HTTP API: a replication node does not run package frontend.
func healthHandler(db kv.Database, m frontend.MetricsSource, cn *cluster.Node, sn *scheduler.Node) http.Handler {
	reply := func(w http.ResponseWriter, status int, v any) {
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(append(b, '\n'))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_up", func(w http.ResponseWriter, r *http.Request) {
		status, body := health.Up(r.Context(), db, health.Self{Node: cn.Name(), Roles: cn.Roles(), HeartbeatAge: cn.HeartbeatAge,
			More: upMore(sn)})
		reply(w, status, body)
	})
	stats := func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, health.StatsPath(map[string]any{"couch_replicator": m.StatsJSON()}, r.PathValue("path")))
	}
	mux.HandleFunc("GET /_node/_local/_stats", stats)
	mux.HandleFunc("GET /_node/_local/_stats/{path...}", stats)
	mux.HandleFunc("GET /_node/_local/_prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(m.Prometheus()))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusNotFound, map[string]string{"error": "not_found", "reason": "missing"})
	})
	return mux
}

// upMore is what a replication node adds to /_up: how its watches of
// parked replications watch their servers (counts only: /_up answers
// anyone).
func upMore(sn *scheduler.Node) func() map[string]any {
	return func() map[string]any { return map[string]any{"watches": sn.Watches()} }
}
