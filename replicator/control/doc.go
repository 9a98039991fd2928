// Package control is the replicator's control plane, what api_frontend
// nodes run (Plane). It never contacts a replication endpoint and speaks
// no HTTP: the HTTP API (package frontend) reaches it through ports
// declared in package api's types, which a Plane satisfies as it is
// (cmd/internal/wire plugs it in).
//
// # Documents
//
// A write to a _replicator database is parsed once (ParseDoc: the
// replication's validation, 403 reasons for the user, endpoints and
// proxies written as addresses Config.Addresses denies included; then,
// outside the transaction, CheckEndpoints refuses host names that resolve
// only to such addresses) and, inside the
// transaction that stores the document, turned into a job (DocWritten,
// DocDeleted): the document and its job commit together. An update that
// leaves the replication unchanged leaves its job alone; a changed one
// replaces the job, halting a running one as soon as its node hears of
// it (within the store's watch latency), and is
// reported as restarted so that the document loses its stale
// "_replication_*" fields. A document that arrives marked "completed" or
// "failed" and has no job (replicated or restored from another server) is
// not run again, as in CouchDB. With conflicts the job follows the
// document's winning revision. A document that bypassed validation (a
// writer with the _replicator role) becomes a failed job whose reason
// shows in _scheduler/docs. Database creation registers a fresh identity
// (DBCreated); deletion retires it (DBDeleted): the documents leave the
// views at once, and the replication nodes remove the database's jobs at
// their next interval.
//
// # POST /_replicate
//
// Replicate adds a transient job (its id a digest of the replication and
// the user, never a password) and follows it through an fdbjobs
// subscription: a continuous replication answers Running once a node runs
// it, a one-shot one Completed with its final checkpoint or Failed with
// CouchDB's error tag and reason. The job outlives the request; posting
// the same replication again does not restart it; its endpoints are
// checked as a document's (ErrForbidden). With no replication
// node alive in the cluster the POST does not wait forever: once
// Config.ReplicateNoNodeTimeout passes without a change of the job and no
// node with the replication role is alive, it answers ErrTimeout (500
// timeout) naming the cause; the job stays pending. A cancel names the
// replication by its specification or id; only its user or an admin may
// cancel it, and never a document's job.
//
// # Views
//
// SchedulerJobs, SchedulerJob, SchedulerDocs, SchedulerDoc and ActiveTasks
// are CouchDB's _scheduler and _active_tasks shapes, cluster-wide, read
// from the job data; credentials are never shown, and a viewer who is not
// a server admin reads a refused address's error as
// couch.AddressDeniedReason alone (hideAddressDetail). The listings read pages
// of the store's view index (replicator.Views.JobsPage, DocsPage,
// RunningJobs), so their cost follows the page (and skip), not the number
// of jobs; api.PageQuery.StartKey starts a page at a row's key. With a
// membership (SetMembership), a job running on a node whose membership
// record expired is shown pending on no node, and is no active task, from
// that moment, with info.stall node_down; while no node with the
// replication role is alive, a job waiting for one (pending, crashing
// past its backoff, or on a dead node) shows info.stall
// no_replication_node (cast.show). The member records are read once per
// request, only when its page has a job that is not finished.
//
// # Retries
//
// Every function that joins the caller's transaction gives the same
// outcome when the transaction runs again, also after
// commit_unknown_result: choices made in an earlier attempt (a database
// identity, the job a write added) are remembered per transaction.
package control
