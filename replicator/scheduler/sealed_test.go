package scheduler_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// A node that holds no private key runs no job whose credentials are
// sealed: each crashes with a reason naming the key, the engine never
// sees it, and the node says so once.
func TestNoSealingKey(t *testing.T) {
	pub, _ := testutil.SealKeys(t)
	s, err := seal.LoadPublicKey(pub)
	require.NoError(t, err)
	logs := &testutil.Logs{}
	cfg := testConfig()
	cfg.Sealer, cfg.Logger = s, logs.Logger()
	c, eng := simCluster(t, 1, cfg, 0, 0)
	for _, id := range []string{"a", "b"} {
		c.PutDoc("_replicator", id, repDoc("http://bob:pw@h/"+id, "http://h/t", true))
	}
	for _, id := range []string{"a", "b"} {
		d := c.WaitDocState("_replicator", id, replicator.StateCrashing)
		require.Contains(t, string(d.Info), scheduler.TagSealed)
		require.Contains(t, string(d.Info), s.ID(), "the reason names the key")
		require.Zero(t, eng.Starts("http://h/"+id+"/"))
	}
	line, ok := logs.Find(scheduler.MsgNoSealingKey, nil)
	require.True(t, ok)
	require.Equal(t, s.ID(), line["key_id"])
	require.Equal(t, 1, strings.Count(logs.String(), scheduler.MsgNoSealingKey), "said once")
}
