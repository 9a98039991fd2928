package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
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
	// Its worker gives the slot back once the exact check after the park
	// answered.
	testutil.WaitUntil(t, &c.Nodes[0].TestSignals.Rescheduled, "a parked job holds no slot",
		func(int64) bool { return c.Nodes[0].Stats().Running == 0 })
	rescheduleNow(t, c, 0)
	require.Contains(t, c.Nodes[0].Metrics().Prometheus(), "couchdb_couch_replicator_jobs_parked 1\n", "the parked gauge")

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

	// A change, and the wake its watch makes: the job runs from its
	// checkpoint and, idle again, parks again.
	eng.Change("http://h:5984/idle/")
	c.WaitJob("parked again", id, func(st fdbjobs.State, d *replicator.JobData) bool {
		return parked(st, d) && d.Parked.Through == "1"
	})
	require.Equal(t, 2, eng.Starts("http://h:5984/idle/"))
	d, _, err = c.Store.Job(context.Background(), nil, id)
	require.NoError(t, err)
	require.Positive(t, d.LastWoken)
	require.Contains(t, d.WakeCause, "its source changed")
	doc = c.DocState("_replicator", "idle")
	require.Contains(t, string(doc.Info), `"last_woken":{"at":`)

	// A wake wakes a parked job once.
	woke, err := c.Store.WakeJob(context.Background(), c.DB, id, "again", time.Now(), func(*replicator.JobData) int64 { return 1 << 50 })
	require.NoError(t, err)
	require.True(t, woke)
	woke, err = c.Store.WakeJob(context.Background(), c.DB, id, "once more", time.Now(), func(*replicator.JobData) int64 { return 1 << 50 })
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

// watchOf returns the state and data of group's watch job.
func watchOf(t *testing.T, c *replicatortest.Cluster, group string) (fdbjobs.State, *replicator.WatchData) {
	t.Helper()
	st, raw, err := c.Jobs.Job(context.Background(), nil, replicator.WatchType, replicator.WatchJobID(group))
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return fdbjobs.NotFound, nil
	}
	require.NoError(t, err)
	wd, err := replicator.DecodeWatchData(raw)
	require.NoError(t, err)
	return st, wd
}

// woken is a WaitJob condition: the job woke for a cause that contains
// cause, and has run since.
func wokenBy(cause string) func(fdbjobs.State, *replicator.JobData) bool {
	return func(_ fdbjobs.State, d *replicator.JobData) bool {
		return d != nil && strings.Contains(d.WakeCause, cause) && d.LastStart >= d.LastWoken
	}
}

// The parked jobs of one source server and user share one watch, which
// follows the server's _db_updates feed: a change to one source database
// wakes its jobs, and only them; once its group has no parked job, the
// watch ends.
func TestWatchFollowsDBUpdates(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter = 100 * time.Millisecond
	c, eng := simCluster(t, 1, cfg, 20*time.Millisecond, 0)
	c.PutDoc("_replicator", "a", repDoc("http://h/a", "http://h/t", true))
	c.PutDoc("_replicator", "b", repDoc("http://h/b", "http://h/t", true))
	a, b := c.DocJobID("_replicator", "a"), c.DocJobID("_replicator", "b")
	c.WaitJob("a parked", a, parked)
	c.WaitJob("b parked", b, parked)
	testutil.Eventually(t, "the watch follows _db_updates", func() bool {
		st, wd := watchOf(t, c, "http://h/")
		return st == fdbjobs.Running && wd.Mode == replicator.WatchDBUpdates && wd.Since != ""
	})

	eng.Change("http://h/a/")
	c.WaitJob("a woken by the feed", a, wokenBy("_db_updates"))
	c.WaitJob("a parked again", a, func(st fdbjobs.State, d *replicator.JobData) bool {
		return parked(st, d) && d.Parked.Through == "1"
	})
	d, st, err := c.Store.Job(context.Background(), nil, b)
	require.NoError(t, err)
	require.True(t, parked(st, d), "b's source did not change")
	require.Zero(t, d.LastWoken)

	c.PutDoc("_replicator", "a", nil)
	c.PutDoc("_replicator", "b", nil)
	testutil.Eventually(t, "the watch ended", func() bool {
		st, _ := watchOf(t, c, "http://h/")
		return st == fdbjobs.Finished
	})
}

// A server that refuses _db_updates (or has none): its idle replications
// keep their slots while no job waits for one, as in CouchDB (a poll
// would delay their changes); once so many wait that rotation would keep
// them out for longer than a poll cycle, they park and are polled: each
// parked job's exact check in turn, every WatchPollInterval; the watch
// says why.
func TestWatchPollsWithoutDBUpdates(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter, cfg.ParkWhenWaitingAfter, cfg.WatchPollInterval = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	c, eng := simCluster(t, 1, cfg, 20*time.Millisecond, 0)
	eng.SetDBUpdates("http://p/", fmt.Errorf("%w: http://p/_db_updates answered 401: the credentials are refused, or are not a server admin's", engine.ErrUnauthorized))
	c.PutDoc("_replicator", "a", repDoc("http://p/a", "http://p/t", true))
	c.PutDoc("_replicator", "b", repDoc("http://p/b", "http://p/t", true))
	a := c.DocJobID("_replicator", "a")
	c.WaitJob("a running", a, runningOn(c.Nodes[0].Config().NodeName))
	// Many times ParkAfter and ParkWhenWaitingAfter, and the node has
	// asked the server for its feed: nothing waits, so nothing parks.
	c.WaitIntervals(0, 25)
	for _, doc := range []string{"a", "b"} {
		require.Equal(t, replicator.StateRunning, c.DocState("_replicator", doc).State, "%s keeps its slot", doc)
	}
	_, _, running, _ := eng.Stats()
	require.Equal(t, 2, running, "both still run")

	// More jobs than slots (testConfig: 4) wait: enough that a poll cycle
	// (50 ms) is no slower than their turns (ceil(waiting / 4) × 40 ms).
	for i := range 10 {
		c.PutDoc("_replicator", fmt.Sprintf("w%d", i), repDoc(fmt.Sprintf("http://p/w%d", i), "http://p/t", true))
	}
	// Which of them park depends on the order they idle in, and a park
	// may fail under injected storage faults (the job then runs again
	// and rotates): follow the first one that parks.
	docs := []string{"a", "b"}
	for i := range 10 {
		docs = append(docs, fmt.Sprintf("w%d", i))
	}
	var doc string
	testutil.Eventually(t, "a replication parked", func() bool {
		for _, d := range docs {
			x, st, err := c.Store.Job(context.Background(), nil, c.DocJobID("_replicator", d))
			if err == nil && parked(st, x) {
				doc = d
				return true
			}
		}
		return false
	})
	testutil.Eventually(t, "the watch polls, and says why", func() bool {
		_, wd := watchOf(t, c, "http://p/")
		return wd != nil && wd.Mode == replicator.WatchPoll && strings.Contains(wd.Reason, "401")
	})
	job, err := c.Plane.SchedulerDoc(context.Background(), "_replicator", doc)
	require.NoError(t, err)
	require.Contains(t, string(job.Info), `"watch":{"mode":"poll","reason":"`, "the view of a parked job says how its source is watched")
	// The change wakes it: by the watch's poll or, when it lands between
	// the park's commit and the parked worker's own look at its source
	// right after (park.go), by that look; either way without _db_updates.
	eng.Change("http://p/" + doc + "/")
	byPoll, asParked := wokenBy("poll"), wokenBy("its source changed as it parked")
	c.WaitJob(doc+" woken by a poll", c.DocJobID("_replicator", doc), func(st fdbjobs.State, d *replicator.JobData) bool {
		return byPoll(st, d) || asParked(st, d)
	})
}

// behindEngine is the simulated engine whose runs from sources named
// ".../behind…" never catch up.
type behindEngine struct{ *simengine.Engine }

func (e behindEngine) Start(ctx context.Context, rep engine.Replication, opts engine.Options) replicator.Run {
	r := e.Engine.Start(ctx, rep, opts)
	if strings.Contains(rep.Source.URL.Path, "/behind") {
		return behindRun{r}
	}
	return r
}

type behindRun struct{ replicator.Run }

func (behindRun) Sync() engine.Sync { return engine.Sync{} }

// With more jobs than slots, a job that rotation stops while it is caught
// up parks at once, however long ParkAfter is, where its source's server
// gives a _db_updates feed: back in the queue it would only take a slot
// again to find nothing to copy. One that is behind goes back to the
// queue and keeps its turns. (Until its node has asked the server for its
// feed, a caught-up job rotation stops goes back to the queue too.)
func TestRotationParksCaughtUpJobs(t *testing.T) {
	cfg := testConfig()
	cfg.MaxJobs, cfg.MaxChurn, cfg.ParkAfter = 1, 1, time.Hour
	cfg.ParkWhenWaitingAfter = time.Hour // rotation alone parks here
	eng := simengine.New()
	eng.CheckpointEvery = 20 * time.Millisecond
	eng.Started.Init()
	c := newCluster(t, 1, behindEngine{eng}, cfg)
	c.PutDoc("_replicator", "behind", repDoc("http://h/behind", "http://h/t", true))
	for i := range 3 {
		c.PutDoc("_replicator", fmt.Sprintf("idle%d", i), repDoc(fmt.Sprintf("http://h/idle%d", i), "http://h/t", true))
	}
	for i := range 3 {
		id := c.DocJobID("_replicator", fmt.Sprintf("idle%d", i))
		c.WaitJob("parked by rotation", id, parked)
		d, _, err := c.Store.Job(context.Background(), nil, id)
		require.NoError(t, err)
		require.Equal(t, "parked: caught up when rotation stopped it", d.History[0].Reason)
	}
	// Parked, a job is not run again.
	starts := make([]int, 3)
	for i := range 3 {
		starts[i] = eng.Starts(fmt.Sprintf("http://h/idle%d/", i))
	}
	c.WaitIntervals(0, 10)
	for i := range 3 {
		require.Equal(t, starts[i], eng.Starts(fmt.Sprintf("http://h/idle%d/", i)), "a parked job is not run again")
	}
	// The job that is behind holds the only slot: nothing else waits.
	id := c.DocJobID("_replicator", "behind")
	c.WaitJob("the job behind runs", id, runningOn(c.Nodes[0].Config().NodeName))
	d, _, err := c.Store.Job(context.Background(), nil, id)
	require.NoError(t, err)
	require.Nil(t, d.Parked)
}

// A node follows at most MaxWatches watches at once: with the parked
// replications of three source servers (three watch groups) and
// MaxWatches 1, one watch runs and the other two wait, pending, interval
// after interval. A MaxWatches raised with SetConfig applies at the next
// interval step, and the waiting watches run.
func TestMaxWatches(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter, cfg.MaxWatches = 100*time.Millisecond, 1
	c, _ := simCluster(t, 1, cfg, 20*time.Millisecond, 0)
	n := c.Nodes[0]
	groups := []string{"http://h1/", "http://h2/", "http://h3/"}
	for i, g := range groups {
		c.PutDoc("_replicator", fmt.Sprint(i), repDoc(g+"src", g+"tgt", true))
	}
	for i := range groups {
		c.WaitJob("parked", c.DocJobID("_replicator", fmt.Sprint(i)), parked)
	}
	following := func() int {
		w := n.Watches()
		return w.DBUpdates + w.Refused + w.Missing + w.Starting
	}
	// states counts the groups' watch jobs in each state.
	states := func() map[fdbjobs.State]int {
		m := map[fdbjobs.State]int{}
		for _, g := range groups {
			st, _ := watchOf(t, c, g)
			m[st]++
		}
		return m
	}
	testutil.Eventually(t, "one watch runs", func() bool { return following() == 1 })
	for range 5 {
		c.WaitIntervals(0, 1)
		require.Equal(t, 1, following(), "the node follows MaxWatches watches")
		require.Equal(t, map[fdbjobs.State]int{fdbjobs.Running: 1, fdbjobs.Pending: 2}, states())
	}

	next := n.Config()
	next.MaxWatches = 3
	require.NoError(t, n.SetConfig(next))
	rescheduleNow(t, c, 0)
	testutil.Eventually(t, "three watches run", func() bool {
		return following() == 3 && states()[fdbjobs.Running] == 3
	})
}

// A replication with follow_purges does not park where its watch would
// poll (a purge adds no change a poll sees): with more jobs waiting than
// TestWatchPollsWithoutDBUpdates needs to park its replications, these
// rotate instead, and none is ever parked.
func TestFollowPurgesParksOnlyWithAFeed(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter, cfg.ParkWhenWaitingAfter, cfg.WatchPollInterval = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	c, eng := simCluster(t, 1, cfg, 20*time.Millisecond, 0)
	eng.SetDBUpdates("http://p/", fmt.Errorf("%w: http://p/_db_updates answered 401: the credentials are refused, or are not a server admin's", engine.ErrUnauthorized))
	var docs []string
	for i := range 12 {
		doc := repDoc(fmt.Sprintf("http://p/f%d", i), "http://p/t", true)
		doc["follow_purges"] = true
		c.PutDoc("_replicator", fmt.Sprintf("f%d", i), doc)
		docs = append(docs, fmt.Sprintf("f%d", i))
	}
	c.WaitJob("f0 running", c.DocJobID("_replicator", "f0"), runningOn(c.Nodes[0].Config().NodeName))
	c.WaitIntervals(0, 25)
	for _, d := range docs {
		x, st, err := c.Store.Job(context.Background(), nil, c.DocJobID("_replicator", d))
		require.NoError(t, err)
		require.False(t, parked(st, x), "%s parked with a polling watch", d)
		require.Nil(t, x.Parked, d)
	}
}
