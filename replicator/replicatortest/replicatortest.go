// Package replicatortest runs a replicator cluster in one process for
// tests: a control plane and replication nodes, each node with its own
// fdbjobs client, on one store, after hashicorp/raft's MakeCluster. Jobs
// are created as api_frontend nodes create them (the control plane's
// ParseDoc and DocWritten), terminal states are recorded by MemDocs, and
// waits follow the jobs through fdbjobs subscriptions instead of polling.
package replicatortest

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/jonboulle/clockwork"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// Config is a scheduler configuration for tests: intervals, backoffs and
// timeouts in tens of milliseconds, room for four jobs per node. The job
// timeout is 6 s, so that a node holds its jobs 3 s after a heartbeat
// (fdbjobs.Job.HoldDeadline) however loaded the machine and however many
// faults are injected: a shorter one makes busy nodes give jobs up.
// Parking is off (the simulated engine's runs are caught up at once, so
// rotation would park them): tests of parking set ParkAfter.
func Config() scheduler.Config {
	return scheduler.Config{
		Config:   replicator.Config{StartupJitter: 20 * time.Millisecond, JobTimeout: 6 * time.Second},
		Interval: 40 * time.Millisecond, MinRunTime: 1,
		MaxJobs: 4, MaxChurn: 4, MaxAcceptors: 2,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, HealthThreshold: time.Minute,
		StatsUpdateInterval: 20 * time.Millisecond,
		TransientJobMaxAge:  time.Hour, ShutdownTimeout: 5 * time.Second,
		ParkAfter: scheduler.ParkNever,
	}
}

// Cluster is a store with a control plane and replication nodes.
type Cluster struct {
	t testing.TB
	// DB is the shared store.
	DB kv.Database
	// Config is the configuration nodes start with (NodeName set per node).
	Config scheduler.Config
	// Plane is the control plane, on its own fdbjobs client Jobs.
	Plane *control.Plane
	Jobs  *fdbjobs.Client
	// Store reads the replicator's state.
	Store *replicator.Store
	// Nodes are the nodes in the order they were added.
	Nodes  []*scheduler.Node
	Engine replicator.Engine
	// Docs records the terminal states nodes write into documents, when
	// Config.DocUpdater was nil.
	Docs *MemDocs

	// Members are the nodes' memberships (cluster.Node), in the order of
	// Nodes, in a cluster made by NewBalancedCluster; nil otherwise.
	Members []*cluster.Node

	nodeJobs []*fdbjobs.Client
	cuts     []*faultkv.Cuttable
	balanced bool
}

// Membership timings of a balanced cluster: a node killed counts as dead
// NodeTimeout after its last heartbeat. Twenty heartbeats: under the race
// detector on a loaded machine, a node's heartbeat missed a timeout of
// four (200 ms) often enough that the nodes took one another for dead
// every few seconds, and balanced on those wrong memberships.
const (
	HeartbeatInterval = 50 * time.Millisecond
	NodeTimeout       = time.Second
)

// JobsClient returns a started fdbjobs client on db with fast test
// settings, stopped at the test's end.
func JobsClient(t testing.TB, db kv.Database) *fdbjobs.Client {
	t.Helper()
	return jobsClient(t, db, nil)
}

// jobsClient is JobsClient on clock (nil: the real one).
func jobsClient(t testing.TB, db kv.Database, clock clockwork.Clock) *fdbjobs.Client {
	t.Helper()
	c, err := fdbjobs.New(db, fdbjobs.Config{ActivityMonitorMaxJitter: 50 * time.Millisecond, NotifierHoldoff: 5 * time.Millisecond,
		TimeUnit: replicator.TimeUnit, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c
}

// NewCluster starts a control plane and n nodes running eng on a fresh
// store (kvtest.NewDB), all stopped at the test's end.
func NewCluster(t testing.TB, n int, eng replicator.Engine, cfg scheduler.Config) *Cluster {
	t.Helper()
	return NewClusterOn(t, kvtest.NewDB(t), n, eng, cfg)
}

// NewBalancedCluster is NewCluster with each node's membership
// (a cluster.Node with the replication role, heartbeating every
// HeartbeatInterval, its test signals on) given to its scheduler as
// Config.Cluster, so that the nodes balance their jobs, and to the
// control plane's views (control.Plane.SetMembership).
func NewBalancedCluster(t testing.TB, n int, eng replicator.Engine, cfg scheduler.Config) *Cluster {
	t.Helper()
	return newClusterOn(t, kvtest.NewDB(t), n, eng, cfg, true)
}

// NewClusterOn is NewCluster on db.
func NewClusterOn(t testing.TB, db kv.Database, n int, eng replicator.Engine, cfg scheduler.Config) *Cluster {
	t.Helper()
	return newClusterOn(t, db, n, eng, cfg, false)
}

func newClusterOn(t testing.TB, db kv.Database, n int, eng replicator.Engine, cfg scheduler.Config, balanced bool) *Cluster {
	t.Helper()
	c := &Cluster{t: t, DB: db, Config: cfg, Engine: eng, balanced: balanced}
	if cfg.DocUpdater == nil {
		c.Docs = NewMemDocs()
		c.Config.DocUpdater = c.Docs
	}
	c.Jobs = JobsClient(t, db)
	c.Store = replicator.NewStore(db, c.Jobs, nil)
	p, err := control.New(c.Store, c.Config.Config)
	require.NoError(t, err)
	require.NoError(t, p.Init(context.Background()))
	c.Plane = p
	if balanced {
		p.SetMembership(cluster.NewStore(db, nil))
	}
	for i := 0; i < n; i++ {
		c.AddNode(fmt.Sprintf("node%d", i))
	}
	return c
}

// AddNode starts one more node named name, with its own fdbjobs client on
// a view of the store that Kill can cut, and its test signals on. The
// client runs on the node's Config.Clock, as the node does: a job's
// scheduled time (a crashing job's backoff) and the fetchers' look at the
// queue are on the clock the test moves.
func (c *Cluster) AddNode(name string) *scheduler.Node {
	c.t.Helper()
	cut := faultkv.NewCuttable(c.DB)
	jc := jobsClient(c.t, cut, c.Config.Clock)
	cfg := c.Config
	cfg.NodeName = name
	if cfg.Logger != nil {
		// The node's logger names it, as the composition root's does.
		l := cfg.Logger.With().Str("node", name).Logger()
		cfg.Logger = &l
	}
	if c.balanced {
		m := c.member(cut, name)
		cfg.Cluster = m
		c.Members = append(c.Members, m)
	}
	n, err := scheduler.New(replicator.NewStore(cut, jc, nil), c.Engine, cfg)
	require.NoError(c.t, err)
	n.TestSignals.InitTestSignals()
	require.NoError(c.t, n.Start(context.Background()))
	c.t.Cleanup(n.Stop)
	c.Nodes = append(c.Nodes, n)
	c.nodeJobs = append(c.nodeJobs, jc)
	c.cuts = append(c.cuts, cut)
	return n
}

// member starts the membership of a replication node named name on db.
func (c *Cluster) member(db kv.Database, name string) *cluster.Node {
	c.t.Helper()
	base, err := config.FromMap(map[string]map[string]string{"node": {"name": name, "roles": config.RoleReplication}})
	require.NoError(c.t, err)
	m, err := cluster.New(db, cluster.Options{Base: base, Version: "test",
		HeartbeatInterval: HeartbeatInterval, NodeTimeout: NodeTimeout})
	require.NoError(c.t, err)
	m.TestSignals.InitTestSignals()
	require.NoError(c.t, m.Start(context.Background()))
	c.t.Cleanup(m.Stop)
	return m
}

// Kill stops node i as if its process died: its store is cut off first,
// so nothing it does from then on is stored (its running jobs stay
// "running" until the activity monitor of another node re-enqueues them),
// then it and its fdbjobs client are stopped.
func (c *Cluster) Kill(i int) {
	c.cuts[i].Cut()
	c.Nodes[i].Stop()
	if c.balanced {
		c.Members[i].Stop() // its record stays until it expires
	}
	c.nodeJobs[i].Stop()
}

// CutOff cuts node i off from the store and leaves it running, as a
// network partition or a firewall rule does: nothing it does from then on
// is stored, and its jobs go back to pending when the activity monitor of
// another node finds them without heartbeats.
func (c *Cluster) CutOff(i int) { c.cuts[i].Cut() }

// HangOff cuts node i off as a firewall rule does: its transactions wait
// for timeout (a FoundationDB client's transaction timeout) instead of
// failing at once (faultkv.Cuttable.Hang).
func (c *Cluster) HangOff(i int, timeout time.Duration) { c.cuts[i].Hang(timeout) }

// PutDoc writes a _replicator document's job as the HTTP API does for a
// server admin (doc nil: the document is deleted).
func (c *Cluster) PutDoc(db, id string, doc map[string]any) {
	c.t.Helper()
	require.NoError(c.t, c.PutDocAs(api.Admin(), db, id, doc))
}

// PutDocAs is PutDoc written by writer: a writer who is not a server
// admin is held to the per-user limits. It returns the write's error
// (the control plane's refusal: an api.TaggedError).
func (c *Cluster) PutDocAs(writer api.User, db, id string, doc map[string]any) error {
	c.t.Helper()
	ctx := c.writeCtx()
	if doc == nil {
		_, err := c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
			return nil, c.Plane.DocDeleted(ctx, tr, db, id)
		})
		return err
	}
	raw, err := json.Marshal(doc)
	require.NoError(c.t, err)
	parsed, perr := c.Plane.ParseDoc(db, id, raw, writer) // invalid documents become failed jobs
	if perr != nil && !writer.IsAdmin() {
		return perr // refused, as the HTTP API refuses it
	}
	_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		_, err := c.Plane.DocWritten(ctx, tr, parsed)
		return nil, err
	})
	return err
}

// putDocsBatch is how many documents PutDocs writes per transaction:
// small enough to commit beside busy nodes under the race detector, and
// under the faults pass's read errors (about one read in 110 fails, and
// a document's job costs about 11 reads: a transaction of 50 documents,
// 550 reads, committed at fewer than 1 attempt in 100, and a seed of
// TestDeletingADatabaseStopsAllItsJobs never got its first 50 through in
// a minute; 10 commit at about 1 attempt in 3).
const putDocsBatch = 10

// PutDocs writes many _replicator documents' jobs as the HTTP API does,
// putDocsBatch per transaction, in document id order.
func (c *Cluster) PutDocs(db string, docs map[string]map[string]any) {
	c.t.Helper()
	ids := make([]string, 0, len(docs))
	for id := range docs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for len(ids) > 0 {
		batch := ids[:min(putDocsBatch, len(ids))]
		ids = ids[len(batch):]
		parsed := make([]api.ParsedDoc, len(batch))
		for i, id := range batch {
			raw, err := json.Marshal(docs[id])
			require.NoError(c.t, err)
			parsed[i], _ = c.Plane.ParseDoc(db, id, raw, api.Admin())
		}
		ctx := c.writeCtx() // each transaction's own: faults retry some many times
		_, err := c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
			for _, p := range parsed {
				if _, err := c.Plane.DocWritten(ctx, tr, p); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		require.NoError(c.t, err)
	}
}

// DeleteDB and CreateDB run the control plane's hooks of a _replicator
// database's deletion and creation, as the HTTP API does.
func (c *Cluster) DeleteDB(db string) { c.dbHook(db, c.Plane.DBDeleted) }

// CreateDB: see DeleteDB.
func (c *Cluster) CreateDB(db string) { c.dbHook(db, c.Plane.DBCreated) }

func (c *Cluster) dbHook(db string, hook func(context.Context, kv.Transaction, string) error) {
	c.t.Helper()
	ctx := c.writeCtx()
	_, err := c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) { return nil, hook(ctx, tr, db) })
	require.NoError(c.t, err)
}

// writeCtx bounds a test's own writes by testutil.WaitTimeout: a write that
// keeps conflicting (with a job that checkpoints faster than a transaction
// takes under the latency mode, say) fails its test instead of retrying
// until the package's timeout.
func (c *Cluster) writeCtx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout)
	c.t.Cleanup(cancel)
	return ctx
}

// DocState returns the scheduler view of a document's job.
func (c *Cluster) DocState(db, id string) api.DocInfo {
	c.t.Helper()
	d, err := c.Plane.SchedulerDoc(context.Background(), db, id)
	require.NoError(c.t, err)
	return d
}

// DocJobID returns the job id of a _replicator document.
func (c *Cluster) DocJobID(db, doc string) string {
	c.t.Helper()
	u, err := c.Store.ReadRegisteredDB(context.Background(), db)
	require.NoError(c.t, err)
	return replicator.DocJobID(u, doc)
}

// WaitDocState waits until a document's job is in one of states and
// returns its scheduler view.
func (c *Cluster) WaitDocState(db, id string, states ...string) api.DocInfo {
	c.t.Helper()
	c.WaitJob(fmt.Sprintf("%s/%s in %v", db, id, states), c.DocJobID(db, id), func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && slices.Contains(states, d.State)
	})
	return c.DocState(db, id)
}

// WaitJob waits until cond holds for a job's fdbjobs state and data (nil
// when the job does not exist). An fdbjobs subscription wakes it when the
// job's state changes; since a subscription reports states, not every
// write (a job that crashes at once goes from pending to pending), the
// job is also read again after a growing pause (1 ms doubling to 100 ms).
func (c *Cluster) WaitJob(what, jobID string, cond func(fdbjobs.State, *replicator.JobData) bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout)
	defer cancel()
	var sub *fdbjobs.Subscription
	defer func() {
		if sub != nil {
			sub.Unsubscribe()
		}
	}()
	pause := time.Millisecond
	for {
		if sub == nil {
			s, _, _, err := c.Jobs.Subscribe(ctx, nil, replicator.JobType, jobID)
			if err == nil {
				sub = s // nil for a finished job
			}
		}
		d, st, err := c.Store.Job(ctx, nil, jobID)
		require.NoError(c.t, err, "waiting for %s", what)
		if d == nil {
			st = fdbjobs.NotFound
		}
		if cond(st, d) {
			return
		}
		wctx, wcancel := context.WithTimeout(ctx, pause)
		if sub != nil {
			ev, err := sub.Wait(wctx)
			if (err == nil && (ev.State == fdbjobs.Finished || ev.State == fdbjobs.NotFound)) || (err != nil && wctx.Err() == nil) {
				sub.Unsubscribe() // no more events (finished, removed, or the subscription closed)
				sub = nil
			}
		}
		if sub == nil {
			<-wctx.Done()
		}
		wcancel()
		if ctx.Err() != nil {
			c.t.Fatalf("timed out after %v waiting for %s; the job last read: %v %s", testutil.WaitTimeout, what, st, d.Encode())
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// JobSTime returns a job's fdbjobs scheduled time and state.
func (c *Cluster) JobSTime(jobID string) (int64, fdbjobs.State) {
	c.t.Helper()
	var st int64
	var state fdbjobs.State
	err := c.Jobs.FoldJobs(context.Background(), replicator.JobType, func(j fdbjobs.JobInfo) error {
		if j.ID == jobID {
			st, state = j.ScheduledTime, j.State
		}
		return nil
	})
	require.NoError(c.t, err)
	return st, state
}

// RepDoc is a replication document from src to tgt.
func RepDoc(src, tgt string, continuous bool) map[string]any {
	return map[string]any{"source": src, "target": tgt, "continuous": continuous}
}

// MemDocs is a replicator.DocUpdater that records terminal states in
// memory (and writes a key in the transaction, so the write is part of
// it).
type MemDocs struct {
	mu     sync.Mutex
	states map[string]DocUpdate
}

// DocUpdate is a recorded terminal state.
type DocUpdate struct {
	State, Reason string
	Stats         json.RawMessage
}

// NewMemDocs returns an empty MemDocs.
func NewMemDocs() *MemDocs { return &MemDocs{states: map[string]DocUpdate{}} }

// DocCompleted implements replicator.DocUpdater.
func (m *MemDocs) DocCompleted(ctx context.Context, tr kv.Transaction, db, doc string, stats json.RawMessage) error {
	return m.record(tr, db, doc, DocUpdate{State: replicator.StateCompleted, Stats: stats})
}

// DocFailed implements replicator.DocUpdater.
func (m *MemDocs) DocFailed(ctx context.Context, tr kv.Transaction, db, doc, reason string) error {
	return m.record(tr, db, doc, DocUpdate{State: replicator.StateFailed, Reason: reason})
}

// ReplicationDocIDs implements replicator.DocRewriter: MemDocs keeps no
// documents.
func (m *MemDocs) ReplicationDocIDs(kv.ReadTransaction, string, string, int) ([]string, string, error) {
	return nil, "", nil
}

// RewriteBodies implements replicator.DocRewriter: MemDocs keeps no
// documents.
func (m *MemDocs) RewriteBodies(kv.Transaction, string, string, func(string, map[string]any) (map[string]any, bool, error)) (bool, error) {
	return false, nil
}

func (m *MemDocs) record(tr kv.Transaction, db, doc string, u DocUpdate) error {
	tr.Set(kv.Key("test-doc-states/"+db+"/"+doc), []byte(u.State))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[db+"/"+doc] = u
	return nil
}

// Get returns the last state recorded for a document.
func (m *MemDocs) Get(db, doc string) (DocUpdate, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.states[db+"/"+doc]
	return u, ok
}

// WaitIntervals waits until node i has run k more interval steps than
// when WaitIntervals was called.
func (c *Cluster) WaitIntervals(i int, k int64) {
	c.t.Helper()
	n := c.Nodes[i]
	target := n.Stats().Intervals + k
	testutil.WaitUntil(c.t, &n.TestSignals.Rescheduled, fmt.Sprintf("node %d to reach interval %d", i, target),
		func(step int64) bool { return step >= target })
}
