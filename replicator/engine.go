package replicator

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Engine runs replications for a Node. EngineDefault is the protocol
// engine (package engine); tests and benchmarks substitute fakes.
type Engine interface {
	// ReplicationID computes the replication id (the full id, with its
	// "+continuous"/"+create_target" suffix) and the filter code it used.
	// For design document filters it fetches the code from the source.
	ReplicationID(ctx context.Context, rep engine.Replication, serverUUID string) (id, filterCode string, err error)
	// Start begins a run; see engine.Start.
	Start(ctx context.Context, rep engine.Replication, opts engine.Options) Run
	// Probe reports whether the host of base (scheme://host[:port]/)
	// answers again; see engine.Probe.
	Probe(ctx context.Context, base string) error
	// Pending returns how many changes rep's source has after since (a
	// checkpointed source sequence): the exact check of a parked
	// replication; see engine.Pending.
	Pending(ctx context.Context, rep engine.Replication, since string) (int64, error)
	// DBUpdates follows the _db_updates feed of the server of rep's
	// source from since until it closes after timeout without a row; see
	// engine.DBUpdates.
	DBUpdates(ctx context.Context, rep engine.Replication, since string, timeout time.Duration, emit func(engine.DBUpdate) error) (string, error)
	// AllDBs returns up to limit database names of the server of rep's
	// source from from on; see engine.AllDBs.
	AllDBs(ctx context.Context, rep engine.Replication, from string, limit int) ([]string, error)
}

// Run is one execution of a replication (see engine.Run).
type Run interface {
	Stop(ctx context.Context) error
	// Halt ends the run without a final checkpoint, starting no write
	// after it is called and letting those in flight finish until ctx
	// ends (engine.Run.Halt).
	Halt(ctx context.Context) error
	Wait() (engine.Result, error)
	Done() <-chan struct{}
	Progress() engine.Stats
	// Sync is whether the run is in sync with its source, and if not,
	// why; it never waits on a request.
	Sync() engine.Sync
	// Refused returns the documents the target refused whose Seq is
	// above after (engine.Run.Refused).
	Refused(after int64) []engine.RefusedDoc
}

// EngineDefault runs replications with package engine.
type EngineDefault struct {
	// Limiter is the process's shared 429 back-off state (nil: one per
	// run).
	Limiter *couch.RateLimiter
	// Logins is the process's memory of refused logins, shared by its runs
	// (nil: each run remembers its own; see engine.Options.Logins).
	Logins *couch.Logins
	// Logger receives the runs' log lines.
	Logger zerolog.Logger
	// Client holds the node's TLS and authentication settings of every
	// endpoint (the zero value: Go's TLS defaults, session auth).
	Client engine.ClientSettings
	// Pools is the process's shared connection pools (nil: each run has
	// its own; see couch.Pools).
	Pools *couch.Pools
	// Metrics, if set, counts the runs' requests, connections and events
	// under CouchDB's names (Metrics.CountHTTP, Metrics.CountRun).
	Metrics *Metrics
}

// client is Client with the counting of Metrics.
func (e EngineDefault) client() engine.ClientSettings {
	c := e.Client
	if e.Metrics != nil {
		c.Count = e.Metrics.CountHTTP
	}
	return c
}

// ReplicationID implements Engine.
func (e EngineDefault) ReplicationID(ctx context.Context, rep engine.Replication, serverUUID string) (string, string, error) {
	code := ""
	if rep.Filter != "" && rep.Filter[0] != '_' {
		var err error
		code, err = engine.FetchFilterCode(ctx, rep, engine.Options{ServerUUID: serverUUID, Limiter: e.Limiter, Logins: e.Logins, Client: e.client(), Pools: e.Pools})
		if err != nil {
			return "", "", err
		}
	}
	_, full, err := engine.ReplicationID(rep, serverUUID, code)
	return full, code, err
}

// Probe implements Engine.
func (e EngineDefault) Probe(ctx context.Context, base string) error {
	return engine.Probe(ctx, base, e.Client)
}

// Pending implements Engine.
func (e EngineDefault) Pending(ctx context.Context, rep engine.Replication, since string) (int64, error) {
	return engine.Pending(ctx, rep, engine.Options{Limiter: e.Limiter, Logins: e.Logins, Client: e.client(), Pools: e.Pools}, since)
}

// DBUpdates implements Engine.
func (e EngineDefault) DBUpdates(ctx context.Context, rep engine.Replication, since string, timeout time.Duration, emit func(engine.DBUpdate) error) (string, error) {
	return engine.DBUpdates(ctx, rep, engine.Options{Limiter: e.Limiter, Logins: e.Logins, Client: e.client(), Pools: e.Pools}, since, timeout, emit)
}

// AllDBs implements Engine.
func (e EngineDefault) AllDBs(ctx context.Context, rep engine.Replication, from string, limit int) ([]string, error) {
	return engine.AllDBs(ctx, rep, engine.Options{Limiter: e.Limiter, Logins: e.Logins, Client: e.client(), Pools: e.Pools}, from, limit)
}

// Start implements Engine.
func (e EngineDefault) Start(ctx context.Context, rep engine.Replication, opts engine.Options) Run {
	if opts.Limiter == nil {
		opts.Limiter = e.Limiter
	}
	if opts.Logins == nil {
		opts.Logins = e.Logins
	}
	if opts.Pools == nil {
		opts.Pools = e.Pools
	}
	opts.Logger, opts.Client = e.Logger, e.client()
	if opts.Count == nil && e.Metrics != nil {
		opts.Count = e.Metrics.CountRun
	}
	return engine.Start(ctx, rep, opts)
}
