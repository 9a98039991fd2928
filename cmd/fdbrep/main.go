// Command fdbrep runs fdbrep nodes.
//
//	fdbrep serve [flags]           run a node (see fdbrep serve -h)
//	fdbrep cluster [flags]         development: several nodes in one process on one embedded store
//	fdbrep hash-password [flags]   hash a password read from stdin for [admins] / [users]
//	fdbrep version                 print the version
//
// A node runs the roles of [node] roles (or -roles): api_frontend serves the
// CouchDB-compatible HTTP API (package frontend), replication runs
// replication jobs (package replicator); by default both, on the embedded
// store. Configuration: CouchDB-style ini files (-config), then
// FDBREP_<SECTION>__<KEY> environment variables, then flags; see
// docs/CONFIG.md. SIGTERM and SIGINT shut the node down gracefully.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/fdbrep/fdbrep/frontend"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// The store and the job layer allocate many short-lived objects per
	// transaction; a GC target of 200% (instead of Go's 100%) cut CPU per
	// job by about a fifth in make bench-jobs, for a Go heap that may grow
	// to about three times its live size (pebble's block cache is outside
	// the Go heap). GOGC in the environment still wins.
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(GCPercentDefault)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "fdbrep:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: fdbrep serve [flags] | fdbrep cluster [flags] | fdbrep hash-password [flags] | fdbrep version")
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr, nil)
	case "cluster":
		return cluster(ctx, args[1:], stderr, nil)
	case "hash-password":
		return hashPassword(args[1:], os.Stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "fdbrep", version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (want serve, cluster, hash-password or version)", args[0])
	}
}

// hashPassword prints the CouchDB-format hash of the first line of in.
func hashPassword(args []string, in io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hash-password", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prf := fs.String("prf", "sha256", "PBKDF2 pseudo-random function: sha (CouchDB <= 3.3), sha256 or sha512")
	iterations := fs.Int("iterations", 600000, "PBKDF2 iterations")
	if err := fs.Parse(args); err != nil {
		return err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && err != io.EOF {
		return err
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return errors.New("hash-password: empty password on stdin")
	}
	h, err := frontend.HashPassword(password, *prf, *iterations)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, h)
	return nil
}

// GCPercentDefault is the garbage collector's target used unless GOGC is
// set (see main).
const GCPercentDefault = 200
