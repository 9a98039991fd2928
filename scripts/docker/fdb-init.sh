#!/usr/bin/env bash
# Configures a new FoundationDB database (single replication, ssd engine) the
# first time the compose cluster starts; does nothing when one exists.
set -euo pipefail
cluster_file=/var/fdb/fdb.cluster
for i in $(seq 1 60); do
  [ -s "$cluster_file" ] && break
  sleep 1
done
[ -s "$cluster_file" ] || { echo "fdb-init: no cluster file at $cluster_file" >&2; exit 1; }
for i in $(seq 1 60); do
  if fdbcli -C "$cluster_file" --exec "status minimal" --timeout 3 | grep -q "database is available"; then
    echo "fdb-init: database already configured"
    exit 0
  fi
  if fdbcli -C "$cluster_file" --exec "configure new single ssd" --timeout 10; then
    echo "fdb-init: configured new single ssd database"
    exit 0
  fi
  sleep 1
done
echo "fdb-init: FoundationDB did not become configurable" >&2
exit 1
