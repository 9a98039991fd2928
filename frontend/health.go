package frontend

import (
	"context"
	"net/http"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// HealthHandler serves, without authentication, GET /_up,
// /_node/_local/_stats and /_node/_local/_prometheus (the replicator's
// metrics from ms, which may be nil). It is meant for a loopback port of a
// replication-only node, which opens no other listener; never expose it
// beyond the host.
func HealthHandler(db kv.Database, ms MetricsSource) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_up", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if _, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) (int64, error) {
			return tr.GetReadVersion().Get()
		}); err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"status": "maintenance_mode"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /_node/_local/_stats", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]any{}
		if ms != nil {
			out["couch_replicator"] = ms.StatsJSON()
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /_node/_local/_prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if ms != nil {
			_, _ = w.Write([]byte(ms.Prometheus()))
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("missing"))
	})
	return mux
}
