#!/bin/sh
# Installs FoundationDB's client package (libfdb_c, its headers, fdbcli)
# for the build's target architecture, after checking its SHA-256.
#
#   install-fdb-clients.sh VERSION TARGETARCH [SHA256]
#
# TARGETARCH is Docker's (amd64, arm64); FoundationDB names the arm64
# package aarch64. SHA256 is the pinned checksum of that package. Without
# one, the checksum FoundationDB publishes next to the package (the
# release asset <package>.sha256) is used instead: that catches a corrupt
# or truncated download, not a tampered release, so pin the checksums (the
# Dockerfile's FDB_CLIENTS_SHA256_* build arguments) for production images.
set -eu
version=$1
arch=${2:-}
pinned=${3:-}
# Without BuildKit TARGETARCH is empty: the build's own architecture.
[ -n "$arch" ] || arch=$(dpkg --print-architecture)

case "$arch" in
  amd64) pkg_arch=amd64 ;;
  arm64) pkg_arch=aarch64 ;;
  *) echo "install-fdb-clients: no FoundationDB client package for architecture $arch" >&2; exit 1 ;;
esac

pkg="foundationdb-clients_${version}-1_${pkg_arch}.deb"
url="https://github.com/apple/foundationdb/releases/download/${version}/${pkg}"
cd /tmp
curl -fsSL --retry 3 -o "$pkg" "$url"
if [ -n "$pinned" ]; then
  expected=$pinned
else
  echo "install-fdb-clients: WARNING: no pinned SHA-256 for $pkg; checking the release's published checksum only" >&2
  expected=$(curl -fsSL --retry 3 "${url}.sha256" | cut -c1-64)
fi
echo "${expected}  ${pkg}" | sha256sum -c -
dpkg -i "$pkg"
rm -f "$pkg"
