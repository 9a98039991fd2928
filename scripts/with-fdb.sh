#!/usr/bin/env bash
# with-fdb.sh COMMAND...: runs COMMAND with FDB_CLUSTER_FILE naming a
# FoundationDB 7.3 cluster that allows tenants, and cgo and the loader set
# up for its client library.
#
# With FDB_CLUSTER_FILE set, that cluster (it must allow tenants: fdbcli
# "configure tenant_mode=optional_experimental"). Otherwise a throwaway
# cluster of 3 processes (double redundancy) started on 127.0.0.1 with
# ../shared/fdb/fdb.sh beside the repository ($FDBREP_FDB_SH to use
# another), stopped and removed when COMMAND ends; on mutual TLS (:tls
# addresses, fdb.sh's throwaway CA) with FDBREP_FDB_TLS=1; with
# FDBREP_FDB_TLS=both, that TLS cluster in FDBREP_BENCH_TLS_CLUSTER_FILE
# beside a plain one in FDB_CLUSTER_FILE (the benchmarks' STORES=fdb,fdb-tls:
# a client that holds a certificate still speaks plain to plain addresses).
# Where neither
# is at hand it says so and exits 0 (a user's machine); under CI ($CI set) that
# is an error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fdbsh=${FDBREP_FDB_SH:-$root/../shared/fdb/fdb.sh}
if [ -f "$fdbsh" ]; then
	# The client library and headers of that release, unless installed.
	eval "$(bash "$fdbsh" env)"
fi
if [ -n "${FDB_CLUSTER_FILE:-}" ]; then
	exec "$@"
fi
if [ ! -f "$fdbsh" ]; then
	msg="with-fdb: no FoundationDB here ($fdbsh is absent and FDB_CLUSTER_FILE is unset)"
	if [ -n "${CI:-}" ]; then
		echo "$msg: CI must run the FoundationDB passes" >&2
		exit 1
	fi
	echo "$msg: skipped: $*" >&2
	echo "with-fdb: to run it, set FDB_CLUSTER_FILE to a cluster that allows tenants, or put FoundationDB's fdb.sh at $fdbsh" >&2
	exit 0
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/fdbrep-fdb.XXXXXX")
cleanup() {
	bash "$fdbsh" stop "$dir" >/dev/null 2>&1 || true
	if [ -d "$dir/tls-cluster" ]; then bash "$fdbsh" stop "$dir/tls-cluster" >/dev/null 2>&1 || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT
# Three free ports in a row.
free_ports() {
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/$((p + 1))) 2>/dev/null &&
			! (exec 3<>/dev/tcp/127.0.0.1/$((p + 2))) 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}
port=$(free_ports)
[ -n "$port" ] || { echo "with-fdb: no free ports" >&2; exit 1; }
if [ "${FDBREP_FDB_TLS:-0}" = both ]; then
	tport=$(free_ports)
	while [ -n "$tport" ] && [ "$tport" -ge $((port - 2)) ] && [ "$tport" -le $((port + 2)) ]; do tport=$(free_ports); done
	[ -n "$tport" ] || { echo "with-fdb: no free ports" >&2; exit 1; }
	tcluster=$(FDB_TLS=1 bash "$fdbsh" start "$tport" "$dir/tls-cluster" 3 | tail -1)
	eval "$(bash "$fdbsh" tls-env "$dir/tls-cluster")"
	bash "$fdbsh" cli "$dir/tls-cluster" --exec "configure tenant_mode=optional_experimental" >/dev/null
	echo "with-fdb: FoundationDB cluster of 3 processes on 127.0.0.1:$tport-$((tport + 2)), mutual TLS ($tcluster)" >&2
	export FDBREP_BENCH_TLS_CLUSTER_FILE=$tcluster
fi
tls=""
if [ "${FDBREP_FDB_TLS:-0}" = 1 ]; then
	# Mutual TLS: only the start sees FDB_TLS, so that clusters the tests
	# start themselves stay as they ask; COMMAND gets the client's
	# FDB_TLS_* variables, which libfdb_c reads.
	cluster=$(FDB_TLS=1 bash "$fdbsh" start "$port" "$dir" 3 | tail -1)
	eval "$(bash "$fdbsh" tls-env "$dir")"
	tls=", mutual TLS"
else
	cluster=$(bash "$fdbsh" start "$port" "$dir" 3 | tail -1)
fi
bash "$fdbsh" cli "$dir" --exec "configure tenant_mode=optional_experimental" >/dev/null
echo "with-fdb: FoundationDB cluster of 3 processes on 127.0.0.1:$port-$((port + 2))$tls ($cluster)" >&2
FDB_CLUSTER_FILE=$cluster "$@"
