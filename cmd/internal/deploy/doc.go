// Package deploy is the deployment test, TestDeployment: fdbrep deployed
// by role as docs/DEPLOY.md says, on hosts made of network namespaces.
//
// The test creates a namespace per host (FoundationDB, the replication
// endpoints, a monitoring host, two api_frontend and two replication
// nodes) joined by a Linux
// bridge in a "switch" namespace, with addresses in a private /24 it picks
// and no route out; its own namespace is the client host. FoundationDB is a
// cluster of three processes (../shared/fdb/fdb.sh, double redundancy) on
// its host, on mutual TLS (FDB_TLS=1: :tls addresses, a throwaway CA), and
// each node gets a certificate and key of its own that CA signed, as
// DEPLOY.md says, through its host's [fdb] tls_* variables; the endpoints
// are a real CouchDB 3.5 (../shared/couchdb), and each
// node runs fdbrep serve, built with -tags fdb, with its role's file of
// deploy/ and only a host's own variables (deploy.HostVariables) plus the
// [replicator] timing the test shortens (interval 1 s, job timeout 6 s,
// min_run_time 2 s), as an operator could. Before anything starts, each
// host loads DEPLOY.md's nftables ruleset for its node type, as written
// there, with the test's own define block. The monitoring host runs
// Prometheus with deploy/prometheus/prometheus.yml, each replication host
// a Prometheus agent with agent.yml, with DEPLOY.md's flags and the test's
// addresses in place of the files' examples (where prometheus is not
// installed that part is left out, said so; under CI it fails).
//
// It then checks, timing each phase:
//
//  1. The rules hold: a frontend cannot reach the endpoints nor the
//     monitoring host, nothing can connect to a replication node (its
//     ports from the client, a frontend, the endpoints' host and the
//     monitoring host), nor to FoundationDB from elsewhere than the nodes;
//     the monitoring host reaches the frontends' API and a replication
//     node the monitoring host's Prometheus; the replication nodes answer
//     /_up on their loopback health port.
//     Then a node started on a frontend's host (which the firewall lets
//     reach FoundationDB) with the cluster's CA but a certificate another
//     CA signed is refused by FoundationDB: it never comes up, and its
//     "waiting for FoundationDB" lines name its certificate.
//  2. Both frontends serve one cluster: POST /_replicate through each
//     returns the result of a run a replication node made, _replicator
//     documents written through one are read through the other, and
//     _scheduler/jobs, _scheduler/docs, _active_tasks and _membership
//     answer the same through both; six continuous replications spread
//     over both replication nodes. Prometheus has every node's series
//     (up = 1), each with its node label: the frontends scraped as the
//     metrics user DEPLOY.md creates, the replication nodes' pushed by
//     their agents, whose sync series count the jobs _scheduler/jobs
//     places on them; and it loaded alerts.yml.
//  3. A replication node SIGKILLed: its jobs run on the other within the
//     activity monitor's bound, and it gets its share back when it
//     returns.
//  4. A replication node cut off from FoundationDB by one nftables rule
//     per direction, in both directions, then outbound only, then inbound
//     only: it stops its jobs before its hold on them expires, they run on
//     the other node, no job ever runs on two nodes at once (from the
//     nodes' lifecycle lines, and from CouchDB's request log: the cut-off
//     node writes nothing to the endpoints of a job the other runs), its
//     /_up answers 503 storage_unavailable with a growing heartbeat age,
//     and when the rule is removed it answers 200 and runs jobs again.
//
// With FDBREP_DEPLOY_FULL set (make test-deploy), also:
//
//  5. A frontend stopped (SIGTERM), then the other SIGKILLed, while
//     clients wait on POST /_replicate through it: each client gets the
//     result, or an error after which the same request through the other
//     frontend gets it, and every target holds its source.
//  6. A rolling restart, one node at a time (SIGTERM, then start again):
//     the frontend not being restarted fails no request.
//
// A writer adds documents to the continuous replications' sources all
// along; at the end every target holds its source's documents.
//
// It needs root, ip and nft (make test-deploy); without them it is skipped
// with a message saying so, and fails under CI. It removes its namespaces
// (and whatever runs in them) when it ends, also on failure, and at start
// those of earlier runs whose process is gone.
package deploy
