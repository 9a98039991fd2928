package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// base returns a start-up configuration for node name with roles.
func base(t *testing.T, name, roles string, extra map[string]map[string]string) *config.Config {
	t.Helper()
	m := map[string]map[string]string{"node": {"name": name, "roles": roles}}
	for s, kvs := range extra {
		if m[s] == nil {
			m[s] = map[string]string{}
		}
		for k, v := range kvs {
			m[s][k] = v
		}
	}
	c, err := config.FromMap(m)
	require.NoError(t, err)
	return c
}

// startNode starts a Node on db with a fake clock and its signals on; the
// applied configurations arrive on the returned channel.
func startNode(t *testing.T, db kv.Database, c *config.Config, clock clockwork.Clock) (*Node, <-chan *config.Config) {
	t.Helper()
	applied := make(chan *config.Config, 16)
	logs := &testutil.Logs{}
	n, err := New(db, Options{Base: c, Version: "test", Clock: clock, Logger: logs.Logger(),
		Apply: func(c *config.Config) { applied <- c }})
	require.NoError(t, err)
	n.TestSignals.InitTestSignals()
	require.NoError(t, n.Load(context.Background()))
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(n.Stop)
	return n, applied
}

// nextApply returns the next configuration a node applied. A node whose
// watch failed (injected faults) reads again at its next heartbeat, on its
// fake clock: while nothing comes, the clock moves a heartbeat on.
func nextApply(t *testing.T, ch <-chan *config.Config, clock *clockwork.FakeClock) *config.Config {
	t.Helper()
	deadline := time.After(testutil.WaitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case c := <-ch:
			return c
		case <-tick.C:
			clock.Advance(HeartbeatIntervalDefault)
		case <-deadline:
			t.Fatal("no configuration applied")
		}
	}
}

func put(section, key, value string) func(*Settings) {
	return func(s *Settings) { s.Set(section, key, value) }
}

func TestMembershipHeartbeatsAndExpiry(t *testing.T) {
	testutil.NoLeaks(t)
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	a, _ := startNode(t, db, base(t, "node-a", "api_frontend", nil), clock)
	b, _ := startNode(t, db, base(t, "node-b", "replication", nil), clock)
	store := a.Store()

	members, err := store.Members(ctx, clock.Now())
	require.NoError(t, err)
	require.Len(t, members, 2)
	require.Equal(t, "node-a", members[0].Name)
	require.Equal(t, []string{"api_frontend"}, members[0].Roles)
	require.Equal(t, []string{"replication"}, members[1].Roles)
	require.Equal(t, "test", members[1].Version)

	// Node b stops heartbeating without leaving (as a killed process):
	// stop its loop only.
	b.svc.Stop()
	// Three heartbeat periods of a: a renews its record, b's expires.
	for range 3 {
		require.NoError(t, clock.BlockUntilContext(ctx, 1)) // a's heartbeat ticker
		clock.Advance(HeartbeatIntervalDefault)
		testutil.Wait(t, &a.TestSignals.Beat)
	}
	clock.Advance(time.Second)
	members, err = store.Members(ctx, clock.Now())
	require.NoError(t, err)
	require.Len(t, members, 1, "the dead node is listed no more")
	require.Equal(t, "node-a", members[0].Name)
	_, ok, err := store.Member(ctx, "node-b")
	require.NoError(t, err)
	require.True(t, ok, "its record stays until ForgetAfter")
	records, err := a.Records(ctx)
	require.NoError(t, err)
	require.Len(t, records, 2, "Records lists the dead node's record too")
	require.Equal(t, "node-b", records[1].Name)
	require.False(t, records[1].Alive(clock.Now()))

	// Past ForgetAfter, a's next forget round removes it.
	clock.Advance(ForgetAfterDefault)
	for range forgetEvery {
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(HeartbeatIntervalDefault)
		testutil.Wait(t, &a.TestSignals.Beat)
	}
	testutil.Eventually(t, "node-b forgotten", func() bool {
		_, ok, err := store.Member(ctx, "node-b")
		require.NoError(t, err)
		return !ok
	})
	_, ok, err = store.Published(ctx, "node-b")
	require.NoError(t, err)
	require.False(t, ok)

	// A graceful stop leaves at once.
	a.Stop()
	members, err = store.Members(ctx, clock.Now())
	require.NoError(t, err)
	require.Empty(t, members)
}

// A replication node's load is in its record at once and in every later
// heartbeat; a node that never reported one has none.
func TestLoadRidesTheHeartbeat(t *testing.T) {
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	a, _ := startNode(t, db, base(t, "node-a", "api_frontend", nil), clock)
	b, _ := startNode(t, db, base(t, "node-b", "replication", nil), clock)
	loads := func() map[string]*Load {
		t.Helper()
		members, err := b.Members(ctx, clock.Now())
		require.NoError(t, err)
		out := map[string]*Load{}
		for _, m := range members {
			out[m.Name] = m.Load
		}
		return out
	}
	require.Equal(t, map[string]*Load{"node-a": nil, "node-b": nil}, loads())

	require.NoError(t, b.SetLoad(ctx, Load{Running: 7}))
	testutil.Wait(t, &b.TestSignals.Beat)
	require.Equal(t, map[string]*Load{"node-a": nil, "node-b": {Running: 7}}, loads())
	require.NoError(t, clock.BlockUntilContext(ctx, 2)) // both heartbeat tickers
	clock.Advance(HeartbeatIntervalDefault)
	testutil.Wait(t, &b.TestSignals.Beat)
	testutil.Wait(t, &a.TestSignals.Beat)
	require.Equal(t, map[string]*Load{"node-a": nil, "node-b": {Running: 7}}, loads(), "the heartbeat keeps it")
	members, err := a.Members(ctx, clock.Now())
	require.NoError(t, err)
	require.True(t, members[1].HasRole("replication"))
	require.False(t, members[0].HasRole("replication"))

	// After Stop, SetLoad writes nothing (the node left).
	b.Stop()
	require.NoError(t, b.SetLoad(ctx, Load{Running: 1}))
	require.Equal(t, map[string]*Load{"node-a": nil}, loads())
}

func TestPublishedConfigIsRedacted(t *testing.T) {
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClock()
	c := base(t, "node-a", "api_frontend,replication", map[string]map[string]string{
		"admins":      {"adm": "-pbkdf2-abcdef,0123,10"},
		"chttpd_auth": {"secret": "cookie-secret-xyz"},
		"replicator":  {"max_jobs": "7", "password": "key-pass-xyz"},
	})
	n, _ := startNode(t, db, c, clock)
	pub, ok, err := n.Store().Published(context.Background(), "node-a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(7), pub.Int("replicator", "max_jobs"))
	require.Equal(t, Redacted, pub.String("chttpd_auth", "secret"))
	require.Equal(t, Redacted, pub.String("replicator", "password"))
	require.Equal(t, map[string]string{"adm": Redacted}, pub.Admins())
	raw, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(n.Store().publishedKey("node-a")).Get()
	})
	require.NoError(t, err)
	for _, secret := range []string{"abcdef", "cookie-secret-xyz", "key-pass-xyz"} {
		require.NotContains(t, string(raw), secret)
	}
}

func TestRuntimeLayersApplyLive(t *testing.T) {
	testutil.NoLeaks(t)
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClock()
	ctx := context.Background()
	a, appliedA := startNode(t, db, base(t, "node-a", "replication", map[string]map[string]string{"replicator": {"max_jobs": "10"}}), clock)
	b, appliedB := startNode(t, db, base(t, "node-b", "replication", nil), clock)
	store := a.Store()

	// A cluster-wide change reaches both nodes through the watch.
	_, err := store.Update(ctx, ScopeCluster, func(l *Layers) error {
		put("replicator", "max_jobs", "20")(&l.Cluster)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(20), nextApply(t, appliedA, clock).Int("replicator", "max_jobs"))
	require.Equal(t, int64(20), nextApply(t, appliedB, clock).Int("replicator", "max_jobs"))

	// A node's own layer wins over the cluster's, on that node only.
	_, err = store.Update(ctx, "node-b", func(l *Layers) error {
		put("replicator", "max_jobs", "30")(&l.Node)
		return nil
	})
	require.NoError(t, err)
	cb := nextApply(t, appliedB, clock)
	require.Equal(t, int64(30), cb.Int("replicator", "max_jobs"))
	require.Equal(t, "_config (node-b)", cb.Source("replicator", "max_jobs"))
	testutil.Wait(t, &a.TestSignals.Applied) // the version moved; a's merge is the same
	require.Equal(t, int64(20), a.Config().Int("replicator", "max_jobs"))
	require.Equal(t, int64(20), nextApply(t, appliedA, clock).Int("replicator", "max_jobs"))

	// Sync applies at once, and a second Sync of the same version does
	// nothing.
	require.NoError(t, a.Sync(ctx))
	select {
	case c := <-appliedA:
		t.Fatalf("applied again: %v", c.Int("replicator", "max_jobs"))
	default:
	}

	// A restarted node starts with the layers (Load), before applying.
	b.Stop()
	b2, err := New(db, Options{Base: base(t, "node-b", "replication", nil), Clock: clock})
	require.NoError(t, err)
	require.NoError(t, b2.Load(ctx))
	require.Equal(t, int64(30), b2.Config().Int("replicator", "max_jobs"))
}

func TestInvalidMergeIsNotApplied(t *testing.T) {
	testutil.NoLeaks(t)
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClock()
	ctx := context.Background()
	logs := &testutil.Logs{}
	// Node a's files set max_backoff 100 s: a cluster-wide min_backoff of
	// 200 s is valid elsewhere but not there.
	n, err := New(db, Options{Base: base(t, "node-a", "replication", map[string]map[string]string{"replicator": {"max_backoff_penalty_sec": "100"}}),
		Clock: clock, Logger: logs.Logger(), Check: func(c *config.Config) error {
			if c.Int("replicator", "max_jobs") == 13 {
				return errors.New("13 is unlucky")
			}
			return nil
		}})
	require.NoError(t, err)
	n.TestSignals.InitTestSignals()
	require.NoError(t, n.Start(ctx))
	t.Cleanup(n.Stop)

	for _, tc := range []struct{ key, value, log string }{
		{"min_backoff_penalty_sec", "200", "under min_backoff_penalty_sec"},
		{"max_jobs", "13", "13 is unlucky"},
	} {
		_, err = n.Store().Update(ctx, ScopeCluster, func(l *Layers) error {
			l.Cluster = Settings{}
			put("replicator", tc.key, tc.value)(&l.Cluster)
			return nil
		})
		require.NoError(t, err)
		// A watch that failed (injected faults) waits for the next
		// heartbeat, on the fake clock: move it until the change is read.
		testutil.Eventually(t, "the change refused", func() bool {
			_, ok := logs.Find("cluster: runtime configuration not applied on this node; the previous one stays in effect", func(m map[string]any) bool {
				return strings.Contains(fmt.Sprint(m["error"]), tc.log)
			})
			if !ok {
				clock.Advance(HeartbeatIntervalDefault)
			}
			return ok
		})
	}
	require.Equal(t, int64(32), n.Config().Int("replicator", "min_backoff_penalty_sec"))
	require.Equal(t, int64(500), n.Config().Int("replicator", "max_jobs"))
}

func TestUpdateBounds(t *testing.T) {
	db := kvtest.NewDB(t)
	store := NewStore(db, nil)
	ctx := context.Background()
	_, err := store.Update(ctx, ScopeCluster, func(l *Layers) error {
		for i := range SettingsMax + 1 {
			l.Cluster.Set("admins", fmt.Sprint("user", i), "h")
		}
		return nil
	})
	require.ErrorIs(t, err, ErrTooMany)
	_, err = store.Update(ctx, ScopeCluster, func(l *Layers) error {
		l.Cluster.Set("replicator", "socket_options", string(make([]byte, ValueMaxBytes+1)))
		return nil
	})
	require.ErrorIs(t, err, ErrTooLarge)
	l, err := store.Layers(ctx, "n")
	require.NoError(t, err)
	require.Zero(t, l.Version, "nothing was written")

	// An edit that changes nothing does not bump the version.
	l, err = store.Update(ctx, "n", func(l *Layers) error { l.Node.Set("log", "level", "debug"); return nil })
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Version)
	l, err = store.Update(ctx, "n", func(l *Layers) error { l.Node.Set("log", "level", "debug"); return nil })
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Version)
	l, err = store.Update(ctx, "n", func(l *Layers) error { l.Node.Delete("log", "level"); return nil })
	require.NoError(t, err)
	require.Equal(t, int64(2), l.Version)
	require.Empty(t, l.Node)
	b, _ := json.Marshal(l.Cluster)
	require.Equal(t, "{}", string(b))
}
