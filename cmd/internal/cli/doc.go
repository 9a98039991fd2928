// Package cli is fdbrep's terminal client, the commands for people who
// live in a shell:
//
//	fdbrep replicate [flags] SOURCE TARGET   run a replication, with a live progress bar
//	fdbrep jobs [flags]                      GET /_scheduler/jobs as a table
//	fdbrep docs [flags] [DB [DOC]]           GET /_scheduler/docs[/DB[/DOC]] as a table
//	fdbrep migrate-check [flags] URL         before a CouchDB's replications move in: which keep their checkpoints
//
// # Where a replication runs
//
// With a cluster named (-cluster or $FDBREP_CLUSTER), replicate sends the
// flags as a POST /_replicate body to the running cluster: a one-shot
// request waits for the end while the client follows the job in
// /_scheduler/jobs; a continuous one returns once a node runs it and the
// client follows /_scheduler/jobs/{id} until Ctrl-C (or returns at once
// with -detach). Ctrl-C cancels the replication on the cluster with POST
// /_replicate "cancel": true. While the job does not move the display
// shows why (its stall; no_replication_node while no replication node is
// alive); a POST the cluster stops waiting on (500 timeout: no
// replication node alive) ends the command with the job's last state and
// the cluster's reason (ExitFailure): the job stays on the cluster.
//
// Without a cluster, the replication runs in this process with the same
// parser, the node's defaults and the same engine (replicator/engine) a
// node runs, on an embedded store (DataDirDefault, or -data-dir) that
// keeps the installation's server UUID: replication ids, and with them the
// checkpoint documents on the peers, stay the same from one run to the
// next, so a rerun resumes where the last one stopped. Ctrl-C stops the
// run with a final checkpoint. The store can be served later with fdbrep
// serve -data-dir (one process at a time opens it).
//
// # A migration's dry run
//
// migrate-check reads the server UUID (GET /) and the replicator
// database's documents (_all_docs, as a server admin) of a CouchDB, and
// for each replication that would run asks its source and target what a
// run's setup asks (engine.FindCheckpoint: the replication id fdbrep
// computes with that UUID, then the ids it would take checkpoints over
// from): a table of each document's id, CouchDB's own (its
// _scheduler/docs), whether each endpoint holds the checkpoint and the
// sequence the replication would go on from. It writes nothing.
//
// # Output
//
// Progress goes to standard output: a live bar (mpb) on a terminal, or
// one plain line each time the counters change in a pipe; then a summary
// whose counts are the replication's as _scheduler shows them (cumulative
// over its runs). Errors go to standard error, with the cluster's
// CouchDB-style tag and reason. No output ever shows a password: URL
// userinfo is redacted and every password the command knows is replaced
// by *****.
//
// # Credentials
//
// The cluster's: -user and -password, else the cluster URL's userinfo,
// else $FDBREP_USER and $FDBREP_PASSWORD, else the netrc entry of the
// cluster's host (-netrc, $NETRC or ~/.netrc, parsed with
// github.com/fhs/go-netrc). An endpoint URL without credentials gets the
// netrc entry of its host, sent as CouchDB's auth.basic object.
//
// # Exit codes
//
// 0 success (one-shot completed, continuous started with -detach, a
// table printed); ExitFailure (1) the replication failed or the cluster
// refused; ExitUsage (2) a bad command line; ExitInterrupted (130) Ctrl-C
// or SIGTERM ended the command: a replication (cancelled on the cluster,
// or stopped in process with a checkpoint), a -watch, or a request in
// flight.
package cli
