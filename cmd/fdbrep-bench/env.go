package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
)

// benchEnv is what a benchmark sets up before it measures: a working
// directory and the embedded stores in it. close releases them, the last
// acquired first.
type benchEnv struct {
	name    string // the benchmark's, part of a temporary directory's name
	dir     string // the working directory ("" until workDir makes one)
	closers []func()
	tenants map[kv.Database]string // the FoundationDB stores' tenants
}

// newBenchEnv prepares the surroundings of benchmark name; dir is its
// -dir flag, "" for a new temporary directory.
func newBenchEnv(name, dir string) *benchEnv { return &benchEnv{name: name, dir: dir} }

// close releases what the benchmark acquired, the last first.
func (e *benchEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// workDir returns the working directory: -dir as given, or a new temporary
// directory that close removes.
func (e *benchEnv) workDir() (string, error) {
	if e.dir != "" {
		return e.dir, nil
	}
	d, err := os.MkdirTemp("", "fdbrep-bench-"+e.name+"-")
	if err != nil {
		return "", err
	}
	e.dir = d
	e.closers = append(e.closers, func() { os.RemoveAll(d) })
	return d, nil
}

// Stores the benchmarks run on (FDBREP_BENCH_STORES, make's STORES): the
// embedded store, or a FoundationDB cluster (FDB_CLUSTER_FILE; a binary
// built with -tags fdb).
const (
	storeEmbedded = "embedded"
	storeFDB      = "fdb"
	// storeFDBTLS is a FoundationDB cluster over mutual TLS
	// (EnvBenchTLSClusterFile, the client's certificate in libfdb_c's
	// FDB_TLS_* variables): beside storeFDB in one run, what TLS costs.
	storeFDBTLS = "fdb-tls"
	// EnvBenchStores lists the stores, comma-separated, each benchmark
	// runs on in turn (default embedded): its figures on each, one after
	// the other, in one run.
	EnvBenchStores = "FDBREP_BENCH_STORES"
	// EnvBenchTLSClusterFile is the cluster file of storeFDBTLS
	// (scripts/with-fdb.sh sets it with FDBREP_FDB_TLS=both).
	EnvBenchTLSClusterFile = "FDBREP_BENCH_TLS_CLUSTER_FILE"
)

// figures are the headline figures of each store's run (noteFigure), by
// store, in the order noted.
var figures = map[string][]figure{}

// figure is one headline figure of a benchmark.
type figure struct {
	name, unit string
	v          float64
}

// noteFigure records a headline figure of the running benchmark on its
// store, for printTLSCost.
func noteFigure(name, unit string, v float64) {
	figures[benchStore] = append(figures[benchStore], figure{name, unit, v})
}

// printTLSCost prints, when the run measured both storeFDB and
// storeFDBTLS, each headline figure over TLS beside the plain one.
func printTLSCost() {
	plain, tls := figures[storeFDB], figures[storeFDBTLS]
	if len(plain) == 0 || len(tls) == 0 {
		return
	}
	fmt.Printf("\n=== what mutual TLS to FoundationDB costs: the same figures on the two clusters of this run\n")
	for _, p := range plain {
		for _, t := range tls {
			if t.name == p.name {
				fmt.Printf("  %-40s plain %10.3f %-6s TLS %10.3f %-6s TLS/plain = %.2fx\n", p.name+":", p.v, p.unit, t.v, t.unit, t.v/p.v)
			}
		}
	}
}

// onFDB reports whether the running benchmark measures a FoundationDB
// cluster (with or without TLS).
func onFDB() bool { return benchStore == storeFDB || benchStore == storeFDBTLS }

// fdbClusterFile is the cluster file of the FoundationDB store the
// running benchmark measures.
func fdbClusterFile() string {
	if benchStore == storeFDBTLS {
		return os.Getenv(EnvBenchTLSClusterFile)
	}
	return os.Getenv("FDB_CLUSTER_FILE")
}

// benchStore is the store the running benchmark measures.
var benchStore = storeEmbedded

// openFDBStore opens a database in a new tenant of the FoundationDB
// cluster (fdbClusterFile) and returns it with the tenant's name and a
// function that empties and deletes the tenant (bench_fdb.go; nil without
// the fdb tag).
var openFDBStore func(name string) (db kv.Database, tenant string, drop func(), err error)

// openFDBTenant opens the existing tenant of the FoundationDB cluster
// (fdbClusterFile), as another process of the benchmark does (bench_fdb.go;
// nil without the fdb tag).
var openFDBTenant func(tenant string) (kv.Database, error)

// benchStores returns the stores of EnvBenchStores.
func benchStores() ([]string, error) {
	v := os.Getenv(EnvBenchStores)
	if v == "" {
		return []string{storeEmbedded}, nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		switch s = strings.TrimSpace(s); s {
		case storeEmbedded:
		case storeFDB, storeFDBTLS:
			if openFDBStore == nil {
				return nil, fmt.Errorf("%s=%s: this binary was built without FoundationDB support (make bench-… STORES=fdb builds it with -tags fdb)", EnvBenchStores, v)
			}
			if s == storeFDBTLS && os.Getenv(EnvBenchTLSClusterFile) == "" {
				return nil, fmt.Errorf("%s=%s: %s names no cluster (make bench-… STORES=fdb,fdb-tls starts one)", EnvBenchStores, v, EnvBenchTLSClusterFile)
			}
		default:
			return nil, fmt.Errorf("%s=%s: want %s, %s or %s", EnvBenchStores, v, storeEmbedded, storeFDB, storeFDBTLS)
		}
		out = append(out, s)
	}
	return out, nil
}

// openStore opens the store benchStore names: an embedded store in memory,
// or on disk with durable commits in the subdirectory sub of the working
// directory; or a fresh tenant of the FoundationDB cluster. close closes
// it (and deletes the tenant).
func (e *benchEnv) openStore(sub string, inMemory bool) (kv.Database, error) {
	if onFDB() {
		db, tenant, drop, err := openFDBStore(e.name + "/" + sub)
		if err != nil {
			return nil, err
		}
		if e.tenants == nil {
			e.tenants = map[kv.Database]string{}
		}
		e.tenants[db] = tenant
		e.closers = append(e.closers, func() {
			delete(e.tenants, db)
			drop()
		})
		return db, nil
	}
	opts := embedded.Options{InMemory: true}
	if !inMemory {
		root, err := e.workDir()
		if err != nil {
			return nil, err
		}
		opts = embedded.Options{Dir: filepath.Join(root, sub)}
	}
	db, err := embedded.Open(opts)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { db.Close() })
	return db, nil
}

// tenant returns the tenant of db, a FoundationDB store openStore opened
// (which other processes open with openFDBTenant), or "" for an embedded
// store.
func (e *benchEnv) tenant(db kv.Database) string { return e.tenants[db] }

// startCPUProfile writes a CPU profile of the process to path ("": none)
// until stop, which may be called more than once.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		f.Close()
	}), nil
}

// parseInts parses flag -name's comma-separated list of positive
// integers; empty entries are skipped.
func parseInts(name, list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad -%s entry %q", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// rusage returns the user and the system CPU time the process has used
// (zero when the system does not say).
func rusage() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// cpuTime returns the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	user, sys := rusage()
	return user + sys
}

// ms is d in (fractional) milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchDocsPerTx is how many documents writeRepDocs writes per
// transaction.
const benchDocsPerTx = 200

// repDocID is the id of the i-th document writeRepDocs writes.
func repDocID(i int) string { return fmt.Sprintf("doc%08d", i) }

// writeRepDocs writes continuous replication documents from to to (ids
// repDocID(i), sources src<i> on an unreachable host, in database
// dbOf(i)) through the control plane, benchDocsPerTx per transaction.
func writeRepDocs(ctx context.Context, db kv.Database, plane *control.Plane, from, to int, dbOf func(int) string) error {
	return writeDocs(ctx, db, plane, from, to, func(i int) (string, string, any) {
		return dbOf(i), repDocID(i), map[string]any{"source": fmt.Sprintf("http://peer.invalid/src%08d", i), "target": "http://peer.invalid/tgt", "continuous": true}
	})
}

// writeDocs writes the replication documents from to to, document i
// being body in database db under id, through the control plane,
// benchDocsPerTx per transaction.
func writeDocs(ctx context.Context, db kv.Database, plane *control.Plane, from, to int, doc func(i int) (db, id string, body any)) error {
	for from < to {
		end := min(from+benchDocsPerTx, to)
		parsed := make([]api.ParsedDoc, 0, end-from)
		for i := from; i < end; i++ {
			dbName, id, body := doc(i)
			raw, err := json.Marshal(body)
			if err != nil {
				return err
			}
			p, err := plane.ParseDoc(dbName, id, raw, api.Admin())
			if err != nil {
				return err
			}
			parsed = append(parsed, p)
		}
		_, err := db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			for _, p := range parsed {
				if _, err := plane.DocWritten(ctx, tr, p); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		if err != nil {
			return err
		}
		from = end
	}
	return nil
}

// openFreshStore opens a new store as openStore does, in the subdirectory
// sub, and returns a function that closes it and removes its directory
// (close does it otherwise).
func (e *benchEnv) openFreshStore(sub string, inMemory bool) (kv.Database, func(), error) {
	db, err := e.openStore(sub, inMemory)
	if err != nil {
		return nil, nil, err
	}
	closer := e.closers[len(e.closers)-1]
	done := false
	e.closers[len(e.closers)-1] = func() {
		if !done {
			done = true
			closer()
			if !inMemory {
				os.RemoveAll(filepath.Join(e.dir, sub))
			}
		}
	}
	return db, e.closers[len(e.closers)-1], nil
}

// fdbServerCPU returns the CPU time the FoundationDB cluster's server
// processes used so far when they run on this machine, else 0
// (bench_fdb.go; nil without the fdb tag).
var fdbServerCPU func() time.Duration

// storeServerCPU is fdbServerCPU on FoundationDB, else 0 (the embedded
// store runs inside the measured process).
func storeServerCPU() time.Duration {
	if !onFDB() || fdbServerCPU == nil {
		return 0
	}
	return fdbServerCPU()
}

// describeFDB describes the FoundationDB cluster for the figures'
// headings (bench_fdb.go).
var describeFDB func() string

// storeKind says which store a benchmark measures, for its heading: the
// embedded store in memory or durable on disk, or FoundationDB (whose
// heading storeName gives).
func storeKind(inMemory bool) string {
	switch {
	case benchStore == storeFDBTLS:
		return "FoundationDB over mutual TLS"
	case onFDB():
		return "FoundationDB"
	case inMemory:
		return "the embedded store in memory"
	}
	return "the embedded store on disk (durable commits)"
}

// storeName describes store s for the figures' headings.
func storeName(s string) string {
	switch s {
	case storeFDB:
		return describeFDB()
	case storeFDBTLS:
		return describeFDB() + ", over mutual TLS"
	}
	return "the embedded store"
}

// newPlane returns a control plane with a job layer client of its own on
// db, set up (its types registered, the server UUID read), as a frontend
// node's.
func newPlane(ctx context.Context, db kv.Database, cfg replicator.Config) (*control.Plane, error) {
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return nil, err
	}
	plane, err := control.New(replicator.NewStore(db, jobs, nil), cfg)
	if err != nil {
		return nil, err
	}
	return plane, plane.Init(ctx)
}
