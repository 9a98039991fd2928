package cluster

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
)

// Defaults of Options.
const (
	// HeartbeatIntervalDefault is how often a node renews its membership
	// record (and re-reads the runtime configuration, should a watch have
	// been lost).
	HeartbeatIntervalDefault = 10 * time.Second
	// NodeTimeoutDefault is how long after its last heartbeat a node
	// counts as dead: three missed heartbeats.
	NodeTimeoutDefault = 30 * time.Second
	// ForgetAfterDefault is how long a dead node's record stays in the
	// store (not listed) before a live node removes it.
	ForgetAfterDefault = time.Hour
	// forgetEvery: a node looks for dead records every this many
	// heartbeats.
	forgetEvery = 6
	// leaveTimeout bounds the removal of a stopping node's record.
	leaveTimeout = 5 * time.Second
)

// Options configure a Node. Base is required.
type Options struct {
	// Base is the node's start-up configuration (files, environment,
	// flags), with [admins] and [users] passwords already hashed; its
	// [node] name and roles name the node.
	Base *config.Config
	// Version is the software version the node reports.
	Version string
	// Check validates a merged configuration beyond the registry's rules
	// (the node's own settings built from it); nil accepts any.
	Check func(*config.Config) error
	// Apply receives each new configuration in effect once the node runs
	// (Start); calls are serialized. Nil applies nothing.
	Apply func(*config.Config)
	// Subspace holds the keys (nil: SubspaceDefault).
	Subspace subspace.Subspace
	// Logger receives warnings (a change not valid here, a failed
	// heartbeat); nil discards them.
	Logger *zerolog.Logger
	// Clock is the time source (nil: the real clock).
	Clock clockwork.Clock
	// HeartbeatInterval, NodeTimeout, ForgetAfter: see the defaults.
	// NodeTimeout must exceed HeartbeatInterval.
	HeartbeatInterval, NodeTimeout, ForgetAfter time.Duration
}

// Node is one node's membership and runtime configuration: it
// heartbeats, watches the runtime settings and applies them.
type Node struct {
	store *Store
	opts  Options
	name  string
	roles []string
	svc   service.Base

	// TestSignals let tests wait for the node's steps; they do nothing
	// unless a test initialises them before Start.
	TestSignals Signals

	mu      sync.Mutex // serializes applying
	cur     *config.Config
	applied int64 // version of cur; -1 before Load
	refused int64 // last version not valid here (logged once)
	started time.Time
	// registered: Start wrote the membership record, Stop removes it.
	registered bool

	// beating serializes heartbeats (a channel of one slot, so that a
	// caller waiting for its turn gives up when its context ends), so
	// that the record last written carries the last SetLoad.
	beating chan struct{}
	loadMu  sync.Mutex
	load    *Load // the last SetLoad; guarded by loadMu
	// lastBeat is when the last heartbeat that committed began (Unix
	// milliseconds of the node's clock; 0 before the first).
	lastBeat atomic.Int64
}

// Signals are the moments of a Node's work tests wait for.
type Signals struct {
	// Applied carries the version of each configuration applied.
	Applied testsignal.Signal[int64]
	// Beat carries the expiry (Unix ms) of each heartbeat written.
	Beat testsignal.Signal[int64]
}

// InitTestSignals initialises every test signal; call it before Start.
func (s *Signals) InitTestSignals() {
	s.Applied.Init()
	s.Beat.Init()
}

// New returns a stopped Node on db.
func New(db kv.Database, opts Options) (*Node, error) {
	if db == nil || opts.Base == nil {
		return nil, fmt.Errorf("%w: a database and a base configuration are required", ErrInvalidOptions)
	}
	opts.HeartbeatInterval = cmp.Or(opts.HeartbeatInterval, HeartbeatIntervalDefault)
	opts.NodeTimeout = cmp.Or(opts.NodeTimeout, NodeTimeoutDefault)
	opts.ForgetAfter = cmp.Or(opts.ForgetAfter, ForgetAfterDefault)
	if opts.HeartbeatInterval <= 0 || opts.NodeTimeout <= opts.HeartbeatInterval || opts.ForgetAfter < 0 {
		return nil, fmt.Errorf("%w: heartbeat %v must be positive and under the node timeout %v", ErrInvalidOptions,
			opts.HeartbeatInterval, opts.NodeTimeout)
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Logger == nil {
		l := zerolog.Nop()
		opts.Logger = &l
	}
	return &Node{store: NewStore(db, opts.Subspace), opts: opts, beating: make(chan struct{}, 1), name: opts.Base.NodeName(), roles: opts.Base.Roles(),
		cur: opts.Base, applied: -1, refused: -1}, nil
}

// Store returns the node's store of membership and runtime settings.
func (n *Node) Store() *Store { return n.store }

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Roles returns the node's roles.
func (n *Node) Roles() []string { return append([]string(nil), n.roles...) }

// Base returns the node's start-up configuration.
func (n *Node) Base() *config.Config { return n.opts.Base }

// Check validates c with Options.Check.
func (n *Node) Check(c *config.Config) error {
	if n.opts.Check == nil {
		return nil
	}
	return n.opts.Check(c)
}

// Merge lays l over base and checks the result: the configuration that
// would be in effect on the node of base. Every error wraps
// config.ErrInvalidValue.
func (n *Node) Merge(base *config.Config, l Layers) (*config.Config, error) {
	c, err := l.Merge(base, base.NodeName())
	if err != nil {
		return nil, err
	}
	if err := n.Check(c); err != nil {
		return nil, fmt.Errorf("%w: %v", config.ErrInvalidValue, err)
	}
	return c, nil
}

// Config returns the configuration in effect.
func (n *Node) Config() *config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur
}

// Load reads the runtime settings and makes their merge the
// configuration in effect (Config), without calling Apply: for building
// the node's services at start-up. A merge that is not valid here is
// logged and the start-up configuration stays in effect.
func (n *Node) Load(ctx context.Context) error { return n.read(ctx, false) }

// Sync reads the runtime settings and applies them now if they changed
// since the last time: the node answering a _config change calls it, so
// that the change is in effect there when the reply is sent.
func (n *Node) Sync(ctx context.Context) error { return n.read(ctx, true) }

func (n *Node) read(ctx context.Context, apply bool) error {
	l, err := n.store.Layers(ctx, n.name)
	if err != nil {
		return err
	}
	n.take(l, apply)
	return nil
}

// take makes l's merge the configuration in effect if l is newer than
// what is, and applies it when apply is set.
func (n *Node) take(l Layers, apply bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.Version <= n.applied || l.Version == n.refused {
		return
	}
	c, err := n.Merge(n.opts.Base, l)
	if err != nil {
		n.refused = l.Version
		n.opts.Logger.Warn().Err(err).Int64("config_version", l.Version).
			Msg("cluster: runtime configuration not applied on this node; the previous one stays in effect")
		return
	}
	n.cur, n.applied = c, l.Version
	if apply && n.opts.Apply != nil {
		n.opts.Apply(c)
	}
	n.TestSignals.Applied.Signal(l.Version)
}

// Start registers the node (its membership record and published
// configuration, written before Start returns), then heartbeats, watches
// the runtime settings and applies their changes until Stop or ctx ends.
func (n *Node) Start(ctx context.Context) error {
	_, err := n.svc.Start(ctx, func(ctx context.Context) error {
		n.started = n.opts.Clock.Now()
		if err := n.beat(ctx, true); err != nil {
			return err
		}
		n.mu.Lock()
		n.registered = true
		n.mu.Unlock()
		return nil
	}, n.run)
	return err
}

// Stop stops the node's loop and removes its membership record, so that
// it leaves /_membership at once. Stop before Start does nothing.
func (n *Node) Stop() {
	n.svc.Stop()
	n.mu.Lock()
	registered := n.registered
	n.registered = false
	n.mu.Unlock()
	if !registered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := n.store.leave(ctx, n.name); err != nil {
		n.opts.Logger.Warn().Err(err).Msg("cluster: leaving the membership list; the node's record expires instead")
	}
}

// Members returns the nodes alive at now (Store.Members), with their
// loads.
func (n *Node) Members(ctx context.Context, now time.Time) ([]Member, error) {
	return n.store.Members(ctx, now)
}

// Records returns every member record, alive or not (Store.Records).
func (n *Node) Records(ctx context.Context) ([]Member, error) { return n.store.Records(ctx) }

// SetLoad records l as the node's load and writes it into the node's
// membership record at once (a heartbeat); every later heartbeat carries
// it too. A node that did not Start, or stopped, writes nothing.
func (n *Node) SetLoad(ctx context.Context, l Load) error {
	n.loadMu.Lock()
	n.load = &l
	n.loadMu.Unlock()
	n.mu.Lock()
	registered := n.registered
	n.mu.Unlock()
	if !registered {
		return nil
	}
	return n.beat(ctx, false)
}

func (n *Node) beat(ctx context.Context, first bool) error {
	select {
	case n.beating <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-n.beating }()
	now := n.opts.Clock.Now()
	n.loadMu.Lock()
	load := n.load
	n.loadMu.Unlock()
	m := Member{Name: n.name, Roles: n.roles, Version: n.opts.Version, Started: n.started.UnixMilli(),
		Seen: now.UnixMilli(), Expires: now.Add(n.opts.NodeTimeout).UnixMilli(), Load: load}
	if err := n.store.heartbeat(ctx, m, publication(n.opts.Base), first); err != nil {
		return err
	}
	n.lastBeat.Store(m.Seen)
	n.TestSignals.Beat.Signal(m.Expires)
	return nil
}

// HeartbeatAge is how long ago the node's last heartbeat that committed
// began, by its clock: about HeartbeatInterval at most while the node
// reaches the store, growing while it does not (a host cut off from
// FoundationDB: its record expires after NodeTimeout and the other nodes
// count it dead, but the process says why). -1 before the first.
func (n *Node) HeartbeatAge() time.Duration {
	ms := n.lastBeat.Load()
	if ms == 0 {
		return -1
	}
	return n.opts.Clock.Since(time.UnixMilli(ms))
}

// run is the node's loop: read the settings and watch their version,
// apply them when they changed; heartbeat every HeartbeatInterval and
// look for dead nodes every forgetEvery heartbeats. After a read or a
// watch that failed, the next heartbeat tries again.
func (n *Node) run(ctx context.Context) {
	tick := n.opts.Clock.NewTicker(n.opts.HeartbeatInterval)
	defer tick.Stop()
	for beats := 1; ; {
		watch, err := n.watch(ctx)
		if err != nil && ctx.Err() == nil {
			n.opts.Logger.Warn().Err(err).Msg("cluster: reading the runtime configuration; retrying at the next heartbeat")
		}
		var changed <-chan struct{}
		if watch != nil {
			changed = watch.Done()
		}
		select {
		case <-ctx.Done():
			if watch != nil {
				watch.Cancel()
			}
			return
		case <-changed:
			if _, err := watch.Get(); err == nil || ctx.Err() != nil {
				continue
			}
			// A failed watch (too many watches, the store unavailable):
			// no spinning; the next heartbeat reads the settings again.
			select {
			case <-ctx.Done():
				return
			case <-tick.Chan():
			}
		case <-tick.Chan():
		}
		if watch != nil {
			watch.Cancel()
		}
		if err := n.beat(ctx, false); err != nil && ctx.Err() == nil {
			n.opts.Logger.Warn().Err(err).Msg("cluster: heartbeat")
		}
		if beats++; beats%forgetEvery == 0 {
			if k, err := n.store.forget(ctx, n.opts.Clock.Now(), n.opts.ForgetAfter); err != nil && ctx.Err() == nil {
				n.opts.Logger.Warn().Err(err).Msg("cluster: removing dead nodes' records")
			} else if k > 0 {
				n.opts.Logger.Info().Int("nodes", k).Msg("cluster: removed the records of nodes dead for long")
			}
		}
	}
}

// watch reads the node's layers with a watch on their version, in one
// transaction, and applies them if they changed.
func (n *Node) watch(ctx context.Context) (kv.FutureNil, error) {
	type res struct {
		l Layers
		w kv.FutureNil
	}
	r, err := kv.Transact(ctx, n.store.db, func(tr kv.Transaction) (res, error) {
		l, err := n.store.readLayers(tr, n.name)
		if err != nil {
			return res{}, err
		}
		return res{l, n.store.watchVersion(tr)}, nil
	})
	if err != nil {
		return nil, err
	}
	n.take(r.l, true)
	return r.w, nil
}
