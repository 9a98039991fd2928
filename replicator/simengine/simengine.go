// Package simengine is the replicator.Engine that replicates nothing: runs
// tick checkpoints and finish (one-shot) after a fixed time, so that the
// scheduler can be measured and tested with many thousands of jobs and no
// peers. Each source has a sequence that Change moves on: a run copies a
// change at once (it is caught up since then), checkpoints its source's
// sequence, and Pending counts the changes after a checkpointed one. Replication ids are computed as the real engine does (filter code
// comes from SetFilterCode instead of the source). Faults are injected per
// source (SetFail, SetPanic), and the engine counts what ran (Starts,
// RunTime, Stats) and signals each start (Started).
package simengine

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Defaults of Engine.
const (
	// CheckpointEveryDefault is the interval of a run's checkpoint ticks.
	CheckpointEveryDefault = 5 * time.Second
	// OneShotDefault is how long a one-shot run lasts.
	OneShotDefault = time.Second
)

// Engine is the simulated engine. The zero value is not usable; call New,
// then set the exported fields before the engine's first run.
type Engine struct {
	// CheckpointEvery and OneShot: see the defaults.
	CheckpointEvery time.Duration
	OneShot         time.Duration
	// Clock times the runs' ticks and one-shot ends; the real clock by
	// default.
	Clock clockwork.Clock
	// Started carries the source URL of every run started (after its
	// faults: a run that fails or panics at start is not signalled). Init
	// it to wait on starts.
	Started testsignal.Signal[string]

	mu      sync.Mutex
	code    map[string]string             // filter code by source URL
	fail    map[string]error              // every run of this source fails with it
	panics  map[string]any                // every Start of this source panics with it
	stalled map[string]bool               // the runs of this source make no progress
	starts  map[string]int                // runs started, by source
	last    map[string]engine.Replication // the latest run's replication, by source
	runTime map[string]time.Duration      // run time of the runs that ended, by source
	open    map[string]map[*run]time.Time // the runs in progress and their starts, by source
	seq     map[string]int64              // the source's update sequence, by source
	updates map[string][]engine.DBUpdate  // each server's _db_updates feed, by server URL
	dbs     map[string]map[string]bool    // each server's databases (CreateDB, DeleteDB), by server URL
	feedErr map[string]error              // a server's answer to _db_updates, when not a feed
	rewind  map[string]int                // rows a server's feed gives again at its next request
	changed chan struct{}                 // closed and replaced at each Change
	running int
	maxRun  int
	total   int64
}

// New returns an Engine with the defaults.
func New() *Engine {
	return &Engine{CheckpointEvery: CheckpointEveryDefault, OneShot: OneShotDefault, Clock: clockwork.NewRealClock(),
		code: map[string]string{}, fail: map[string]error{}, panics: map[string]any{}, stalled: map[string]bool{},
		starts: map[string]int{}, runTime: map[string]time.Duration{}, open: map[string]map[*run]time.Time{},
		last: map[string]engine.Replication{}, seq: map[string]int64{},
		updates: map[string][]engine.DBUpdate{}, feedErr: map[string]error{}, rewind: map[string]int{}, changed: make(chan struct{})}
}

// SetDBUpdates makes the _db_updates feed of server (a URL ending in "/")
// answer err (nil: a feed again), as a server that refuses or lacks it.
func (e *Engine) SetDBUpdates(server string, err error) { setOrDelete(&e.mu, e.feedErr, server, err) }

// AllDBs implements replicator.Engine: the databases CreateDB made on the
// server of rep's source and DeleteDB did not remove, in name order.
func (e *Engine) AllDBs(_ context.Context, rep engine.Replication, from string, limit int) ([]string, error) {
	src := rep.Source.URL.String()
	server := src[:strings.LastIndexByte(strings.TrimSuffix(src, "/"), '/')+1]
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for db := range e.dbs[server] {
		if db >= from {
			out = append(out, db)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), limit)], nil
}

// CreateDB makes database db on server (a URL ending in "/"), which its
// _db_updates feed says; DeleteDB removes it.
func (e *Engine) CreateDB(server, db string) { e.dbUpdate(server, db, "created") }

// DeleteDB removes database db from server (see CreateDB).
func (e *Engine) DeleteDB(server, db string) { e.dbUpdate(server, db, "deleted") }

func (e *Engine) dbUpdate(server, db, typ string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dbs == nil {
		e.dbs = map[string]map[string]bool{}
	}
	if e.dbs[server] == nil {
		e.dbs[server] = map[string]bool{}
	}
	if typ == "deleted" {
		delete(e.dbs[server], db)
	} else {
		e.dbs[server][db] = true
	}
	e.updates[server] = append(e.updates[server], engine.DBUpdate{DB: db, Type: typ, Seq: strconv.Itoa(len(e.updates[server]) + 1)})
	close(e.changed)
	e.changed = make(chan struct{})
}

// DBUpdates implements replicator.Engine: the server of rep's source has a
// feed of its sources' changes, one row per Change, its sequences 1, 2, …
func (e *Engine) DBUpdates(ctx context.Context, rep engine.Replication, since string, timeout time.Duration, emit func(engine.DBUpdate) error) (string, error) {
	src := rep.Source.URL.String()
	server := src[:strings.LastIndexByte(strings.TrimSuffix(src, "/"), '/')+1]
	var end <-chan time.Time
	for {
		e.mu.Lock()
		if err := e.feedErr[server]; err != nil {
			e.mu.Unlock()
			return since, err
		}
		log, wait, back := e.updates[server], e.changed, e.rewind[server]
		delete(e.rewind, server)
		e.mu.Unlock()
		from := 0
		switch since {
		case "now":
			from = len(log)
		case "":
		default:
			n, _ := strconv.Atoi(since)
			from = max(0, min(n, len(log))-back)
		}
		for _, u := range log[from:] {
			since = u.Seq
			if err := emit(u); err != nil {
				return since, err
			}
		}
		if from < len(log) {
			return since, nil
		}
		if since == "now" {
			since = strconv.Itoa(len(log))
		}
		if end == nil {
			end = e.Clock.After(timeout)
		}
		select {
		case <-wait:
		case <-end:
			return since, nil
		case <-ctx.Done():
			return since, ctx.Err()
		}
	}
}

// Change writes a document to source: its sequence moves on, its server's
// _db_updates feed says so, and its open runs copy the change at once
// (caught up since now).
func (e *Engine) Change(source string) { e.change(source, false) }

// ChangeUnannounced is Change without the feed's row, as CouchDB's
// _db_updates loses the last updates of a node that dies.
func (e *Engine) ChangeUnannounced(source string) { e.change(source, true) }

// RewindFeed makes server's _db_updates feed give its last n rows again
// at its next request, as CouchDB's may after a restart.
func (e *Engine) RewindFeed(server string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rewind[server] = n
}

func (e *Engine) change(source string, unannounced bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq[source]++
	if i := strings.LastIndexByte(strings.TrimSuffix(source, "/"), '/'); i >= 0 && !unannounced {
		server := source[:i+1]
		db, err := url.PathUnescape(strings.Trim(source[i+1:], "/")) // the feed names databases as they are
		if err != nil {
			db = strings.Trim(source[i+1:], "/")
		}
		e.updates[server] = append(e.updates[server], engine.DBUpdate{DB: db, Type: "updated",
			Seq: strconv.Itoa(len(e.updates[server]) + 1)})
	}
	close(e.changed)
	e.changed = make(chan struct{})
	now := e.Clock.Now()
	for r := range e.open[source] {
		r.mu.Lock()
		r.through, r.caughtUp = e.seq[source], now
		r.stats.DocsRead++
		r.stats.DocsWritten++
		r.mu.Unlock()
	}
}

// Pending implements replicator.Engine: the changes of rep's source after
// since (a sequence its runs checkpointed).
func (e *Engine) Pending(_ context.Context, rep engine.Replication, since string) (int64, error) {
	src := rep.Source.URL.String()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.fail[src]; err != nil {
		return 0, err
	}
	n, _ := strconv.ParseInt(since, 10, 64)
	return max(0, e.seq[src]-n), nil
}

// SetFilterCode sets the filter code of replications from source (its
// normalized URL, with the trailing slash).
func (e *Engine) SetFilterCode(source, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.code[source] = code
}

// SetFail makes every later run from source end at once with err (nil:
// runs succeed again).
func (e *Engine) SetFail(source string, err error) { setOrDelete(&e.mu, e.fail, source, err) }

// SetStalled makes the runs from source make no progress (stalled), as
// runs whose peer never answers: their checkpoint ticks neither count
// documents nor checkpoint, and a one-shot run does not end while it
// stays so (its length starts again); false lets them go on.
func (e *Engine) SetStalled(source string, stalled bool) {
	setOrDelete(&e.mu, e.stalled, source, stalled)
}

func (e *Engine) isStalled(source string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stalled[source]
}

// SetPanic makes every later Start of a run from source panic with v (nil:
// no panic).
func (e *Engine) SetPanic(source string, v any) { setOrDelete(&e.mu, e.panics, source, v) }

// Work makes the open runs from source read and write docs more
// documents, as a real run does between its checkpoints: their Progress
// shows them, no checkpoint is reported.
func (e *Engine) Work(source string, docs int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for r := range e.open[source] {
		r.mu.Lock()
		r.stats.DocsRead += docs
		r.stats.DocsWritten += docs
		r.mu.Unlock()
	}
}

// setOrDelete sets m[k] to v under mu, or deletes it when v is the zero
// value.
func setOrDelete[V comparable](mu *sync.Mutex, m map[string]V, k string, v V) {
	mu.Lock()
	defer mu.Unlock()
	var zero V
	if v == zero {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// Starts reports how many runs from source started.
func (e *Engine) Starts(source string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.starts[source]
}

// LastReplication returns the replication the latest run from source was
// started with (the node's defaults applied), and whether there was one.
func (e *Engine) LastReplication(source string) (engine.Replication, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rep, ok := e.last[source]
	return rep, ok
}

// RunTime reports how long runs from source ran in all until now, the
// runs in progress included.
func (e *Engine) RunTime(source string) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.runTime[source]
	for _, begin := range e.open[source] {
		d += e.Clock.Since(begin)
	}
	return d
}

// Stats reports the number of distinct sources started at least once, the
// total number of runs started, the runs in progress and the most in
// progress at once.
func (e *Engine) Stats() (distinct int, total int64, running, maxRunning int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.starts), e.total, e.running, e.maxRun
}

// ReplicationID implements replicator.Engine.
func (e *Engine) ReplicationID(ctx context.Context, rep engine.Replication, uuid string) (string, string, error) {
	e.mu.Lock()
	code := e.code[rep.Source.URL.String()]
	e.mu.Unlock()
	_, full, err := engine.ReplicationID(rep, uuid, code)
	return full, code, err
}

// Start implements replicator.Engine.
func (e *Engine) Start(ctx context.Context, rep engine.Replication, opts engine.Options) replicator.Run {
	src := rep.Source.URL.String()
	e.mu.Lock()
	if p := e.panics[src]; p != nil {
		e.mu.Unlock()
		panic(p)
	}
	failErr := e.fail[src]
	e.last[src] = rep
	// A start is counted once its run is open, in one critical section:
	// a test that saw Starts move reaches the run with Work.
	e.starts[src]++
	e.total++
	e.running++
	e.maxRun = max(e.maxRun, e.running)
	begin := e.Clock.Now()
	r := &run{stop: make(chan struct{}), halt: make(chan struct{}), done: make(chan struct{}), stats: opts.Stats, caughtUp: begin}
	r.through = e.seq[src] // what it has to copy, copied at once
	r.stats.CheckpointedSourceSeq = strconv.FormatInt(r.through, 10)
	if e.open[src] == nil {
		e.open[src] = map[*run]time.Time{}
	}
	e.open[src][r] = begin
	e.mu.Unlock()
	if failErr == nil {
		e.Started.Signal(src) // open: Work reaches it
	}
	go func() {
		defer func() {
			e.mu.Lock()
			e.running--
			e.runTime[src] += e.Clock.Since(begin)
			delete(e.open[src], r)
			if len(e.open[src]) == 0 {
				delete(e.open, src)
			}
			e.mu.Unlock()
			close(r.done)
		}()
		if failErr != nil {
			r.err = failErr
			return
		}
		t := e.Clock.NewTicker(e.CheckpointEvery)
		defer t.Stop()
		// A one-shot run ends at its timer, stopped with the run: a run
		// halted early leaves no waiter on a fake clock that a test
		// counts (clockwork's BlockUntil).
		var end <-chan time.Time
		var endTimer clockwork.Timer
		if !rep.Continuous {
			endTimer = e.Clock.NewTimer(e.OneShot)
			defer endTimer.Stop()
			end = endTimer.Chan()
		}
		for {
			select {
			case <-t.Chan():
				if e.isStalled(src) {
					continue
				}
				r.mu.Lock()
				r.stats.DocsRead++
				r.stats.DocsWritten++
				r.stats.CheckpointedSourceSeq = strconv.FormatInt(r.through, 10)
				s := r.stats
				r.mu.Unlock()
				if opts.OnCheckpoint != nil {
					opts.OnCheckpoint(engine.Checkpoint{Seq: json.RawMessage(`"1"`), Stats: s, Time: e.Clock.Now()})
				}
			case <-end:
				if e.isStalled(src) {
					endTimer.Reset(e.OneShot)
					continue
				}
				r.res = engine.Result{OK: true, SessionID: "sim", SourceLastSeq: json.RawMessage(`"1"`),
					ReplicationIDVersion: engine.ReplicationIDVersion, Stats: r.Progress(), Completed: true}
				return
			case <-r.stop:
				r.mu.Lock()
				r.stats.CheckpointedSourceSeq = strconv.FormatInt(r.through, 10) // the final checkpoint
				r.mu.Unlock()
				r.res = engine.Result{OK: true, Stats: r.Progress()}
				return
			case <-r.halt:
				r.err = engine.ErrHalted
				return
			case <-ctx.Done():
				r.err = ctx.Err()
				return
			}
		}
	}()
	return r
}

type run struct {
	stop     chan struct{}
	stopOnce sync.Once
	halt     chan struct{}
	haltOnce sync.Once
	done     chan struct{}
	mu       sync.Mutex
	stats    engine.Stats
	through  int64     // the source sequence it copied up to
	caughtUp time.Time // when it last copied a change (or started)
	res      engine.Result
	err      error
}

func (r *run) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.err
}

// Halt ends the run at once, without a final checkpoint.
func (r *run) Halt(ctx context.Context) error {
	r.haltOnce.Do(func() { close(r.halt) })
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.err
}

func (r *run) Wait() (engine.Result, error) { <-r.done; return r.res, r.err }
func (r *run) Done() <-chan struct{}        { return r.done }
func (r *run) Progress() engine.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Sync reports the run caught up since it last copied a change (or
// started): a simulated run copies each change at once.
func (r *run) Sync() engine.Sync {
	r.mu.Lock()
	defer r.mu.Unlock()
	return engine.Sync{CaughtUp: true, CaughtUpSince: r.caughtUp.UnixMilli()}
}

// Refused returns nothing: a simulated target refuses no document.
func (r *run) Refused(int64) []engine.RefusedDoc { return nil }

// Probe reports the host of base unreachable while a failure set by
// SetFail for a source under base is one (engine.Unreachable).
func (e *Engine) Probe(_ context.Context, base string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for src, err := range e.fail {
		if strings.HasPrefix(src, base) && engine.Unreachable(err) {
			return err
		}
	}
	return nil
}
