#!/usr/bin/env bash
# Configures a new FoundationDB database (single replication, ssd engine)
# the first time the compose cluster starts; does nothing when one exists.
# It also lets fdbrep's user (FDBREP_UID) write the cluster file, which
# FoundationDB's client rewrites when the coordinators change.
set -euo pipefail
cluster_file=${FDB_CLUSTER_FILE:-/var/fdb/config/fdb.cluster}
attempts=120

for _ in $(seq 1 "$attempts"); do
  [ -s "$cluster_file" ] && break
  sleep 1
done
if [ ! -s "$cluster_file" ]; then
  echo "fdb-init: no cluster file at $cluster_file after ${attempts}s: is the fdb service running?" >&2
  exit 1
fi

if [ -n "${FDBREP_UID:-}" ]; then
  chown "$FDBREP_UID" "$(dirname "$cluster_file")" "$cluster_file"
  chmod u+rwx "$(dirname "$cluster_file")"
  chmod u+rw "$cluster_file"
fi

# fdbcli's output is captured before grep reads it: with pipefail, a grep
# that stops reading early could make a healthy fdbcli look failed.
for _ in $(seq 1 "$attempts"); do
  status=$(fdbcli -C "$cluster_file" --exec "status minimal" --timeout 3 2>&1 || true)
  if grep -q "database is available" <<<"$status"; then
    echo "fdb-init: database available"
    exit 0
  fi
  out=$(fdbcli -C "$cluster_file" --exec "configure new single ssd" --timeout 10 2>&1 || true)
  if grep -qE "Database created|already exists" <<<"$out"; then
    echo "fdb-init: $out"
  fi
  sleep 1
done
echo "fdb-init: FoundationDB at $(cat "$cluster_file") did not become available after ${attempts} attempts; last status: $status" >&2
exit 1
