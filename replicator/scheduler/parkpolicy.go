package scheduler

// When a caught-up, idle continuous replication parks: only where parking
// costs its users no lag that CouchDB's own replicator would not cost
// them (see doc.go, "When a replication parks").

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// feedCheckTTL is how long a node trusts what it found of a watch group's
// _db_updates feed (feeds.ok) before it asks the server again;
// feedRetryTTL how long it trusts that the server did not answer.
const (
	feedCheckTTL = 10 * time.Minute
	feedRetryTTL = time.Minute
)

// feeds is the node's part that knows which watch groups (a source server,
// user and proxy: replicator.WatchGroupOf) give a _db_updates feed, which
// wakes a parked replication within about a second of a change: it asks
// each server once (engine.DBUpdates from the feed's end, closing at
// once), on a goroutine of its own, and remembers the answer for
// feedCheckTTL. It owns its state (its own mutex).
type feeds struct {
	mu     sync.Mutex           // guards known and asking
	known  map[string]feedState // by watch group
	asking map[string]bool      // groups being asked
}

type feedState struct {
	ok    bool
	until time.Time // when to ask again
}

func newFeeds() feeds { return feeds{known: map[string]feedState{}, asking: map[string]bool{}} }

// ok reports whether the group of rep's source is known to give a
// _db_updates feed. Unknown (never asked, or asked too long ago), it
// starts asking, on a goroutine the node waits for, and reports false
// until the answer comes.
func (n *Node) feedOK(rep engine.Replication, group string) bool {
	f := &n.feeds
	now := n.Config().Clock.Now()
	f.mu.Lock()
	st, known := f.known[group]
	if known && now.Before(st.until) {
		f.mu.Unlock()
		return st.ok
	}
	if f.asking[group] {
		f.mu.Unlock()
		return known && st.ok
	}
	f.asking[group] = true
	f.mu.Unlock()
	ask := func(ctx context.Context) {
		cfg := n.Config()
		actx, cancel := context.WithTimeout(ctx, parkCheckTimeout)
		_, err := n.eng.DBUpdates(actx, rep, "now", time.Millisecond, func(engine.DBUpdate) error { return nil })
		cancel()
		st := feedState{ok: err == nil, until: cfg.Clock.Now().Add(feedCheckTTL)}
		if err != nil && !engineRefusedFeed(err) {
			st.until = cfg.Clock.Now().Add(feedRetryTTL) // the server did not answer: ask again sooner
		}
		f.mu.Lock()
		f.known[group] = st
		delete(f.asking, group)
		f.mu.Unlock()
	}
	if !n.spawn(ask) { // stopping
		f.mu.Lock()
		delete(f.asking, group)
		f.mu.Unlock()
	}
	return known && st.ok
}

// engineRefusedFeed reports an answer that says the server gives these
// credentials no feed (rather than no answer).
func engineRefusedFeed(err error) bool {
	return errors.Is(err, engine.ErrNoDBUpdates) || errors.Is(err, engine.ErrUnauthorized) || errors.Is(err, engine.ErrForbidden)
}

// waitingCount is the node's latest reading of the runnable jobs that
// wait for a slot (pending and due, beyond its own free slots), and when
// it was read: rotation reads it every interval, the park check while any
// of the node's jobs idles.
type waitingCount struct {
	mu sync.Mutex // guards n and at
	n  int
	at time.Time
}

func (c *waitingCount) set(n int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.at = n, at
}

// get is the latest reading, 0 when it is older than maxAge.
func (c *waitingCount) get(now time.Time, maxAge time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.at) > maxAge {
		return 0
	}
	return c.n
}

// waitingMaxAge is how old a reading of the waiting jobs may be and
// still count: rotation reads it every interval, the progress loop every
// second while a job idles, so two intervals or 5 s, whichever is more.
func (c Config) waitingMaxAge() time.Duration { return max(2*c.Interval, 5*time.Second) }

// pollParkOK reports whether a replication whose group gives no feed may
// park while waiting jobs wait for a slot: only when rotation would keep
// it out of a slot at least as long as a poll cycle (WatchPollInterval)
// keeps a change to its source waiting. Stopped by rotation and queued, it
// would wait its turn: ceil(waiting / MaxChurn) intervals, and at least
// MinRunTime, as the jobs that took the slots run that long before
// rotation may stop them. Parked, it is woken by its watch's poll: the
// poll is then never the slower.
func (c Config) pollParkOK(waiting int) bool {
	if waiting <= 0 {
		return false
	}
	turns := (waiting + c.MaxChurn - 1) / c.MaxChurn
	return max(time.Duration(turns)*c.Interval, c.MinRunTime) >= c.WatchPollInterval
}

// pollParkWaiting is how many waiting jobs make pollParkOK true: the most
// a count of them needs to read.
func (c Config) pollParkWaiting() int {
	if c.MinRunTime >= c.WatchPollInterval {
		return 1
	}
	turns := int((c.WatchPollInterval + c.Interval - 1) / c.Interval)
	return max(1, turns*c.MaxChurn)
}

// mayPark reports whether the caught-up job of w, whose source is in
// group, may park now (see doc.go, "When a replication parks"): where
// its group gives a _db_updates feed (a change wakes it within about a
// second), or where waiting jobs make a poll no slower than rotation. A
// replication with follow_purges parks only with a feed: a purge adds no
// change for a poll to see, and _db_updates reports it (rotated instead,
// it follows the purges made meanwhile when it runs again).
func (n *Node) mayPark(w *worker, rep engine.Replication, waiting int) bool {
	if w.group == "" {
		return false
	}
	return n.feedOK(rep, w.group) || (!rep.FollowPurges && n.Config().pollParkOK(waiting))
}

// giveWayWhileWaiting is the progress loop's step for the jobs that wait
// for a slot: when some of the node's parkable jobs have been caught up
// and idle for ParkWhenWaitingAfter (see doc.go, "When a replication
// parks"), or some of its one-shot runs have made no progress for
// OneShotStallPreempt (see doc.go, "Stalled one-shot runs"), it counts
// the runnable jobs that wait beyond the node's free slots and asks as
// many of those jobs to give their slots up as wait: first the idle ones
// to park (the longest idle first, each that mayPark), then the stalled
// ones to stop (the longest stalled first), each queued behind the jobs
// that waited. One count (a read of the queue's due keys, at most
// pollParkWaiting of them) per tick while any job idles or stalls, none
// otherwise.
func (n *Node) giveWayWhileWaiting(ctx context.Context) {
	cfg := n.Config()
	if !cfg.parks() && !cfg.stallPreempts() {
		return
	}
	now := cfg.Clock.Now()
	nowMs := replicator.Millis(now)
	type cand struct {
		w     *worker
		since int64
	}
	var idle, stalled []cand
	p := &n.progress
	p.mu.Lock()
	for w, r := range p.live {
		if w.stopRequested() || r.ended {
			continue
		}
		s := r.run.Sync()
		switch {
		case cfg.parks() && w.parkable && s.CaughtUp && s.Stall == nil && s.CaughtUpSince > 0 &&
			now.Sub(time.UnixMilli(s.CaughtUpSince)) >= cfg.ParkWhenWaitingAfter:
			idle = append(idle, cand{w, s.CaughtUpSince})
		case cfg.stallPreempts() && !w.continuous && r.stalledFor(s, nowMs) >= cfg.OneShotStallPreempt:
			stalled = append(stalled, cand{w, max(r.moved, s.LastProgress)})
		}
	}
	running := len(p.live)
	p.mu.Unlock()
	if len(idle)+len(stalled) == 0 {
		return
	}
	free := max(0, cfg.MaxJobs-running)
	count := len(idle) + len(stalled)
	if len(idle) > 0 {
		count = max(count, cfg.pollParkWaiting())
	}
	pending, err := n.store.PendingCount(ctx, nowMs, free+count)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Debug().Err(err).Msg("replicator: counting the jobs waiting for a slot; parking and stalled runs look again at the next tick")
		}
		return
	}
	waiting := max(0, pending-free)
	n.waiting.set(waiting, now)
	if waiting == 0 {
		return
	}
	byTime := func(a, b cand) int { return cmp.Compare(a.since, b.since) }
	slices.SortFunc(idle, byTime)
	asked := 0
	for _, c := range idle {
		if asked == waiting {
			break
		}
		if n.mayPark(c.w, c.w.rep, waiting) {
			c.w.requestStop(stopPark)
			asked++
		}
	}
	slices.SortFunc(stalled, byTime)
	for _, c := range stalled[:min(len(stalled), waiting-asked)] {
		// Behind the jobs that waited: they are due now or sooner.
		c.w.requestStopUntil(stopStall, nowMs)
		n.m.Inc(replicator.MetricJobsPreempted)
	}
}
