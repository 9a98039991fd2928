// Package health is what the HTTP API of api_frontend nodes and the
// loopback health port of replication nodes (which do not link the HTTP
// API) share: the GET /_up check, whether the node's store can serve, and
// the sub-paths of /_node/_local/_stats.
package health

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ProbeTimeoutDefault bounds the read-version probe of Up: a store that
// does not answer within it is reported unavailable.
const ProbeTimeoutDefault = 5 * time.Second

// Up reports whether db can serve, as the HTTP status and JSON body of
// GET /_up:
//   - 200 {"status":"ok"};
//   - 507 {"status":"storage_full"} while the store refuses writes because
//     its disk is full (kv.ErrStorageFull; reads still work, writes resume
//     once space is freed);
//   - 503 {"status":"storage_error"} for other failures the store reports
//     through kv.Health;
//   - 503 {"status":"storage_unavailable"} when the store gives no read
//     version within ProbeTimeoutDefault (FoundationDB down, wrong cluster
//     file).
//
// Reasons say what to do and never carry the store's own error text
// (paths, cluster addresses): /_up answers without authentication. The
// node logs the details.
func Up(ctx context.Context, db kv.Database) (int, map[string]string) {
	if err := kv.Health(db); err != nil {
		if errors.Is(err, kv.ErrStorageFull) {
			return http.StatusInsufficientStorage, map[string]string{"status": "storage_full",
				"reason": "the store's disk is full: writes are refused until space is freed; reads still work"}
		}
		return http.StatusServiceUnavailable, map[string]string{"status": "storage_error",
			"reason": "the store cannot write; see the node's log"}
	}
	if err := kv.Probe(ctx, db, ProbeTimeoutDefault); err != nil {
		return http.StatusServiceUnavailable, map[string]string{"status": "storage_unavailable",
			"reason": "the store did not answer; see the node's log"}
	}
	return http.StatusOK, map[string]string{"status": "ok"}
}

// StatsPath returns the subtree of stats (CouchDB's nested _stats
// object) that path names ("couch_replicator/jobs"; "" for all), or nil
// (JSON null) when it names none, as CouchDB answers
// /_node/{node}/_stats/{path}.
func StatsPath(stats map[string]any, path string) any {
	var cur any = stats
	for _, part := range strings.Split(path, "/") {
		if part == "" {
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}
