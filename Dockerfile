# fdbrep for a FoundationDB cluster: built with -tags fdb against the
# FoundationDB client library (libfdb_c) from FoundationDB's client package.
#
#   docker build -t fdbrep .
#
# The embedded store is also compiled in; set [fdb] backend = fdb (or
# FDBREP_FDB__BACKEND=fdb) and a cluster file to use FoundationDB.

ARG FDB_VERSION=7.3.63
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
ARG FDB_VERSION
ADD https://github.com/apple/foundationdb/releases/download/${FDB_VERSION}/foundationdb-clients_${FDB_VERSION}-1_amd64.deb /tmp/fdb-clients.deb
RUN dpkg -i /tmp/fdb-clients.deb
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -tags fdb -trimpath -o /out/fdbrep ./cmd/fdbrep

FROM debian:bookworm-slim
ARG FDB_VERSION
ADD https://github.com/apple/foundationdb/releases/download/${FDB_VERSION}/foundationdb-clients_${FDB_VERSION}-1_amd64.deb /tmp/fdb-clients.deb
RUN dpkg -i /tmp/fdb-clients.deb && rm /tmp/fdb-clients.deb \
 && apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 fdbrep
COPY --from=build /out/fdbrep /usr/local/bin/fdbrep
USER fdbrep
ENTRYPOINT ["/usr/local/bin/fdbrep"]
CMD ["serve"]
