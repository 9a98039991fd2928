# syntax=docker/dockerfile:1
#
# fdbrep for a FoundationDB cluster: built with -tags fdb against the
# FoundationDB client library (libfdb_c) from FoundationDB's client package.
#
#   docker build -t fdbrep .
#   docker buildx build --platform linux/amd64,linux/arm64 -t fdbrep .
#
# The client package is chosen by the target architecture (TARGETARCH,
# set by BuildKit) and checked against a SHA-256 before it is installed.
# The checksums below are NOT pinned yet: they could not be obtained and
# verified when this file was written (no access to the release assets).
# Until they are, scripts/docker/install-fdb-clients.sh checks each package
# against the checksum FoundationDB publishes next to it (.sha256), which
# catches a corrupt download but not a tampered release. Pin them with
#
#   sha256sum foundationdb-clients_7.3.63-1_amd64.deb foundationdb-clients_7.3.63-1_aarch64.deb
#
# on packages downloaded from https://github.com/apple/foundationdb/releases
# and checked against the release's .sha256 files, then set the defaults
# below (or pass --build-arg FDB_CLIENTS_SHA256_AMD64=... and _ARM64=...).
#
# The embedded store is also compiled in; set [fdb] backend = fdb (or
# FDBREP_FDB__BACKEND=fdb) and a cluster file to use FoundationDB. The role
# configuration files of deploy/ are in /etc/fdbrep: run a role with
#
#   docker run ... fdbrep serve -config /etc/fdbrep/api_frontend.ini
#   docker run ... fdbrep serve -config /etc/fdbrep/replication.ini
#
# and each host's own values in its environment (docs/DEPLOY.md).
#
# The image talks to FoundationDB 7.3 clusters only. To upgrade a cluster to
# a later version without downtime, add that version's libfdb_c to the image
# and point FDB_NETWORK_OPTION_EXTERNAL_CLIENT_DIRECTORY at its directory
# (FoundationDB's multi-version client), then upgrade the cluster.

ARG FDB_VERSION=7.3.63
ARG GO_VERSION=1.26
ARG FDB_CLIENTS_SHA256_AMD64=""
ARG FDB_CLIENTS_SHA256_ARM64=""

FROM golang:${GO_VERSION}-bookworm AS build
ARG FDB_VERSION
ARG TARGETARCH
ARG FDB_CLIENTS_SHA256_AMD64
ARG FDB_CLIENTS_SHA256_ARM64
COPY scripts/docker/install-fdb-clients.sh /usr/local/bin/install-fdb-clients.sh
RUN if [ "$TARGETARCH" = arm64 ]; then sum=$FDB_CLIENTS_SHA256_ARM64; else sum=$FDB_CLIENTS_SHA256_AMD64; fi \
 && install-fdb-clients.sh "$FDB_VERSION" "$TARGETARCH" "$sum"
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version the binary reports (.git stays out of the context, so Go
# stamps none): docker build --build-arg FDBREP_VERSION=$(make -s version).
ARG FDBREP_VERSION=""
RUN CGO_ENABLED=1 go build -tags fdb -trimpath -ldflags "-X main.version=${FDBREP_VERSION}" -o /out/fdbrep ./cmd/fdbrep

# Fauxton, CouchDB's dashboard, served at /_utils: its prebuilt files from
# the pinned npm package (scripts/fauxton), nothing else of node.
FROM node:20-bookworm-slim AS fauxton
WORKDIR /fauxton
COPY scripts/fauxton/package.json scripts/fauxton/package-lock.json scripts/fauxton/.npmrc ./
RUN npm ci --no-audit --no-fund

FROM debian:bookworm-slim
ARG FDB_VERSION
ARG TARGETARCH
ARG FDB_CLIENTS_SHA256_AMD64
ARG FDB_CLIENTS_SHA256_ARM64
COPY scripts/docker/install-fdb-clients.sh /usr/local/bin/install-fdb-clients.sh
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && if [ "$TARGETARCH" = arm64 ]; then sum=$FDB_CLIENTS_SHA256_ARM64; else sum=$FDB_CLIENTS_SHA256_AMD64; fi \
 && install-fdb-clients.sh "$FDB_VERSION" "$TARGETARCH" "$sum" \
 && rm -rf /var/lib/apt/lists/* /usr/local/bin/install-fdb-clients.sh \
 && useradd --system --uid 10001 fdbrep
COPY --from=build /out/fdbrep /usr/local/bin/fdbrep
COPY deploy/*.ini /etc/fdbrep/
COPY --from=fauxton /fauxton/node_modules/fauxton/dist/release /usr/share/fdbrep/fauxton
ENV FDBREP_CHTTPD__UTILS_DIR=/usr/share/fdbrep/fauxton
USER fdbrep
ENTRYPOINT ["/usr/local/bin/fdbrep"]
CMD ["serve"]
