// Package simengine is a replicator.Engine that replicates nothing: runs
// tick checkpoints and finish (one-shot) after a fixed time, so that the
// scheduler can be measured and tested with many thousands of jobs and no
// peers. Replication ids are computed as the real engine does (filter code
// comes from SetFilterCode instead of the source).
package simengine

import (
	"context"
	"encoding/json"
	"sync"
	"time"

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

// Engine is the simulated engine. The zero value is not usable; call New.
type Engine struct {
	// CheckpointEvery and OneShot: see the defaults.
	CheckpointEvery time.Duration
	OneShot         time.Duration

	mu      sync.Mutex
	code    map[string]string
	starts  map[string]int
	running int
	maxRun  int
	total   int64
}

// New returns an Engine with the defaults.
func New() *Engine {
	return &Engine{CheckpointEvery: CheckpointEveryDefault, OneShot: OneShotDefault,
		code: map[string]string{}, starts: map[string]int{}}
}

// SetFilterCode sets the filter code of replications from source (its
// normalized URL).
func (e *Engine) SetFilterCode(source, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.code[source] = code
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
	e.mu.Lock()
	e.starts[rep.Source.URL.String()]++
	e.total++
	e.running++
	e.maxRun = max(e.maxRun, e.running)
	e.mu.Unlock()
	r := &run{stop: make(chan struct{}), done: make(chan struct{}), stats: opts.Stats}
	go func() {
		defer func() {
			e.mu.Lock()
			e.running--
			e.mu.Unlock()
			close(r.done)
		}()
		t := time.NewTicker(e.CheckpointEvery)
		defer t.Stop()
		var end <-chan time.Time
		if !rep.Continuous {
			end = time.After(e.OneShot)
		}
		for {
			select {
			case <-t.C:
				r.mu.Lock()
				r.stats.DocsRead++
				r.stats.DocsWritten++
				s := r.stats
				r.mu.Unlock()
				if opts.OnCheckpoint != nil {
					opts.OnCheckpoint(engine.Checkpoint{Seq: json.RawMessage(`"1"`), Stats: s, Time: time.Now()})
				}
			case <-end:
				r.res = engine.Result{OK: true, SessionID: "sim", SourceLastSeq: json.RawMessage(`"1"`), ReplicationIDVersion: 4, Stats: r.Progress()}
				return
			case <-r.stop:
				r.res = engine.Result{OK: true, Stats: r.Progress()}
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
	done     chan struct{}
	mu       sync.Mutex
	stats    engine.Stats
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

func (r *run) Wait() (engine.Result, error) { <-r.done; return r.res, r.err }
func (r *run) Done() <-chan struct{}        { return r.done }
func (r *run) Progress() engine.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}
