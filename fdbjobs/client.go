package fdbjobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Client is one node's handle on the job layer. Its API calls are safe for
// concurrent use and work without Start; Start runs the node's background
// services: an activity monitor per type and, for subscriptions, a
// notifier per type. Many Clients (nodes) may share one database.
type Client struct {
	db  kv.Database
	cfg Config
	k   keys

	svc      service.Base
	force    chan struct{}
	claiming claiming
	wake     wakes // this Client's commits wake its own acceptors (wake.go)
	// schedWake: this Client's schedule changes wake its own Runtimes'
	// schedule loops (schedulefire.go), under the key "".
	schedWake wakes
	layoutOK  atomic.Bool // CheckLayout succeeded
	owners    ownership   // of the queues' shards (shards.go)
	// infos is what the type-check loop last read of every type (their
	// timeouts and shard counts), for accepts to use instead of reading
	// it each time; nil while the Client is not started or that read
	// failed (see cachedTypeInfo).
	infos atomic.Pointer[map[string]typeInfo]
	// typesGen counts this Client's own changes of types: the loop keeps
	// a read only if none committed since it began, so that the Client
	// that made a change never accepts with what it knew before.
	typesGen atomic.Uint64

	mu        sync.Mutex
	runCtx    context.Context // of the running server; nil when stopped
	monitors  map[string]*ActivityMonitor
	notifiers map[string]*notifier
	// notifierSeq numbers the notifiers started, so that the type-check
	// loop stops only notifiers older than its read of the types (a
	// Subscribe between that read and the sync saw its type exist).
	notifierSeq uint64
	// reenqueueHooks by type (SetReenqueueHook).
	reenqueueHooks map[string]ReenqueueHook
	// insertHooks in the order added (AddInsertHook).
	insertHooks []InsertHook
	// metrics records what the Client and its Runtimes do (NewMetrics).
	metrics atomic.Pointer[Metrics]

	hooks testHooks
}

// testHooks let tests observe background services without sleeping.
type testHooks struct {
	monitorChecked func(typ string, reenqueued int)
	monitorBatch   func(limit int) error // injects batch errors
	notifierBatch  func(limit int) error
	typesSynced    func()
	typesRead      func()           // between the type-check loop's read and its sync
	acceptWaiting  func(typ string) // an Accept found nothing and waits
}

// New returns a Client on db. It validates cfg and fills in its defaults.
func New(db kv.Database, cfg Config) (*Client, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{
		db:        db,
		cfg:       cfg,
		k:         newKeys(cfg.Subspace),
		force:     make(chan struct{}, 1),
		monitors:  map[string]*ActivityMonitor{},
		notifiers: map[string]*notifier{},
	}
	c.k.feed = &feedState{infos: &c.infos, clock: cfg.Clock}
	return c, nil
}

// transactor returns tx, or the database when tx is nil.
func (c *Client) transactor(tx kv.Transactor) kv.Transactor {
	if tx == nil {
		return c.db
	}
	return tx
}

func (c *Client) readTransactor(tx kv.ReadTransactor) kv.ReadTransactor {
	if tx == nil {
		return c.db
	}
	return tx
}

// MaxNameSize is the longest type or job id accepted, in bytes, so that
// every key stays far below FoundationDB's 10,000-byte key limit.
const MaxNameSize = 1000

func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidArgument, what)
	}
	if len(s) > MaxNameSize {
		return fmt.Errorf("%w: %s of %d bytes, at most %d", ErrInvalidArgument, what, len(s), MaxNameSize)
	}
	return nil
}

// SetTypeTimeout registers typ with its activity timeout: a running job of
// this type that sends no Update for timeout is re-enqueued by the activity
// monitors. The timeout must be at least a millisecond. tx may be nil (a
// transaction of its own), a Database, or a caller's Transaction.
func (c *Client) SetTypeTimeout(ctx context.Context, tx kv.Transactor, typ string, timeout time.Duration) error {
	if err := checkName("type", typ); err != nil {
		return err
	}
	if timeout < time.Millisecond {
		return fmt.Errorf("%w: type timeout %v is under a millisecond", ErrInvalidArgument, timeout)
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		tr.Set(c.k.timeoutKey(typ), tuple.Tuple{timeout.Milliseconds()}.Pack())
		return nil
	})
}

// changeTypes runs change, which sets or clears a type's timeout, in tx,
// bumps the types version (the type monitors watch it) and makes this
// client's type monitor look at once.
func (c *Client) changeTypes(ctx context.Context, tx kv.Transactor, change func(kv.Transaction) error) error {
	_, err := c.transactor(tx).Transact(ctx, func(tr kv.Transaction) (any, error) {
		if err := change(tr); err != nil {
			return nil, err
		}
		tr.Add(c.k.typesVersion(), one)
		return nil, nil
	})
	if err != nil {
		return err
	}
	c.typesChanged()
	return nil
}

// typesChanged drops the copy of the types this Client's accepts use
// until the type-check loop, made to look at once, reads them again.
func (c *Client) typesChanged() {
	c.typesGen.Add(1)
	c.infos.Store(nil)
	c.forceTypeCheck()
}

// ClearTypeTimeout unregisters typ. Its jobs stay; Add of new ones fails
// with ErrNoTypeTimeout and the activity monitors and notifiers of the
// type stop.
func (c *Client) ClearTypeTimeout(ctx context.Context, tx kv.Transactor, typ string) error {
	if err := checkName("type", typ); err != nil {
		return err
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error { tr.Clear(c.k.timeoutKey(typ)); return nil })
}

// TypeTimeout returns typ's activity timeout, or ErrNotFound.
func (c *Client) TypeTimeout(ctx context.Context, tx kv.ReadTransactor, typ string) (time.Duration, error) {
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (time.Duration, error) {
		return c.typeTimeout(tr, typ)
	})
}

func (c *Client) typeTimeout(tr kv.ReadTransaction, typ string) (time.Duration, error) {
	v, err := tr.Get(c.k.timeoutKey(typ)).Get()
	if err != nil {
		return 0, err
	}
	if v == nil {
		return 0, fmt.Errorf("type %q: %w", typ, ErrNotFound)
	}
	return decodeTimeout(v)
}

func decodeTimeout(v []byte) (time.Duration, error) {
	t, err := tuple.Unpack(v)
	if err != nil || len(t) != 1 {
		return 0, fmt.Errorf("fdbjobs: bad type timeout %x", v)
	}
	ms, ok := intElem(t[0])
	if !ok {
		return 0, fmt.Errorf("fdbjobs: bad type timeout %x", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Types returns every type that has an activity timeout, sorted.
func (c *Client) Types(ctx context.Context, tx kv.ReadTransactor) ([]string, error) {
	m, err := kv.ReadTransact(ctx, c.readTransactor(tx), c.readTypes)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

func (c *Client) readTypes(tr kv.ReadTransaction) (map[string]time.Duration, error) {
	kvs, err := tr.GetRange(c.k.timeouts, kv.RangeOptions{}).GetSliceWithError()
	if err != nil {
		return nil, err
	}
	m := make(map[string]time.Duration, len(kvs))
	for _, e := range kvs {
		t, err := c.k.timeouts.Unpack(e.Key)
		if err != nil || len(t) != 1 {
			continue
		}
		typ, ok := t[0].(string)
		if !ok {
			continue
		}
		d, err := decodeTimeout(e.Value)
		if err != nil {
			return nil, err
		}
		m[typ] = d
	}
	return m, nil
}

// Start runs the node's background services until Stop or until ctx ends:
// it follows the list of types (through a watch, and every TypeCheckPeriod
// as a fallback), runs an activity monitor per type unless
// DisableActivityMonitor is set, and serves Subscribe with a notifier per
// type. Start on a started Client does nothing.
func (c *Client) Start(ctx context.Context) error {
	_, err := c.svc.Start(ctx, func(ctx context.Context) error {
		if err := c.CheckLayout(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		c.runCtx = ctx
		c.mu.Unlock()
		return nil
	}, func(ctx context.Context) {
		c.serve(ctx)
		c.infos.Store(nil)
		c.mu.Lock()
		c.runCtx = nil
		mons, nots := c.monitors, c.notifiers
		c.monitors, c.notifiers = map[string]*ActivityMonitor{}, map[string]*notifier{}
		c.mu.Unlock()
		for _, m := range mons {
			m.Stop()
		}
		for _, n := range nots {
			n.stop()
		}
	})
	return err
}

// Stop stops the background services and waits for them to end. Pending
// subscriptions get no further events. Stop before Start, and a second
// Stop, do nothing.
func (c *Client) Stop() { c.svc.Stop() }

func (c *Client) forceTypeCheck() {
	select {
	case c.force <- struct{}{}:
	default:
	}
}

// serve is the type-check loop.
func (c *Client) serve(ctx context.Context) {
	log := c.cfg.Logger
	var b kv.Backoff
	for {
		c.mu.Lock()
		seq := c.notifierSeq
		c.mu.Unlock()
		gen := c.typesGen.Load()
		infos, watch, err := c.typesAndWatch(ctx)
		if h := c.hooks.typesRead; h != nil {
			h()
		}
		if err != nil {
			c.infos.Store(nil)
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Msg("fdbjobs: reading types")
		} else {
			if c.typesGen.Load() == gen {
				old := c.infos.Swap(&infos)
				// Acceptors waiting with a copy that lacks a lane of a
				// type may have missed its first job (priority.go,
				// useLane): they look again.
				for typ, ti := range infos {
					if old == nil || (*old)[typ].lanes != ti.lanes {
						c.wake.notify(typ)
					}
				}
			}
			types := make(map[string]time.Duration, len(infos))
			for typ, ti := range infos {
				if ti.hasTimeout {
					types[typ] = ti.timeout
				}
			}
			c.syncTypes(ctx, types, seq)
		}
		period := c.cfg.TypeCheckPeriod + jitter(c.cfg.TypeCheckPeriod/2)
		t := c.cfg.Clock.NewTimer(period)
		var watchDone <-chan struct{}
		if watch != nil {
			watchDone = watch.Done()
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-watchDone:
			fired = true
		case <-c.force:
		case <-t.Chan():
		}
		t.Stop()
		if fired && !afterWatch(ctx, &b, watch) {
			return
		}
		if watch != nil {
			watch.Cancel()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// typesAndWatch reads what the type-check loop follows of every type, its
// timeout, shard counts, feed and priority lanes (a type with shard counts set but no
// timeout is listed without one), and watches the types version, which
// every change of either bumps.
func (c *Client) typesAndWatch(ctx context.Context) (map[string]typeInfo, kv.FutureNil, error) {
	type res struct {
		infos map[string]typeInfo
		watch kv.FutureNil
	}
	r, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (res, error) {
		shards := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyShards}), kv.RangeOptions{})
		feeds := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyFeed}), kv.RangeOptions{})
		lanesOf := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyLanes}), kv.RangeOptions{})
		limits := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyLimit}), kv.RangeOptions{})
		partLimits := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyPartLimit}), kv.RangeOptions{})
		fairs := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyFair}), kv.RangeOptions{})
		m, err := c.readTypes(tr)
		if err != nil {
			return res{}, err
		}
		kvs, err := shards.GetSliceWithError()
		if err != nil {
			return res{}, err
		}
		infos := make(map[string]typeInfo, len(m))
		for typ, d := range m {
			infos[typ] = typeInfo{timeout: d, hasTimeout: true, shards: ShardsDefault, high: ShardsDefault, known: true, lanes: laneHighest}
		}
		// info returns the entry of the type of key e, if it is one.
		info := func(e kv.KeyValue) (string, typeInfo, bool) {
			t, err := c.k.root.Unpack(e.Key)
			if err != nil || len(t) != 2 {
				return "", typeInfo{}, false
			}
			typ, ok := t[1].(string)
			if !ok {
				return "", typeInfo{}, false
			}
			ti, ok := infos[typ]
			if !ok {
				ti = typeInfo{shards: ShardsDefault, high: ShardsDefault, known: true, lanes: laneHighest}
			}
			return typ, ti, true
		}
		for _, e := range kvs {
			typ, ti, ok := info(e)
			if !ok {
				continue
			}
			if ti.shards, ti.high, err = decodeShards(e.Value); err != nil {
				return res{}, err
			}
			infos[typ] = ti
		}
		// each sets what the entries of one range of per-type keys say.
		each := func(f kv.RangeResult, set func(ti *typeInfo, v []byte) error) error {
			kvs, err := f.GetSliceWithError()
			if err != nil {
				return err
			}
			for _, e := range kvs {
				if typ, ti, ok := info(e); ok {
					if err := set(&ti, e.Value); err != nil {
						return err
					}
					infos[typ] = ti
				}
			}
			return nil
		}
		for _, r := range []struct {
			f   kv.RangeResult
			set func(ti *typeInfo, v []byte) error
		}{
			{feeds, func(ti *typeInfo, _ []byte) error { ti.feed = true; return nil }},
			{lanesOf, func(ti *typeInfo, v []byte) error { ti.lanes = decodeLanes(v); return nil }},
			{limits, func(ti *typeInfo, v []byte) (err error) { ti.limit, err = decodeLimit(v); return err }},
			{partLimits, func(ti *typeInfo, v []byte) error {
				l, err := decodeLimit(v)
				ti.partLimit, ti.partRate = l.Running, l.rateMicro()
				return err
			}},
			{fairs, func(ti *typeInfo, v []byte) error {
				ti.fairRunTime = decodeFairShare(v) == FairShareRunTime
				return nil
			}},
		} {
			if err := each(r.f, r.set); err != nil {
				return res{}, err
			}
		}
		return res{infos, tr.Watch(c.k.typesVersion())}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return r.infos, r.watch, nil
}

// syncTypes starts the activity monitors of the types that exist and stops
// those of the types that do not, and their notifiers; a notifier whose
// number is above seq started after types was read and is kept (its
// Subscribe found its type).
func (c *Client) syncTypes(ctx context.Context, types map[string]time.Duration, seq uint64) {
	c.mu.Lock()
	var stopM []*ActivityMonitor
	var stopN []*notifier
	for typ, m := range c.monitors {
		if _, ok := types[typ]; !ok {
			stopM = append(stopM, m)
			delete(c.monitors, typ)
		}
	}
	for typ, n := range c.notifiers {
		if _, ok := types[typ]; !ok && n.seq <= seq {
			stopN = append(stopN, n)
			delete(c.notifiers, typ)
		}
	}
	if !c.cfg.DisableActivityMonitor {
		for typ := range types {
			if c.monitors[typ] == nil {
				m := c.NewActivityMonitor(typ)
				_ = m.Start(ctx)
				c.monitors[typ] = m
			}
		}
	}
	c.mu.Unlock()
	for _, m := range stopM {
		m.Stop()
	}
	for _, n := range stopN {
		n.stop()
	}
	if h := c.hooks.typesSynced; h != nil {
		h()
	}
}

// started reports whether the Client is started (between Start and Stop).
func (c *Client) started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runCtx != nil
}

// notifierFor returns the running notifier of typ, starting one if needed.
func (c *Client) notifierFor(typ string) (*notifier, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runCtx == nil {
		return nil, ErrNotStarted
	}
	if n := c.notifiers[typ]; n != nil {
		return n, nil
	}
	c.notifierSeq++
	n := newNotifier(c, typ, c.notifierSeq)
	n.start(c.runCtx)
	c.notifiers[typ] = n
	return n, nil
}

// runningCounts reports how many activity monitors and notifiers run, for
// tests.
func (c *Client) runningCounts() (monitors, notifiers int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.monitors), len(c.notifiers)
}

// jitter returns a random duration in [0, max].
func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max + 1)
}

// gaveUp names the loop in an error of kv.Batch.Retry that gave up.
func gaveUp(loop string, err error) error {
	if errors.Is(err, kv.ErrGaveUp) {
		return fmt.Errorf("fdbjobs: %s %w", loop, err)
	}
	return err
}

// watchRetryDefault is how long a loop waits after a watch that failed
// with an error FoundationDB would not retry (too_many_watches, or the
// transaction timeout, which on FoundationDB also ends the transaction's
// watches) before it sets the watch again.
const watchRetryDefault = 100 * time.Millisecond

// afterWatch is called once a watch of a loop is done: when it failed
// instead of firing, it waits (as OnError would after a retryable error,
// watchRetryDefault otherwise) so that the loop never spins on failing
// watches, and resets b after a watch that fired. It reports false when
// ctx ended.
func afterWatch(ctx context.Context, b *kv.Backoff, watch kv.FutureNil) bool {
	_, err := watch.Get()
	if err == nil || ctx.Err() != nil {
		b.Reset()
		return ctx.Err() == nil
	}
	delay, ok := b.Next(err)
	if !ok {
		delay = watchRetryDefault
	}
	return sleepCtx(ctx, delay)
}

// batchMax is the most jobs an activity monitor's or a notifier's batch
// grows to: their keys alone stay well under FoundationDB's advised 1 MB
// per transaction.
const batchMax = 2_000

// monitorBatchBytes is about how many bytes of job rows one activity
// monitor batch reads: three quarters of kv.PageBytes, as it writes them
// back (a transaction stays near twice this, under FoundationDB's
// advised 1 MB).
const monitorBatchBytes = kv.PageBytes * 3 / 4

// readAhead is how many rows a byte-bounded batch reads at once before it
// looks at its budget again.
const readAhead = 16
