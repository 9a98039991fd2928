package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

func TestNodeLifecycle(t *testing.T) {
	db := kvtest.NewDB(t)
	jc := replicatortest.JobsClient(t, db)
	n, err := scheduler.New(replicator.NewStore(db, jc, nil), simengine.New(), testConfig())
	require.NoError(t, err)
	n.Stop() // before start
	require.NoError(t, n.Start(context.Background()))
	require.NoError(t, n.Start(context.Background()))
	n.Stop()
	n.Stop()
	require.Zero(t, n.Stats().Running)
}

// A configuration changed at run time keeps the address policy the node
// shares with its control plane when it names none (as one built from the
// settings does): that policy knows the node's own listeners and follows
// the rules' changes in place. Losing it sent webhooks by the default
// rules after any runtime change (a loopback receiver allowed refused,
// the operator's denied networks not denied).
func TestSetConfigKeepsSharedAddresses(t *testing.T) {
	cfg := testConfig()
	shared := couch.NewAddressPolicy(couch.AddressRules{})
	cfg.Addresses = shared
	c := newCluster(t, 1, simengine.New(), cfg)
	n := c.Nodes[0]
	require.Same(t, shared, n.Config().Addresses)
	next := n.Config()
	next.Addresses = nil
	next.MaxChurn++
	require.NoError(t, n.SetConfig(next))
	rescheduleNow(t, c, 0)
	require.Equal(t, next.MaxChurn, n.Config().MaxChurn, "in force")
	require.Same(t, shared, n.Config().Addresses)
}

// A second Start of a running node does nothing: its running jobs stay
// running under it, not put back in the queue by the take back that a
// first Start does (it re-enqueued them while their workers ran on).
func TestSecondStartLeavesRunningJobs(t *testing.T) {
	c, eng := simCluster(t, 1, testConfig(), 0, 0)
	const jobs = 3
	ids := make([]string, jobs)
	for i := range jobs {
		doc := fmt.Sprintf("d%d", i)
		c.PutDoc("_replicator", doc, repDoc(fmt.Sprintf("http://h/src%d", i), "http://h/tgt", true))
		ids[i] = c.DocJobID("_replicator", doc)
		c.WaitJob(doc+" running", ids[i], runningOn(c.Nodes[0].Config().NodeName))
	}
	started := func() bool {
		for i := range jobs {
			if eng.Starts(fmt.Sprintf("http://h/src%d/", i)) < 1 {
				return false
			}
		}
		return true
	}
	waitStarts(t, eng, "every job's run started", started)
	require.NoError(t, c.Nodes[0].Start(context.Background()))
	for i, id := range ids {
		_, state := c.JobSTime(id)
		require.Equal(t, fdbjobs.Running, state, "job %d after a second Start", i)
		require.Equal(t, 1, eng.Starts(fmt.Sprintf("http://h/src%d/", i)), "job %d started once", i)
	}
	require.Equal(t, jobs, c.Nodes[0].Stats().Running)
}

func TestConfigValidation(t *testing.T) {
	db := kvtest.NewDB(t)
	jc := replicatortest.JobsClient(t, db)
	for _, tc := range []struct {
		name string
		cfg  scheduler.Config
	}{
		{"negative max_jobs", scheduler.Config{MaxJobs: -1}},
		{"max_backoff under min", scheduler.Config{MinBackoff: time.Minute, MaxBackoff: time.Second}},
		{"max_backoff over 30 days", scheduler.Config{MaxBackoff: 31 * 24 * time.Hour}},
		{"shares out of range", scheduler.Config{Config: replicator.Config{Shares: map[string]int{"_replicator": 1001}}}},
		{"usage coeff", scheduler.Config{Config: replicator.Config{UsageCoeff: 2}}},
		{"max_jobs_per_user_percent under 1", scheduler.Config{MaxJobsPerUserPercent: -1}},
		{"max_user_connection_timeout over an hour", scheduler.Config{Config: replicator.Config{MaxUserConnectionTimeout: 2 * time.Hour}}},
		{"max_replications_per_user under 1", scheduler.Config{Config: replicator.Config{MaxReplicationsPerUser: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scheduler.New(replicator.NewStore(db, jc, nil), nil, tc.cfg)
			require.ErrorIs(t, err, replicator.ErrInvalidConfig)
		})
	}
	// The cluster-wide part is checked by the control plane too.
	_, err := control.New(replicator.NewStore(db, jc, nil), replicator.Config{UsageCoeff: 2})
	require.ErrorIs(t, err, replicator.ErrInvalidConfig)
}

// More continuous jobs than capacity: every job gets to run (rotation),
// and a node never runs more than MaxJobs at once.
func TestRotation(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 2, 2
	c, eng := simCluster(t, 2, cfg, 50*time.Millisecond, 0)
	const jobs = 10
	for i := 0; i < jobs; i++ {
		c.PutDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/src%d", i), "http://h/tgt", true))
	}
	everyJobStarted := func(round int) bool {
		for i := 0; i < jobs; i++ {
			if eng.Starts(fmt.Sprintf("http://h/src%d/", i)) < round {
				return false
			}
		}
		return true
	}
	for round := 1; round <= 2; round++ {
		waitStarts(t, eng, fmt.Sprintf("every job started %d times", round), func() bool { return everyJobStarted(round) })
	}
	_, _, _, maxRun := eng.Stats()
	require.LessOrEqual(t, maxRun, 2*cfg.MaxJobs)
	var rotations int
	for _, n := range c.Nodes {
		for _, r := range n.Stats().Rotations {
			rotations += r
		}
	}
	require.Positive(t, rotations)
}

// One-shot jobs are not preempted: with MaxJobs 1 and long one-shot runs,
// every one-shot job starts exactly once and completes.
func TestOneShotNotPreempted(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 1, 1
	c, eng := simCluster(t, 1, cfg, 0, 300*time.Millisecond)
	for i := 0; i < 3; i++ {
		c.PutDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", false))
	}
	for i := 0; i < 3; i++ {
		d := c.WaitDocState("_replicator", fmt.Sprintf("d%d", i), replicator.StateCompleted)
		require.Equal(t, replicator.StateCompleted, d.State)
		require.Equal(t, 1, eng.Starts(fmt.Sprintf("http://h/s%d/", i)))
		u, ok := c.Docs.Get("_replicator", fmt.Sprintf("d%d", i))
		require.True(t, ok)
		require.Equal(t, replicator.StateCompleted, u.State)
	}
}

func TestKilledNodeJobsResumeElsewhere(t *testing.T) {
	eng := simengine.New()
	eng.CheckpointEvery = 5 * time.Millisecond
	cfg := testConfig()
	cfg.JobTimeout = 300 * time.Millisecond
	cfg.StatsUpdateInterval = 50 * time.Millisecond
	cfg.MaxJobs = 10
	c := newCluster(t, 1, eng, cfg)
	for i := 0; i < 3; i++ {
		c.PutDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", true))
	}
	for i := 0; i < 3; i++ {
		d := c.WaitDocState("_replicator", fmt.Sprintf("d%d", i), replicator.StateRunning)
		require.Equal(t, "node0", *d.Node)
	}
	c.Kill(0)
	c.AddNode("node1")
	for i := 0; i < 3; i++ {
		c.WaitJob("job on node1", c.DocJobID("_replicator", fmt.Sprintf("d%d", i)), runningOn("node1"))
	}
}

func TestGracefulStopHandsJobsOver(t *testing.T) {
	c := newCluster(t, 1, simengine.New(), testConfig())
	c.PutDoc("_replicator", "d", repDoc("http://h/s", "http://h/t", true))
	c.WaitDocState("_replicator", "d", replicator.StateRunning)
	c.Nodes[0].Stop()
	require.Equal(t, replicator.StatePending, c.DocState("_replicator", "d").State)
	c.AddNode("node1")
	c.WaitJob("job on node1", c.DocJobID("_replicator", "d"), runningOn("node1"))
}

// Lowering max_jobs takes effect at the next interval and, once no
// continuous job is left to stop, preempts one-shot jobs too; they run
// again later and complete.
func TestLoweredMaxJobsPreemptsOneShot(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 2, 1
	c, eng := simCluster(t, 1, cfg, 0, 2*time.Second)
	c.PutDoc("_replicator", "a", repDoc("http://h/a", "http://h/t", false))
	c.PutDoc("_replicator", "b", repDoc("http://h/b", "http://h/t", false))
	c.WaitDocState("_replicator", "a", replicator.StateRunning)
	c.WaitDocState("_replicator", "b", replicator.StateRunning)
	lower := c.Nodes[0].Config()
	lower.MaxJobs = 1
	require.NoError(t, c.Nodes[0].SetConfig(lower))
	c.WaitIntervals(0, 2) // applied at the first, the excess stopped by then
	require.Equal(t, 1, c.Nodes[0].Config().MaxJobs)
	require.Positive(t, c.Nodes[0].Metrics().Value(replicator.MetricJobsPreempted))
	c.WaitDocState("_replicator", "a", replicator.StateCompleted)
	c.WaitDocState("_replicator", "b", replicator.StateCompleted)
	require.GreaterOrEqual(t, eng.Starts("http://h/a/")+eng.Starts("http://h/b/"), 3, "the preempted one ran again")
}

// Lowering max_jobs stops the excess continuous jobs at the next interval
// even when they ran less than min_run_time (as CouchDB stops the excess
// at once), and raising it again starts the pending ones.
func TestMaxJobsLoweredAndRaised(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn, cfg.MinRunTime = 3, 3, time.Hour
	c, _ := simCluster(t, 1, cfg, 0, 0)
	for i := range 3 {
		c.PutDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", true))
	}
	for i := range 3 {
		c.WaitDocState("_replicator", fmt.Sprintf("d%d", i), replicator.StateRunning)
	}
	running := func() int {
		n := 0
		for i := range 3 {
			if c.DocState("_replicator", fmt.Sprintf("d%d", i)).State == replicator.StateRunning {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct{ maxJobs, want int }{{1, 1}, {3, 3}} {
		next := c.Nodes[0].Config()
		next.MaxJobs = tc.maxJobs
		require.NoError(t, c.Nodes[0].SetConfig(next))
		c.WaitIntervals(0, 1) // applied, the excess asked to stop or the acceptors started
		for k := 0; running() != tc.want; k++ {
			require.Less(t, k, 50, "max_jobs %d: %d jobs running", tc.maxJobs, running())
			c.WaitIntervals(0, 1)
		}
		require.Equal(t, tc.maxJobs, c.Nodes[0].Config().MaxJobs)
		// And it stays so: no acceptor takes the stopped jobs back, no
		// rotation runs beyond max_jobs jobs younger than min_run_time.
		for range 3 {
			c.WaitIntervals(0, 1)
			require.Equal(t, tc.want, running(), "max_jobs %d", tc.maxJobs)
		}
	}
}

// M4: a node restarted under the same name takes back at once the jobs its
// earlier run left running (no wait for the activity monitor and its job
// timeout, an hour here), and the views never show a job running that no
// node runs.
func TestRestartedNodeTakesItsJobsBack(t *testing.T) {
	eng := simengine.New()
	eng.CheckpointEvery = 5 * time.Millisecond
	cfg := testConfig()
	cfg.JobTimeout, cfg.MaxJobs = time.Hour, 10
	c := newCluster(t, 1, eng, cfg)
	for i := 0; i < 3; i++ {
		c.PutDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", true))
	}
	for i := 0; i < 3; i++ {
		c.WaitDocState("_replicator", fmt.Sprintf("d%d", i), replicator.StateRunning)
	}
	c.Kill(0)
	killed := time.Now().UnixMilli()
	// The dead node's jobs still look running: fdbjobs has them running
	// until someone re-enqueues them.
	require.Equal(t, replicator.StateRunning, c.DocState("_replicator", "d0").State)

	// Re-enqueued but not yet taken, a job is pending in every view.
	ok, err := c.Jobs.Reenqueue(context.Background(), nil, replicator.JobType, c.DocJobID("_replicator", "d0"))
	require.NoError(t, err)
	require.True(t, ok)
	d := c.DocState("_replicator", "d0")
	require.Equal(t, replicator.StatePending, d.State)
	require.Nil(t, d.Node)
	tasks, err := c.Plane.ActiveTasks(context.Background(), api.Admin())
	require.NoError(t, err)
	require.Len(t, tasks, 2, "only the jobs fdbjobs has running")

	c.AddNode("node0")
	for i := 0; i < 3; i++ {
		c.WaitJob(fmt.Sprintf("d%d started again", i), c.DocJobID("_replicator", fmt.Sprintf("d%d", i)),
			func(st fdbjobs.State, d *replicator.JobData) bool {
				return st == fdbjobs.Running && d.Node == "node0" && d.LastStart >= killed
			})
	}
}

// A node's [replicator] defaults fill what a replication leaves unset and
// nothing else (M4 found checkpoint_interval ignored).
func TestNodeJobDefaults(t *testing.T) {
	eng := simengine.New()
	eng.Started.Init()
	cfg := testConfig()
	cfg.JobDefaults = replicator.JobDefaults{WorkerProcesses: 7, CheckpointInterval: 5 * time.Second, NoBulkGet: true, NoCheckpoints: true}
	c := newCluster(t, 1, eng, cfg)
	doc := repDoc("http://h/jd", "http://h/t", true)
	doc["worker_processes"] = 3
	doc["use_checkpoints"] = true
	c.PutDoc("_replicator", "d", doc)
	waitStarts(t, eng, "the run", func() bool { return eng.Starts("http://h/jd/") > 0 })
	rep, ok := eng.LastReplication("http://h/jd/")
	require.True(t, ok)
	require.Equal(t, 3, rep.WorkerProcesses, "the document's own value")
	require.Equal(t, 5*time.Second, rep.CheckpointInterval, "the node's default")
	require.True(t, rep.DisableBulkGet, "use_bulk_get unset: the node's default")
	require.False(t, rep.DisableCheckpoints, "use_checkpoints set by the document")

	bad := testConfig()
	bad.JobDefaults.WorkerProcesses = 65
	_, err := scheduler.New(replicator.NewStore(c.DB, c.Jobs, nil), eng, bad)
	require.ErrorIs(t, err, replicator.ErrInvalidConfig)
	require.ErrorContains(t, err, "worker_processes")
}

// Rotation uses the churn it is allowed: with more continuous jobs than
// MaxJobs, every interval stops MaxChurn of them and the acceptors start
// as many waiting jobs in the slots they leave, and the node never runs
// more than MaxJobs at once (no start beyond MaxJobs, however large
// MaxChurn). (Which jobs run is fair share's choice.) The intervals are driven by hand
// (Reschedule; an hour apart otherwise).
func TestRotationUsesAllItsChurn(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		jobs, maxJobs, maxChurn int
	}{
		{"churn 2 of 4", 20, 4, 2},
		{"churn 3 of 3", 15, 3, 3},
		{"churn 1 of 5", 9, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxJobs, cfg.MaxChurn, cfg.Interval = tc.maxJobs, tc.maxChurn, time.Hour
			c, eng := simCluster(t, 1, cfg, time.Hour, 0)
			for i := range tc.jobs {
				c.PutDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", true))
			}
			starts := func() int64 { _, total, _, _ := eng.Stats(); return total }
			waitStarts(t, eng, "the node filled", func() bool { return starts() >= int64(tc.maxJobs) })
			intervals := (tc.jobs - tc.maxJobs + tc.maxChurn - 1) / tc.maxChurn
			for i := 1; i <= intervals; i++ {
				rescheduleNow(t, c, 0)
				want := int64(tc.maxJobs + i*tc.maxChurn)
				waitStarts(t, eng, fmt.Sprintf("interval %d's rotation", i), func() bool { return starts() >= want })
			}
			_, total, _, maxRun := eng.Stats()
			require.Equal(t, int64(tc.maxJobs+intervals*tc.maxChurn), total, "MaxChurn starts per interval, no more")
			require.LessOrEqual(t, maxRun, tc.maxJobs)
			rot := c.Nodes[0].Stats().Rotations
			require.Len(t, rot, intervals)
			for i, r := range rot {
				require.Equal(t, tc.maxChurn, r, "interval %d stops MaxChurn jobs", i+1)
			}
		})
	}
}
