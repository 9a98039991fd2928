// Package couchtest provides real CouchDB-compatible peers and network fault
// injection for tests of fdbrep's HTTP client and replication engine.
//
// # pouchdb-server peers
//
// StartPouchDB starts a pouchdb-server (npm pouchdb-server 4.2.0, PouchDB
// 7.3.1) in memory on 127.0.0.1 on a free port, with a fresh t.TempDir() as
// its working directory (it writes config.json and log.txt there), waits until
// GET / answers (bounded by StartTimeoutDefault) and kills its whole process
// group in t.Cleanup. A start takes about 0.5–2 s on an idle 2-core machine
// (node loading PouchDB), several seconds when the machine is loaded.
//
// The binary is found, in order, at $FDBREP_POUCHDB_SERVER or at
// scripts/pouchdb/node_modules/.bin/pouchdb-server below the module root (the
// directory holding go.mod, found by walking up from the working directory).
// When it is not installed the harness runs `npm ci` in scripts/pouchdb once,
// serialised across test processes by a file lock, which needs Node.js ≥ 18
// and npm on PATH and access to the npm registry; `make pouchdb` does the same
// ahead of time. If that fails the test fails with a message naming
// `make pouchdb`.
//
// The peer is in "admin party" mode unless WithAdmin is given, which writes
// the admin into the peer's config file before start so Basic auth and
// 401 answers can be tested. pouchdb-server differs from CouchDB in ways a
// replicator must tolerate (see the research notes, §5): continuous _changes
// never ends by itself, open_revs answers are JSON only, _bulk_get groups
// results per doc id, and a few malformed requests crash the process (then
// Exited reports it and the cleanup logs the tail of its output).
//
// LaunchPouchDB does the same for callers without a testing.TB (benchmarks);
// they Stop it themselves. PouchReplicate runs one PouchDB.replicate between
// two URLs with scripts/pouchdb/replicate.js (PouchDB 7.3.1 defaults
// batch_size 100, batches_limit 10), the baseline for the replication
// benchmark.
//
// # Real CouchDB peers
//
// StartCouchDB starts a real Apache CouchDB 3.5.0 on 127.0.0.1 (a free
// port, a fresh data directory, admin CouchAdmin) with the script
// couchdb.sh ($FDBREP_COUCHDB_SH, or ../shared/couchdb/couchdb.sh beside the
// module root, where CI has it) and stops it in t.Cleanup; where the
// script is absent the test is skipped with a message saying so (failed
// under CI, $CI set, which must run it). Its
// Server has the same helpers as pouchdb-server's. LaunchCouchDB is the
// same for callers without a testing.TB. StartCouchDBOn runs it on a host
// of the test's own network instead: a network namespace's address and a
// fixed port, with couchdb.sh run on that host (ip netns exec).
//
// # Fault proxy
//
// FaultProxy is a reverse proxy on 127.0.0.1 placed between a client and a
// peer. Per request it injects, from a script (Script) or at seeded rates
// (FaultConfig), an HTTP 500, an HTTP 429, a connection dropped in the middle
// of the response (after the peer processed the request), a connection reset
// before any response, a stall before the request is forwarded, or an HTTP
// 401 (with WWW-Authenticate) or 404 in place of the peer's answer. It
// counts what it injected and how requests authenticated (logins, Basic,
// session cookies: Counts) and shuts down in t.Cleanup, cancelling requests
// still in flight, including streamed continuous feeds.
//
// # TLS
//
// NewTLSProxy is a FaultProxy behind a TLS listener (a TLS terminator in
// front of a plain pouchdb-server), optionally requiring client
// certificates. NewCA makes a private CA for a test, with intermediates,
// server certificates for 127.0.0.1 and client certificates; WriteKeyPair
// and CA.WriteCert write them as PEM files for the replicator's settings.
package couchtest
