# fdbrep Makefile. `make run` starts a single node on the embedded store;
# `make test` runs everything CI runs.
GO        ?= go
BIN       ?= bin
DATA_DIR  ?= ./data
FDBSTUB   := $(CURDIR)/scripts/fdbstub
POUCHDB   := $(CURDIR)/scripts/pouchdb
FAUXTON   := $(CURDIR)/scripts/fauxton

.PHONY: all version build build-fdb run test test-unit test-faults test-latency test-fdb test-deploy soak lint fdb-check pouchdb fauxton fuzz \
        bench-kv bench-jobs bench-replication bench-scheduler bench-frontend bench-views bench-scale bench-dormant bench-webhooks cluster clean

all: build

## VERSION is the version the binaries report (fdbrep version, GET /): the
## checkout's commit as a Go pseudo-version, v0.0.0-<commit time,
## UTC>-<12 digits of the commit>, "+dirty" with uncommitted changes
## (Go stamps the same from its build info, but not in a git worktree nor
## with -buildvcs=false); empty outside a checkout, where the binary reads
## its build info. make version prints it.
VERSION ?= $(shell TZ=UTC git log -1 --abbrev=12 --date=format-local:%Y%m%d%H%M%S --format=v0.0.0-%cd-%h 2>/dev/null)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo +dirty)
VERSION_LDFLAGS := -X main.version=$(VERSION)

version:
	@echo $(VERSION)

build:
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(BIN)/fdbrep ./cmd/fdbrep

## build-fdb: $(BIN)/fdbrep-fdb, the binary with the FoundationDB backend
## (-tags fdb; the embedded store too). It has a name of its own, so that
## make run and make cluster, which build and run $(BIN)/fdbrep, never
## replace it. It is linked against FoundationDB's client library
## (libfdb_c): installed (its client package, or ../shared/fdb/fdb.sh
## install), or that of ../shared/fdb. At run time the loader looks for
## libfdb_c.so in LD_LIBRARY_PATH, then in FDB_RPATH (where FoundationDB's
## Debian package and fdb.sh install put it), then where ldconfig knows of.
## The binary is then run once (fdbrep-fdb version) under the caller's
## LD_LIBRARY_PATH: where the loader finds no libfdb_c.so, the target fails
## and says what to do.
FDBSH ?= $(CURDIR)/../shared/fdb/fdb.sh
FDB_RPATH ?= /usr/lib:/usr/local/lib
build-fdb:
	@caller_ld_path="$${LD_LIBRARY_PATH:-}"; \
	if [ -f $(FDBSH) ]; then eval "$$(bash $(FDBSH) env)"; fi; \
	echo "$(GO) build -tags fdb -ldflags '$(VERSION_LDFLAGS) -extldflags \"-Wl,-rpath,$(FDB_RPATH)\"' -o $(BIN)/fdbrep-fdb ./cmd/fdbrep"; \
	$(GO) build -tags fdb -ldflags '$(VERSION_LDFLAGS) -extldflags "-Wl,-rpath,$(FDB_RPATH)"' -o $(BIN)/fdbrep-fdb ./cmd/fdbrep || exit 1; \
	if ! out=$$(LD_LIBRARY_PATH="$$caller_ld_path" $(BIN)/fdbrep-fdb version 2>&1); then \
		echo "$(BIN)/fdbrep-fdb was built but does not start here:"; echo "  $$out"; \
		echo "The loader looks for libfdb_c.so in LD_LIBRARY_PATH, in $(FDB_RPATH) and where ldconfig knows of."; \
		echo "Install FoundationDB's client package (foundationdb-clients 7.3, from its GitHub releases),"; \
		if [ -f $(FDBSH) ]; then echo "or run: sudo bash $(FDBSH) install,"; fi; \
		echo "or run the binary with LD_LIBRARY_PATH set to the directory that holds libfdb_c.so."; \
		exit 1; \
	fi; echo "$(BIN)/fdbrep-fdb: $$out, with FoundationDB's client library"

## run: start one node with every role on the embedded store in $(DATA_DIR)
## ($(BIN)/fdbrep, built without FoundationDB; build-fdb's binary is
## $(BIN)/fdbrep-fdb), with Fauxton at /_utils/ when it can be installed (npm; the node runs
## without it).
run: build
	@$(MAKE) --no-print-directory fauxton || echo "Fauxton not installed (needs npm): the node runs without /_utils"
	$(BIN)/fdbrep serve -data-dir $(DATA_DIR) $(ARGS)

## cluster: the docker-compose topology for development, in one process on
## the embedded store in $(DATA_DIR): frontends on 127.0.0.1:5984 and 5985,
## two replication nodes. Pass -config local.ini etc. with ARGS.
cluster: build
	$(BIN)/fdbrep cluster -data-dir $(DATA_DIR) $(ARGS)

## test: what CI runs: lint, the fdb-tagged build, the whole suite with the
## race detector, then the packages whose tests reach the store again with
## storage fault injection, again with network latency and the transaction
## budget check on the embedded store, and again on a real FoundationDB
## cluster (test-fdb).
test: lint fdb-check pouchdb fauxton test-unit test-faults test-latency test-fdb

## store_pkgs lists the packages whose tests open a store (their test
## binary links pkg/kv/kvtest; go list flags in $(1)): the passes that
## change the store rerun only these, since the others (the CouchDB
## client, the replication protocol, the CLI, the docs) would repeat the
## plain pass. Of these, cmd/fdbrep's nodes open their own store, which
## reads FDBREP_KV_LATENCY and FDBREP_KV_BUDGET but not FDBREP_KV_FAULTS
## nor FDBREP_KV_BACKEND: the faults and FoundationDB passes leave it out
## (nodes_pkgs), and test-fdb runs its FoundationDB tests alone.
store_pkgs = $(shell $(GO) list $(1) -test -f '{{.ImportPath}}|{{range .Deps}}{{.}} {{end}}' ./... | \
	awk -F'|' '$$1 ~ /\.test$$/ && index($$2, "/pkg/kv/kvtest ") { sub(/\.test$$/, "", $$1); print $$1 }')
nodes_pkgs = $(filter-out %/cmd/fdbrep,$(call store_pkgs,$(1)))

## WAIT_P is how many test binaries, and parallel tests in each, the
## faults and latency passes run at once (go test -p and -parallel;
## default 4, where go test runs as many as the machine's cores): their
## tests mostly wait, on CouchDB or on injected latency (the wire package
## under faults: 23 s of CPU in 90 s), so a 2-core runner would sit idle
## with two. The race pass keeps go test's default, as the race detector
## makes it CPU-bound, and so does the FoundationDB pass, whose cluster's
## processes share the runner's cores (with 4, its tests timed out).
WAIT_P ?= 4

test-unit:
	scripts/timed.sh test-unit $(GO) test -race -count=1 -timeout 20m ./...

## test-faults: the store packages again under injected storage faults,
## without the race detector: the plain pass has it, and this one's value
## is the code's behaviour under the store's errors (CI's time, issue 41).
test-faults:
	scripts/timed.sh test-faults env FDBREP_KV_FAULTS=1 $(GO) test -p $(WAIT_P) -parallel $(WAIT_P) -count=1 -timeout 20m $(call nodes_pkgs)

## test-latency: every read and commit waits as over a network, and any
## transaction over 1 MB or 1 s fails its test (FDB's guidance).
test-latency:
	scripts/timed.sh test-latency env FDBREP_KV_LATENCY=1 FDBREP_KV_BUDGET=1 $(GO) test -p $(WAIT_P) -parallel $(WAIT_P) -count=1 -timeout 20m $(call store_pkgs)

## soak: the scheduler's model test (cmd/internal/sim) over new seeds, one
## after the other, for SOAK_DURATION (default 10m), then the real-process
## soak (cmd/internal/soak: fdbrep serve and fdbrep cluster against a real
## CouchDB 3.5, SIGKILLs among the operations) for as long. make test runs
## one seed in each pass (500 intervals under the race detector; 1,000 on
## a store that injects faults or waits as over a network, and on
## FoundationDB) and about two minutes of the real-process soak in the
## latency and FoundationDB passes (its processes are built without the
## race detector, and do not read the injected faults).
SOAK_DURATION ?= 10m
soak:
	$(GO) test -count=1 -timeout 0 -run '^TestModel$$' ./cmd/internal/sim -v -sim.soak $(SOAK_DURATION)
	FDBREP_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' ./cmd/internal/soak -v

## test-fdb: the packages whose tests reach the store (store_pkgs), the kv
## conformance suite among them, and the fault tests of FoundationDB's own
## processes (cmd/internal/fdbfault), on a real FoundationDB 7.3 cluster
## (scripts/with-fdb.sh: 3 processes started from ../shared/fdb, or the
## cluster of FDB_CLUSTER_FILE), each test in a tenant of its own; skipped with a message where neither is at hand.
## It includes the short version of the deployment test (test-deploy).
## The cluster runs on mutual TLS (make test-fdb FDB_TLS=0: plain TCP),
## so that every test also proves the TLS client; the TLS tests of
## cmd/fdbrep start clusters of their own.
FDB_TLS ?= 1
test-fdb:
	scripts/timed.sh test-fdb env FDBREP_FDB_TLS=$(FDB_TLS) scripts/with-fdb.sh env FDBREP_KV_BACKEND=fdb sh -c '\
		$(GO) test -tags fdb -count=1 -timeout 30m $(call nodes_pkgs,-tags fdb) ./pkg/kv/fdbkv ./cmd/internal/deploy ./cmd/internal/fdbfault; a=$$?; \
		$(GO) test -tags fdb -count=1 -timeout 10m -run "^(TestInterruptWhileWaitingForFDB|TestServeOnFDBOverTLS)$$" ./cmd/fdbrep; b=$$?; \
		[ $$a -eq 0 ] && [ $$b -eq 0 ]'

## test-deploy: the deployment test (cmd/internal/deploy; docs/DEPLOY.md):
## FoundationDB, CouchDB and fdbrep nodes by role on hosts made of network
## namespaces, under DEPLOY.md's nftables rulesets; a replication node
## killed, then cut off from FoundationDB; and (FDBREP_DEPLOY_FULL, which
## the short version leaves out) frontends stopped while clients wait on
## POST /_replicate, and a rolling restart. Needs root, ip and nft; skipped
## with a message otherwise.
test-deploy:
	@if [ -f $(FDBSH) ]; then eval "$$(bash $(FDBSH) env)"; fi; \
	FDBREP_DEPLOY_FULL=1 $(GO) test -tags fdb -count=1 -timeout 20m -run '^TestDeploy' -v ./cmd/internal/deploy

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## fdb-check: build and vet the FoundationDB backend against the compile-only
## stand-in for libfdb_c (scripts/fdbstub); nothing built here runs.
fdb-check:
	$(MAKE) -C $(FDBSTUB)
	CGO_CFLAGS="-I$(FDBSTUB)/include" CGO_LDFLAGS="-L$(FDBSTUB)/lib" $(GO) build -tags fdb ./...
	CGO_CFLAGS="-I$(FDBSTUB)/include" CGO_LDFLAGS="-L$(FDBSTUB)/lib" $(GO) vet -tags fdb ./...

## pouchdb: install pouchdb-server from the committed lockfile for the
## replication tests and benchmarks.
pouchdb:
	@if [ ! -x $(POUCHDB)/node_modules/.bin/pouchdb-server ]; then cd $(POUCHDB) && npm ci --no-audit --no-fund --loglevel=error; fi

## fauxton: install Fauxton, CouchDB's dashboard, from the committed lockfile
## (its prebuilt dist/release, served at /_utils/ and used by the browser
## tests).
fauxton:
	@if [ ! -f $(FAUXTON)/node_modules/fauxton/dist/release/index.html ]; then cd $(FAUXTON) && npm ci --no-audit --no-fund --loglevel=error; fi

## Every benchmark below runs on the stores STORES lists, one after the
## other in one run (default embedded): STORES=fdb runs it on a throwaway
## FoundationDB 7.3.79 cluster of ../shared/fdb (scripts/with-fdb.sh; or
## FDB_CLUSTER_FILE's), STORES=embedded,fdb prints both, and
## STORES=fdb,fdb-tls runs it on a second such cluster over mutual TLS too
## and prints each headline figure over TLS beside the plain one.
STORES ?= embedded
ifneq ($(findstring fdb,$(STORES)),)
BENCH := $(if $(findstring fdb-tls,$(STORES)),FDBREP_FDB_TLS=both) scripts/with-fdb.sh env FDBREP_BENCH_STORES=$(STORES) $(GO) run -tags fdb ./cmd/fdbrep-bench
else
BENCH := FDBREP_BENCH_STORES=$(STORES) $(GO) run ./cmd/fdbrep-bench
endif

bench-kv:
	$(BENCH) kv $(ARGS)

## bench-jobs: the job layer against River (PostgreSQL), alternating in one
## run, and its scale-out (-nodes 1,2,4,8: the burn-down of -scale-jobs
## jobs by K Clients on one store, with attempts per transaction, mutations
## and conflict ranges per job; on FoundationDB, STORES=fdb, each K also by
## K processes of the benchmark's binary, one Client each, on the same
## tenant). Knobs, from the environment or the command line: BENCH_JOBS (the
## burn-down's jobs, 200000), BENCH_DURATION (each continuous run, 30s),
## BENCH_ROUNDS (rounds per mode, 3), RIVER=0 (fdbjobs alone); its schedules
## mode (10,000 one-minute schedules, ARGS=-schedules=0 skips it) takes about
## three minutes, most of it waiting for the periods. River's peer
## is its own module (cmd/fdbrep-bench/river), built here; PostgreSQL's
## initdb must be on PATH or in /usr/lib/postgresql/*/bin (else River is
## skipped, said so).
BENCH_JOBS     ?= 200000
BENCH_DURATION ?= 30s
BENCH_ROUNDS   ?= 3
RIVER          ?= 1
bench-jobs:
	@if [ "$(RIVER)" != 0 ]; then $(GO) -C cmd/fdbrep-bench/river vet ./... && $(GO) -C cmd/fdbrep-bench/river build -o $(abspath $(BIN))/fdbrep-bench-river . ; fi
	$(BENCH) jobs -jobs $(BENCH_JOBS) -duration $(BENCH_DURATION) -rounds $(BENCH_ROUNDS) \
		$(if $(filter-out 0,$(RIVER)),-river-bin $(abspath $(BIN))/fdbrep-bench-river) $(ARGS)

## bench-replication: the engine against PouchDB's replicator between two
## pouchdb-server processes, and (where ../shared/couchdb is) CouchDB 3.5 ->
## CouchDB 3.5 by CouchDB's own replicator and by the engine, in
## alternating rounds, beside CouchDB's _bulk_docs new_edits=false limit;
## then authenticated peers (Basic versus session). ARGS=-large for 100,000
## documents.
bench-replication: pouchdb
	$(BENCH) replication $(ARGS)

## bench-scheduler: 10,000 continuous jobs on 3 nodes (simulated engine),
## the liveness phase, then (where ../shared/couchdb is) CouchDB 3.5's
## scheduler against one fdbrep node running the same real replications
## with the same max_jobs, max_churn and interval.
bench-scheduler:
	$(BENCH) scheduler $(ARGS)

bench-frontend:
	$(BENCH) frontend $(ARGS)

## bench-views: scheduler view page latency at 1k, 10k and 100k jobs
## (ARGS="-sizes 1000,10000,100000,1000000" for the million).
bench-views:
	$(BENCH) views $(ARGS)

## bench-dormant: many replications, few active: N (-n, 600) continuous
## replications from N user databases of a CouchDB 3.5 into one shared
## database, with the same max_jobs (100), max_churn (20) and interval (5 s)
## on CouchDB 3.5's own replicator and on one fdbrep node with its default
## parking settings, fdbrep with _db_updates (the replication documents,
## then one template document for all the user databases) and without it; timed writes
## to random user databases from 30 s after the replications were written
## (-write-after): arrived, lag p50, p99, max; once they settled,
## connections, CPU and memory while idle, store size per replication; then
## 20 replications (-few), fewer than max_jobs, without _db_updates on both,
## their writes timed; then a simulated run of 100,000 replications
## (-sim-n 0 skips it). Needs ../shared/couchdb.
bench-dormant:
	$(BENCH) dormant $(ARGS)

## bench-webhooks: one node, default settings: 1,000 replication documents
## whose source refuses connections change state again and again while a
## webhook of every change posts to a receiver on 127.0.0.1 and a reader
## follows _scheduler/_changes; deliveries per second and each path's lag
## from commit (p50, p99).
bench-webhooks:
	$(BENCH) webhooks $(ARGS)

## bench-scale: 100,000 _replicator documents on 3 replication nodes
## (max_jobs 500): time until every job started once, store bytes per job,
## memory per node, a fourth node joining, view pages at 1k/10k/100k
## (ARGS="-view-sizes 1000,10000,100000,1000000" for the million).
bench-scale:
	$(BENCH) scale $(ARGS)

## fuzz: run each fuzz target for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzUnpack$$' -fuzztime $(FUZZTIME) ./pkg/tuple
	$(GO) test -run '^$$' -fuzz '^FuzzParseFeed$$' -fuzztime $(FUZZTIME) ./replicator/engine
	$(GO) test -run '^$$' -fuzz '^FuzzParseOpenRevs$$' -fuzztime $(FUZZTIME) ./replicator/engine
	$(GO) test -run '^$$' -fuzz '^FuzzParseBulkGet$$' -fuzztime $(FUZZTIME) ./replicator/engine
	$(GO) test -run '^$$' -fuzz '^FuzzParseSpec$$' -fuzztime $(FUZZTIME) ./replicator
	$(GO) test -run '^$$' -fuzz '^FuzzRevTreeMerge$$' -fuzztime $(FUZZTIME) ./repdb
	$(GO) test -run '^$$' -fuzz '^FuzzAPI$$' -fuzztime $(FUZZTIME) ./frontend

clean:
	rm -rf $(BIN) $(DATA_DIR)
