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
// its Runtime of watch jobs (at most Config.MaxWatches at once, beside the
// replication slots), the watches running and recent, and the rate of its
// exact checks (Config.WatchPollRate, for every polling watch of the node
// together).
type watches struct {
	// mu guards rt, runs, recent and maxWatches; it is never held while
	// Node.mu is taken.
	mu sync.Mutex
	// rt works the watch jobs (set by Node.Start, cleared by stopWatches;
	// the Runtime is the one runner of held watch jobs: hold, heartbeat,
	// end).
	rt   *fdbjobs.Runtime
	runs map[*watchRun]bool // the watches running
	// recent are the watches that ran here and were put back, by job id:
	// a polling watch runs a cycle at a time.
	recent map[string]recentWatch
	// maxWatches is the Concurrency the Runtime was last given.
	maxWatches int
	// limit is the rate of the exact checks (safe for concurrent use).
	limit *rate.Limiter
}

// recentWatch is a watch that ran on the node, as it was put back.
type recentWatch struct {
	wd replicator.WatchData
	at time.Time
}

func newWatches() *watches {
	return &watches{runs: map[*watchRun]bool{}, recent: map[string]recentWatch{}, limit: rate.NewLimiter(rate.Inf, 1)}
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
		seen[r.w.ID] = true
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
	var wd *replicator.WatchData
	if !on && end != watchEmpty {
		wd = r.data() // before ws.mu: data takes n.mu
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if on {
		ws.runs[r] = true
		return
	}
	delete(ws.runs, r)
	if end == watchEmpty {
		delete(ws.recent, r.w.ID)
	} else {
		ws.recent[r.w.ID] = recentWatch{wd: *wd, at: now}
	}
}

// wait waits for the node's rate of exact checks to allow one more.
func (ws *watches) wait(ctx context.Context, cfg Config) error {
	now := cfg.Clock.Now()
	ws.limit.SetLimitAt(now, rate.Limit(cfg.WatchPollRate))
	ws.limit.SetBurstAt(now, max(1, cfg.WatchPollRate))
	return clockwait.Sleep(ctx, cfg.Clock, ws.limit.ReserveN(now, 1).DelayFrom(now))
}

// startWatches starts the node's Runtime of watch jobs, with the
// configuration's MaxWatches (the rescheduling step follows a new one:
// setMaxWatches), until ctx ends or stopWatches.
func (n *Node) startWatches(ctx context.Context, cfg Config) error {
	rt, err := n.store.NewWatchRuntime(fdbjobs.WorkFunc[replicator.WatchData](n.workWatch),
		fdbjobs.WorkerOptions{Concurrency: cfg.MaxWatches, Timeout: cfg.JobTimeout},
		fdbjobs.RuntimeOptions{FetchPoll: cfg.acceptWaitMax()})
	if err != nil {
		return err
	}
	if err := rt.Start(ctx); err != nil {
		return err
	}
	n.watches.mu.Lock()
	n.watches.rt, n.watches.maxWatches = rt, cfg.MaxWatches
	n.watches.mu.Unlock()
	return nil
}

// setMaxWatches gives the watch Runtime, and the template Runtime, the
// configuration's MaxWatches.
func (n *Node) setMaxWatches(cfg Config) {
	ws := n.watches
	ws.mu.Lock()
	rt, changed := ws.rt, ws.maxWatches != cfg.MaxWatches
	ws.maxWatches = cfg.MaxWatches
	ws.mu.Unlock()
	if !changed {
		return
	}
	if rt != nil {
		if err := rt.SetConcurrency(replicator.WatchType, cfg.MaxWatches); err != nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: max_watches")
		}
	}
	if rt := n.templates.Load(); rt != nil {
		if err := rt.SetConcurrency(replicator.TemplateType, cfg.MaxWatches); err != nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: max_watches (templates)")
		}
	}
}

// stopWatches stops the watch Runtime: the watches running are put back
// at once, pending with what they followed, for another node to go on.
func (n *Node) stopWatches() {
	n.watches.mu.Lock()
	rt := n.watches.rt
	n.watches.rt = nil
	n.watches.mu.Unlock()
	if rt != nil {
		rt.StopAndCancel()
	}
}

// watchEnd is how a watch's work ended.
type watchEnd int

const (
	watchCancelled watchEnd = iota // the node stops, or the job is no longer the node's
	watchEmpty                     // its group has no parked job
	watchPolled                    // a poll cycle is done: again after WatchPollInterval
	watchRetry                     // its server did not answer: again after watchRetryWait
)

// watchRun is one watch job worked on the node.
type watchRun struct {
	n *Node
	w *fdbjobs.Work[replicator.WatchData]

	mu sync.Mutex           // guards wd
	wd replicator.WatchData // as the next write stores it
}

// workWatch follows the watch job w until its group is empty, a poll
// cycle ends, its server does not answer, or ctx ends (the node stops, or
// the job is no longer the node's); then it ends the job, or puts it back
// (a Snooze) to be taken again (see doc.go, "Watches"). Its data (the
// feed's since) is written every heartbeat and before it is put back.
func (n *Node) workWatch(ctx context.Context, w *fdbjobs.Work[replicator.WatchData]) error {
	cfg := n.Config()
	r := &watchRun{n: n, w: w, wd: w.Args}
	r.wd.Node = cfg.NodeName
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
		case <-hb.Chan():
			if err := w.Update(ctx, *r.data()); errors.Is(err, fdbjobs.ErrHalt) {
				cancel() // no longer this node's
				end = <-done
				return err
			}
		case end = <-done:
			return r.end(ctx, end)
		}
	}
}

// data returns the watch's data as it stands, stamped now.
func (r *watchRun) data() *replicator.WatchData {
	now := replicator.Millis(r.n.Config().Clock.Now()) // before r.mu: n.mu is never taken under a part's lock
	r.mu.Lock()
	defer r.mu.Unlock()
	wd := r.wd
	wd.Updated = now
	return &wd
}

// set changes the watch's data.
func (r *watchRun) set(f func(*replicator.WatchData)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.wd)
}

// end ends the watch's attempt after its work: it finishes the job when
// its group is empty (a park meanwhile makes it go on), or writes its data
// and puts it back to be taken again when the end calls for (a Snooze: not
// an attempt). When ctx ended (the node stops), the Runtime puts it back
// at once, with the data written here first, so that another node goes on
// from what this one followed.
func (r *watchRun) end(ctx context.Context, end watchEnd) error {
	cfg := r.n.Config()
	wd := r.data()
	var again time.Duration
	switch end {
	case watchEmpty:
		ended, err := kv.Transact(ctx, r.n.store, func(tr kv.Transaction) (bool, error) {
			return r.n.store.EndWatch(tr, wd.Group, func(tr kv.Transaction) error { return r.w.CompleteTx(ctx, tr) })
		})
		if err == nil && ended {
			cfg.Logger.Debug().Str("group", wd.Group).Msg("replicator: watch ended: its group has no parked replication")
			return nil
		}
	case watchPolled:
		again = cfg.WatchPollInterval
	case watchRetry:
		again = watchRetryWait
	default:
		cause := context.Cause(ctx)
		if cause == nil {
			break // again at once
		}
		if errors.Is(cause, fdbjobs.ErrHoldLapsed) {
			cfg.Logger.Warn().Str("group", wd.Group).Msg("replicator: watch stopped: this node could not renew its hold on it; another node takes it")
		}
		if errors.Is(cause, fdbjobs.ErrStopped) {
			_ = r.w.Update(context.WithoutCancel(ctx), *wd)
		}
		return cause
	}
	if err := r.w.Update(ctx, *wd); err != nil {
		if !errors.Is(err, fdbjobs.ErrHalt) && ctx.Err() == nil {
			// The job is put back as the store has it.
			cfg.Logger.Warn().Err(err).Str("group", wd.Group).Msg("replicator: watch: writing what it followed")
		}
	}
	return fdbjobs.Snooze(again)
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
		case feedUnavailable(err):
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

// feedUnavailable: the server refuses its _db_updates feed to the
// template's credentials, or has none.
func feedUnavailable(err error) bool {
	return errors.Is(err, engine.ErrUnauthorized) || errors.Is(err, engine.ErrForbidden) || errors.Is(err, engine.ErrNoDBUpdates)
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
