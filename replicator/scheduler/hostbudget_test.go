package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
)

// Budgets per host (doc.go, "Budgets per host"): with max_jobs_per_host 1,
// of two replications from one source host one runs and the other is held
// back, pending with the stall budget naming the host, across two nodes,
// while a replication of other hosts runs at once; when the running one
// stops (its document deleted), the held one starts at once: the interval,
// an hour, would hold it back until its recheck otherwise.
func TestHostBudgetHoldsBackAHostsJobs(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobsPerHost = 1
	cfg.Interval = time.Hour
	c, _ := simCluster(t, 2, cfg, 0, 0)
	ctx := context.Background()
	c.PutDoc("_replicator", "a1", repDoc("http://a/s1", "http://t1/x", true))
	c.PutDoc("_replicator", "a2", repDoc("http://a:80/s2", "http://t2/x", true))
	c.PutDoc("_replicator", "other", repDoc("http://b/s", "http://t3/x", true))

	c.WaitDocState("_replicator", "other", replicator.StateRunning)
	held, running := "", ""
	for _, id := range []string{"a1", "a2"} {
		c.WaitJob(id+" running or held", c.DocJobID("_replicator", id), func(_ fdbjobs.State, d *replicator.JobData) bool {
			switch {
			case d != nil && d.State == replicator.StateRunning:
				running = id
			case d != nil && d.HeldHost != "":
				held = id
			default:
				return false
			}
			return true
		})
	}
	require.NotEmpty(t, held, "one of a's replications is held back")
	require.NotEmpty(t, running, "one of a's replications runs")

	info := c.DocState("_replicator", held)
	require.Equal(t, replicator.StatePending, info.State)
	var add struct {
		Stall struct{ Reason, Host, Until string } `json:"stall"`
	}
	require.NoError(t, json.Unmarshal(info.Info, &add), string(info.Info))
	require.Equal(t, replicator.StallBudget, add.Stall.Reason)
	require.Equal(t, "http://a:80", add.Stall.Host)
	require.NotEmpty(t, add.Stall.Until)

	// The running one stops: the held one takes its place at once.
	c.PutDoc("_replicator", running, nil)
	info = c.WaitDocState("_replicator", held, replicator.StateRunning)
	require.Equal(t, replicator.StateRunning, info.State)
	d, _, err := c.Store.Job(ctx, nil, c.DocJobID("_replicator", held))
	require.NoError(t, err)
	require.Equal(t, []string{"http://a:80", "http://t" + held[1:] + ":80"}, d.BudgetHosts)
	require.Empty(t, d.HeldHost)
}

func TestBudgetGroups(t *testing.T) {
	ep := func(url, user string) replicator.EndpointSpec {
		return replicator.EndpointSpec{URL: url, Username: user}
	}
	for _, tc := range []struct {
		src, tgt replicator.EndpointSpec
		want     []string
	}{
		{ep("http://A.example/db", ""), ep("https://b.example/db", ""), []string{"http://a.example:80", "https://b.example:443"}},
		{ep("http://h:5984/a", ""), ep("http://h:5984/b", ""), []string{"http://h:5984"}},
		{ep("http://[::1]:5984/a", ""), ep("http://h/b", ""), []string{"http://[::1]:5984", "http://h:80"}},
		{ep("not a url", ""), ep("http://h/b", ""), []string{"http://h:80"}},
		{ep("http://127.0.0.1:026984/a", ""), ep("http://[::ffff:7f00:1]:26984/b", ""), []string{"http://127.0.0.1:26984"}},
		{ep("https://H.example.:443/a", ""), ep("https://h.example/b", ""), []string{"https://h.example:443"}},
		{ep("http://h/a", "bob"), ep("http://h/b", "al ice"), []string{"http://al+ice@h:80", "http://bob@h:80", "http://h:80"}},
		{replicator.EndpointSpec{URL: "https://h/a", Token: &replicator.TokenSpec{ClientID: "svc"}}, ep("http://t/b", ""),
			[]string{"http://t:80", "https://h:443", "https://svc@h:443"}},
	} {
		got := replicator.BudgetGroups(&replicator.Spec{Source: tc.src, Target: tc.tgt})
		require.Equal(t, tc.want, got, tc.src.URL)
	}
	h := replicator.HostOf("http://" + strings.Repeat("x", 200) + ".example/db")
	require.LessOrEqual(t, len(h), fdbjobs.PartitionMaxBytes)
	require.Contains(t, h, "sha256:")
	require.False(t, replicator.IsHostUser(h))
	hu := replicator.HostUserOf(replicator.EndpointSpec{URL: "http://" + strings.Repeat("x", 200) + ".example/db", Username: "u"})
	require.True(t, replicator.IsHostUser(hu), hu)

	b := replicator.Budgets{PerHostUser: 2}
	spec := &replicator.Spec{Source: ep("http://h/a", "bob"), Target: ep("http://t/b", "")}
	require.Equal(t, []fdbjobs.Place{{Partition: "http://bob@h:80", Limit: 2}}, b.Places(spec), "only the budgets set")
}

// runningOfHost counts, in one snapshot of the store, the jobs of ids that
// run.
func runningOfHost(t *testing.T, c *replicatortest.Cluster, ids []string) int {
	n, _ := runningPlaced(t, c, ids)
	return n
}

// runningPlaced counts the jobs ids that run, and of them those that hold
// their places in their hosts' budgets (a job that ran before a budget
// was set runs without until its next heartbeat).
func runningPlaced(t *testing.T, c *replicatortest.Cluster, ids []string) (running, placed int) {
	t.Helper()
	_, err := kv.ReadTransact(context.Background(), c.DB, func(tr kv.ReadTransaction) (struct{}, error) {
		running, placed = 0, 0
		for _, id := range ids {
			d, st, err := c.Store.Job(context.Background(), tr, id)
			if err != nil {
				return struct{}{}, err
			}
			if d != nil && st == fdbjobs.Running && d.State == replicator.StateRunning {
				running++
				if len(d.BudgetHosts) > 0 {
					placed++
				}
			}
		}
		return struct{}{}, nil
	})
	require.NoError(t, err)
	return running, placed
}

// The continuous replications of a host take turns within its budget:
// with max_jobs_per_host 1, each of three continuous replications from
// one host runs, never two at once; and replications that ran before the
// budget was set take their places at their next heartbeat, those beyond
// it giving way.
func TestHostBudgetTurns(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "set before", true: "set while they run"}[late], func(t *testing.T) {
			cfg := testConfig()
			if !late {
				cfg.MaxJobsPerHost = 1
			}
			c, eng := simCluster(t, 2, cfg, 0, 0)
			var ids []string
			for i := range 3 {
				id := fmt.Sprintf("r%d", i)
				c.PutDoc("_replicator", id, repDoc(fmt.Sprintf("http://a/s%d", i), fmt.Sprintf("http://t%d/x", i), true))
				ids = append(ids, c.DocJobID("_replicator", id))
			}
			if late {
				for i := range 3 {
					c.WaitDocState("_replicator", fmt.Sprintf("r%d", i), replicator.StateRunning)
				}
				for _, n := range c.Nodes {
					next := n.Config()
					next.MaxJobsPerHost = 1
					require.NoError(t, n.SetConfig(next))
				}
				// Those that ran before take their places at their next
				// heartbeats, or give way: until then more run.
				testutil.Eventually(t, "one of a's replications running, with its place", func() bool {
					running, placed := runningPlaced(t, c, ids)
					return running == 1 && placed == 1
				})
			}
			starts := func(i int) int { return eng.Starts(fmt.Sprintf("http://a/s%d/", i)) }
			before := []int{starts(0), starts(1), starts(2)}
			waitStarts(t, eng, "each of a's replications ran again", func() bool {
				require.LessOrEqual(t, runningOfHost(t, c, ids), 1, "a runs more than its budget")
				for i := range 3 {
					if starts(i) <= before[i] {
						return false
					}
				}
				return true
			})
		})
	}
}

// A budget per host and user: with max_jobs_per_host_user 1, of bob's two
// replications from host a one runs and the other waits, naming bob at a,
// while alice's from a runs beside them.
func TestHostUserBudget(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobsPerHostUser = 1
	cfg.Interval = time.Hour
	c, _ := simCluster(t, 1, cfg, 0, 0)
	c.PutDoc("_replicator", "bob1", repDoc("http://bob:pw@a/s1", "http://t1/x", true))
	c.PutDoc("_replicator", "bob2", repDoc("http://bob:pw@a/s2", "http://t2/x", true))
	c.PutDoc("_replicator", "alice", repDoc("http://alice:pw@a/s3", "http://t3/x", true))
	c.WaitDocState("_replicator", "alice", replicator.StateRunning)
	held := ""
	for _, id := range []string{"bob1", "bob2"} {
		c.WaitJob(id+" running or held", c.DocJobID("_replicator", id), func(_ fdbjobs.State, d *replicator.JobData) bool {
			if d != nil && d.HeldHost != "" {
				held = id
			}
			return d != nil && (d.State == replicator.StateRunning || d.HeldHost != "")
		})
	}
	require.NotEmpty(t, held)
	var add struct {
		Stall struct{ Reason, Host, Detail string } `json:"stall"`
	}
	info := c.DocState("_replicator", held)
	require.NoError(t, json.Unmarshal(info.Info, &add), string(info.Info))
	require.Equal(t, replicator.StallBudget, add.Stall.Reason)
	require.Equal(t, "http://bob@a:80", add.Stall.Host)
	require.Contains(t, add.Stall.Detail, "max_jobs_per_host_user")
}
