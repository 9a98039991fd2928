// Package wire connects the HTTP API (package frontend) to the
// replicator's control plane (package replicator/control): a control.Plane
// is the frontend's Replicator and Scheduler ports as it is (both speak
// the types of package api), and its metrics are the frontend's
// MetricsSource. It is the only code that connects the two, so the HTTP
// package links no replicator and the control plane speaks no HTTP; the
// packages that build a node (cmd/internal/node, for the fdbrep binary,
// and the benchmarks) import both to construct them and call Frontend.
// Its tests run the whole service (HTTP API, control plane, replication
// node, real peers) in one process.
package wire

import (
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/replicator/control"
)

// The control plane is the frontend's ports.
var (
	_ frontend.Replicator = (*control.Plane)(nil)
	_ frontend.Scheduler  = (*control.Plane)(nil)
)

// Frontend sets opts' ports to p: document checks and job changes
// (Replicator), POST /_replicate and the views (Scheduler), and the
// replicator's metrics (Metrics). Errors pass through: the control
// plane's carry CouchDB tags (api.TaggedError), which the frontend maps to
// statuses.
func Frontend(opts *frontend.Options, p *control.Plane) {
	opts.Replicator, opts.Scheduler, opts.Metrics = p, p, p.Metrics()
}
