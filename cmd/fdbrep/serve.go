package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cmd/internal/wire"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// Defaults of the serve flags.
const (
	// BindDefault is where the HTTP API listens: loopback and CouchDB's
	// port, so a node started by hand is not reachable from the network.
	BindDefault = "127.0.0.1:5984"
	// DataDirDefault is where the embedded store keeps its files.
	DataDirDefault = "./data"
	// ShutdownTimeoutDefault bounds a graceful shutdown.
	ShutdownTimeoutDefault = 30 * time.Second
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
}

// legacyEnv are variables that act as flags.
var legacyEnv = map[string]string{"bind": "FDBREP_BIND", "data-dir": "FDBREP_DATA_DIR", "log-format": "FDBREP_LOG_FORMAT"}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
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
	if err := fs.Parse(args); err != nil {
		return serveConfig{}, err
	}
	if fs.NArg() > 0 {
		return serveConfig{}, fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if len(files) == 0 {
		if v := os.Getenv("FDBREP_CONFIG"); v != "" {
			files = strings.Split(v, ",")
		}
	}
	// Flags become overrides after the environment's.
	given := map[string]string{}
	for name, env := range legacyEnv {
		if v, ok := os.LookupEnv(env); ok {
			given[name] = v
		}
	}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	var overrides []string
	for name, v := range given {
		if name == "config" {
			continue
		}
		if name == "bind" {
			host, port, err := net.SplitHostPort(v)
			if err != nil {
				return serveConfig{}, fmt.Errorf("serve: -bind %q: %w", v, err)
			}
			overrides = append(overrides, config.EnvName("chttpd", "bind_address")+"="+host, config.EnvName("chttpd", "port")+"="+port)
			continue
		}
		key := flagOverrides[name]
		overrides = append(overrides, config.EnvName(key[0], key[1])+"="+v)
	}
	cfg, err := config.Load(files, append(os.Environ(), overrides...))
	if err != nil {
		return serveConfig{}, fmt.Errorf("serve: %w", err)
	}
	if !cfg.Bool("fdb", "in_memory") && cfg.String("fdb", "backend") == "embedded" && cfg.String("fdb", "data_dir") == "" {
		return serveConfig{}, errors.New("serve: -data-dir ([fdb] data_dir) must not be empty")
	}
	return serveConfig{cfg: cfg}, nil
}

func openStore(cfg *config.Config) (kv.Database, error) {
	switch cfg.String("fdb", "backend") {
	case "fdb":
		return openFDB(cfg.String("fdb", "cluster_file"))
	default:
		opts := embedded.Options{Dir: cfg.String("fdb", "data_dir")}
		if cfg.Bool("fdb", "in_memory") {
			opts = embedded.Options{InMemory: true}
		}
		db, err := embedded.Open(opts)
		if err != nil {
			return nil, fmt.Errorf("open embedded store: %w", err)
		}
		return db, nil
	}
}

func secs(cfg *config.Config, key string) time.Duration {
	return time.Duration(cfg.Int("replicator", key)) * time.Second
}

func millis(cfg *config.Config, section, key string) time.Duration {
	return time.Duration(cfg.Int(section, key)) * time.Millisecond
}

// fairShareWindow maps fair_share_window_sec to Config.FairShareWindow:
// the default (86400) is the replicator's FairShareWindowDefault with fair
// share on; 0 disables fair share, which the replicator spells as a
// negative window (its zero value means "use the default").
func fairShareWindow(cfg *config.Config) time.Duration {
	window := secs(cfg, "fair_share_window_sec")
	if window == 0 {
		return -1
	}
	return window
}

// clusterConfig maps [replicator] and [replicator.shares] to the
// replicator's cluster-wide settings.
func clusterConfig(cfg *config.Config, log *zerolog.Logger, metrics *replicator.Metrics) replicator.Config {
	return replicator.Config{
		JobTimeout:      secs(cfg, "job_timeout_sec"),
		MaxHistory:      int(cfg.Int("replicator", "max_history")),
		StartupJitter:   millis(cfg, "replicator", "startup_jitter"),
		Shares:          cfg.AllShares(),
		UsageCoeff:      cfg.Float("replicator", "usage_coeff"),
		PriorityCoeff:   cfg.Float("replicator", "priority_coeff"),
		FairShareWindow: fairShareWindow(cfg),
		Metrics:         metrics,
		Logger:          log,
	}
}

// nodeConfig maps [replicator] to a replication node's settings.
func nodeConfig(cfg *config.Config, cluster replicator.Config, docs replicator.DocUpdater) (scheduler.Config, error) {
	defaults, err := jobDefaults(cfg)
	if err != nil {
		return scheduler.Config{}, err
	}
	return scheduler.Config{
		Config:              cluster,
		NodeName:            cfg.NodeName(),
		MaxJobs:             int(cfg.Int("replicator", "max_jobs")),
		MaxChurn:            int(cfg.Int("replicator", "max_churn")),
		MaxAcceptors:        int(cfg.Int("replicator", "max_acceptors")),
		Interval:            cfg.Interval(),
		MinRunTime:          secs(cfg, "min_run_time_sec"),
		MinBackoff:          secs(cfg, "min_backoff_penalty_sec"),
		MaxBackoff:          secs(cfg, "max_backoff_penalty_sec"),
		HealthThreshold:     secs(cfg, "health_threshold_sec"),
		TransientJobMaxAge:  secs(cfg, "transient_job_max_age_sec"),
		StatsUpdateInterval: secs(cfg, "stats_update_interval_sec"),
		JobDefaults:         defaults,
		DocUpdater:          docs,
	}, nil
}

// jobDefaults maps [replicator]'s defaults of the replications' own
// settings; socket_options that fdbrep cannot apply is an error.
func jobDefaults(cfg *config.Config) (replicator.JobDefaults, error) {
	retries := int(cfg.Int("replicator", "retries_per_request"))
	if retries == 0 {
		retries = -1 // the engine's "no retries"
	}
	socket, err := couch.ParseSocketOptions(cfg.String("replicator", "socket_options"))
	if err != nil {
		return replicator.JobDefaults{}, fmt.Errorf("%w: [replicator] %s", config.ErrInvalidValue,
			strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
	}
	return replicator.JobDefaults{
		WorkerProcesses:    int(cfg.Int("replicator", "worker_processes")),
		WorkerBatchSize:    int(cfg.Int("replicator", "worker_batch_size")),
		HTTPConnections:    int(cfg.Int("replicator", "http_connections")),
		ConnectionTimeout:  millis(cfg, "replicator", "connection_timeout"),
		RetriesPerRequest:  retries,
		CheckpointInterval: millis(cfg, "replicator", "checkpoint_interval"),
		NoCheckpoints:      !cfg.Bool("replicator", "use_checkpoints"),
		NoBulkGet:          !cfg.Bool("replicator", "use_bulk_get"),
		SocketOptions:      &socket,
	}, nil
}

// clientSettings maps [replicator]'s TLS and authentication keys to the
// settings of every replication's HTTP clients, reading the certificate
// files: a missing or unreadable file, or a wrong key passphrase, is a
// configuration error here, at start-up.
func clientSettings(cfg *config.Config) (engine.ClientSettings, error) {
	depth := int(cfg.Int("replicator", "ssl_certificate_max_depth"))
	if depth == 0 {
		depth = couch.MaxDepthNone
	}
	tlsCfg, err := couch.TLSSettings{
		NoVerify:    !cfg.Bool("replicator", "verify_ssl_certificates"),
		CAFile:      cfg.String("replicator", "ssl_trusted_certificates_file"),
		MaxDepth:    depth,
		CertFile:    cfg.String("replicator", "cert_file"),
		KeyFile:     cfg.String("replicator", "key_file"),
		KeyPassword: cfg.String("replicator", "password"),
	}.Config()
	if err != nil {
		return engine.ClientSettings{}, fmt.Errorf("%w: %s", config.ErrInvalidValue,
			strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
	}
	auth := couch.AuthBasic
	if slices.Contains(cfg.List("replicator", "auth_plugins"), "couch_replicator_auth_session") {
		auth = couch.AuthSession
	}
	return engine.ClientSettings{
		TLS:                    tlsCfg,
		Auth:                   auth,
		SessionRefreshInterval: secs(cfg, "session_refresh_interval_sec"),
	}, nil
}

func jobsConfig(cfg *config.Config, log *zerolog.Logger) fdbjobs.Config {
	return fdbjobs.Config{
		Logger:                   log,
		ActivityMonitorMaxJitter: millis(cfg, "couch_jobs", "activity_monitor_max_jitter_msec"),
		NotifierHoldoff:          millis(cfg, "couch_jobs", "type_monitor_holdoff_msec"),
		TypeCheckPeriod:          millis(cfg, "couch_jobs", "type_check_period_msec"),
		BatchSize:                int(cfg.Int("couch_jobs", "batch_size")),
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
	log, db, err := start(sc.cfg, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	return runNode(ctx, sc.cfg, db, log, ready)
}

// start makes the logger of cfg, logs what the configuration ignored and
// opens the store.
func start(cfg *config.Config, stderr io.Writer) (nodeLog, kv.Database, error) {
	log := newLogger(cfg, stderr)
	for _, w := range cfg.Warnings() {
		log.Warn().Msg("config: " + w)
	}
	db, err := openStore(cfg)
	return log, db, err
}

// runNode runs the roles of cfg on an open store until ctx ends, then
// shuts them down gracefully (see serve). Several nodes can share one
// store in a process (fdbrep cluster).
func runNode(ctx context.Context, cfg *config.Config, db kv.Database, lg nodeLog, ready chan<- string) error {
	log := lg.Logger
	// A replication node reads its endpoints' certificate files before
	// anything starts: a bad file stops it here, not a replication later.
	var client engine.ClientSettings
	if cfg.HasRole(config.RoleReplication) {
		var err error
		if client, err = clientSettings(cfg); err != nil {
			return err
		}
		if _, err := jobDefaults(cfg); err != nil {
			return err
		}
		if client.TLS.InsecureSkipVerify {
			log.Warn().Msg("config: [replicator] verify_ssl_certificates is false: the certificates of https endpoints are not checked")
		}
	}
	// The HTTP API's settings too (accounts, [chttpd] utils_dir); its
	// plaintext passwords are hashed once, here: the configurations merged
	// with runtime settings later keep these hashes.
	var apiOpts frontend.Options
	if cfg.HasRole(config.RoleAPIFrontend) {
		hashed, plain, err := frontend.HashConfigPasswords(cfg)
		if err != nil {
			return err
		}
		for _, name := range plain {
			log.Warn().Str("user", name).Msg("config: plaintext password hashed in memory; store a hash instead (fdbrep hash-password)")
		}
		if apiOpts, _, err = frontend.OptionsFromConfig(hashed); err != nil {
			return err
		}
		cfg = hashed
	}
	jobs, err := fdbjobs.New(db, jobsConfig(cfg, &log))
	if err != nil {
		return err
	}
	// Services start on a background context and are stopped in order by
	// the deferred calls: listeners drain first, then the replication node
	// checkpoints and re-enqueues its jobs, then the job layer and store.
	if err := jobs.Start(context.Background()); err != nil {
		return err
	}
	defer jobs.Stop()
	var node *scheduler.Node
	defer func() {
		if node != nil {
			node.Stop()
		}
	}()

	// The node's membership and runtime configuration: from here on cfg
	// holds the settings changed through _config too.
	docs := repdb.New(db, repdb.Options{})
	live := &liveServices{log: lg, docs: docs}
	cn, err := loadClusterNode(ctx, cfg, db, lg, live)
	if err != nil {
		return err
	}
	cfg = cn.Config()
	metrics := replicator.NewMetrics()
	shared := clusterConfig(cfg, &log, metrics)

	var servers []*frontend.HTTPServer
	errc := make(chan error, 2)
	limits := frontend.LimitsFromConfig(cfg)
	listen := func(addr string, h http.Handler, what string) (string, error) {
		srv, err := frontend.NewHTTPServer(h, limits)
		if err != nil {
			return "", err
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return "", fmt.Errorf("%s listener: %w", what, err)
		}
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
		_, capacity := srv.Connections()
		log.Info().Str("addr", ln.Addr().String()).Int("max_connections", capacity).Msg(what + " listening")
		return ln.Addr().String(), nil
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeoutDefault)
		defer cancel()
		for _, srv := range servers {
			if err := srv.Shutdown(sctx); err != nil {
				_ = srv.Close() // requests still running (one-shot _replicate) are cut
			}
		}
	}()

	readyAddr := ""
	if cfg.HasRole(config.RoleReplication) {
		ncfg, err := nodeConfig(cfg, shared, docs)
		if err != nil {
			return err
		}
		ncfg.Cluster = cn // the replication nodes balance their jobs through the membership records
		n, err := scheduler.New(db, jobs, replicator.EngineDefault{Logger: log, Client: client}, ncfg)
		if err != nil {
			return err
		}
		if err := n.Start(context.Background()); err != nil {
			return err
		}
		node, live.node = n, n
		log.Info().Int("max_jobs", ncfg.MaxJobs).Msg("replication node started")
		if addr := cfg.String("node", "health_address"); addr != "" {
			if readyAddr, err = listen(addr, healthHandler(db, metrics), "health"); err != nil {
				return err
			}
		}
	}
	if cfg.HasRole(config.RoleAPIFrontend) {
		opts := apiOpts
		if opts.Accounts, _, err = frontend.AccountsFromConfig(cfg); err != nil {
			return err
		}
		plane, err := control.New(db, jobs, shared)
		if err != nil {
			return err
		}
		plane.SetMembership(cn) // jobs of dead nodes are shown pending at once
		// Register the job type and read the server UUID before the first
		// request, so a frontend-only cluster serves document writes and
		// POST /_replicate without any replication node having run.
		if err := plane.Init(ctx); err != nil {
			return fmt.Errorf("replicator control plane setup: %w", err)
		}
		if opts.UUID, err = plane.ServerUUID(ctx); err != nil {
			return err
		}
		opts.DB, opts.Logger, opts.Version, opts.Cluster = db, &log, version, cn
		wire.Frontend(&opts, plane)
		api, err := frontend.New(opts)
		if err != nil {
			return err
		}
		live.plane, live.api = plane, api
		if err := api.Init(ctx); err != nil {
			return fmt.Errorf("create _replicator: %w", err)
		}
		if opts.UtilsDir != "" {
			log.Info().Str("utils_dir", opts.UtilsDir).Msg("Fauxton served at /_utils/")
		} else {
			log.Info().Msg("Fauxton is not installed: /_utils/ says how to get it (make fauxton, or [chttpd] utils_dir)")
		}
		if readyAddr, err = listen(cfg.BindAddress(), api, "HTTP API"); err != nil {
			return err
		}
	}
	// Heartbeats and runtime changes from now on: every service exists.
	if err := cn.Start(context.Background()); err != nil {
		return fmt.Errorf("joining the cluster: %w", err)
	}
	defer cn.Stop()
	log.Info().Strs("roles", cfg.Roles()).Bool("in_memory", cfg.Bool("fdb", "in_memory")).Str("backend", cfg.String("fdb", "backend")).Msg("fdbrep node up")
	if ready != nil {
		ready <- readyAddr
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	return nil
}
