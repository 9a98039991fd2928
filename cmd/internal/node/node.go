package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/cmd/internal/wire"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/fdbjobs/jobshttp"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// ShutdownTimeoutDefault bounds the drain of a node's HTTP listeners at
// shutdown.
const ShutdownTimeoutDefault = 30 * time.Second

// Options are what Run needs.
type Options struct {
	// Config is the node's start-up configuration (files, environment,
	// flags): its roles, settings and accounts.
	Config *config.Config
	// DB is the open store; Run does not close it.
	DB kv.Database
	// Log is the node's logger (NewLog).
	Log Log
	// Version is reported by the node (GET /, /_membership).
	Version string
	// Engine runs the replications; nil is the replication protocol's
	// engine with the [replicator] client settings (TLS, authentication).
	Engine replicator.Engine
	// NoListen opens no listener: the caller serves Parts.API and
	// Parts.Health itself (a simulation calls them directly).
	NoListen bool
	// Ready, when not nil, is called once the node serves, with its parts.
	Ready func(*Parts)
	// Tune, when not nil, adjusts the replication node's own settings each
	// time they are built from the configuration (at start and at each
	// runtime change), after the configuration's checks: for tests whose
	// intervals are shorter than the configuration's ranges allow.
	// scheduler.New still checks what it gives. The part the node shares
	// with the control plane and the store (scheduler.Config.Config: the
	// job timeout above all, which the store holds as the job type's) is
	// the configuration's whatever Tune does.
	Tune func(*scheduler.Config)
	// Lookup, when not nil, resolves the names of endpoints' hosts when a
	// replication is written (couch.AddressPolicy.Lookup); nil is the
	// system's resolver. A simulation gives its own: a real DNS query
	// inside testing/synctest's bubble waits on the network, which the
	// bubble's clock cannot tell from work, and never times out.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Parts are a running node's services, for its caller: what it serves,
// and the pieces tests look into. A part of a role the node does not run
// is nil.
type Parts struct {
	// Addr is the API's address, or on a node without api_frontend the
	// health listener's, or "" (none, or NoListen); with [ssl] https_only
	// the HTTPS API's.
	Addr string
	// HTTPSAddr is the HTTPS API's address ([ssl] enable), or "".
	HTTPSAddr string
	// HealthAddr is the health listener's address ([node]
	// health_address on a replication node), or "".
	HealthAddr string
	// API is the HTTP API (api_frontend).
	API http.Handler
	// Health serves /_up, stats and metrics without authentication
	// (replication).
	Health http.Handler
	// Plane is the control plane behind the API (api_frontend).
	Plane *control.Plane
	// Scheduler is the replication node's job server (replication).
	Scheduler *scheduler.Node
	// Member is the node's cluster membership and runtime configuration.
	Member *cluster.Node
	// Jobs is the node's job-layer client.
	Jobs *fdbjobs.Client
	// Metrics are the replicator's metrics.
	Metrics *replicator.Metrics
}

// Run runs the roles of opts.Config on opts.DB until ctx ends, then shuts
// them down gracefully: the HTTP listeners stop accepting and drain, the
// replication node checkpoints and re-enqueues its jobs, and the job layer
// stops (the caller closes the store). Several nodes can share one store
// in a process (fdbrep cluster).
func Run(ctx context.Context, opts Options) error {
	cfg, db, lg := opts.Config, opts.DB, opts.Log
	log := lg.Logger
	// A replication node reads its endpoints' certificate files before
	// anything starts: a bad file stops it here, not a replication later.
	var client engine.ClientSettings
	if cfg.HasRole(config.RoleReplication) {
		var err error
		if client, err = replicator.ClientSettingsFromConfig(cfg); err != nil {
			return err
		}
		if _, err := replicator.JobDefaultsFromConfig(cfg); err != nil {
			return err
		}
		if !cfg.Bool("replicator", "verify_ssl_certificates") {
			log.Warn().Msg("config: [replicator] verify_ssl_certificates is false: the certificates of https endpoints are not checked")
		}
	}
	// The HTTP API's settings too (accounts, [chttpd] utils_dir); its
	// plaintext passwords are hashed once, here: the configurations merged
	// with runtime settings later keep these hashes.
	var apiOpts frontend.Options
	var https frontend.HTTPS
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
		// [ssl] too, with its files: a bad certificate stops the node
		// before its replication role takes any job.
		if https, err = frontend.HTTPSFromConfig(hashed); err != nil {
			return err
		}
		cfg = hashed
	}
	// The ports are bound before anything is created: a port in use (a
	// CouchDB on 5984) stops the node here, before the first-run admin is
	// created and its one-time password printed, which a failed start
	// would lose. They are served once the node's services exist.
	lns, err := bind(cfg, https, opts.NoListen)
	if err != nil {
		return err
	}
	defer lns.close()
	// The sealing keys: the public one seals on api_frontend nodes, the
	// private ones open on replication nodes.
	sealer, opener, err := replicator.SealingFromConfig(cfg, cfg.HasRole(config.RoleAPIFrontend), cfg.HasRole(config.RoleReplication))
	if err != nil {
		return err
	}
	// (An in-memory store keeps nothing at rest, nor backups, to warn of.)
	if cfg.HasRole(config.RoleAPIFrontend) && sealer == nil && !cfg.Bool("fdb", "in_memory") {
		log.Warn().Msg("config: [replicator] seal_public_key_file is not set: endpoint credentials are stored as written, " +
			"readable in the store and its backups (docs/CONFIG.md, seal_public_key_file)")
	}
	accepting := &acceptingNodes{self: cfg.NodeName()}
	jobs, err := fdbjobs.New(db, jobsConfig(cfg, &log, accepting.list))
	if err != nil {
		return err
	}
	jobsMetrics, err := jobsRegistry(jobs)
	if err != nil {
		return err
	}
	if keyMigrate.Get(cfg) {
		log.Info().Msg("fdbjobs: migrating the store's jobs to this version's key layout, if an earlier one wrote them")
		if err := jobs.Migrate(ctx); err != nil {
			return err
		}
	}
	// One replicator store for the process: its control plane and its
	// replication node share it (and the re-enqueue hook it installs on
	// jobs).
	store := replicator.NewStore(db, jobs, nil)
	if err := jobs.CheckLayout(ctx); errors.Is(err, fdbjobs.ErrLayout) {
		return fmt.Errorf("%w; if an earlier fdbrep wrote it, stop every node of that version, then start this one once with -migrate-jobs ([couch_jobs] migrate = true)", err)
	} else if err != nil {
		return err
	}
	// The server UUID an operator brings ([couchdb] uuid), before any
	// service reads the store's: replication ids depend on it.
	if uuid, replace := replicator.ServerUUIDFromConfig(cfg); uuid != "" {
		had, err := store.EnsureServerUUID(ctx, uuid, replace)
		if err != nil {
			return err
		}
		if had != "" && had != uuid {
			log.Warn().Str("was", had).Str("uuid", uuid).Msg("server UUID replaced ([couchdb] replace_uuid): every replication id changed")
		}
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
	live := &liveServices{log: lg, docs: docs, tune: opts.Tune}
	cn, err := loadClusterNode(ctx, cfg, db, lg, opts.Version, live)
	if err != nil {
		return err
	}
	cfg = cn.Config()
	metrics := replicator.NewMetrics()
	metrics.Observe(replicator.MetricNodeHeartbeatAge, func() int64 {
		if age := cn.HeartbeatAge(); age >= 0 {
			return int64(age / time.Second)
		}
		return -1
	})
	prom := &nodeMetrics{Metrics: metrics, jobs: jobsMetrics, log: &log}
	shared := clusterConfig(cfg, &log, metrics)
	shared.Sealer, shared.Opener = sealer, opener
	// The addresses endpoints may not reach: one policy for the control
	// plane's checks of what is written and the engine's of every
	// connection, following runtime changes; the health port is the
	// node's own, refused on every local address. (The API's ports are
	// not: they authenticate every request, and a node's replicator
	// backing up its own _replicator database goes through them.)
	addresses, err := replicator.AddressPolicyFromConfig(cfg)
	if err != nil {
		return err
	}
	addresses.Lookup = opts.Lookup
	if lns.health != nil {
		addresses.DenyOwn(lns.health.Addr())
	}
	shared.Addresses, client.Addresses, live.addresses = addresses, addresses, addresses

	var servers []*frontend.HTTPServer
	errc := make(chan error, 2)
	limits := frontend.LimitsFromConfig(cfg)
	listen := func(ln net.Listener, h http.Handler, what string, tlsCfg *tls.Config) (string, error) {
		if ln == nil {
			return "", nil
		}
		srv, err := frontend.NewHTTPServer(h, limits)
		if err != nil {
			return "", err
		}
		servers = append(servers, srv)
		go func() {
			if tlsCfg != nil {
				errc <- srv.ServeTLS(ln, tlsCfg)
				return
			}
			errc <- srv.Serve(ln)
		}()
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
	parts := &Parts{Metrics: metrics}
	if cfg.HasRole(config.RoleReplication) {
		ncfg, err := nodeConfig(cfg, shared, docs, opts.Tune)
		if err != nil {
			return err
		}
		// The replication nodes balance their jobs through the membership
		// records, and their acceptors take from the queue's shards by it.
		accepting.Membership = cn
		ncfg.Cluster = accepting
		eng := opts.Engine
		if eng == nil {
			// One 429 back-off per node, as CouchDB's: the runs to a host
			// that answered 429 slow down together.
			limiter, err := couch.NewRateLimiter(couch.RateLimiterConfig{})
			if err != nil {
				return err
			}
			eng = replicator.EngineDefault{Logger: log, Client: client, Logins: replicator.LoginsFromConfig(cfg), Pools: couch.NewPools(),
				Limiter: limiter, Metrics: metrics}
		}
		n, err := scheduler.New(store, eng, ncfg)
		if err != nil {
			return err
		}
		if err := n.Start(context.Background()); err != nil {
			return err
		}
		node, live.node = n, n
		parts.Scheduler = n
		log.Info().Int("max_jobs", ncfg.MaxJobs).Msg("replication node started")
		parts.Health = healthHandler(db, prom, cn, n)
		if lns.health != nil {
			if readyAddr, err = listen(lns.health, parts.Health, "health", nil); err != nil {
				return err
			}
			parts.HealthAddr = readyAddr
		}
	}
	if cfg.HasRole(config.RoleAPIFrontend) {
		fopts := apiOpts
		if fopts.Accounts, _, err = frontend.AccountsFromConfig(cfg); err != nil {
			return err
		}
		plane, err := control.New(store, shared)
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
		if fopts.UUID, err = plane.ServerUUID(ctx); err != nil {
			return err
		}
		fopts.DB, fopts.Logger, fopts.Version, fopts.Cluster = db, &log, opts.Version, cn
		if node != nil {
			fopts.UpMore = upMore(node)
		}
		wire.Frontend(&fopts, plane)
		fopts.Jobs = jobshttp.New(jobs, jobshttp.Options{Logger: &log,
			Managed: []string{replicator.JobType, replicator.WatchType, replicator.TriggerType}})
		fopts.Metrics = prom // the plane's, with the job layer's in _prometheus
		api, err := frontend.New(fopts)
		if err != nil {
			return err
		}
		live.plane, live.api = plane, api
		parts.Plane, parts.API = plane, api
		if err := api.Init(ctx); err != nil {
			return fmt.Errorf("create _replicator: %w", err)
		}
		if fopts.UtilsDir != "" {
			log.Info().Str("utils_dir", fopts.UtilsDir).Msg("Fauxton served at /_utils/")
		} else {
			log.Info().Msg("Fauxton is not installed: /_utils/ says how to get it (make fauxton, or [chttpd] utils_dir)")
		}
		if lns.http != nil {
			if readyAddr, err = listen(lns.http, api, "HTTP API", nil); err != nil {
				return err
			}
		}
		if lns.https != nil {
			tlsCfg, err := https.TLSConfig()
			if err != nil {
				return err
			}
			addr, err := listen(lns.https, api, "HTTPS API", tlsCfg)
			if err != nil {
				return err
			}
			parts.HTTPSAddr = addr
			if readyAddr == "" {
				readyAddr = addr
			}
		}
	}
	// Heartbeats and runtime changes from now on: every service exists.
	if err := cn.Start(context.Background()); err != nil {
		return fmt.Errorf("joining the cluster: %w", err)
	}
	defer cn.Stop()
	log.Info().Strs("roles", cfg.Roles()).Bool("in_memory", cfg.Bool("fdb", "in_memory")).Str("backend", cfg.String("fdb", "backend")).Msg("fdbrep node up")
	if opts.Ready != nil {
		parts.Addr, parts.Member, parts.Jobs = readyAddr, cn, jobs
		opts.Ready(parts)
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	return nil
}

// listeners are a node's bound ports; nil for a port it does not open.
type listeners struct {
	health, http, https net.Listener
}

// bind binds the ports of cfg's roles: the health address of a
// replication node, the HTTP and HTTPS APIs of an api_frontend node
// (https as cfg's [ssl] gives it); none with noListen. The ports are read
// from the start-up configuration: none of them changes at run time.
func bind(cfg *config.Config, https frontend.HTTPS, noListen bool) (*listeners, error) {
	l := &listeners{}
	if noListen {
		return l, nil
	}
	var err error
	open := func(addr, what string) net.Listener {
		if err != nil {
			return nil
		}
		ln, lerr := net.Listen("tcp", addr)
		if lerr != nil {
			err = fmt.Errorf("%s listener: %w", what, lerr)
		}
		return ln
	}
	if addr := cfg.String("node", "health_address"); addr != "" && cfg.HasRole(config.RoleReplication) {
		l.health = open(addr, "health")
	}
	if cfg.HasRole(config.RoleAPIFrontend) {
		if !https.Only {
			l.http = open(cfg.BindAddress(), "HTTP API")
		}
		if https.Enable {
			host, _, _ := net.SplitHostPort(cfg.BindAddress())
			l.https = open(net.JoinHostPort(host, strconv.Itoa(https.Port)), "HTTPS API")
		}
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// close closes the ports; a served one is closed already by its server's
// shutdown.
func (l *listeners) close() {
	for _, ln := range []net.Listener{l.health, l.http, l.https} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}
