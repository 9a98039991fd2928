// Command fdbrep-bench runs fdbrep's benchmarks and prints their figures.
//
//	fdbrep-bench kv [flags]           storage layer (make bench-kv)
//	fdbrep-bench jobs [flags]         job layer (make bench-jobs)
//	fdbrep-bench replication [flags]  replication engine (make bench-replication)
//	fdbrep-bench scheduler [flags]    replication scheduler (make bench-scheduler)
//
// Each benchmark lives in its own file and registers itself in init.
package main

import (
	"fmt"
	"os"
	"sort"
)

// benchmarks maps a subcommand to its entry point, which receives the
// remaining arguments and returns an error to print.
var benchmarks = map[string]func(args []string) error{}

func register(name string, run func(args []string) error) { benchmarks[name] = run }

func main() {
	if len(os.Args) < 2 || benchmarks[os.Args[1]] == nil {
		names := make([]string, 0, len(benchmarks))
		for n := range benchmarks {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: fdbrep-bench <benchmark> [flags]\nbenchmarks: %v\n", names)
		os.Exit(2)
	}
	if err := benchmarks[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "fdbrep-bench:", err)
		os.Exit(1)
	}
}
