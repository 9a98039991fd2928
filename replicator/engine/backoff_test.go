package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/stretchr/testify/require"
)

// TestMaxBackoff checks that a peer answering nothing but 429 ends the run
// with ErrMaxBackoff once the shared limiter reaches its ceiling.
func TestMaxBackoff(t *testing.T) {
	t.Parallel()
	srv := couchtest.StartPouchDB(t)
	srv.CreateDB(t, "src")
	srv.AddDocs(t, "src", 0, 10)
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{Seed: 1, Rate429: 1})
	limiter, err := couch.NewRateLimiter(couch.RateLimiterConfig{MaxInterval: 200 * time.Millisecond, MinUpdateInterval: time.Millisecond})
	require.NoError(t, err)
	rep := engine.Replication{Source: endpoint(t, srv.DBURL("src")), Target: endpoint(t, proxy.URL()+"/tgt")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = engine.Start(ctx, rep, engine.Options{ServerUUID: testUUID, Limiter: limiter}).Wait()
	require.ErrorIs(t, err, engine.ErrMaxBackoff)
}
