package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	nodes "github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// A node's configuration at run time: the logger whose level [log] level
// sets, the checks a configuration merged with the runtime settings must
// pass (those a node applies at start-up), applying a new one to the
// node's services, and the server admin of a first run.

// Log is a node's logger, with the level filter that [log] level
// sets at run time, and the terminal (stderr) for the one message that
// must not go through the logger.
type Log struct {
	zerolog.Logger
	level  *levelFilter
	stderr io.Writer
}

// levelFilter drops log lines below its level; the logger above it logs
// at debug level, so that the level can change at run time in one place
// for every copy of the logger.
type levelFilter struct {
	w     io.Writer
	level atomic.Int32
}

func (f *levelFilter) Write(p []byte) (int, error) { return f.w.Write(p) }

// WriteLevel implements zerolog.LevelWriter.
func (f *levelFilter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	if l < zerolog.Level(f.level.Load()) {
		return len(p), nil
	}
	return f.w.Write(p)
}

// set sets the least level logged ([log] level, validated by config).
func (f *levelFilter) set(level string) {
	l, err := zerolog.ParseLevel(level)
	if err != nil {
		l = zerolog.InfoLevel
	}
	f.level.Store(int32(l))
}

func NewLog(cfg *config.Config, w io.Writer) Log {
	stderr := w
	if cfg.String("log", "format") == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	f := &levelFilter{w: w}
	f.set(cfg.String("log", "level"))
	log := zerolog.New(f).Level(zerolog.DebugLevel).With().Timestamp().Str("node", cfg.NodeName()).Logger()
	return Log{Logger: log, level: f, stderr: stderr}
}

// liveServices are the services of a node that take a new configuration
// at run time; nil ones are absent from the node.
type liveServices struct {
	log   Log
	plane *control.Plane
	node  *scheduler.Node
	api   *frontend.Server
	docs  replicator.DocUpdater
	tune  func(*scheduler.Config) // Options.Tune
	// addresses is the policy of the endpoints' addresses the control
	// plane and the engine share.
	addresses *couch.AddressPolicy

	prev *config.Config
}

// apply gives c to every service and logs each value that changed
// (secrets redacted). nodes.Node serializes the calls.
func (s *liveServices) apply(c *config.Config) {
	log := s.log.Logger
	s.log.level.set(c.String("log", "level"))
	cl := clusterConfig(c, &log, nil)
	// The policy the node's services share: it knows the node's own
	// listeners, and SetRules below gives it the new rules. A config built
	// here has none (nil: the node's deliveries would fall back to the
	// base rules, without the operator's networks or the own listeners).
	cl.Addresses = s.addresses
	if s.plane != nil {
		if err := s.plane.SetConfig(cl); err != nil {
			log.Error().Err(err).Msg("config: runtime change not applied to the control plane")
		}
	}
	if s.node != nil {
		ncfg, err := nodeConfig(c, cl, s.docs, s.tune)
		if err == nil {
			err = s.node.SetConfig(ncfg)
		}
		if err != nil {
			log.Error().Err(err).Msg("config: runtime change not applied to the replication node")
		}
	}
	if s.addresses != nil {
		rules, err := replicator.AddressRulesFromConfig(c)
		if err != nil {
			log.Error().Err(err).Msg("config: runtime change of the endpoints' addresses not applied")
		} else {
			s.addresses.SetRules(rules)
		}
	}
	if s.api != nil {
		accounts, _, err := frontend.AccountsFromConfig(c)
		if err != nil {
			log.Error().Err(err).Msg("config: runtime change of the accounts not applied")
		} else {
			s.api.SetAccounts(accounts)
		}
	}
	if s.prev != nil {
		before, after := nodes.Redact(s.prev), nodes.Redact(c)
		for _, sec := range slices.Sorted(maps.Keys(union(before, after))) {
			for _, k := range slices.Sorted(maps.Keys(union(before[sec], after[sec]))) {
				if v, ok := after[sec][k]; !ok {
					log.Info().Str("section", sec).Str("key", k).Msg("config: runtime change: removed")
				} else if old, had := before[sec][k]; !had || old != v {
					log.Info().Str("section", sec).Str("key", k).Str("value", v).Str("source", c.Source(sec, k)).Msg("config: runtime change")
				}
			}
		}
	}
	s.prev = c
}

func union[V any](a, b map[string]V) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// Server admin of a first run.
const (
	// FirstRunAdminName is the server admin a node creates when no admin
	// is configured anywhere.
	FirstRunAdminName = "admin"
	// FirstRunPasswordLength is the length of its random password
	// (rand.Text's base32 letters and digits: 120 bits).
	FirstRunPasswordLength = 24
)

// firstRunAdmin creates a server admin with a random password when none
// is configured: none in the files, the environment or the runtime
// settings. It keeps the password's hash in the cluster layer of the
// runtime settings ([admins] of /_node/_cluster/_config), so that every
// node of the cluster shares it and a restart keeps it (with the embedded
// store, in the data directory; -in-memory keeps nothing, so each start
// creates a new one). The password is written once to stderr, directly
// and never through the logger; of nodes starting together on an empty
// store, the one whose write wins prints it.
func firstRunAdmin(ctx context.Context, cn *nodes.Node, lg Log) error {
	if len(cn.Base().Admins()) > 0 {
		return nil
	}
	store := cn.Store()
	l, err := store.Layers(ctx, cn.Name())
	if err != nil {
		return err
	}
	if len(l.Cluster[config.SectionAdmins]) > 0 || len(l.Node[config.SectionAdmins]) > 0 {
		return nil
	}
	password := rand.Text()[:FirstRunPasswordLength]
	hashing := frontend.PasswordHashing(cn.Base())
	hash, err := frontend.HashPassword(password, hashing.PRF, hashing.Iterations)
	if err != nil {
		return err
	}
	created := false
	if _, err := store.Update(ctx, nodes.ScopeCluster, func(l *nodes.Layers) error {
		created = false
		if len(l.Cluster[config.SectionAdmins]) > 0 {
			// Another node was first, unless this is a retry finding the
			// write of an attempt that did commit.
			h, ok := l.Cluster.Get(config.SectionAdmins, FirstRunAdminName)
			created = ok && h == hash
			return nil
		}
		l.Cluster.Set(config.SectionAdmins, FirstRunAdminName, hash)
		created = true
		return nil
	}); err != nil {
		return err
	}
	if !created {
		return nil
	}
	fmt.Fprintf(lg.stderr, "\nfdbrep: no server admin was configured, so this one was created:\n\n"+
		"    name: %s\n    password: %s\n\n"+
		"This is the only time the password is shown. Its hash is kept in the store and every node\n"+
		"of the cluster uses it. Set your own admins in [admins], or with\n"+
		"PUT /_node/_cluster/_config/admins/{name}, and DELETE this one.\n\n", FirstRunAdminName, password)
	lg.Warn().Str("user", FirstRunAdminName).
		Msg("config: no server admin was configured; created one, whose password was printed on stderr once and is not logged")
	return nil
}

// loadClusterNode makes the node's cluster.Node over cfg (the start-up
// configuration, a frontend's plaintext passwords already hashed), creates
// the first-run admin on an api_frontend node, and loads the runtime
// settings; live receives their changes once the node starts.
func loadClusterNode(ctx context.Context, cfg *config.Config, db kv.Database, lg Log, version string, live *liveServices) (*nodes.Node, error) {
	log := lg.Logger
	cn, err := nodes.New(db, nodes.Options{Base: cfg, Version: version, Check: checkConfig, Apply: live.apply, Logger: &log})
	if err != nil {
		return nil, err
	}
	if cfg.HasRole(config.RoleAPIFrontend) {
		if err := firstRunAdmin(ctx, cn, lg); err != nil {
			return nil, fmt.Errorf("first-run admin: %w", err)
		}
	}
	if err := cn.Load(ctx); err != nil {
		return nil, fmt.Errorf("runtime configuration: %w", err)
	}
	live.prev = cn.Config()
	lg.level.set(cn.Config().String("log", "level"))
	return cn, nil
}
