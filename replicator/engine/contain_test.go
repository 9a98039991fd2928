package engine_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

// Every tunable is refused above its documented maximum, including values
// whose product overflows, and accepted at it.
func TestValidateMaxima(t *testing.T) {
	base := func() engine.Replication {
		return engine.Replication{Source: endpoint(t, "http://127.0.0.1:1/a"), Target: endpoint(t, "http://127.0.0.1:1/b")}
	}
	tests := []struct {
		name string
		set  func(*engine.Replication)
		want string // "" for valid
	}{
		{"worker_processes at max", func(r *engine.Replication) { r.WorkerProcesses = engine.WorkerProcessesMax }, ""},
		{"worker_processes C1", func(r *engine.Replication) { r.WorkerProcesses = 100_000_000 }, "`worker_processes` must be at most 64"},
		{"worker_processes max int", func(r *engine.Replication) { r.WorkerProcesses = math.MaxInt }, "`worker_processes` must be at most"},
		{"worker_batch_size C1", func(r *engine.Replication) { r.WorkerBatchSize = 1_000_000_000 }, "`worker_batch_size` must be at most 10000"},
		{"product overflows", func(r *engine.Replication) { r.WorkerProcesses, r.WorkerBatchSize = 4, 1<<62 }, "`worker_batch_size` must be at most"},
		{"product too large", func(r *engine.Replication) { r.WorkerProcesses, r.WorkerBatchSize = 64, 10_000 }, "`worker_processes` × `worker_batch_size` must be at most 100000"},
		{"product at max", func(r *engine.Replication) { r.WorkerProcesses, r.WorkerBatchSize = 10, 10_000 }, ""},
		{"http_connections", func(r *engine.Replication) { r.HTTPConnections = 1 << 31 }, "`http_connections` must be at most 1000"},
		{"connection_timeout", func(r *engine.Replication) { r.ConnectionTimeout = 2 * time.Hour }, "`connection_timeout` must be at most 3600000"},
		{"retries_per_request", func(r *engine.Replication) { r.RetriesPerRequest = 101 }, "`retries_per_request` must be at most 100"},
		{"checkpoint_interval", func(r *engine.Replication) { r.CheckpointInterval = 61 * time.Minute }, "`checkpoint_interval` must be at most 3600000"},
		{"since_seq", func(r *engine.Replication) {
			r.SinceSeq = []byte(`"` + strings.Repeat("1", engine.SinceSeqMaxBytes) + `"`)
		}, "`since_seq` is larger than 16384 bytes"},
		{"doc_ids", func(r *engine.Replication) { r.DocIDs = make([]string, engine.DocIDsMax+1) }, "`doc_ids` has more than 10000 ids"},
		{"headers", func(r *engine.Replication) {
			r.Source.Headers = http.Header{}
			for i := 0; i <= engine.HeadersMax; i++ {
				r.Source.Headers.Set(fmt.Sprintf("X-H%d", i), "v")
			}
		}, "`source` has more than 64 headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := base()
			tt.set(&rep)
			err := rep.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, engine.ErrInvalidSpec)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// A run that must fail stays alone: handed tunables that would exhaust
// the process (C1 below every parser), it fails with bad_request before it
// allocates anything; with a panic on one of its goroutines (here in the
// checkpoint callback), it ends with internal_error. The process and a
// run beside it go on.
func TestFaultyRunFailsAlone(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 200)
	for _, tc := range []struct {
		name string
		rep  engine.Replication
		opts engine.Options
		want error
	}{
		{"oversized", engine.Replication{WorkerProcesses: 100_000_000}, engine.Options{}, engine.ErrInvalidSpec},
		{"panic", engine.Replication{Continuous: true, CheckpointInterval: 10 * time.Millisecond},
			engine.Options{OnCheckpoint: func(engine.Checkpoint) { panic("injected fault") }}, engine.ErrInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.rep
			bad.CreateTarget = true
			badRun := start(t, srcTo(t, srv, tc.name, bad), tc.opts)
			good := start(t, srcTo(t, srv, tc.name+"-good", engine.Replication{CreateTarget: true}), engine.Options{})
			_, err := badRun.Wait()
			require.ErrorIs(t, err, tc.want)
			res, err := good.Wait()
			require.NoError(t, err)
			require.True(t, res.Completed)
			enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL(tc.name+"-good"))
		})
	}
}
