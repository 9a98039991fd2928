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

// Self is what a node says of itself in GET /_up, so that an operator
// (or a load balancer's check) can tell which node answers and how it sees
// the store: a host cut off from FoundationDB answers 503
// storage_unavailable with a growing heartbeat age, a dead one does not
// answer at all.
type Self struct {
	// Node is the node's name ([node] name).
	Node string
	// Roles are the node's roles ([node] roles).
	Roles []string
	// HeartbeatAge, when set, reports how long ago the node's last
	// membership heartbeat committed (cluster.Node.HeartbeatAge; negative
	// before the first).
	HeartbeatAge func() time.Duration
	// More, when set, gives more members of the body, from the node's
	// services (a replication node's watches); never secrets, nor the
	// store's or the endpoints' addresses: /_up answers anyone.
	More func() map[string]any
}

// Up reports whether db can serve, as the HTTP status and JSON body of
// GET /_up. The body also carries self: "node", "roles" and, with a
// membership, "heartbeat_age_ms". The status is one of:
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
func Up(ctx context.Context, db kv.Database, self Self) (int, map[string]any) {
	status, body := up(ctx, db)
	if self.Node != "" {
		body["node"] = self.Node
	}
	if self.Roles != nil {
		body["roles"] = self.Roles
	}
	if self.HeartbeatAge != nil {
		if age := self.HeartbeatAge(); age >= 0 {
			body["heartbeat_age_ms"] = age.Milliseconds()
		}
	}
	if self.More != nil {
		for k, v := range self.More() {
			body[k] = v
		}
	}
	return status, body
}

func up(ctx context.Context, db kv.Database) (int, map[string]any) {
	if err := kv.Health(db); err != nil {
		if errors.Is(err, kv.ErrStorageFull) {
			return http.StatusInsufficientStorage, map[string]any{"status": "storage_full",
				"reason": "the store's disk is full: writes are refused until space is freed; reads still work"}
		}
		return http.StatusServiceUnavailable, map[string]any{"status": "storage_error",
			"reason": "the store cannot write; see the node's log"}
	}
	if err := kv.Probe(ctx, db, ProbeTimeoutDefault); err != nil {
		return http.StatusServiceUnavailable, map[string]any{"status": "storage_unavailable",
			"reason": "the store did not answer; see the node's log"}
	}
	return http.StatusOK, map[string]any{"status": "ok"}
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
