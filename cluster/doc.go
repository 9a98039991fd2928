// Package cluster is what the nodes of an fdbrep cluster know of each
// other, through the store only (nodes never connect to each other):
//
//   - Membership. Every node writes a small record with its roles and an
//     expiry time every HeartbeatInterval; GET /_membership lists the
//     nodes whose record has not expired (NodeTimeout after the last
//     heartbeat). A node that stops gracefully removes its record; a dead
//     node's record is listed no more once it expires and is removed
//     ForgetAfter later by any live node. Node names must be unique in a
//     cluster. A replication node's scheduler also reports its load (Load:
//     the jobs it runs) with Node.SetLoad, written at once and carried by
//     every later heartbeat; the nodes balance their jobs with it
//     (replicator/scheduler, "Balance").
//
//   - Runtime configuration. Settings changed through the _config API live
//     in the store in two layers over each node's start-up configuration
//     (ini files, environment, flags): the cluster layer (scope
//     ScopeCluster, /_node/_cluster/_config), which every node applies,
//     and one layer per node name (/_node/{name}/_config, where _local is
//     the node answering), which only that node applies and which wins
//     over the cluster layer. Every change bumps a version key that every
//     node watches; a node re-reads both of its layers, merges them over
//     its start-up configuration (config.Config.With, validated like the
//     files, then Options.Check) and hands the result to Options.Apply.
//     A merge that is not valid on a node is logged there and not
//     applied; the node keeps its previous configuration. The layers
//     persist: a node that restarts starts with them, as CouchDB keeps
//     _config changes in local.ini.
//
// # Keys
//
// Under the subspace ("fdbrep_cluster"):
//
//	(1, Scope, Section, Key) -> value        runtime setting; Scope is "_cluster" or a node name
//	(2)                      -> int64 LE     configuration version: +1 per change (atomic add); nodes watch it
//	(3, Node)                -> member JSON  roles, version, start, last heartbeat and expiry (Unix ms),
//	                                         and a replication node's load (jobs running)
//	(4, Node)                -> config JSON  the node's start-up configuration, secrets replaced by Redacted
//
// # Transactions
//
// Each is small and bounded: a heartbeat writes one key (and the node's
// published configuration when its record was missing); reading a node's
// layers reads at most 2 × SettingsMax keys of at most ValueMaxBytes; a
// change edits one key of one layer; listing members and forgetting dead
// ones read the member records only (at most MembersMax). Heartbeats and
// forgetting are blind writes or guarded by reads of the records they
// clear, and a change is a set or clear of one key plus an atomic add, so
// a retry after commit_unknown_result does no harm (a retried change
// finds its own earlier write and reports it as the old value).
//
// Clocks: a member's expiry is its writer's clock plus NodeTimeout, read
// against the reader's clock, so node clocks must agree to well within
// NodeTimeout (NTP does).
package cluster
