// Package proctest runs the real processes of fdbrep's black-box tests on
// FoundationDB (cmd/internal/fdbfault, cmd/internal/deploy): the fdbrep
// binary built with -tags fdb (BuildFDBBinary), a FoundationDB cluster
// started with ../shared/fdb/fdb.sh on this host or on a host of a network
// namespace (StartFDB), processes whose JSON log lines it keeps (Start,
// Proc), the check, from those lines, that no replication ran on two
// nodes at once (RequireNoOverlap), and a CouchDB database's document
// count (DocCount).
//
// Every wait is bounded (WaitUntil polls a condition until a deadline the
// caller computes from the configuration), and every process and cluster
// it starts is stopped in t.Cleanup, also when the test fails.
package proctest
