package replicator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// fakeEngine runs replications without peers: a continuous run checkpoints
// every ckEvery until stopped; a one-shot run completes after oneShot.
// Runs are keyed by the source URL.
type fakeEngine struct {
	ckEvery time.Duration
	oneShot time.Duration

	mu      sync.Mutex
	code    map[string]string // filter code by source URL
	fail    map[string]error  // every run of this source fails with it
	panics  map[string]any    // every Start of this source panics with it
	starts  map[string]int
	runTime map[string]time.Duration
	running map[string]int
	maxRun  int // most runs at once
	total   int
	started chan string
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{ckEvery: 5 * time.Millisecond, oneShot: 20 * time.Millisecond,
		code: map[string]string{}, fail: map[string]error{}, panics: map[string]any{}, starts: map[string]int{},
		runTime: map[string]time.Duration{}, running: map[string]int{}, started: make(chan string, 100000)}
}

func (e *fakeEngine) setFail(src string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		delete(e.fail, src)
	} else {
		e.fail[src] = err
	}
}

func (e *fakeEngine) setCode(src, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.code[src] = code
}

func (e *fakeEngine) startsOf(src string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.starts[src]
}

func (e *fakeEngine) runTimeOf(src string) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runTime[src]
}

func (e *fakeEngine) ReplicationID(ctx context.Context, rep engine.Replication, uuid string) (string, string, error) {
	e.mu.Lock()
	code := e.code[rep.Source.URL.String()]
	e.mu.Unlock()
	_, full, err := engine.ReplicationID(rep, uuid, code)
	return full, code, err
}

func (e *fakeEngine) Start(ctx context.Context, rep engine.Replication, opts engine.Options) Run {
	src := rep.Source.URL.String()
	e.mu.Lock()
	e.starts[src]++
	e.running[src]++
	e.total++
	cur := 0
	for _, n := range e.running {
		cur += n
	}
	e.maxRun = max(e.maxRun, cur)
	failErr, p := e.fail[src], e.panics[src]
	e.mu.Unlock()
	if p != nil {
		e.mu.Lock()
		e.running[src]--
		e.mu.Unlock()
		panic(p)
	}
	select {
	case e.started <- src:
	default:
	}
	r := &fakeRun{stop: make(chan struct{}), done: make(chan struct{}), stats: opts.Stats}
	go func() {
		begin := time.Now()
		defer func() {
			e.mu.Lock()
			e.running[src]--
			e.runTime[src] += time.Since(begin)
			e.mu.Unlock()
			close(r.done)
		}()
		if failErr != nil {
			r.err = failErr
			return
		}
		t := time.NewTicker(e.ckEvery)
		defer t.Stop()
		var end <-chan time.Time
		if !rep.Continuous {
			end = time.After(e.oneShot)
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
				r.res = engine.Result{OK: true, SessionID: "s1", SourceLastSeq: json.RawMessage(`"9"`), ReplicationIDVersion: 4, Stats: r.Progress()}
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

type fakeRun struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	mu       sync.Mutex
	stats    engine.Stats
	res      engine.Result
	err      error
}

func (r *fakeRun) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	return r.err
}
func (r *fakeRun) Wait() (engine.Result, error) { <-r.done; return r.res, r.err }
func (r *fakeRun) Done() <-chan struct{}        { return r.done }
func (r *fakeRun) Progress() engine.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// cluster is a store with a frontend and replication nodes, each with its
// own fdbjobs Client (its own activity monitor and notifier).
type cluster struct {
	t     *testing.T
	db    kv.Database
	cfg   Config
	fe    *Frontend
	feJob *fdbjobs.Client
	nodes []*Node
	njobs []*fdbjobs.Client
	eng   Engine
	docs  *memDocs
}

func testConfig() Config {
	return Config{
		Interval: 40 * time.Millisecond, MinRunTime: 1, StartupJitter: 20 * time.Millisecond,
		MaxJobs: 4, MaxChurn: 4, MaxAcceptors: 2,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, HealthThreshold: time.Minute,
		JobTimeout: 2 * time.Second, StatsUpdateInterval: 20 * time.Millisecond,
		TransientJobMaxAge: time.Hour, ShutdownTimeout: 5 * time.Second,
	}
}

func newJobsClient(t *testing.T, db kv.Database) *fdbjobs.Client {
	t.Helper()
	c, err := fdbjobs.New(db, fdbjobs.Config{ActivityMonitorMaxJitter: 50 * time.Millisecond, NotifierHoldoff: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c
}

func newCluster(t *testing.T, nodes int, eng Engine, cfg Config) *cluster {
	t.Helper()
	db := kvtest.NewDB(t)
	c := &cluster{t: t, db: db, cfg: cfg, eng: eng, docs: newMemDocs()}
	if cfg.DocUpdater == nil {
		c.cfg.DocUpdater = c.docs
	}
	c.feJob = newJobsClient(t, db)
	fe, err := NewFrontend(db, c.feJob, c.cfg)
	require.NoError(t, err)
	c.fe = fe
	for i := 0; i < nodes; i++ {
		c.addNode(fmt.Sprintf("node%d", i))
	}
	return c
}

func (c *cluster) addNode(name string) *Node {
	c.t.Helper()
	jc := newJobsClient(c.t, c.db)
	cfg := c.cfg
	cfg.NodeName = name
	n, err := NewNode(c.db, jc, c.eng, cfg)
	require.NoError(c.t, err)
	require.NoError(c.t, n.Start(context.Background()))
	c.t.Cleanup(n.Stop)
	c.nodes = append(c.nodes, n)
	c.njobs = append(c.njobs, jc)
	return n
}

// putDoc writes a _replicator document the way a frontend would.
func (c *cluster) putDoc(db, id string, doc map[string]any) {
	c.t.Helper()
	var raw json.RawMessage
	if doc != nil {
		b, err := json.Marshal(doc)
		require.NoError(c.t, err)
		raw = b
	}
	_, err := c.db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		return nil, c.fe.DocWritten(context.Background(), tr, db, id, raw)
	})
	require.NoError(c.t, err)
}

func (c *cluster) docState(db, id string) DocInfo {
	c.t.Helper()
	d, err := c.fe.SchedulerDoc(context.Background(), db, id)
	require.NoError(c.t, err)
	return d
}

// waitFor polls cond (every 5 ms, at most 60 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *cluster) waitDocState(db, id string, states ...string) DocInfo {
	c.t.Helper()
	var d DocInfo
	waitFor(c.t, fmt.Sprintf("%s/%s in %v", db, id, states), func() bool {
		var err error
		d, err = c.fe.SchedulerDoc(context.Background(), db, id)
		if err != nil {
			return false
		}
		for _, s := range states {
			if d.State == s {
				return true
			}
		}
		return false
	})
	return d
}

// memDocs is a DocUpdater recording terminal states in memory (and a key
// in the transaction, so the write is part of it).
type memDocs struct {
	mu     sync.Mutex
	states map[string]docUpdate
}

type docUpdate struct {
	State, Reason string
	Stats         json.RawMessage
}

func newMemDocs() *memDocs { return &memDocs{states: map[string]docUpdate{}} }

func (m *memDocs) UpdateDocState(ctx context.Context, tr kv.Transaction, db, doc, state, reason string, stats json.RawMessage) error {
	tr.Set(kv.Key("test-doc-states/"+db+"/"+doc), []byte(state))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[db+"/"+doc] = docUpdate{state, reason, stats}
	return nil
}

func (m *memDocs) get(db, doc string) (docUpdate, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.states[db+"/"+doc]
	return u, ok
}

func repDoc(src, tgt string, continuous bool) map[string]any {
	return map[string]any{"source": src, "target": tgt, "continuous": continuous}
}

// crashRunning ends every current run of src with err (the next runs are
// unaffected unless setFail is used).
func (e *fakeEngine) crashNext(src string, err error) { e.setFail(src, err) }

// jobSTime returns the fdbjobs scheduled time and state of a job.
func (c *cluster) jobSTime(jobID string) (int64, fdbjobs.State) {
	c.t.Helper()
	var st int64
	var state fdbjobs.State
	err := c.feJob.FoldJobs(context.Background(), JobType, func(j fdbjobs.JobInfo) error {
		if j.ID == jobID {
			st, state = j.ScheduledTime, j.State
		}
		return nil
	})
	require.NoError(c.t, err)
	return st, state
}

// docJobID returns the job id of a _replicator document.
func (c *cluster) docJobID(db, doc string) string {
	c.t.Helper()
	u, err := c.fe.registeredDB(context.Background(), db)
	require.NoError(c.t, err)
	return persistentJobID(u, doc)
}
