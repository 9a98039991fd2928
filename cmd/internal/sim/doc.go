// Package sim is the simulation test of the replication service: a whole
// cluster (api_frontend and replication nodes run by node.Run as fdbrep
// serve runs them, on one embedded store, with a simulated engine) inside
// a testing/synctest bubble, whose fake clock jumps whenever every
// goroutine waits, so that hours of operation take seconds. A seed draws
// the cluster's shape and a stream of operations (documents created,
// updated and deleted, POST /_replicate waiting and cancelled, replicator
// databases created and deleted, max_jobs, max_churn and interval
// changed, nodes started, stopped and killed, endpoints failing); after
// every interval a model, built from the operations and the engine's
// record of every run, checks the invariants that replicator/scheduler's
// doc.go states (liveness, safety) and that the views agree with it. A
// failure prints the seed and the shortest operation sequence found that
// still fails.
package sim
