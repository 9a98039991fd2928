// Package node runs one fdbrep node: the roles of its configuration
// (api_frontend, replication) on an open store, wired as fdbrep serve
// runs them: the job layer, the membership and runtime configuration
// (package cluster), the replication node (replicator/scheduler), the
// control plane and HTTP API (replicator/control, frontend, joined by
// cmd/internal/wire), the health listener, and their graceful shutdown.
// fdbrep serve runs one per process, fdbrep cluster several on one
// store, and the simulation (cmd/internal/sim) many in a testing/synctest
// bubble, with a simulated engine and no listeners.
package node
