package scheduler

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/replicator"
)

// Node is a replication node's job server: it accepts replication jobs
// from the cluster-wide queue, runs them with its Engine, rotates
// continuous jobs when more are runnable than it may run, backs crashing
// jobs off, charges run time for fair share and removes expired transient
// jobs. Many nodes share one store; they need no connection to each other
// or to the frontends.
//
// Its fields are grouped by owner (see doc.go for the parts). A function
// whose name ends in Locked must be called with mu held. The lock order
// is mu, then a part's lock or a worker's stopMu: no part's lock is held
// while mu is taken (publishLoad takes mu in its turn, load.turn, which
// nothing that holds mu waits for).
type Node struct {
	// triggers works the Trigger jobs of scheduled replications (set by
	// Start, cleared by stopTriggers).
	triggers atomic.Pointer[fdbjobs.Runtime]
	// webhooks works the webhook deliveries (set by Start, cleared by
	// stopWebhooks); hookClient is their HTTP client, made once
	// (webhookClient).
	webhooks atomic.Pointer[fdbjobs.Runtime]
	// templates works the template jobs (set by Start, cleared by
	// stopTemplates; templates.go).
	templates  atomic.Pointer[fdbjobs.Runtime]
	hookOnce   sync.Once
	hookClient *http.Client
	hookOwners hookOwners
	// nonAdmins is Config.NonAdmins of the last SetConfig, in force at
	// once (not at the next interval): an account that stops being a
	// server admin stops hearing others' replications with its next
	// delivery.
	nonAdmins atomic.Pointer[map[string]bool]
	// Set by New and never changed: read without a lock.
	store *replicator.Store
	eng   replicator.Engine
	// pacer paces the runs' requests within the budget of requests per
	// second per host (MaxRequestsPerHostPerSec, set at each interval
	// step); safe for concurrent use.
	pacer *replicator.HostPacer
	m     *replicator.Metrics
	kick  chan struct{} // Reschedule's nudge to the interval loop (one slot)
	// TestSignals let tests wait for the node's steps instead of sleeping
	// or polling; they do nothing unless a test initialises them before
	// Start.
	TestSignals Signals

	// svc starts and stops the node (it has its own lock).
	svc service.Base

	// The parts: each owns its state behind its own lock (keysLacking
	// is a sync.Map), never held while mu is taken, so a holder of mu
	// may call one.
	hosts hostProber    // hosts that did not answer, and their jobs (hosts.go)
	load  loadPublisher // the node's load for balance (balance.go)
	// progress follows the running jobs' runs for the progress loop and
	// the metrics (progress.go).
	progress progress
	// charges accrues the jobs' run time for fair share and keeps the
	// share table (charges.go).
	charges *charges
	// watches follows the watch jobs of parked replications (watch.go).
	watches *watches
	// feeds knows which source servers give a _db_updates feed, and
	// waiting how many jobs wait for a slot, for parking's decisions
	// (parkpolicy.go).
	feeds   feeds
	waiting waitingCount
	// keysLacking holds the ids of the sealing keys this node found it
	// lacks (each said once; see worker.cannotOpen).
	keysLacking sync.Map

	// cfgMu guards next, and nothing else: SetConfig leaves a new
	// configuration there without waiting for mu.
	cfgMu sync.Mutex
	next  *Config // from SetConfig, applied at the next interval

	// mu guards the Runtime of the node's jobs, the workers and the
	// interval step's figures: cfg, ctx, stopping, rt, concurrency,
	// retain, fetches, share, workers, rotations and intervals, and each worker's
	// charged, priority and prioritized (worker.go). It also orders
	// wg.Add with shutdown's Wait: a goroutine is added to wg with mu
	// held, while the node is not stopping or by a goroutine wg counts.
	mu       sync.Mutex
	cfg      Config          // applied (the interval step writes it)
	ctx      context.Context // the node's run context; nil when stopped
	stopping bool
	// rt runs the node's replication jobs (runtime.go), with concurrency
	// as its Concurrency (the node's target) and retain as its
	// RetainFinished; nil when stopped. fetches is its count of accepts
	// as the metrics last had it.
	rt          *fdbjobs.Runtime
	concurrency int
	retain      time.Duration
	fetches     int64
	share       int // the most jobs the node fills itself to when balancing (0: MaxJobs)
	workers     map[*worker]bool
	rotations   []int // preemptions per interval (most recent last, capped)
	intervals   int64

	// serverUUID is the store's, written by Start (under mu) before it
	// starts the Runtime, and constant while the node runs: workers
	// read it without mu.
	serverUUID string
	// wg counts the node's goroutines, for shutdown to wait for (see mu).
	wg sync.WaitGroup

	// heldSeen is the store's count of held-back jobs of each user whose
	// jobs ran here, as the last interval step read it (rotateUsers):
	// only the interval step's goroutine touches it, without a lock.
	heldSeen map[string]int64
	// hostHeldSeen is, likewise, the store's count of jobs held back by
	// the budget of each host of the jobs here (rotateHosts).
	hostHeldSeen map[string]int64
}

// Signals are the moments of a node's work that tests wait for.
type Signals struct {
	// Rescheduled carries the number of each interval step that ended
	// (NodeStats.Intervals after it).
	Rescheduled testsignal.Signal[int64]
	// Progress carries the clock time (Unix ms) of each write of the
	// running jobs' live counters that committed.
	Progress testsignal.Signal[int64]
}

// InitTestSignals initialises every test signal; call it before Start.
func (s *Signals) InitTestSignals() {
	s.Rescheduled.Init()
	s.Progress.Init()
}

// New returns a stopped replication node over store (which a process
// shares with its control plane: cmd/internal/node builds one) running
// replications with eng (nil means replicator.EngineDefault{}).
func New(store *replicator.Store, eng replicator.Engine, cfg Config) (*Node, error) {
	if store == nil {
		return nil, replicator.InvalidConfig("nil store")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if eng == nil {
		eng = replicator.EngineDefault{}
	}
	n := &Node{store: store, eng: eng, m: cfg.Metrics, cfg: cfg, pacer: replicator.NewHostPacer(store, cfg.Clock, cfg.Logger, cfg.Metrics),
		kick: make(chan struct{}, 1), load: newLoadPublisher(), workers: map[*worker]bool{}, charges: newCharges(),
		progress: newProgress(), watches: newWatches(), feeds: newFeeds()}
	for _, name := range []string{replicator.MetricSyncJobs, replicator.MetricSyncLagChanges, replicator.MetricSyncLagSeconds} {
		n.m.ObserveSeries(name, false, func() []replicator.Series { return n.progress.syncSeries(name) })
	}
	n.m.ObserveSeries(replicator.MetricDocsRefused, true, n.progress.refusedSeries)
	n.nonAdmins.Store(&cfg.NonAdmins)
	n.pacer.SetRates(float64(cfg.MaxRequestsPerHostPerSec), float64(cfg.MaxRequestsPerHostUserPerSec))
	return n, nil
}

// Metrics returns the counters the node updates.
func (n *Node) Metrics() *replicator.Metrics { return n.m }

// SetConfig validates cfg and applies it at the next interval (NonAdmins
// at once; a new Interval is used from the interval after). Lowering
// MaxJobs stops the excess then, whatever their run time and however many
// (MaxChurn does not bound it), the least deserving first: continuous
// jobs, then
// one-shot jobs, each in stopOrder. Raising it gives the Runtime of its jobs
// the new room at that step, and its fetchers take pending jobs into it as
// fast as they come (acceptBatchMax per accept, MaxAcceptors at once; not
// bounded by MaxChurn). New JobDefaults apply to the jobs started from
// then on. Subspace, Metrics, Clock, Logger and Cluster keep their values
// from New, and so does Addresses when cfg has none (the policy is shared
// and changed in place).
func (n *Node) SetConfig(cfg Config) error {
	cur := n.Config()
	cfg.Metrics, cfg.Clock, cfg.Logger, cfg.Cluster = cur.Metrics, cur.Clock, cur.Logger, cur.Cluster
	cfg.Opener = cur.Opener // its keys are read at start
	if cfg.Addresses == nil {
		cfg.Addresses = cur.Addresses // shared, and changed in place (SetRules)
	}
	if cfg.DocUpdater == nil {
		cfg.DocUpdater = cur.DocUpdater
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	n.cfgMu.Lock()
	n.next = &cfg
	n.cfgMu.Unlock()
	n.nonAdmins.Store(&cfg.NonAdmins)
	// The budgets of requests apply at once: the pacer is read before
	// each request.
	n.pacer.SetRates(float64(cfg.MaxRequestsPerHostPerSec), float64(cfg.MaxRequestsPerHostUserPerSec))
	return nil
}

// Config returns the configuration in effect.
func (n *Node) Config() Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg
}

// spawn runs f on a goroutine that shutdown waits for, with the node's
// run context, unless the node is stopping (or stopped); it reports
// whether f runs. It adds to wg under mu while the node is not stopping,
// so that no Add comes after shutdown's Wait began (publishSoonLocked,
// the other place that adds, is called by the Runtime's workers, which
// have all left before that Wait).
func (n *Node) spawn(f func(ctx context.Context)) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping || n.ctx == nil {
		return false
	}
	ctx := n.ctx
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f(ctx)
	}()
	return true
}

// kept returns the workers not asked to stop.
func (n *Node) kept() []*worker {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.keptLocked()
}

// Reschedule runs the rescheduling step now instead of at the next tick.
func (n *Node) Reschedule() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Start registers the rep_jobs type, takes back the jobs an earlier run
// of this node left running (takeBack), then starts the Runtime of its
// jobs and the rescheduling loop; they run until Stop or until ctx ends (the node then
// shuts down as by Stop). Start on a started node does nothing, the take
// back included (it would put the node's own running jobs back in the
// queue); a node whose ctx ended starts again.
func (n *Node) Start(ctx context.Context) error {
	_, err := n.svc.Start(ctx, func(runCtx context.Context) error {
		cfg := n.Config()
		uuid, err := n.store.Setup(runCtx, cfg.JobTimeout, cfg.JobShards)
		if err != nil {
			return err
		}
		if err := n.takeBack(runCtx, cfg); err != nil {
			return err
		}
		if err := n.startWatches(runCtx, cfg); err != nil {
			return err
		}
		if err := n.startTemplates(runCtx, cfg); err != nil {
			n.stopWatches()
			return err
		}
		if err := n.startTriggers(runCtx, cfg); err != nil {
			n.stopTemplates()
			n.stopWatches()
			return err
		}
		if err := n.startWebhooks(runCtx, cfg); err != nil {
			n.stopTriggers()
			n.stopTemplates()
			n.stopWatches()
			return err
		}
		n.mu.Lock()
		n.ctx, n.stopping, n.serverUUID = runCtx, false, uuid
		n.mu.Unlock()
		if err := n.startJobs(runCtx, cfg); err != nil {
			n.stopWebhooks()
			n.stopTriggers()
			n.stopTemplates()
			n.stopWatches()
			return err
		}
		n.spawn(n.progressLoop)
		return nil
	}, func(runCtx context.Context) {
		n.serve(runCtx)
		n.shutdown()
	})
	return err
}

// takeBack re-enqueues at once the jobs an earlier run of a node with this
// name left running: they have no worker any more (the process died, or
// was stopped past its shutdown timeout), and without this they would wait
// for the activity monitor, a job timeout or more. They are found through
// the view index of running jobs by node, so this costs what the node ran,
// not the cluster's jobs. Node names must be unique in a cluster (the
// default is the host name).
func (n *Node) takeBack(ctx context.Context, cfg Config) error {
	mine, err := n.store.RunningOn(ctx, cfg.NodeName)
	if err != nil {
		return err
	}
	taken := 0
	for _, id := range mine {
		ok, err := n.store.Reenqueue(ctx, id)
		if err != nil {
			return err
		}
		if ok {
			taken++
		}
	}
	if taken > 0 {
		cfg.Logger.Info().Int("jobs", taken).
			Msg("replicator: took back the jobs an earlier run of this node left running")
	}
	return nil
}

// Stop stops accepting, stops every running job (each writes a final
// checkpoint and goes back to pending, so another node resumes it at once;
// a run that has not ended after a short grace, e.g. because a peer does
// not answer, is cancelled and its job still goes back to pending; jobs
// still busy after Config.ShutdownTimeout are aborted and resumed
// elsewhere after the job timeout) and waits for every goroutine to end.
// Stop before Start and a second Stop do nothing.
func (n *Node) Stop() { n.svc.Stop() }

func (n *Node) shutdown() {
	n.mu.Lock()
	n.stopping = true
	timeout, log, clock := n.cfg.ShutdownTimeout, n.cfg.Logger, n.cfg.Clock
	n.mu.Unlock()
	// The Runtime's fetchers stop first, before any worker puts its job
	// back: a fetch that took such a job as it was cancelled could drop
	// it, left running for a job timeout (a job a fetch took meanwhile
	// goes back at once: started).
	hard := make(chan struct{})
	all := make(chan struct{})
	go func() {
		n.stopJobs(hard)
		n.wg.Wait()
		close(all)
	}()
	n.mu.Lock()
	for w := range n.workers {
		w.requestStop(stopShutdown)
	}
	n.mu.Unlock()
	n.stopWatches()
	n.stopTemplates()
	n.stopTriggers()
	n.stopWebhooks()
	t := clock.NewTimer(timeout)
	select {
	case <-all:
	case <-t.Chan():
		close(hard)
		<-all
	}
	t.Stop()
	// The run time charged since the last interval, for fair share; if
	// the store does not take it within the shutdown timeout it is lost,
	// which usage's decay makes up for.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	if err := n.charges.flush(ctx, n.store); err != nil {
		log.Warn().Err(err).Msg("replicator: fair share usage: the last run time charged is lost")
	}
	cancel()
	n.mu.Lock()
	n.ctx = nil
	n.mu.Unlock()
}

func (n *Node) serve(ctx context.Context) {
	for {
		cfg := n.Config()
		d := cfg.Interval + time.Duration(rand.Int64N(int64(cfg.Interval/3)+1))
		t := cfg.Clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		case <-n.kick:
			t.Stop()
		}
		if err := n.reschedule(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: reschedule")
		}
		n.probeHosts()
	}
}

// addChargeLocked accrues w's run time since its last charge.
func (n *Node) addChargeLocked(w *worker, now time.Time) {
	if w.started.IsZero() {
		return
	}
	from := w.started
	if w.charged.After(from) {
		from = w.charged
	}
	if d := now.Sub(from).Milliseconds(); d > 0 {
		n.charges.add(w.shareKey, d)
	}
	w.charged = now
}

// priorityOf returns w's fair-share priority at now: as of the last
// interval step (or its start), decayed since. Its increment for the
// part of an interval it ran since is not added (CouchDB adds increments
// only at interval steps).
func (n *Node) priorityOf(w *worker, now time.Time) float64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return w.cfg.Decay(w.priority, now.Sub(w.prioritized), w.cfg.Interval)
}

// NodeStats are a node's scheduler figures.
type NodeStats struct {
	// Running counts the node's workers; Acceptors the fetchers of its
	// Runtime waiting for a job (none when the node is at its target).
	Running   int
	Acceptors int
	// Idle is when a fetcher last found no job due (Unix ms; 0: never).
	Idle      int64
	Intervals int64
	// Rotations holds the number of jobs preempted in each of the last
	// intervals (at most 1000, oldest first).
	Rotations []int
}

// Stats returns the node's scheduler figures.
func (n *Node) Stats() NodeStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.runtimeStatsLocked()
	return NodeStats{Running: len(n.workers), Acceptors: rs.Fetching, Idle: rs.Idle, Intervals: n.intervals,
		Rotations: append([]int(nil), n.rotations...)}
}

// stopOrder orders running jobs for stopping (a cmp function on their
// fair-share priorities and start times): the least deserving first, i.e.
// the highest priority, then the one that started first (CouchDB's order).
func stopOrder(pa float64, sa time.Time, pb float64, sb time.Time) int {
	if pa != pb {
		if pa > pb {
			return -1
		}
		return 1
	}
	return sa.Compare(sb)
}

// keptLocked returns the workers not asked to stop.
func (n *Node) keptLocked() []*worker {
	var ws []*worker
	for w := range n.workers {
		if !w.stopRequested() {
			ws = append(ws, w)
		}
	}
	return ws
}

// stopLeastDeservingLocked asks up to k of the workers ws for which
// eligible holds to stop (kind says why), the least deserving first: the
// highest fair-share priority, then the one that started first (CouchDB's
// order). It returns how many it asked. Trim, rotation, balance and the
// users' turns all choose their jobs here. n.mu must be held: it reads
// the workers' priorities.
func stopLeastDeservingLocked(ws []*worker, k int, kind stopKind, eligible func(*worker) bool) int {
	return stopLeastDeservingUntilLocked(ws, k, kind, 0, eligible)
}

// stopLeastDeservingUntilLocked is stopLeastDeservingLocked whose jobs go
// back to the queue no sooner than at (Unix ms; 0: their fair-share
// time).
func stopLeastDeservingUntilLocked(ws []*worker, k int, kind stopKind, at int64, eligible func(*worker) bool) int {
	if k <= 0 {
		return 0
	}
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b *worker) int { return stopOrder(a.priority, a.started, b.priority, b.started) })
	stopped := 0
	for _, w := range ws {
		if stopped == k {
			break
		}
		if !w.stopRequested() && eligible(w) {
			w.requestStopUntil(kind, at)
			stopped++
		}
	}
	return stopped
}

// rotate is the interval's rotation, while every node is full: it stops
// as many continuous jobs that ran at least MinRunTime as runnable jobs
// wait beyond the node's room, at most MaxChurn less the jobs the trim
// stopped, the least deserving first. Each writes a final checkpoint and
// goes back to the queue behind the jobs that waited, which take the
// slots it leaves (a stopping worker counts against the target until it
// leaves, so the node never runs more than MaxJobs). It returns how many
// it stopped.
func (n *Node) rotate(ctx context.Context, cfg Config, now time.Time, stopped int) int {
	ran := func(w *worker) bool { return w.continuous && now.Sub(w.started) >= cfg.MinRunTime }
	kept := n.kept()
	rotatable := 0
	for _, w := range kept {
		if ran(w) { // fixed at the worker's start: read without mu
			rotatable++
		}
	}
	limit := rotationPendingLimit(len(kept), rotatable, cfg.MaxJobs, cfg.MaxChurn, stopped)
	if limit == 0 {
		return 0
	}
	// Counted far enough for parking too: a job rotation stops caught up
	// parks only where so many wait that a poll is no slower than its
	// turn (pollParkOK).
	if cfg.parks() {
		limit = max(limit, max(0, cfg.MaxJobs-len(kept))+cfg.pollParkWaiting())
	}
	pending, err := n.store.PendingCount(ctx, replicator.Millis(now), limit)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: rotation: counting pending jobs; no rotation this interval")
		}
		return 0
	}
	n.m.Set(replicator.MetricJobsPending, int64(pending))
	n.waiting.set(max(0, pending-max(0, cfg.MaxJobs-len(kept))), now)
	n.mu.Lock()
	defer n.mu.Unlock()
	k := planRotation(len(kept), rotatable, pending, cfg.MaxJobs, cfg.MaxChurn, stopped)
	return stopLeastDeservingLocked(n.keptLocked(), k, stopPreempt, ran)
}

// reschedule is the interval step.
func (n *Node) reschedule(ctx context.Context) error {
	n.cfgMu.Lock()
	next := n.next
	n.next = nil
	n.cfgMu.Unlock()
	n.mu.Lock()
	if next != nil {
		n.cfg = *next
	}
	cfg := n.cfg
	now := cfg.Clock.Now()
	for w := range n.workers {
		n.addChargeLocked(w, now)
	}
	n.mu.Unlock()
	n.setMaxWatches(cfg) // (the pacer's rates were set by SetConfig)

	// Fair share: charge, roll up, then adjust the priorities of the jobs
	// running here (replicator/share.go).
	_ = n.charges.flush(ctx, n.store) // kept for the next interval
	if err := n.charges.rollUp(ctx, n.store, now, cfg.Interval, cfg.UsageCoeff); err != nil && ctx.Err() == nil {
		cfg.Logger.Warn().Err(err).Msg("replicator: fair share usage")
	}
	shares := n.charges.shares()
	n.mu.Lock()
	for w := range n.workers {
		from := w.started
		if w.prioritized.After(from) {
			from = w.prioritized
		}
		w.priority = cfg.Adjust(w.priority, w.shareKey, shares, now.Sub(from), now.Sub(w.prioritized), cfg.Interval)
		w.prioritized = now
	}

	// Trim: after MaxJobs was lowered (or fetches racing took the node
	// over it), the excess stops at once: the least deserving continuous
	// jobs, then one-shot jobs.
	active := n.keptLocked()
	stopped := 0
	if excess := planTrim(len(active), cfg.MaxJobs); excess > 0 {
		stopped = stopLeastDeservingLocked(active, excess, stopPreempt, func(w *worker) bool { return w.continuous })
		stopped += stopLeastDeservingLocked(active, excess-stopped, stopPreempt, func(w *worker) bool { return !w.continuous })
	}
	n.mu.Unlock()

	// The users' turns: continuous jobs of users whose other jobs were
	// held back at the per-user limit make room for them.
	stopped += n.rotateUsers(ctx, cfg, now, stopped)
	// The hosts' turns, likewise, within their budgets.
	stopped += n.rotateHosts(ctx, cfg, now, stopped)

	// Balance: with other replication nodes, move jobs to the lighter
	// ones and set the node's share; rotation only while every node is
	// full.
	full := true
	if cfg.Cluster != nil {
		full = n.balance(ctx, cfg, now, stopped)
	}
	rotated := 0
	if full {
		rotated = n.rotate(ctx, cfg, now, stopped)
	}

	n.mu.Lock()
	n.rotations = append(n.rotations, stopped+rotated)
	if len(n.rotations) > 1000 {
		n.rotations = n.rotations[1:]
	}
	n.m.Add(replicator.MetricJobsPreempted, int64(stopped+rotated))
	n.setTargetLocked()
	rs := n.runtimeStatsLocked()
	n.m.Set(replicator.MetricJobsAccepting, int64(rs.Fetching))
	n.m.Add(replicator.MetricJobsAccepts, max(0, rs.Fetches-n.fetches))
	n.fetches = max(n.fetches, rs.Fetches)
	n.m.Set(replicator.MetricJobsRunning, int64(len(n.workers)))
	n.m.Inc(replicator.MetricJobsReschedules)
	n.intervals++
	step := n.intervals
	n.mu.Unlock()

	if err := n.cleanup(ctx, cfg); err != nil && ctx.Err() == nil {
		cfg.Logger.Warn().Err(err).Msg("replicator: cleanup")
	}
	if err := n.reseal(ctx, cfg); err != nil && ctx.Err() == nil {
		cfg.Logger.Warn().Err(err).Msg("replicator: reseal pass; again at the next interval")
	}
	if parked, err := n.store.ParkedCount(ctx, nil); err == nil {
		n.m.Set(replicator.MetricJobsParked, parked)
	}

	n.TestSignals.Rescheduled.Signal(step)
	return nil
}

// lacksKey records that this node lacks sealing key id; true the first
// time for each id.
func (n *Node) lacksKey(id string) bool {
	_, known := n.keysLacking.LoadOrStore(id, true)
	return !known
}
