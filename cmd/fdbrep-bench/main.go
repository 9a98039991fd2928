// Command fdbrep-bench runs fdbrep's benchmarks and prints their figures.
//
//	fdbrep-bench kv [flags]           storage layer (make bench-kv)
//	fdbrep-bench jobs [flags]         job layer (make bench-jobs)
//	fdbrep-bench replication [flags]  replication engine (make bench-replication)
//	fdbrep-bench scheduler [flags]    replication scheduler (make bench-scheduler)
//	fdbrep-bench frontend [flags]     HTTP API of an api_frontend node (make bench-frontend)
//	fdbrep-bench views [flags]        scheduler view pages as jobs grow (make bench-views)
//	fdbrep-bench dormant [flags]      many replications, few active, against CouchDB 3.5 (make bench-dormant)
//	fdbrep-bench scale [flags]        100,000 documents on 3 replication nodes, a fourth joining (make bench-scale)
//	fdbrep-bench webhooks [flags]     webhook deliveries and their lag beside _scheduler/_changes (make bench-webhooks)
//
// Each benchmark lives in its own file and registers itself in init;
// jobs-node, which the jobs benchmark runs in processes of its own, is
// left out of the usage.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"sort"
)

// benchmarks maps a subcommand to its entry point, which receives the
// remaining arguments and returns an error to print.
var benchmarks = map[string]func(args []string) error{}

func register(name string, run func(args []string) error) { benchmarks[name] = run }

// hidden are the subcommands a benchmark runs in processes of its own
// (jobs-node): left out of the usage, and run without a store heading.
var hidden = map[string]bool{}

func main() {
	// The store and the job layer allocate many short-lived objects per
	// transaction; a GC target of 200% (instead of Go's 100%) cut CPU per
	// job by about a fifth in make bench-jobs, for a Go heap that may grow
	// to about three times its live size (pebble's block cache is outside
	// the Go heap). GOGC in the environment still wins.
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(GCPercentDefault)
	}
	if len(os.Args) < 2 || benchmarks[os.Args[1]] == nil {
		names := make([]string, 0, len(benchmarks))
		for n := range benchmarks {
			if !hidden[n] {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: fdbrep-bench <benchmark> [flags]\nbenchmarks: %v\n", names)
		os.Exit(2)
	}
	stores, err := benchStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdbrep-bench:", err)
		os.Exit(2)
	}
	for _, s := range stores {
		benchStore = s
		if !hidden[os.Args[1]] && (len(stores) > 1 || s != storeEmbedded) {
			fmt.Printf("\n=== store: %s\n", storeName(s))
		}
		if err := benchmarks[os.Args[1]](os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fdbrep-bench:", err)
			os.Exit(1)
		}
	}
	printTLSCost()
}

// GCPercentDefault matches fdbrep's own GC target, so the benchmarks measure
// what the server runs with; GOGC in the environment still wins.
const GCPercentDefault = 200
