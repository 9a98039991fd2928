package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// Engine is the simulation's replication engine, shared by every node:
// simengine's runs (checkpoint ticks, one-shot runs that end after a
// while), with endpoints that go down and up by host, and a record of
// every run: which node ran which job (a job is its source URL, unique per
// document version and per POST /_replicate), from when to when. It
// checks at each start that no other run of the job is open: a job never
// runs on two nodes, nor twice on one.
type Engine struct {
	inner *simengine.Engine

	mu         sync.Mutex
	kill       map[string]context.CancelFunc // ends the runs of each node's current incarnation
	down       map[string]bool               // hosts whose endpoints fail
	open       map[string]*Record            // the open run of each job
	runs       map[string][]*Record
	violations []string
	started    int
	ended      uint64                 // runs whose end was recorded: the order of ends and deaths
	checked    map[string][]time.Time // the exact checks of each job's source: it was parked then
}

// ParkedSince returns when job was first seen parked after after: the
// first exact check of its source then (a node makes one right after a
// park commits, and a watch only of parked jobs); zero for none.
func (e *Engine) ParkedSince(job string, after time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.checked[job] {
		if !t.Before(after) {
			return t
		}
	}
	return time.Time{}
}

// Ended returns how many runs ended so far. Time alone cannot order a
// run's end and an operation of the same instant: a run that ended as an
// operation was applied (before it, since the simulation applies an
// operation once every goroutine waits) has the same time as the
// operation, and so has a run the operation ended (a kill). A death
// records Ended as it begins; a run whose EndSeq is greater ended within
// it.
func (e *Engine) Ended() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settleLocked()
	return e.ended
}

// Started returns how many runs started.
func (e *Engine) Started() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// Record is one run of a job on a node.
type Record struct {
	Job, Node   string
	Start, End  time.Time // End is zero while the run is open
	EndSeq      uint64    // the run's place among the ends recorded (Ended), from 1
	StopAsked   time.Time // when the node asked the run to stop (zero: never)
	Failed      bool      // its endpoint was down: it ended at once with an error
	Completed   bool      // a one-shot run that ran to its end
	run         replicator.Run
	endRecorded bool
}

// newEngine returns an Engine whose one-shot runs last oneShot and whose
// runs checkpoint every checkpoint.
func newEngine(oneShot, checkpoint time.Duration) *Engine {
	in := simengine.New()
	in.OneShot, in.CheckpointEvery = oneShot, checkpoint
	return &Engine{inner: in, kill: map[string]context.CancelFunc{}, down: map[string]bool{}, open: map[string]*Record{}, runs: map[string][]*Record{},
		checked: map[string][]time.Time{}}
}

// For returns the engine as a new incarnation of node sees it.
func (e *Engine) For(node string) replicator.Engine {
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kill[node] = cancel
	return nodeEngine{e: e, node: node, ctx: ctx}
}

// Kill ends every run of node at once, as its process dies.
func (e *Engine) Kill(node string) {
	e.mu.Lock()
	kill := e.kill[node]
	e.mu.Unlock()
	if kill != nil {
		kill()
	}
}

// SetDown makes the endpoints on host fail (down) or answer again.
func (e *Engine) SetDown(host string, down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down[host] = down
}

// settle records the end of every open run whose engine run ended.
func (e *Engine) settleLocked() {
	for job, r := range e.open {
		if r.run == nil {
			continue // being started
		}
		select {
		case <-r.run.Done():
			e.endLocked(job, r)
		default:
		}
	}
}

func (e *Engine) endLocked(job string, r *Record) {
	if r.endRecorded {
		return
	}
	r.endRecorded = true
	e.ended++
	r.End, r.EndSeq = time.Now(), e.ended
	res, err := r.run.Wait()
	r.Completed = err == nil && res.Completed
	if e.open[job] == r {
		delete(e.open, job)
	}
}

// Open returns the runs open now, by job.
func (e *Engine) Open() map[string]*Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settleLocked()
	out := make(map[string]*Record, len(e.open))
	for k, r := range e.open {
		c := *r
		out[k] = &c
	}
	return out
}

// Runs returns a copy of the runs of job, oldest first.
func (e *Engine) Runs(job string) []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settleLocked()
	out := make([]Record, len(e.runs[job]))
	for i, r := range e.runs[job] {
		out[i] = *r
	}
	return out
}

// Violations returns what the engine saw go wrong.
func (e *Engine) Violations() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.violations...)
}

type nodeEngine struct {
	e    *Engine
	node string
	ctx  context.Context // ends when the node is killed
}

func (n nodeEngine) ReplicationID(ctx context.Context, rep engine.Replication, uuid string) (string, string, error) {
	return n.e.inner.ReplicationID(ctx, rep, uuid)
}

func (n nodeEngine) Start(ctx context.Context, rep engine.Replication, opts engine.Options) replicator.Run {
	e := n.e
	job := rep.Source.URL.String()
	e.mu.Lock()
	e.settleLocked()
	if o := e.open[job]; o != nil {
		e.violations = append(e.violations, fmt.Sprintf("%s: job %s started on %s while it runs on %s since %s",
			time.Now().Format(time.TimeOnly), job, n.node, o.Node, o.Start.Format(time.TimeOnly)))
	}
	down := e.down[hostOf(job)]
	if down {
		e.inner.SetFail(job, refused(job))
	} else {
		e.inner.SetFail(job, nil)
	}
	e.started++
	r := &Record{Job: job, Node: n.node, Start: time.Now(), Failed: down}
	e.open[job] = r
	e.runs[job] = append(e.runs[job], r)
	e.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(n.ctx, cancel)
	run := e.inner.Start(ctx, rep, opts)
	e.mu.Lock()
	r.run = run
	e.mu.Unlock()
	go func() {
		<-r.run.Done()
		stop()
		cancel()
		e.mu.Lock()
		e.endLocked(job, r)
		e.mu.Unlock()
	}()
	return &watchedRun{Run: r.run, e: e, r: r}
}

// watchedRun notes when the node asks a run to stop.
type watchedRun struct {
	replicator.Run
	e *Engine
	r *Record
}

func (w *watchedRun) Stop(ctx context.Context) error {
	w.e.mu.Lock()
	if w.r.StopAsked.IsZero() {
		w.r.StopAsked = time.Now()
	}
	w.e.mu.Unlock()
	return w.Run.Stop(ctx)
}

// refused is the error of a run whose source's host is down: its first
// request could not connect (engine.UnreachableHost names the host).
func refused(job string) error {
	return fmt.Errorf("%w: %w", engine.ErrHTTP, &couch.RequestError{Method: "GET", URL: job, Attempts: 1,
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}})
}

// Probe implements replicator.Engine: a host set down does not answer.
func (n nodeEngine) Probe(_ context.Context, base string) error {
	n.e.mu.Lock()
	defer n.e.mu.Unlock()
	if n.e.down[hostOf(base)] {
		return refused(base)
	}
	return nil
}

// Pending implements replicator.Engine: a source whose host is down does
// not answer; the others count their changes after since.
func (n nodeEngine) Pending(ctx context.Context, rep engine.Replication, since string) (int64, error) {
	job := rep.Source.URL.String()
	n.e.mu.Lock()
	down := n.e.down[hostOf(job)]
	n.e.checked[job] = append(n.e.checked[job], time.Now())
	n.e.mu.Unlock()
	if down {
		return 0, refused(job)
	}
	return n.e.inner.Pending(ctx, rep, since)
}

// AllDBs implements replicator.Engine: a server whose host is down does
// not answer.
func (n nodeEngine) AllDBs(ctx context.Context, rep engine.Replication, from string, limit int) ([]string, error) {
	if err := n.Probe(ctx, rep.Source.URL.String()); err != nil {
		return nil, err
	}
	return n.e.inner.AllDBs(ctx, rep, from, limit)
}

// DBUpdates implements replicator.Engine: a server whose host is down
// does not answer.
func (n nodeEngine) DBUpdates(ctx context.Context, rep engine.Replication, since string, timeout time.Duration, emit func(engine.DBUpdate) error) (string, error) {
	if err := n.Probe(ctx, rep.Source.URL.String()); err != nil {
		return since, err
	}
	return n.e.inner.DBUpdates(ctx, rep, since, timeout, emit)
}

func hostOf(job string) string {
	u, err := url.Parse(job)
	if err != nil {
		return ""
	}
	return u.Host
}
