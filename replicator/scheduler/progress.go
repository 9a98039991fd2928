package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// liveRun is a worker's run as the progress loop sees it: registered by
// the worker once the run started (its job data then names this node and
// the run's start), unregistered when the run ends. Its fields are fixed
// at registration, except written, writtenSync and refused, which only
// the progress loop touches.
type liveRun struct {
	jobID string
	db    string // JobData.DBName: the metrics' database label
	run   replicator.Run
	node  string
	start int64 // JobData.LastStart of the run
	// written and writtenSync are the counters and sync last written
	// (nil: none yet).
	written     *engine.Stats
	writtenSync engine.Sync
	// refused is the Seq of the last refused document stored.
	refused int64
	// ended is set (under progress.mu) once the run's final counters
	// were stored for whoever removed its job (storeRunEnd): the loop
	// removes them runEndKeep later, not at its next tick.
	ended bool
	// seen is the counters the loop last read, and moved when they last
	// changed (Unix ms; the run's start at first): how long a run has made
	// no progress (stalledFor).
	seen  engine.Stats
	moved int64
}

// stalledFor is how long the run has made no progress at now (Unix ms):
// since its counters last changed, or its last batch finished
// (engine.Sync.LastProgress), whichever is later.
func (r *liveRun) stalledFor(y engine.Sync, now int64) time.Duration {
	return time.Duration(now-max(r.moved, y.LastProgress)) * time.Millisecond
}

// runEndKeep is how long the final counters of a run whose job was
// removed stay in the store for the one who removed it
// (replicator.Progress.RunEnd takes them at once) before the run's node
// removes them.
const runEndKeep = time.Minute

// progress is the node's part that follows its running jobs' runs for
// the progress loop and the metrics: the runs registered, those that
// ended since the loop's last write, and the loop's last readings. It
// owns its state (its own mutex).
type progress struct {
	// mu guards live, ended, kept, syncByDB and refusedByDB, and each
	// registered run's ended (liveRun).
	mu          sync.Mutex
	live        map[*worker]*liveRun
	ended       []*liveRun         // runs that ended since the loop's last write
	kept        []keptEnd          // final counters stored (storeRunEnd), removed at their time
	syncByDB    map[string]*dbSync // the metrics' reading of the running jobs, per database
	refusedByDB map[string]int64   // documents refused, per database (MetricDocsRefused)
}

func newProgress() progress {
	return progress{live: map[*worker]*liveRun{}, refusedByDB: map[string]int64{}}
}

// runStarted registers w's run for the progress loop.
func (n *Node) runStarted(w *worker, run replicator.Run, d *replicator.JobData) {
	p := &n.progress
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[w] = &liveRun{jobID: w.job.ID, db: d.DBName, run: run, node: d.Node, start: d.LastStart, seen: d.Stats, moved: d.LastStart}
}

// liveSync is the Sync of w's run while it is registered, else nil.
func (w *worker) liveSync() *engine.Sync {
	p := &w.n.progress
	p.mu.Lock()
	r := p.live[w]
	p.mu.Unlock()
	if r == nil {
		return nil
	}
	s := r.run.Sync()
	return &s
}

// runEnded unregisters w's run; the progress loop removes its progress at
// its next write (the job's data has the run's last counters by then, or
// soon: the views ignore progress of a run that is not the job's current
// one).
func (n *Node) runEnded(w *worker) {
	p := &n.progress
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.live[w]; r != nil {
		p.ended = append(p.ended, r)
		delete(p.live, w)
	}
}

// keptEnd is a run's final counters the loop removes at until (Unix ms).
type keptEnd struct {
	r     *liveRun
	until int64
}

// storeRunEnd stores the final counters of w's run, halted because its
// job was removed, for whoever removed it (replicator.Progress.RunEnd), in a
// transaction of its own; the progress loop removes them runEndKeep
// later if nobody took them. Best effort: a failure is logged.
func (w *worker) storeRunEnd(s engine.Stats) {
	p := &w.n.progress
	p.mu.Lock()
	r := p.live[w]
	if r != nil {
		r.ended = true
	}
	p.mu.Unlock()
	if r == nil {
		return
	}
	now := replicator.Millis(w.cfg.Clock.Now())
	sy := r.run.Sync()
	err := w.n.store.Progress().Write(w.ctx, []replicator.ProgressWrite{{JobID: r.jobID,
		Progress: &replicator.RunProgress{Node: r.node, Start: r.start, At: now, Stats: s, Sync: &sy, Ended: true}}})
	if err != nil && w.ctx.Err() == nil {
		w.cfg.Logger.Warn().Err(err).Str("job_id", r.jobID).Msg("replicator: storing the final counters of a removed job's run")
	}
}

// again gives ended runs back to the next tick.
func (p *progress) again(ended []*liveRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = append(p.ended, ended...)
}

// progressLoop writes the live counters of the node's running jobs every
// ProgressInterval (see doc.go, "Live progress") until ctx ends.
func (n *Node) progressLoop(ctx context.Context) {
	for {
		cfg := n.Config()
		t := cfg.Clock.NewTimer(cfg.ProgressInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
		n.writeProgress(ctx)
		n.giveWayWhileWaiting(ctx)
	}
}

// writeProgress writes the counters of the runs that changed since their
// last write, removes the progress of the runs that ended, and stores
// the documents the targets refused since the last tick (those of the
// runs that ended too). What a failed write left unwritten is written at
// the next tick.
func (n *Node) writeProgress(ctx context.Context) {
	cfg := n.Config() // before p.mu: a part's lock is never held while n.mu is taken
	now := replicator.Millis(cfg.Clock.Now())
	p := &n.progress
	p.mu.Lock()
	runs := make([]*liveRun, 0, len(p.live))
	for _, r := range p.live {
		if !r.ended { // its final counters are stored: leave them
			runs = append(runs, r)
		}
	}
	var ended []*liveRun
	for _, r := range p.ended {
		if r.ended {
			p.kept = append(p.kept, keptEnd{r: r, until: now + runEndKeep.Milliseconds()})
		} else {
			ended = append(ended, r)
		}
	}
	p.ended = nil
	kept := p.kept[:0]
	var expired []*liveRun
	for _, k := range p.kept {
		if k.until <= now {
			expired = append(expired, k.r)
		} else {
			kept = append(kept, k)
		}
	}
	p.kept = kept
	p.mu.Unlock()

	writes := make([]replicator.ProgressWrite, 0, len(ended)+len(expired)+len(runs))
	for _, r := range append(ended, expired...) {
		writes = append(writes, replicator.ProgressWrite{JobID: r.jobID, Node: r.node, Start: r.start})
	}
	var changed []*liveRun
	var counts []engine.Stats
	var syncs []engine.Sync
	agg := map[string]*dbSync{}
	for _, r := range runs {
		s, y := r.run.Progress(), r.run.Sync()
		agg[r.db] = agg[r.db].add(s, y, now)
		if !sameProgress(r.seen, s) {
			r.seen, r.moved = s, now
		}
		if r.written != nil && sameProgress(*r.written, s) && r.writtenSync.Equal(y) {
			continue
		}
		changed, counts, syncs = append(changed, r), append(counts, s), append(syncs, y)
		writes = append(writes, replicator.ProgressWrite{JobID: r.jobID,
			Progress: &replicator.RunProgress{Node: r.node, Start: r.start, At: now, Stats: s, Sync: &y}})
	}
	p.mu.Lock()
	p.syncByDB = agg
	p.mu.Unlock()
	var retry []*liveRun // ended runs to see again at the next tick
	if len(writes) > 0 {
		if err := n.store.Progress().Write(ctx, writes); err != nil {
			if ctx.Err() == nil {
				cfg.Logger.Warn().Err(err).Int("jobs", len(writes)).Msg("replicator: writing the running jobs' progress; again at the next tick")
			}
			p.again(append(ended, expired...))
			return
		}
		for i, r := range changed {
			r.written, r.writtenSync = &counts[i], syncs[i]
		}
	}
	// Refused documents, in a transaction per job that has new ones
	// (rare: a refusal is a target's answer to a write).
	for i, r := range append(runs, ended...) {
		docs := r.run.Refused(r.refused)
		if len(docs) == 0 {
			continue
		}
		if err := n.store.FailedDocs().Append(ctx, r.jobID, r.node, r.start, docs); err != nil {
			if ctx.Err() == nil {
				cfg.Logger.Warn().Err(err).Str("job_id", r.jobID).Msg("replicator: storing the documents the target refused; again at the next tick")
			}
			if i >= len(runs) {
				retry = append(retry, r)
			}
			continue
		}
		r.refused = docs[len(docs)-1].Seq
		p.mu.Lock()
		p.refusedByDB[r.db] += int64(len(docs))
		p.mu.Unlock()
	}
	if len(retry) > 0 {
		p.again(retry)
	}
	if len(writes) > 0 {
		n.TestSignals.Progress.Signal(now)
	}
}

// dbSync is what the metrics say of one database's running jobs on this
// node (replicator.MetricSync…).
type dbSync struct {
	caughtUp, behind, stalled int64
	lagChanges                int64
	lagMillis                 int64
}

// add counts a run's reading in d (nil: a new one) and returns d.
func (d *dbSync) add(s engine.Stats, y engine.Sync, now int64) *dbSync {
	if d == nil {
		d = &dbSync{}
	}
	switch {
	case y.Stall != nil:
		d.stalled++
	case y.CaughtUp:
		d.caughtUp++
		return d
	default:
		d.behind++
	}
	if s.ChangesPending != nil {
		d.lagChanges = max(d.lagChanges, *s.ChangesPending)
	}
	if y.BehindSince > 0 {
		d.lagMillis = max(d.lagMillis, now-y.BehindSince)
	}
	return d
}

// syncSeries are the series of MetricSyncJobs, MetricSyncLagChanges and
// MetricSyncLagSeconds, from the progress loop's last reading.
func (p *progress) syncSeries(which string) []replicator.Series {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]replicator.Series, 0, len(p.syncByDB))
	for db, d := range p.syncByDB {
		l := [2]string{"database", db}
		switch which {
		case replicator.MetricSyncJobs:
			for _, st := range []struct {
				name string
				v    int64
			}{{"caught_up", d.caughtUp}, {"behind", d.behind}, {"stalled", d.stalled}} {
				out = append(out, replicator.Series{Labels: [][2]string{l, {"state", st.name}}, Value: float64(st.v)})
			}
		case replicator.MetricSyncLagChanges:
			out = append(out, replicator.Series{Labels: [][2]string{l}, Value: float64(d.lagChanges)})
		case replicator.MetricSyncLagSeconds:
			out = append(out, replicator.Series{Labels: [][2]string{l}, Value: float64(d.lagMillis) / 1000})
		}
	}
	slices.SortFunc(out, func(a, b replicator.Series) int { return cmp.Compare(fmt.Sprint(a.Labels), fmt.Sprint(b.Labels)) })
	return out
}

// refusedSeries is MetricDocsRefused's.
func (p *progress) refusedSeries() []replicator.Series {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]replicator.Series, 0, len(p.refusedByDB))
	for db, v := range p.refusedByDB {
		out = append(out, replicator.Series{Labels: [][2]string{{"database", db}}, Value: float64(v)})
	}
	slices.SortFunc(out, func(a, b replicator.Series) int { return cmp.Compare(a.Labels[0][1], b.Labels[0][1]) })
	return out
}

// sameProgress reports whether two readings of a run's counters are
// equal.
func sameProgress(a, b engine.Stats) bool {
	ap, bp := a.ChangesPending, b.ChangesPending
	a.ChangesPending, b.ChangesPending = nil, nil
	if a != b {
		return false
	}
	return (ap == nil) == (bp == nil) && (ap == nil || *ap == *bp)
}
