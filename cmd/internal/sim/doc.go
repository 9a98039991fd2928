// Package sim is the simulation test of the replication service: a whole
// cluster (api_frontend and replication nodes run by node.Run as fdbrep
// serve runs them, on one embedded store, with a simulated engine) inside
// a testing/synctest bubble, whose fake clock jumps whenever every
// goroutine waits, so that hours of operation take seconds. A seed draws
// the cluster's shape and a stream of operations (documents created,
// updated and deleted, POST /_replicate waiting and cancelled, replicator
// databases created and deleted, max_jobs, max_churn and interval
// changed, nodes started, stopped and killed, endpoints failing, documents
// written to sources; with parking on in some setups, and one server that
// refuses _db_updates in some, so that its sources are polled); after
// every interval a model, built from the operations and the engine's
// record of every run, checks the invariants that replicator/scheduler's
// doc.go states (liveness, safety; a parked replication runs again within
// the watch's bound of a change to its source, or at its sweep, and is not
// waiting meanwhile) and that the views agree with it (a parked one shows
// running on no node, and only after its run parked). A
// failure prints the seed and the shortest operation sequence found that
// still fails.
package sim
