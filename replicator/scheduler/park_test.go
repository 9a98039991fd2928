package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// parked is a WaitJob condition: the job is parked, pending in the job
// layer.
func parked(st fdbjobs.State, d *replicator.JobData) bool {
	return d != nil && d.State == replicator.StateParked && st == fdbjobs.Pending && d.Parked != nil
}

// A continuous replication that stays caught up with nothing to copy for
// ParkAfter parks: its run stops after its final checkpoint, its slot is
// free, the watch index lists it under its source's group, and the views
// show it running and parked. A wake makes it run again from its
// checkpoint, and idle again, it parks again.
func TestIdleReplicationParks(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter = 150 * time.Millisecond
	c, eng := simCluster(t, 1, cfg, 20*time.Millisecond, 0)
	c.PutDoc("_replicator", "idle", repDoc("http://h:5984/idle", "http://h:5984/t", true))
	id := c.DocJobID("_replicator", "idle")
	c.WaitJob("parked", id, parked)
	require.Equal(t, 1, eng.Starts("http://h:5984/idle/"))
	require.Zero(t, c.Nodes[0].Stats().Running, "a parked job holds no slot")

	d, _, err := c.Store.Job(context.Background(), nil, id)
	require.NoError(t, err)
	require.Equal(t, "0", d.Parked.Through)
	require.Equal(t, "http://h:5984/", d.Parked.Group)
	require.Equal(t, "idle", d.Parked.SourceDB)
	require.Contains(t, d.History[0].Reason, "parked: caught up, no change to copy for")
	page, err := c.Store.ParkedPage(context.Background(), c.DB, "http://h:5984/", "", replicator.ParkedRef{}, 10)
	require.NoError(t, err)
	require.Equal(t, []replicator.ParkedRef{{SourceDB: "idle", JobID: id}}, page)

	doc := c.DocState("_replicator", "idle")
	require.Equal(t, replicator.StateRunning, doc.State, "a parked replication shows running")
	require.Nil(t, doc.Node)
	var info struct {
		api.SyncInfo
		Parked *api.ParkInfo `json:"parked"`
	}
	require.NoError(t, json.Unmarshal(doc.Info, &info))
	require.True(t, info.CaughtUp)
	require.NotNil(t, info.CaughtUpSince)
	require.NotNil(t, info.Parked)
	require.Equal(t, "0", info.Parked.Through)

	// A change, and the wake its watch makes.
	eng.Change("http://h:5984/idle/")
	woke, err := c.Store.WakeJob(context.Background(), c.DB, id, "its source changed", time.Now(),
		func(*replicator.JobData) int64 { return 0 })
	require.NoError(t, err)
	require.True(t, woke)
	waitStarts(t, eng, "the woken run", func() bool { return eng.Starts("http://h:5984/idle/") == 2 })
	c.WaitJob("parked again", id, func(st fdbjobs.State, d *replicator.JobData) bool {
		return parked(st, d) && d.Parked.Through == "1"
	})
	d, _, err = c.Store.Job(context.Background(), nil, id)
	require.NoError(t, err)
	require.Equal(t, "its source changed", d.WakeCause)
	require.Positive(t, d.LastWoken)
	woke, err = c.Store.WakeJob(context.Background(), c.DB, id, "again", time.Now(), func(*replicator.JobData) int64 { return 0 })
	require.NoError(t, err)
	require.True(t, woke)
	woke, err = c.Store.WakeJob(context.Background(), c.DB, id, "once more", time.Now(), func(*replicator.JobData) int64 { return 0 })
	require.NoError(t, err)
	require.False(t, woke, "a job that is not parked is not woken")
}

// changingEngine is the simulated engine whose sources change once more
// as each run stops, after its final checkpoint: the change a park must
// not miss.
type changingEngine struct{ *simengine.Engine }

func (e changingEngine) Start(ctx context.Context, rep engine.Replication, opts engine.Options) replicator.Run {
	return changingRun{Run: e.Engine.Start(ctx, rep, opts), e: e.Engine, src: rep.Source.URL.String()}
}

type changingRun struct {
	replicator.Run
	e   *simengine.Engine
	src string
}

func (r changingRun) Stop(ctx context.Context) error {
	err := r.Run.Stop(ctx)
	r.e.Change(r.src)
	return err
}

// A change that comes between a run's last read and its park is found by
// the exact check after the park: the job wakes at once and copies it.
func TestChangeAsItParksWakesIt(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter = 100 * time.Millisecond
	eng := simengine.New()
	eng.CheckpointEvery = 20 * time.Millisecond
	eng.Started.Init()
	c := newCluster(t, 1, changingEngine{eng}, cfg)
	c.PutDoc("_replicator", "busy", repDoc("http://h/busy", "http://h/t", true))
	id := c.DocJobID("_replicator", "busy")
	c.WaitJob("woken by the check after its park", id, func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && d.WakeCause == "its source changed as it parked"
	})
	waitStarts(t, eng, "the woken run", func() bool { return eng.Starts("http://h/busy/") >= 2 })
}

// A parked job that nothing wakes runs again at its sweep.
func TestParkedJobRunsAtItsSweep(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter, cfg.ParkSweep = 100*time.Millisecond, 200*time.Millisecond
	c, eng := simCluster(t, 1, cfg, 20*time.Millisecond, 0)
	c.PutDoc("_replicator", "quiet", repDoc("http://h/quiet", "http://h/t", true))
	c.WaitJob("parked", c.DocJobID("_replicator", "quiet"), parked)
	waitStarts(t, eng, "the sweep's run", func() bool { return eng.Starts("http://h/quiet/") >= 2 })
}
