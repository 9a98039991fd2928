package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/health"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func TestUp(t *testing.T) {
	db, full := kvtest.OpenFullableDisk(t)
	ctx := context.Background()
	status, body := health.Up(ctx, db, health.Self{})
	require.Equal(t, 200, status)
	require.Equal(t, "ok", body["status"])

	full.Store(true)
	_, _ = kv.Transact(ctx, db, func(tr kv.Transaction) (any, error) { tr.Set(kv.Key("k"), []byte("v")); return nil, nil })
	status, body = health.Up(ctx, db, health.Self{})
	require.Equal(t, 507, status)
	require.Equal(t, "storage_full", body["status"])
	require.NotContains(t, body["reason"], "mem/", "no store paths in an unauthenticated reply")
	full.Store(false)
	testutil.Eventually(t, "healthy again", func() bool { s, _ := health.Up(ctx, db, health.Self{}); return s == 200 })

	require.NoError(t, db.Close())
	status, body = health.Up(ctx, db, health.Self{})
	require.Equal(t, 503, status)
	require.Contains(t, []any{"storage_error", "storage_unavailable"}, body["status"])
}

// upRetried asks Up again, at most 20 times, while an injected fault
// (FDBREP_KV_FAULTS) makes the store's probe fail: that request answers 503.
func upRetried(db kv.Database, self health.Self) (int, map[string]any) {
	var status int
	var body map[string]any
	for range 20 {
		if status, body = health.Up(context.Background(), db, self); status == 200 {
			break
		}
	}
	return status, body
}

// The body names the node, its roles and its heartbeat's age, whatever
// the store's state.
func TestUpSaysWhoAnswers(t *testing.T) {
	db := kvtest.NewDB(t)
	self := health.Self{Node: "replication1", Roles: []string{"replication"}, HeartbeatAge: func() time.Duration { return 1500 * time.Millisecond }}
	status, body := upRetried(db, self)
	require.Equal(t, 200, status)
	require.Equal(t, map[string]any{"status": "ok", "node": "replication1", "roles": []string{"replication"}, "heartbeat_age_ms": int64(1500)}, body)

	self.HeartbeatAge = func() time.Duration { return -1 }
	_, body = health.Up(context.Background(), db, self)
	require.NotContains(t, body, "heartbeat_age_ms", "no heartbeat yet")
}

// More adds the node's services' members to the body.
func TestUpMore(t *testing.T) {
	db := kvtest.NewDB(t)
	status, body := upRetried(db, health.Self{Node: "n", More: func() map[string]any { return map[string]any{"watches": 2} }})
	require.Equal(t, 200, status)
	require.Equal(t, 2, body["watches"])
}
