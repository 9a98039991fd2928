// Command fdbrep runs fdbrep nodes, and is the terminal client of a
// cluster.
//
//	fdbrep serve [flags]           run a node (see fdbrep serve -h)
//	fdbrep cluster [flags]         development: several nodes in one process on one embedded store
//	fdbrep replicate [flags] SOURCE TARGET
//	                               run a replication on a cluster or in process, with a progress bar
//	fdbrep jobs [flags]            the cluster's _scheduler/jobs as a table (-watch refreshes)
//	fdbrep docs [flags] [DB [DOC]] the cluster's _scheduler/docs as a table (-watch refreshes)
//	fdbrep migrate-check [flags] URL
//	                               before moving a CouchDB's replications in: which keep their checkpoints
//	fdbrep hash-password [flags]   hash a password read from stdin for [admins] / [users]
//	fdbrep help [COMMAND]          usage
//	fdbrep version                 print the version
//
// A node runs the roles of [node] roles (or -roles): api_frontend serves the
// CouchDB-compatible HTTP API (package frontend), replication runs
// replication jobs (package replicator); by default both, on the embedded
// store. Configuration: CouchDB-style ini files (-config), then
// FDBREP_<SECTION>__<KEY> environment variables, then flags; see
// docs/CONFIG.md. SIGTERM and SIGINT shut the node down gracefully.
//
// The client commands are package cmd/internal/cli. Exit codes: 0 success,
// 1 failure, 2 a bad command line, 130 a command interrupted by Ctrl-C (a
// replication cancelled on the cluster or stopped in process with a
// checkpoint, a -watch, a request in flight).
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

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cmd/internal/cli"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// LogTimeFormat is the format of the "time" field of log lines: RFC 3339
// in milliseconds.
const LogTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func main() {
	// The store and the job layer allocate many short-lived objects per
	// transaction; a GC target of 200% (instead of Go's 100%) cut CPU per
	// job by about a fifth in make bench-jobs, for a Go heap that may grow
	// to about three times its live size (pebble's block cache is outside
	// the Go heap). GOGC in the environment still wins.
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(GCPercentDefault)
	}
	// Log times to the millisecond (zerolog's default is the second): the
	// lines of one job on several nodes must be ordered by them.
	zerolog.TimeFieldFormat = LogTimeFormat
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		os.Exit(exitCode(err, os.Stderr))
	}
}

// exitCode prints err (unless it is empty or a -h) and returns the process
// exit code it calls for: a cli.ExitError's, 2 for flag.ErrHelp, else 1.
func exitCode(err error, stderr io.Writer) int {
	var ee *cli.ExitError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return cli.ExitUsage
	case errors.As(err, &ee):
		if ee.Err != nil {
			fmt.Fprintln(stderr, "fdbrep:", ee.Err)
		}
		return ee.Code
	default:
		fmt.Fprintln(stderr, "fdbrep:", err)
		return cli.ExitFailure
	}
}

// usage is fdbrep help's text.
const usage = `usage: fdbrep COMMAND [flags]

Nodes:
  serve [flags]                    run a node: the HTTP API and/or replication jobs (fdbrep help serve)
  cluster [flags]                  development: several nodes in one process on one embedded store
  hash-password [flags]            hash a password read from stdin for [admins] / [users]

Terminal client (a cluster: -cluster URL or $FDBREP_CLUSTER; credentials:
-user/-password, the URL, $FDBREP_USER/$FDBREP_PASSWORD or ~/.netrc):
  replicate [flags] SOURCE TARGET  replicate on the cluster (POST /_replicate), or in process without
                                   one; a progress bar, a summary; Ctrl-C cancels
  jobs [flags]                     _scheduler/jobs as a table; -watch refreshes until Ctrl-C
  docs [flags] [DB [DOC]]          _scheduler/docs as a table; -watch refreshes until Ctrl-C

Moving in from CouchDB (README, "Migrating from CouchDB"):
  migrate-check [flags] URL        for each replication of the CouchDB at URL, whether it will go on
                                   from its checkpoint in fdbrep (a dry run: nothing is written)

  help [COMMAND]                   this text, or a command's flags
  version                          print the version

Exit codes: 0 success, 1 failure, 2 bad command line, 130 interrupted (Ctrl-C).
`

// help prints the usage, or a command's (its -h).
func help(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	switch args[0] {
	case "serve", "cluster", "hash-password", "replicate", "jobs", "docs", "migrate-check":
		err := run(ctx, []string{args[0], "-h"}, stdout, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	return fmt.Errorf("help: unknown command %q", args[0])
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &cli.ExitError{Code: cli.ExitUsage, Err: errors.New("no command given")}
	}
	env := cli.Env{Stdout: stdout, Stderr: stderr, JobDefaults: clientJobDefaults, Client: clientEndpoints}
	switch args[0] {
	case "replicate":
		return cli.Replicate(ctx, args[1:], env)
	case "jobs":
		return cli.Jobs(ctx, args[1:], env)
	case "docs":
		return cli.Docs(ctx, args[1:], env)
	case "migrate-check":
		return cli.MigrateCheck(ctx, args[1:], env)
	case "help", "-h", "-help", "--help":
		return help(ctx, args[1:], stdout, stderr)
	case "serve":
		return serve(ctx, args[1:], stderr, nil)
	case "cluster":
		return cluster(ctx, args[1:], stderr, nil)
	case "hash-password":
		return hashPassword(args[1:], os.Stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "fdbrep", buildVersion())
		return nil
	default:
		return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("unknown command %q (see fdbrep help)", args[0])}
	}
}

// hashPassword prints the CouchDB-format hash of the first line of in.
func hashPassword(args []string, in io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hash-password", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prf := fs.String("prf", "sha256", "PBKDF2 pseudo-random function: sha (CouchDB <= 3.3), sha256 or sha512")
	iterations := fs.Int("iterations", 600000, "PBKDF2 iterations")
	if _, err := cli.ParseFlags(fs, args, false); err != nil {
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

// clientConfig is the configuration an in-process fdbrep replicate reads,
// as a node does: the files in $FDBREP_CONFIG and FDBREP_* variables.
func clientConfig() (*config.Config, error) {
	var files []string
	if v := os.Getenv("FDBREP_CONFIG"); v != "" {
		files = strings.Split(v, ",")
	}
	return config.Load(files, os.Environ())
}

// clientJobDefaults are the defaults an in-process fdbrep replicate applies
// to the replication's tunables: a node's, from [replicator].
func clientJobDefaults() (replicator.JobDefaults, error) {
	cfg, err := clientConfig()
	if err != nil {
		return replicator.JobDefaults{}, err
	}
	return replicator.JobDefaultsFromConfig(cfg)
}

// clientEndpoints are the TLS and authentication settings an in-process
// fdbrep replicate uses: a node's, from [replicator].
func clientEndpoints() (engine.ClientSettings, error) {
	cfg, err := clientConfig()
	if err != nil {
		return engine.ClientSettings{}, err
	}
	return replicator.ClientSettingsFromConfig(cfg)
}
