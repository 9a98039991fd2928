// Package api holds the types that the HTTP API (package frontend), the
// replicator's control plane (package replicator/control) and the terminal
// client (cmd/internal/cli) share: who asks (User), which page of a view
// (PageQuery), how a POST /_replicate ended (Outcome, ReplicateResult),
// the rows of the _scheduler views and of _active_tasks in CouchDB's
// shapes (JobInfo, DocInfo, ActiveTask, ...), a replication's counters
// (Stats), and the one interface of the errors the control plane reports
// to a client (TaggedError).
//
// It imports nothing but the standard library, so that every side of the
// seam can name these types without linking the others: the frontend's
// ports are declared in them and the control plane satisfies those ports
// as it is; the client decodes the views into the very types the server
// encodes.
package api
