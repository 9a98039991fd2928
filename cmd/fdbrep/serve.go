package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cmd/internal/cli"
	"github.com/fdbrep/fdbrep/cmd/internal/node"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// Defaults of the serve flags.
const (
	// BindDefault is where the HTTP API listens: loopback and CouchDB's
	// port, so a node started by hand is not reachable from the network.
	BindDefault = "127.0.0.1:5984"
	// DataDirDefault is where the embedded store keeps its files.
	DataDirDefault = "./data"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// serveConfig is the resolved configuration of a node: config files, then
// FDBREP_<SECTION>__<KEY> variables, then flags (and the older FDBREP_BIND,
// FDBREP_DATA_DIR, FDBREP_LOG_FORMAT variables, which act as flags).
type serveConfig struct {
	cfg *config.Config
}

// flagOverrides maps serve flags to the config keys they set.
var flagOverrides = map[string][2]string{
	"data-dir":     {"fdb", "data_dir"},
	"in-memory":    {"fdb", "in_memory"},
	"log-format":   {"log", "format"},
	"log-level":    {"log", "level"},
	"roles":        {"node", "roles"},
	"health-bind":  {"node", "health_address"},
	"node-name":    {"node", "name"},
	"backend":      {"fdb", "backend"},
	"cluster-file": {"fdb", "cluster_file"},
	"migrate-jobs": {"couch_jobs", "migrate"},
	"replace-uuid": {"couchdb", "replace_uuid"},
}

// serveUsage heads fdbrep serve's -h.
const serveUsage = `usage: fdbrep serve [flags]

Runs a node: CouchDB's HTTP API (role api_frontend) and/or replication jobs
(role replication), on the embedded store in -data-dir or on FoundationDB.
Every setting is also an ini key (-config) and an FDBREP_<SECTION>__<KEY>
variable; a flag wins over both. docs/CONFIG.md lists them.

flags:
`

// legacyEnv are variables that act as flags.
var legacyEnv = map[string]string{"bind": "FDBREP_BIND", "data-dir": "FDBREP_DATA_DIR", "log-format": "FDBREP_LOG_FORMAT"}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	var files listFlag
	fs.Var(&files, "config", "CouchDB-style ini file; repeat for several, later ones win (env FDBREP_CONFIG, comma-separated)")
	fs.String("bind", BindDefault, "address of the HTTP API, host:port ([chttpd] bind_address and port; env FDBREP_BIND)")
	fs.String("data-dir", DataDirDefault, "directory of the embedded store ([fdb] data_dir; env FDBREP_DATA_DIR)")
	fs.Bool("in-memory", false, "keep the embedded store in memory only: nothing survives a restart ([fdb] in_memory)")
	fs.String("log-format", "console", "log format: console or json ([log] format; env FDBREP_LOG_FORMAT)")
	fs.String("log-level", "info", "least severity logged: debug, info, warn, error ([log] level)")
	fs.String("roles", "api_frontend,replication", "roles of this node: api_frontend, replication or both ([node] roles)")
	fs.String("health-bind", "", "optional loopback address for /_up and metrics, e.g. 127.0.0.1:5986 ([node] health_address)")
	fs.String("node-name", "", "node name in _scheduler output ([node] name; default fdbrep@<hostname>)")
	fs.String("backend", "embedded", "storage backend: embedded or fdb ([fdb] backend)")
	fs.String("cluster-file", "", "FoundationDB cluster file for -backend fdb ([fdb] cluster_file)")
	fs.Bool("replace-uuid", false, "make [couchdb] uuid the server UUID of a store that holds another; every replication id changes; stop every node first ([couchdb] replace_uuid)")
	fs.Bool("migrate-jobs", false, "rewrite a store an earlier fdbrep wrote into this version's job layout, at start; stop every node of the earlier version first ([couch_jobs] migrate)")
	rest, err := cli.ParseFlags(fs, args, false)
	if err != nil {
		return serveConfig{}, err
	}
	if len(rest) > 0 {
		return serveConfig{}, &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("serve: unexpected arguments %q", rest)}
	}
	if len(files) == 0 {
		if v := os.Getenv("FDBREP_CONFIG"); v != "" {
			files = strings.Split(v, ",")
		}
	}
	// Flags become overrides after the environment's, named as the user
	// gave them: a flag, or one of the variables that act as flags.
	type given struct{ value, source string }
	byFlag := map[string]given{}
	for name, env := range legacyEnv {
		if v, ok := os.LookupEnv(env); ok {
			byFlag[name] = given{v, "env " + env}
		}
	}
	fs.Visit(func(f *flag.Flag) { byFlag[f.Name] = given{f.Value.String(), "flag -" + f.Name} })
	var overrides []config.Override
	for name, g := range byFlag {
		if name == "config" {
			continue
		}
		if name == "bind" {
			host, port, err := net.SplitHostPort(g.value)
			if err != nil {
				return serveConfig{}, &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("serve: -bind %q: %w", g.value, err)}
			}
			overrides = append(overrides, config.Override{Section: "chttpd", Key: "bind_address", Value: host, Source: g.source},
				config.Override{Section: "chttpd", Key: "port", Value: port, Source: g.source})
			continue
		}
		key := flagOverrides[name]
		overrides = append(overrides, config.Override{Section: key[0], Key: key[1], Value: g.value, Source: g.source})
	}
	cfg, err := config.LoadWith(files, os.Environ(), overrides)
	if err != nil {
		return serveConfig{}, fmt.Errorf("serve: %w", err)
	}
	if !cfg.Bool("fdb", "in_memory") && cfg.String("fdb", "backend") == "embedded" && cfg.String("fdb", "data_dir") == "" {
		return serveConfig{}, errors.New("serve: -data-dir ([fdb] data_dir) must not be empty")
	}
	if cfg.Bool("fdb", "in_memory") && cfg.String("fdb", "backend") == "fdb" {
		return serveConfig{}, errors.New("serve: -in-memory ([fdb] in_memory) is an option of the embedded store, not of FoundationDB (-backend fdb)")
	}
	return serveConfig{cfg: cfg}, nil
}

func openStore(ctx context.Context, cfg *config.Config, log *zerolog.Logger) (kv.Database, error) {
	switch cfg.String("fdb", "backend") {
	case "fdb":
		return openFDB(ctx, cfg, log)
	default:
		opts := embedded.Options{Dir: cfg.String("fdb", "data_dir")}
		if cfg.Bool("fdb", "in_memory") {
			opts = embedded.Options{InMemory: true}
		}
		db, err := embedded.Open(opts)
		if errors.Is(err, embedded.ErrInUse) {
			return nil, fmt.Errorf("%w: another fdbrep node runs on this data directory; stop it, or give this one another -data-dir ([fdb] data_dir)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("open embedded store: %w", err)
		}
		return db, nil
	}
}

// serve runs a node until ctx ends, then shuts it down gracefully: the
// HTTP listeners stop accepting and drain, the replication node
// checkpoints and re-enqueues its jobs, and the store is closed. When
// ready is not nil, the API address (or, on a node without api_frontend,
// the health address, or "") is sent on it once the node serves.
func serve(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	sc, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	log, db, err := start(ctx, sc.cfg, stderr)
	if err != nil && ctx.Err() != nil {
		// Interrupted before the node was up (waiting for its store): an
		// interrupt is not a failure, as after start-up.
		log.Info().Msg(err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	defer db.Close()
	// A node with both roles seals with a key of its data directory unless
	// one is configured (node.DataDirSealing).
	cfg, err := node.DataDirSealing(sc.cfg, sc.cfg.HasRole(config.RoleAPIFrontend) && sc.cfg.HasRole(config.RoleReplication), log)
	if err != nil {
		return err
	}
	return node.Run(ctx, node.Options{Config: cfg, DB: db, Log: log, Version: buildVersion(), Ready: readyAddr(ready)})
}

// readyAddr reports a node's address on ready (nil: nothing).
func readyAddr(ready chan<- string) func(*node.Parts) {
	if ready == nil {
		return nil
	}
	return func(p *node.Parts) { ready <- p.Addr }
}

// start makes the logger of cfg, logs what the configuration ignored and
// opens the store.
func start(ctx context.Context, cfg *config.Config, stderr io.Writer) (node.Log, kv.Database, error) {
	log := node.NewLog(cfg, stderr)
	for _, w := range cfg.Warnings() {
		log.Warn().Msg("config: " + w)
	}
	db, err := openStore(ctx, cfg, &log.Logger)
	return log, db, err
}
