package replicator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestNodeLifecycle(t *testing.T) {
	db := kvtest.NewDB(t)
	jc := newJobsClient(t, db)
	n, err := NewNode(db, jc, newFakeEngine(), testConfig())
	require.NoError(t, err)
	n.Stop() // before start
	require.NoError(t, n.Start(context.Background()))
	require.NoError(t, n.Start(context.Background()))
	n.Stop()
	n.Stop()
	require.Zero(t, n.Stats().Running)
}

func TestConfigValidation(t *testing.T) {
	db := kvtest.NewDB(t)
	jc := newJobsClient(t, db)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"negative max_jobs", Config{MaxJobs: -1}},
		{"max_backoff under min", Config{MinBackoff: time.Minute, MaxBackoff: time.Second}},
		{"max_backoff over 30 days", Config{MaxBackoff: 31 * 24 * time.Hour}},
		{"shares out of range", Config{Shares: map[string]int{"_replicator": 1001}}},
		{"usage coeff", Config{UsageCoeff: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewNode(db, jc, nil, tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			_, err = NewFrontend(db, jc, tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

// More continuous jobs than capacity: every job gets to run (rotation),
// and a node never runs more than MaxJobs + MaxChurn at once.
func TestRotation(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 2, 2
	c := newCluster(t, 2, eng, cfg)
	const jobs = 10
	for i := 0; i < jobs; i++ {
		c.putDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/src%d", i), "http://h/tgt", true))
	}
	for round := 1; round <= 2; round++ {
		waitFor(t, fmt.Sprintf("every job started %d times", round), func() bool {
			for i := 0; i < jobs; i++ {
				if eng.startsOf(fmt.Sprintf("http://h/src%d/", i)) < round {
					return false
				}
			}
			return true
		})
	}
	eng.mu.Lock()
	maxRun := eng.maxRun
	eng.mu.Unlock()
	require.LessOrEqual(t, maxRun, 2*(cfg.MaxJobs+cfg.MaxChurn))
	var rotations int
	for _, n := range c.nodes {
		for _, r := range n.Stats().Rotations {
			rotations += r
		}
	}
	require.Positive(t, rotations)
}

// One-shot jobs are not preempted: with MaxJobs 1 and long one-shot runs,
// every one-shot job starts exactly once and completes.
func TestOneShotNotPreempted(t *testing.T) {
	eng := newFakeEngine()
	eng.oneShot = 300 * time.Millisecond
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 1, 1
	c := newCluster(t, 1, eng, cfg)
	for i := 0; i < 3; i++ {
		c.putDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", false))
	}
	for i := 0; i < 3; i++ {
		d := c.waitDocState("_replicator", fmt.Sprintf("d%d", i), StateCompleted)
		require.JSONEq(t, `"completed"`, fmt.Sprintf("%q", d.State))
		require.Equal(t, 1, eng.startsOf(fmt.Sprintf("http://h/s%d/", i)))
		u, ok := c.docs.get("_replicator", fmt.Sprintf("d%d", i))
		require.True(t, ok)
		require.Equal(t, StateCompleted, u.State)
	}
}

func TestBackoffBounds(t *testing.T) {
	cfg := Config{MinBackoff: 32 * time.Second, MaxBackoff: 48 * time.Hour}.withDefaults()
	for n, want := range map[int]time.Duration{1: 32 * time.Second, 2: 64 * time.Second, 3: 128 * time.Second, 20: 48 * time.Hour, 1000: 48 * time.Hour} {
		for i := 0; i < 50; i++ {
			got := cfg.backoff(n, rand.Float64())
			require.LessOrEqual(t, got, want)
			require.GreaterOrEqual(t, got, want-want/4)
		}
	}
}

func TestKilledNodeJobsResumeElsewhere(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig()
	cfg.JobTimeout = 300 * time.Millisecond
	cfg.StatsUpdateInterval = 50 * time.Millisecond
	cfg.MaxJobs = 10
	c := newCluster(t, 1, eng, cfg)
	for i := 0; i < 3; i++ {
		c.putDoc("_replicator", fmt.Sprintf("d%d", i), repDoc(fmt.Sprintf("http://h/s%d", i), "http://h/t", true))
	}
	for i := 0; i < 3; i++ {
		d := c.waitDocState("_replicator", fmt.Sprintf("d%d", i), StateRunning)
		require.Equal(t, "node0", *d.Node)
	}
	c.nodes[0].kill()
	c.njobs[0].Stop()
	c.addNode("node1")
	for i := 0; i < 3; i++ {
		waitFor(t, "job on node1", func() bool {
			d := c.docState("_replicator", fmt.Sprintf("d%d", i))
			return d.State == StateRunning && d.Node != nil && *d.Node == "node1"
		})
	}
}

func TestGracefulStopHandsJobsOver(t *testing.T) {
	eng := newFakeEngine()
	c := newCluster(t, 1, eng, testConfig())
	c.putDoc("_replicator", "d", repDoc("http://h/s", "http://h/t", true))
	c.waitDocState("_replicator", "d", StateRunning)
	c.nodes[0].Stop()
	d := c.docState("_replicator", "d")
	require.Equal(t, StatePending, d.State)
	c.addNode("node1")
	waitFor(t, "job on node1", func() bool {
		d := c.docState("_replicator", "d")
		return d.State == StateRunning && *d.Node == "node1"
	})
}

var _ = fdbjobs.Pending

// Lowering max_jobs takes effect at the next interval and, once no
// continuous job is left to stop, preempts one-shot jobs too; they run
// again later and complete.
func TestLoweredMaxJobsPreemptsOneShot(t *testing.T) {
	eng := newFakeEngine()
	eng.oneShot = 2 * time.Second
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn = 2, 1
	c := newCluster(t, 1, eng, cfg)
	c.putDoc("_replicator", "a", repDoc("http://h/a", "http://h/t", false))
	c.putDoc("_replicator", "b", repDoc("http://h/b", "http://h/t", false))
	c.waitDocState("_replicator", "a", StateRunning)
	c.waitDocState("_replicator", "b", StateRunning)
	lower := c.nodes[0].Config()
	lower.MaxJobs = 1
	require.NoError(t, c.nodes[0].SetConfig(lower))
	waitFor(t, "a one-shot job preempted", func() bool {
		return eng.startsOf("http://h/a/")+eng.startsOf("http://h/b/") >= 3 || c.nodes[0].m.Value(MetricJobsPreempted) > 0
	})
	require.Equal(t, 1, c.nodes[0].Config().MaxJobs)
	c.waitDocState("_replicator", "a", StateCompleted)
	c.waitDocState("_replicator", "b", StateCompleted)
	require.Positive(t, c.nodes[0].m.Value(MetricJobsPreempted))
}
