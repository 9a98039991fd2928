package scheduler_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// C1 injected below the parser: job data whose tunables would exhaust the
// node (written by an older version, or by hand) fails its own job with
// the bound it breaks, before anything is allocated; the node runs the
// next job as usual.
func TestOversizedJobFailsAlone(t *testing.T) {
	eng := simengine.New()
	c := newCluster(t, 1, eng, testConfig())
	c.PutDoc("_replicator", "ok", repDoc("http://h/ok", "http://h/t", false))
	c.WaitDocState("_replicator", "ok", replicator.StateCompleted)

	spec, err := replicator.ParseSpec([]byte(`{"source":"http://h/dos","target":"http://h/t"}`))
	require.NoError(t, err)
	spec.WorkerProcesses = 100_000_000
	ctx := context.Background()
	u, err := c.Store.ReadRegisteredDB(ctx, "_replicator")
	require.NoError(t, err)
	jobID := replicator.DocJobID(u, "dos")
	_, err = c.DB.Transact(ctx, func(tr kv.Transaction) (any, error) {
		d := &replicator.JobData{Rep: spec, DBName: "_replicator", DBUUID: u, DocID: "dos", State: replicator.StatePending}
		return nil, c.Store.AddJob(ctx, tr, jobID, nil, d, 0, c.Config.JobTimeout)
	})
	require.NoError(t, err)

	d := c.WaitDocState("_replicator", "dos", replicator.StateFailed)
	require.Contains(t, string(d.Info), "`worker_processes` must be at most 64")
	require.Zero(t, eng.Starts("http://h/dos/"), "the engine never saw it")
	c.PutDoc("_replicator", "after", repDoc("http://h/after", "http://h/t", false))
	c.WaitDocState("_replicator", "after", replicator.StateCompleted)
}

// A panic in one job's run is contained to that job: it crashes with
// internal_error and the panic as its reason, and the node's other jobs
// run and complete.
func TestPanickingJobCrashesAlone(t *testing.T) {
	eng := simengine.New()
	eng.SetPanic("http://h/boom/", "injected fault")
	c := newCluster(t, 1, eng, testConfig())
	c.PutDoc("_replicator", "boom", repDoc("http://h/boom", "http://h/t", true))
	c.PutDoc("_replicator", "ok", repDoc("http://h/ok", "http://h/t", false))

	d := c.WaitDocState("_replicator", "boom", replicator.StateCrashing)
	require.Contains(t, string(d.Info), "internal_error")
	require.Contains(t, string(d.Info), "injected fault")
	c.WaitDocState("_replicator", "ok", replicator.StateCompleted)
	c.PutDoc("_replicator", "after", repDoc("http://h/after", "http://h/t", false))
	c.WaitDocState("_replicator", "after", replicator.StateCompleted)
}

// panicEngine is the simulated engine whose runs panic at their start,
// signalling their source first.
type panicEngine struct {
	*simengine.Engine
	starting *testsignal.Signal[string]
}

func (e panicEngine) Start(_ context.Context, rep engine.Replication, _ engine.Options) replicator.Run {
	e.starting.Signal(rep.Source.URL.String())
	panic("injected fault")
}

// gateWriter is a log writer that holds the line containing msg until
// open is closed.
type gateWriter struct {
	msg  string
	open chan struct{}
}

func (g gateWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(g.msg)) {
		<-g.open
	}
	return len(p), nil
}

// A job that panics while the interval step applies a new configuration
// is contained as any other: the panic's log line and its crash read
// nothing the step writes (the node's configuration is the step's, under
// the node's lock). Under -race, the step's write is made while the
// panicking worker logs.
func TestPanicWhileConfigChanges(t *testing.T) {
	cfg := testConfig()
	// Nothing else reads the node's configuration meanwhile: no
	// acceptor waits (the job fills the node), no interval step but the
	// test's, no progress tick.
	cfg.MaxJobs, cfg.Interval, cfg.ProgressInterval = 1, time.Hour, time.Hour
	logs := gateWriter{msg: "job panicked", open: make(chan struct{})}
	l := zerolog.New(logs)
	cfg.Logger = &l
	eng := panicEngine{Engine: simengine.New(), starting: &testsignal.Signal[string]{}}
	eng.starting.Init()
	c := newCluster(t, 1, eng, cfg)
	var once sync.Once
	release := func() { once.Do(func() { close(logs.open) }) }
	t.Cleanup(release) // before the node stops
	c.PutDoc("_replicator", "boom", repDoc("http://h/boom", "http://h/t", true))
	testutil.Wait(t, eng.starting)
	n := c.Nodes[0]
	next := n.Config()
	next.MaxChurn++
	require.NoError(t, n.SetConfig(next))
	rescheduleNow(t, c, 0)
	require.Equal(t, next.MaxChurn, n.Config().MaxChurn)
	release()
	d := c.WaitDocState("_replicator", "boom", replicator.StateCrashing)
	require.Contains(t, string(d.Info), "injected fault")
}
