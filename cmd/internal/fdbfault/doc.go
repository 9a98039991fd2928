// Package fdbfault tests fdbrep under FoundationDB's own faults, with real
// processes: a cluster of three fdbserver processes (double redundancy)
// started from ../shared/fdb/fdb.sh, fdbrep serve nodes on it built with
// -tags fdb, endpoints on a real CouchDB 3.5, and steady load (continuous
// replications of sources that keep growing, _replicator documents
// written one after the other). One after the other, TestFoundationDBFaults
// SIGKILLs an fdbserver process and restarts it, SIGKILLs the one acting as
// cluster controller, takes the whole cluster down and back, and starts a
// node while it is down. After each it checks that every acknowledged
// write is there and none is there twice, that every job runs again within
// the documented time and its target holds its source's documents, that no
// job ran on two nodes at once (from the nodes' logs), and that the nodes
// stayed up and said what was wrong while it lasted (/_up, their logs,
// jobs.holds_lost).
//
// It runs in make test's FoundationDB pass (make test-fdb; the file needs
// the fdb build tag) and is skipped, saying why, where fdb.sh or CouchDB is
// absent.
package fdbfault
