package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/clockwait"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Watches (see doc.go, "Watches").
const (
	// watchFeedTimeoutMax bounds how long one _db_updates request waits
	// for a row before CouchDB closes it and the watch asks again: the
	// node's Interval, at most this (a watch whose group emptied ends
	// within that time).
	watchFeedTimeoutMax = time.Minute
	// watchFeedRetry is how long a polling watch polls before it asks for
	// _db_updates again (a _global_changes created since, credentials
	// changed).
	watchFeedRetry = 10 * time.Minute
	// watchRetryWait is how long a watch whose server did not answer
	// waits before it asks again (its parked jobs stay parked meanwhile).
	watchRetryWait = 10 * time.Second
	// watchPage is how many parked jobs a watch reads per transaction.
	watchPage = 100
)

// watches is the part of a Node that follows the watch jobs it holds:
// how many it holds (at most Config.MaxWatches, beside the replication
// slots) and the rate of its exact checks (Config.WatchPollRate, for
// every polling watch of the node together).
type watches struct {
	mu   sync.Mutex
	held int
	runs map[*watchRun]bool // the watches running
	// recent are the watches that ran here and were put back, by job id:
	// a polling watch runs a cycle at a time.
	recent map[string]recentWatch
	freed  chan struct{} // signalled (buffer of one) when a watch ends
	limit  *rate.Limiter
}

// recentWatch is a watch that ran on the node, as it was put back.
type recentWatch struct {
	wd replicator.WatchData
	at time.Time
}

func newWatches() *watches {
	return &watches{runs: map[*watchRun]bool{}, recent: map[string]recentWatch{}, freed: make(chan struct{}, 1),
		limit: rate.NewLimiter(rate.Inf, 1)}
}

// WatchCounts are how the watches a node follows watch their servers.
type WatchCounts struct {
	// DBUpdates follow their server's _db_updates feed.
	DBUpdates int `json:"db_updates"`
	// Refused poll because the feed refused their credentials (they are
	// not a server admin's), Missing because the server has no feed (on
	// CouchDB 3.x, no _global_changes).
	Refused int `json:"polled_refused"`
	Missing int `json:"polled_missing"`
	// Starting have not asked their server yet.
	Starting int `json:"starting"`
}

// Watches returns how the watches the node follows watch their servers:
// those it runs, and those it put back within two poll intervals (a
// polling watch runs a cycle at a time). Its /_up says; which servers, and
// why, are in the views of their parked jobs and in the log.
func (n *Node) Watches() WatchCounts {
	cfg := n.Config()
	ws := n.watches
	ws.mu.Lock()
	runs := make([]*watchRun, 0, len(ws.runs))
	seen := map[string]bool{}
	for r := range ws.runs {
		runs = append(runs, r)
		seen[r.job.ID] = true
	}
	var all []replicator.WatchData
	for id, rw := range ws.recent {
		switch {
		case cfg.Clock.Since(rw.at) > 2*cfg.WatchPollInterval:
			delete(ws.recent, id)
		case !seen[id]:
			all = append(all, rw.wd)
		}
	}
	ws.mu.Unlock()
	for _, r := range runs {
		all = append(all, *r.data())
	}
	var c WatchCounts
	for _, wd := range all {
		switch {
		case wd.Mode == replicator.WatchDBUpdates:
			c.DBUpdates++
		case wd.Mode == replicator.WatchPoll && wd.Cause == "missing":
			c.Missing++
		case wd.Mode == replicator.WatchPoll:
			c.Refused++
		default:
			c.Starting++
		}
	}
	return c
}

// track adds r to the watches running, or removes it, keeping it among
// the recent ones until its next run unless its group emptied.
func (ws *watches) track(r *watchRun, on bool, end watchEnd, now time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if on {
		ws.runs[r] = true
		return
	}
	delete(ws.runs, r)
	if end == watchEmpty {
		delete(ws.recent, r.job.ID)
	} else {
		ws.recent[r.job.ID] = recentWatch{wd: *r.data(), at: now}
	}
}

// take reserves room for one more watch; false when max are held.
func (ws *watches) take(max int) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.held >= max {
		return false
	}
	ws.held++
	return true
}

// release gives back a watch's room.
func (ws *watches) release() {
	ws.mu.Lock()
	ws.held--
	ws.mu.Unlock()
	select {
	case ws.freed <- struct{}{}:
	default:
	}
}

// count is how many watches the node holds.
func (ws *watches) count() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.held
}

// wait waits for the node's rate of exact checks to allow one more.
func (ws *watches) wait(ctx context.Context, cfg Config) error {
	now := cfg.Clock.Now()
	ws.limit.SetLimitAt(now, rate.Limit(cfg.WatchPollRate))
	ws.limit.SetBurstAt(now, max(1, cfg.WatchPollRate))
	return clockwait.Sleep(ctx, cfg.Clock, ws.limit.ReserveN(now, 1).DelayFrom(now))
}

// watchAcceptor takes the watch jobs that are due, while the node holds
// fewer than MaxWatches, and runs each (runWatch), until ctx ends.
func (n *Node) watchAcceptor(ctx context.Context) {
	defer n.wg.Done()
	b := kv.Backoff{Initial: acceptRetryDefault, Max: acceptRetryMax, Rand: kv.Full}
	for ctx.Err() == nil {
		cfg := n.Config()
		if !n.watches.take(cfg.MaxWatches) {
			select {
			case <-n.watches.freed:
			case <-ctx.Done():
			}
			continue
		}
		// A watch due later (a polling one, back at its next cycle) is
		// due without a write: the wait is bounded, as the acceptors'.
		job, err := n.store.AcceptWatch(ctx, cfg.acceptWaitMax())
		if err != nil {
			n.watches.release()
			if ctx.Err() != nil || errors.Is(err, fdbjobs.ErrNotFound) {
				continue
			}
			cfg.Logger.Warn().Err(err).Msg("replicator: watch accept")
			if b.WaitAny(ctx, err) != nil {
				return
			}
			continue
		}
		b.Reset()
		n.wg.Add(1)
		go n.runWatch(ctx, job)
	}
}

// watchEnd is how a watch's work ended.
type watchEnd int

const (
	watchCancelled watchEnd = iota // the node stops, or the hold lapsed
	watchEmpty                     // its group has no parked job
	watchPolled                    // a poll cycle is done: again after WatchPollInterval
	watchRetry                     // its server did not answer: again after watchRetryWait
)

// watchRun is one watch job held by the node.
type watchRun struct {
	n    *Node
	job  *fdbjobs.Job
	hold *holdTimer

	mu sync.Mutex
	wd replicator.WatchData // as the next write stores it
}

// runWatch follows the watch job job until its group is empty, a poll
// cycle ends, its server does not answer, the node stops or its hold
// lapses; then it ends the job, or puts it back to be taken again (see
// doc.go, "Watches").
func (n *Node) runWatch(ctx context.Context, job *fdbjobs.Job) {
	defer n.wg.Done()
	defer n.watches.release()
	cfg := n.Config()
	wd, err := replicator.DecodeWatchData(job.Data)
	if err != nil {
		cfg.Logger.Error().Err(err).Str("job_id", job.ID).Msg("replicator: undecodable watch data; the watch is dropped")
		_, _ = kv.Transact(ctx, n.store, func(tr kv.Transaction) (any, error) { return nil, n.store.DropWatch(ctx, tr, job) })
		return
	}
	wd.Node = cfg.NodeName
	r := &watchRun{n: n, job: job, wd: *wd, hold: newHoldTimer(job, cfg.Clock)}
	defer r.hold.stop()
	n.watches.track(r, true, 0, time.Time{})
	end := watchCancelled
	defer func() { n.watches.track(r, false, end, cfg.Clock.Now()) }()
	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan watchEnd, 1)
	go func() { done <- r.work(workCtx) }()
	hb := cfg.Clock.NewTicker(cfg.heartbeat())
	defer hb.Stop()
	for {
		select {
		case <-r.hold.expired():
			cancel()
			<-done
			cfg.Logger.Warn().Str("group", wd.Group).Msg("replicator: watch stopped: this node could not renew its hold on it; another node takes it")
			return
		case <-hb.Chan():
			if !r.renew(ctx) {
				cancel()
				<-done
				return
			}
		case end = <-done:
			r.end(ctx, end)
			return
		case <-ctx.Done():
			cancel()
			<-done
			// Another node goes on at once, from what this one followed.
			r.requeue(context.WithoutCancel(ctx), cfg.Clock.Now())
			return
		}
	}
}

// data returns the watch's data as it stands, stamped now.
func (r *watchRun) data() *replicator.WatchData {
	r.mu.Lock()
	defer r.mu.Unlock()
	wd := r.wd
	wd.Updated = replicator.Millis(r.n.Config().Clock.Now())
	return &wd
}

// set changes the watch's data.
func (r *watchRun) set(f func(*replicator.WatchData)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.wd)
}

// renew writes the watch's data (its since) and renews its hold; false
// when the job was taken from this node or the hold lapsed.
func (r *watchRun) renew(ctx context.Context) bool {
	renewed := r.job.Renewing()
	hctx, done := r.job.HoldContext(ctx)
	defer done()
	wd := r.data()
	_, err := kv.Transact(hctx, r.n.store, func(tr kv.Transaction) (any, error) {
		return nil, r.n.store.UpdateWatch(hctx, tr, r.job, wd)
	})
	renewed(err == nil)
	if err != nil || r.hold.lapsed() {
		return false
	}
	r.hold.reset()
	return true
}

// end ends the watch's run after its work: it finishes the job when its
// group is empty (a park meanwhile makes it go on), or puts it back to be
// taken again at the time the end calls for.
func (r *watchRun) end(ctx context.Context, end watchEnd) {
	cfg := r.n.Config()
	now := cfg.Clock.Now()
	switch end {
	case watchEmpty:
		wd := r.data()
		hctx, done := r.job.HoldContext(ctx)
		defer done()
		ended, err := kv.Transact(hctx, r.n.store, func(tr kv.Transaction) (bool, error) {
			return r.n.store.EndWatch(hctx, tr, r.job, wd)
		})
		if err == nil && ended {
			cfg.Logger.Debug().Str("group", wd.Group).Msg("replicator: watch ended: its group has no parked replication")
			return
		}
		r.requeue(ctx, now)
	case watchPolled:
		r.requeue(ctx, now.Add(cfg.WatchPollInterval))
	case watchRetry:
		r.requeue(ctx, now.Add(watchRetryWait))
	default:
		r.requeue(ctx, now)
	}
}

// requeue puts the watch back, pending at at, with its data.
func (r *watchRun) requeue(ctx context.Context, at time.Time) {
	wd := r.data()
	hctx, done := r.job.HoldContext(ctx)
	defer done()
	err := r.n.store.RequeueWatch(hctx, r.job, replicator.Millis(at), wd)
	if err != nil && !errors.Is(err, fdbjobs.ErrHalt) && ctx.Err() == nil {
		// The activity monitor puts it back a job timeout later.
		r.n.Config().Logger.Warn().Err(err).Str("group", wd.Group).Msg("replicator: watch not put back")
	}
}

// work follows the group's server: its _db_updates feed (unless a recent
// refusal makes it poll), else one poll cycle.
func (r *watchRun) work(ctx context.Context) watchEnd {
	cfg := r.n.Config()
	rep, ok, err := r.member(ctx)
	switch {
	case err != nil:
		return watchRetry
	case !ok:
		return watchEmpty
	}
	wd := r.data()
	if wd.Mode != replicator.WatchPoll || cfg.Clock.Now().Sub(time.UnixMilli(wd.FeedTried)) >= watchFeedRetry {
		if end, polls := r.follow(ctx, rep); !polls {
			return end
		}
	}
	if err := r.checkAll(ctx, "its source changed (poll)"); err != nil {
		if ctx.Err() != nil {
			return watchCancelled
		}
		return watchRetry
	}
	return watchPolled
}

// member returns the replication of one parked job of the group, whose
// source's credentials, headers and proxy the watch asks the server with;
// false when the group has none.
func (r *watchRun) member(ctx context.Context) (engine.Replication, bool, error) {
	group := r.data().Group
	after := replicator.ParkedRef{}
	for {
		page, err := r.n.store.ParkedPage(ctx, r.n.store, group, "", after, watchPage)
		if err != nil || len(page) == 0 {
			return engine.Replication{}, false, err
		}
		for _, ref := range page {
			if rep, _, ok := r.replication(ctx, ref.JobID); ok {
				return rep, true, nil
			}
		}
		after = page[len(page)-1]
	}
}

// replication returns the parked job id's replication (the node's
// defaults applied) and its data; false when it is not parked, or its
// data is not a replication.
func (r *watchRun) replication(ctx context.Context, id string) (engine.Replication, *replicator.JobData, bool) {
	d, _, err := r.n.store.Job(ctx, nil, id)
	if err != nil || d == nil || d.State != replicator.StateParked || d.Parked == nil || d.Rep == nil {
		return engine.Replication{}, nil, false
	}
	spec, err := d.Rep.Open(r.n.Config().Opener, d.SealScope()) // a node without the key cannot follow it
	if err != nil {
		return engine.Replication{}, nil, false
	}
	rep, err := spec.Replication()
	if err != nil {
		return engine.Replication{}, nil, false
	}
	return r.n.Config().JobDefaults.Apply(rep, spec), d, true
}

// follow follows the server's _db_updates feed with rep's source
// credentials, and wakes the parked jobs of each database it names, until
// the group is empty, the server does not answer, or ctx ends. A watch
// without a since takes the feed's end first, then checks every parked
// job once (what changed before the feed's end is not in what it will
// follow). polls is true when the feed is refused or missing: the watch
// polls instead, and says why.
func (r *watchRun) follow(ctx context.Context, rep engine.Replication) (end watchEnd, polls bool) {
	cfg := r.n.Config()
	wd := r.data()
	since := wd.Since
	refused := func(err error) (watchEnd, bool) {
		switch {
		case ctx.Err() != nil:
			return watchCancelled, false
		case errors.Is(err, engine.ErrUnauthorized), errors.Is(err, engine.ErrForbidden), errors.Is(err, engine.ErrNoDBUpdates):
			reason, cause := replicator.Reason(err), "refused"
			if errors.Is(err, engine.ErrNoDBUpdates) {
				cause = "missing"
			}
			r.set(func(w *replicator.WatchData) {
				w.Mode, w.Reason, w.Cause, w.Since, w.FeedTried = replicator.WatchPoll, reason, cause, "", replicator.Millis(cfg.Clock.Now())
			})
			cfg.Logger.Warn().Str("group", wd.Group).Str("reason", reason).
				Msg("replicator: the parked replications of this source server are polled, one request each per poll: its _db_updates feed is not available" +
					" (it needs a server admin's credentials in the replications, and on CouchDB 3.x the _global_changes database: PUT /_global_changes)")
			return watchPolled, true
		default:
			first := false
			r.set(func(w *replicator.WatchData) {
				if first = w.Unanswered == 0; first {
					w.Unanswered = replicator.Millis(cfg.Clock.Now())
				}
			})
			if first {
				cfg.Logger.Info().Err(err).Str("group", wd.Group).
					Msg("replicator: watch: the source server does not answer; its parked replications stay parked until it does")
			}
			return watchRetry, false
		}
	}
	answered := func() {
		was := int64(0)
		r.set(func(w *replicator.WatchData) { was, w.Unanswered = w.Unanswered, 0 })
		if was != 0 {
			cfg.Logger.Info().Str("group", wd.Group).Str("after", cfg.Clock.Now().Sub(time.UnixMilli(was)).Round(time.Second).String()).
				Msg("replicator: watch: the source server answers again")
		}
	}
	if since == "" {
		last, err := r.n.eng.DBUpdates(ctx, rep, "now", time.Millisecond, func(engine.DBUpdate) error { return nil })
		if err != nil {
			return refused(err)
		}
		answered()
		if err := r.checkAll(ctx, "its source changed (before its watch followed _db_updates)"); err != nil {
			if ctx.Err() != nil {
				return watchCancelled, false
			}
			return watchRetry, false
		}
		since = last
	}
	r.set(func(w *replicator.WatchData) {
		w.Mode, w.Reason, w.Cause, w.Since = replicator.WatchDBUpdates, "", "", since
	})
	for {
		last, err := r.n.eng.DBUpdates(ctx, rep, since, min(watchFeedTimeoutMax, r.n.Config().Interval), func(u engine.DBUpdate) error {
			return r.wakeDB(ctx, u.DB)
		})
		if last != "" {
			since = last
			r.set(func(w *replicator.WatchData) { w.Since = since })
		}
		if err != nil {
			return refused(err)
		}
		answered()
		any, err := kv.ReadTransact(ctx, r.n.store, func(tr kv.ReadTransaction) (bool, error) {
			return r.n.store.AnyParked(tr, wd.Group)
		})
		if err == nil && !any {
			return watchEmpty, false
		}
	}
}

// wakeDB wakes the parked jobs of the group whose source is db.
func (r *watchRun) wakeDB(ctx context.Context, db string) error {
	group := r.data().Group
	after := replicator.ParkedRef{}
	for {
		page, err := r.n.store.ParkedPage(ctx, r.n.store, group, db, after, watchPage)
		if err != nil {
			return err
		}
		for _, ref := range page {
			r.n.wake(ctx, ref.JobID, "its source changed (_db_updates)")
		}
		if len(page) < watchPage {
			return nil
		}
		after = page[len(page)-1]
	}
}

// checkAll makes the exact check of every parked job of the group (its
// own source credentials; Engine.Pending after its checkpoint), at the
// node's WatchPollRate, and wakes those whose source changed, for cause.
// A source that does not answer leaves its job parked.
func (r *watchRun) checkAll(ctx context.Context, cause string) error {
	group := r.data().Group
	after := replicator.ParkedRef{}
	for {
		page, err := r.n.store.ParkedPage(ctx, r.n.store, group, "", after, watchPage)
		if err != nil {
			return err
		}
		for _, ref := range page {
			if err := r.n.watches.wait(ctx, r.n.Config()); err != nil {
				return err
			}
			r.check(ctx, ref.JobID, cause)
		}
		if len(page) < watchPage {
			return nil
		}
		after = page[len(page)-1]
	}
}

// check is the exact check of the parked job id.
func (r *watchRun) check(ctx context.Context, id, cause string) {
	rep, d, ok := r.replication(ctx, id)
	if !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, parkCheckTimeout)
	n, err := r.n.eng.Pending(cctx, rep, d.Parked.Through)
	cancel()
	if err == nil && n > 0 {
		r.n.wake(ctx, id, cause)
	}
}
