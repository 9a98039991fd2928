package scheduler_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// closedAddr returns a 127.0.0.1 address nothing listens on: connections
// to it are refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Stop does not wait out the shutdown timeout while a job retries requests
// to a peer that refuses connections: the run gets a short grace for its
// final checkpoint, then its requests are cancelled and the job goes back
// to pending for another node.
func TestStopWithUnreachablePeer(t *testing.T) {
	cfg := testConfig()
	cfg.ShutdownTimeout = time.Minute // far beyond the test's own bound below
	c := newCluster(t, 1, replicator.EngineDefault{}, cfg)
	peer := "http://" + closedAddr(t)
	c.PutDoc("_replicator", "d", repDoc(peer+"/src", peer+"/tgt", true))
	c.WaitDocState("_replicator", "d", replicator.StateRunning)

	stopped := make(chan struct{})
	go func() {
		c.Nodes[0].Stop()
		close(stopped)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("Stop still waiting after 30 s with a 1 min shutdown timeout")
	}
	d := c.DocState("_replicator", "d")
	require.Equal(t, replicator.StatePending, d.State)
	_, st := c.JobSTime(c.DocJobID("_replicator", "d"))
	require.Equal(t, fdbjobs.Pending, st)
}
