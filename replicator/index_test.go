package replicator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// indexSeedEnv replays TestIndexModel (and TestIndexBackfillAddsOwners)
// with a given seed.
const indexSeedEnv = "FDBREP_INDEX_SEED"

// modelJob is what the model expects of one job.
type modelJob struct {
	st          fdbjobs.State
	view, node  string // view state, node when running
	dbUUID, doc string
	lastUpdated int64
}

// indexModel drives rep_jobs jobs through every transition the replicator
// makes, through the Store's methods, on a store with injected faults, and
// keeps what it expects of each job.
type indexModel struct {
	t     *testing.T
	ctx   context.Context
	rng   *rand.Rand
	db    kv.Database
	s     *Store
	jobs  map[string]*modelJob
	held  map[string]*fdbjobs.Job // accepted jobs, by id
	now   int64
	dbs   map[string]string // registered databases: name -> uuid
	gone  map[string]bool   // retired database uuids whose jobs may remain
	steps map[string]int    // operations that ran, by name
}

var (
	modelDBs    = []string{"_replicator", "a/_replicator", "b/_replicator"}
	modelNodes  = []string{"n1", "n2"}
	modelOwners = []string{"", "u", "v"} // "": a document without an owner
)

func newIndexModel(t *testing.T, seed uint64) *indexModel {
	t.Helper()
	db := kvtest.NewDB(t)
	if _, faulty := faultkv.StatsOf(db); !faulty {
		db = kvtest.WithFaults(t, db, faultkv.DefaultOptions(seed))
	}
	jobs, err := fdbjobs.New(db, fdbjobs.Config{})
	require.NoError(t, err)
	m := &indexModel{t: t, ctx: context.Background(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)), db: db,
		s: NewStore(db, jobs, subspace.Sub("model")), jobs: map[string]*modelJob{}, held: map[string]*fdbjobs.Job{},
		now: 1_000_000, dbs: map[string]string{}, gone: map[string]bool{}, steps: map[string]int{}}
	_, err = m.s.Setup(m.ctx, time.Hour, 0)
	require.NoError(t, err)
	return m
}

func (m *indexModel) tx(f func(kv.Transaction) error) {
	m.t.Helper()
	_, err := m.db.Transact(m.ctx, func(tr kv.Transaction) (any, error) { return nil, f(tr) })
	require.NoError(m.t, err)
}

func (m *indexModel) pick(ids []string) string { return ids[m.rng.IntN(len(ids))] }

// ids returns the model's job ids that satisfy cond, sorted.
func (m *indexModel) ids(cond func(*modelJob) bool) []string {
	var out []string
	for id, j := range m.jobs {
		if cond(j) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (m *indexModel) heldIDs() []string {
	out := make([]string, 0, len(m.held))
	for id := range m.held {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// addDoc writes a document's job (a tenth of them did not parse: failed
// from the start), as DocWritten does.
func (m *indexModel) addDoc() {
	name := m.pick(modelDBs)
	doc := fmt.Sprintf("d%02d", m.rng.IntN(30))
	bad := m.rng.IntN(10) == 0
	owner := m.pick(modelOwners) // a rewrite may change the owner
	var id, uuid string
	m.tx(func(tr kv.Transaction) error {
		var err error
		if uuid, err = m.s.DBUUID(tr, name); err != nil {
			return err
		}
		id = DocJobID(uuid, doc)
		old, _, err := m.s.Job(m.ctx, tr, id)
		if err != nil {
			return err
		}
		d := &JobData{DBName: name, DBUUID: uuid, DocID: doc, DocOwner: owner, State: StatePending, LastUpdated: m.now}
		if bad {
			d.State = StateFailed
		}
		return m.s.AddJob(m.ctx, tr, id, old, d, 0, time.Hour)
	})
	m.dbs[name] = uuid
	view := StatePending
	if bad {
		view = StateFailed
	}
	delete(m.held, id)
	m.jobs[id] = &modelJob{st: fdbjobs.Pending, view: view, dbUUID: uuid, doc: doc, lastUpdated: m.now}
}

// addTransient adds a POST /_replicate job.
func (m *indexModel) addTransient() {
	id := fmt.Sprintf("t%02d", m.rng.IntN(10))
	user := m.pick(modelOwners[1:])
	m.tx(func(tr kv.Transaction) error {
		old, _, err := m.s.Job(m.ctx, tr, id)
		if err != nil {
			return err
		}
		return m.s.AddJob(m.ctx, tr, id, old, &JobData{RepUser: user, State: StatePending, LastUpdated: m.now}, 0, time.Hour)
	})
	delete(m.held, id)
	m.jobs[id] = &modelJob{st: fdbjobs.Pending, view: StatePending, lastUpdated: m.now}
}

// start accepts up to three jobs and marks them running on a node, as
// initJob does (with a replication id, which moves the job in
// _scheduler/jobs); a document that did not parse is failed instead.
func (m *indexModel) start() {
	jobs, err := m.s.jobs.AcceptBatch(m.ctx, JobType, 1+m.rng.IntN(3), fdbjobs.AcceptOptions{})
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return
	}
	require.NoError(m.t, err)
	node := m.pick(modelNodes)
	for _, job := range jobs {
		d, err := DecodeJobData(job.Data)
		require.NoError(m.t, err)
		j := m.jobs[job.ID]
		if d.State == StateFailed {
			m.finish(job, d, StateFailed)
			continue
		}
		d.State, d.Node, d.RepID, d.LastUpdated = StateRunning, node, "rep-"+job.ID, m.now
		m.held[job.ID] = job
		if m.write(job, func(tr kv.Transaction) error { return m.s.UpdateJob(m.ctx, tr, job, d) }) {
			j.st, j.view, j.node = fdbjobs.Running, StateRunning, node
		}
	}
}

// data returns a held job's data as its worker last wrote it.
func (m *indexModel) data(job *fdbjobs.Job) *JobData {
	d, err := DecodeJobData(job.Data)
	require.NoError(m.t, err)
	d.LastUpdated = m.now
	return d
}

// write runs a worker's write for a held job; false when the job was
// taken from it (ErrHalt: removed or re-enqueued), then it is no longer
// held, or when its database was deleted: then the worker removes it.
func (m *indexModel) write(job *fdbjobs.Job, f func(kv.Transaction) error) bool {
	_, err := m.db.Transact(m.ctx, func(tr kv.Transaction) (any, error) { return nil, f(tr) })
	if errors.Is(err, ErrDBDeleted) {
		m.steps["orphan halted"]++
		m.remove(job.ID)
	}
	if errors.Is(err, fdbjobs.ErrHalt) {
		delete(m.held, job.ID)
		return false
	}
	require.NoError(m.t, err)
	return true
}

func (m *indexModel) heartbeat(job *fdbjobs.Job) {
	d := m.data(job)
	m.write(job, func(tr kv.Transaction) error { return m.s.UpdateJob(m.ctx, tr, job, d) })
}

// finish ends a held job completed or failed, as complete and failTx do.
func (m *indexModel) finish(job *fdbjobs.Job, d *JobData, state string) {
	d.State, d.Node, d.LastUpdated = state, "", m.now
	if !m.write(job, func(tr kv.Transaction) error { return m.s.FinishJob(m.ctx, tr, job, d) }) {
		return
	}
	delete(m.held, job.ID)
	j := m.jobs[job.ID]
	j.st, j.view, j.node, j.lastUpdated = fdbjobs.Finished, state, "", m.now
}

// resubmit stops a held job, pending again (reschedule) or crashing
// (crashTx).
func (m *indexModel) resubmit(job *fdbjobs.Job, state string) {
	d := m.data(job)
	d.State, d.Node = state, ""
	stime := m.now
	if state == StateCrashing {
		stime += 60_000
	}
	if !m.write(job, func(tr kv.Transaction) error { return m.s.ResubmitJob(m.ctx, tr, job, d, stime) }) {
		return
	}
	delete(m.held, job.ID)
	j := m.jobs[job.ID]
	j.st, j.view, j.node = fdbjobs.Pending, state, ""
}

// park parks a held job (a continuous job caught up and idle), pending at
// its sweep time, in the watch group of its source.
func (m *indexModel) park(job *fdbjobs.Job) {
	d := m.data(job)
	d.State, d.Node = StateParked, ""
	d.Parked = &ParkInfo{Since: m.now, Through: "7", Group: m.pick([]string{"http://a/", "http://b/ user=u"}),
		SourceDB: m.pick([]string{"s1", "s2"}), SweepAt: m.now + 3_600_000}
	if !m.write(job, func(tr kv.Transaction) error { return m.s.ResubmitJob(m.ctx, tr, job, d, d.Parked.SweepAt) }) {
		return
	}
	delete(m.held, job.ID)
	j := m.jobs[job.ID]
	j.st, j.view, j.node = fdbjobs.Pending, StateParked, ""
}

// wake wakes a job (WakeJob): a parked one is pending at once, any other
// is left alone; a parked job comes first in its group's watch pages.
func (m *indexModel) wake(id string) {
	j := m.jobs[id]
	if j.view == StateParked {
		d, _, err := m.s.Job(m.ctx, nil, id)
		require.NoError(m.t, err)
		page, err := m.s.ParkedPage(m.ctx, m.db, d.Parked.Group, d.Parked.SourceDB, ParkedRef{}, 100)
		require.NoError(m.t, err)
		require.Contains(m.t, page, ParkedRef{SourceDB: d.Parked.SourceDB, JobID: id}, "a parked job is in its watch group")
	}
	woke, err := m.s.WakeJob(m.ctx, m.db, id, "test", time.UnixMilli(m.now), func(*JobData) int64 { return m.now })
	require.NoError(m.t, err)
	require.Equal(m.t, j.view == StateParked, woke, "job %s in %s", id, j.view)
	if woke {
		j.view = StatePending
	}
}

// reenqueue takes one running job back (Node.takeBack); its worker keeps
// the stale hold and is fenced off at its next write.
func (m *indexModel) reenqueue(id string) {
	ok, err := m.s.jobs.Reenqueue(m.ctx, nil, JobType, id)
	require.NoError(m.t, err)
	require.True(m.t, ok, "job %s was running", id)
	j := m.jobs[id]
	j.st, j.view, j.node = fdbjobs.Pending, StatePending, ""
}

// monitor runs two activity monitor cycles: every running job that sent
// no heartbeat in between is re-enqueued (a node died).
func (m *indexModel) monitor() {
	mon := m.s.jobs.NewActivityMonitor(JobType)
	_, _, err := mon.Check(m.ctx)
	require.NoError(m.t, err)
	_, _, err = mon.Check(m.ctx)
	require.NoError(m.t, err)
	for _, j := range m.jobs {
		if j.st == fdbjobs.Running {
			j.st, j.view, j.node = fdbjobs.Pending, StatePending, ""
		}
	}
}

// remove removes a job as DocDeleted or a cancel does.
func (m *indexModel) remove(id string) {
	m.tx(func(tr kv.Transaction) error {
		d, _, err := m.s.Job(m.ctx, tr, id)
		if err != nil || d == nil {
			return err
		}
		return m.s.RemoveJob(m.ctx, tr, id, d)
	})
	delete(m.jobs, id)
}

// retire deletes a database (DBDeleted) or re-creates it under a new
// identity without a deletion first (DBCreated); the nodes' cleanup
// removes its jobs.
func (m *indexModel) retire(name string, recreate bool) {
	old := m.dbs[name]
	fresh := NewDBUUID()
	m.tx(func(tr kv.Transaction) error {
		if recreate {
			return m.s.RegisterDB(tr, name, fresh)
		}
		_, err := m.s.UnregisterDB(tr, name)
		return err
	})
	delete(m.dbs, name)
	if recreate {
		m.dbs[name] = fresh
	}
	if old != "" {
		m.gone[old] = true
	}
}

// cleanup is a node's interval cleanup: deleted databases' jobs, and
// transient jobs finished at or before a random time.
func (m *indexModel) cleanup() {
	_, err := m.s.retention.RemoveDeletedDBJobs(m.ctx, m.pick(modelNodes), time.Now, time.Minute, 3)
	require.NoError(m.t, err)
	// An older node's expiry keys (13): one of a finished transient job,
	// in place of its mark, and a stale one; MoveExpiryKeys hands the
	// first to the job layer and drops the second. And a mark an earlier
	// finish left (an older node's write that did not clear it): the
	// sweeper clears it and keeps the job until its own mark is due.
	if ids := m.ids(func(j *modelJob) bool { return j.dbUUID == "" && j.st == fdbjobs.Finished }); len(ids) > 0 {
		id := m.pick(ids)
		at := m.jobs[id].lastUpdated
		m.tx(func(tr kv.Transaction) error {
			m.s.jobs.UnretainTx(tr, JobType, id, time.UnixMilli(at))
			tr.Set(m.s.k.expiryKey(at, id), nil)
			tr.Set(m.s.k.expiryKey(at-1, id), nil)
			return nil
		})
		m.steps["expiry keys moved"]++
		id = m.pick(ids)
		m.tx(func(tr kv.Transaction) error {
			m.s.jobs.RetainTx(tr, JobType, id, time.UnixMilli(m.jobs[id].lastUpdated-int64(1+m.rng.IntN(40))))
			return nil
		})
		m.steps["stale mark"]++
	}
	_, err = m.s.retention.MoveExpiryKeys(m.ctx, 2)
	require.NoError(m.t, err)
	before := m.now - int64(m.rng.IntN(50))
	_, err = m.s.jobs.SweepRetained(m.ctx, JobType, time.UnixMilli(before), fdbjobs.Sweep{FinishedAt: finishedAt, OnRemove: m.s.onRemove})
	require.NoError(m.t, err)
	for id, j := range m.jobs {
		if m.gone[j.dbUUID] || j.dbUUID == "" && j.st == fdbjobs.Finished && j.lastUpdated <= before {
			delete(m.jobs, id)
		}
	}
	for id := range m.held {
		if m.jobs[id] == nil {
			delete(m.held, id)
		}
	}
	m.gone = map[string]bool{}
}

// step runs one random operation.
func (m *indexModel) step() {
	m.now += int64(1 + m.rng.IntN(10))
	held := m.heldIDs()
	running := m.ids(func(j *modelJob) bool { return j.st == fdbjobs.Running })
	all := m.ids(func(*modelJob) bool { return true })
	type op struct {
		name string
		ok   bool
		run  func()
	}
	// The rare ones (monitor, database delete and re-create, cleanup)
	// run on one pick in 32 (one of 16 kinds, then a coin): at least 12
	// times each, on average, in TestIndexModel's 400 steps, whose check
	// that every kind ran then fails for about one seed in 10^5.
	ops := []op{
		{"add doc", true, m.addDoc},
		{"add transient", true, m.addTransient},
		{"start", true, m.start},
		{"heartbeat", len(held) > 0, func() { m.heartbeat(m.held[m.pick(held)]) }},
		{"complete", len(held) > 0, func() { job := m.held[m.pick(held)]; m.finish(job, m.data(job), StateCompleted) }},
		{"fail", len(held) > 0, func() { job := m.held[m.pick(held)]; m.finish(job, m.data(job), StateFailed) }},
		{"reschedule", len(held) > 0, func() { m.resubmit(m.held[m.pick(held)], StatePending) }},
		{"crash", len(held) > 0, func() { m.resubmit(m.held[m.pick(held)], StateCrashing) }},
		{"park", len(held) > 0, func() { m.park(m.held[m.pick(held)]) }},
		{"wake", len(all) > 0, func() { m.wake(m.pick(all)) }},
		{"reenqueue", len(running) > 0, func() { m.reenqueue(m.pick(running)) }},
		{"monitor", m.rng.IntN(2) == 0, m.monitor},
		{"remove", len(all) > 0, func() { m.remove(m.pick(all)) }},
		{"delete db", m.rng.IntN(2) == 0, func() { m.retire(m.pick(modelDBs), false) }},
		{"re-create db", m.rng.IntN(2) == 0, func() { m.retire(m.pick(modelDBs), true) }},
		{"cleanup", m.rng.IntN(2) == 0, m.cleanup},
	}
	for {
		o := ops[m.rng.IntN(len(ops))]
		if o.ok {
			m.steps[o.name]++
			o.run()
			return
		}
	}
}

// TestIndexModel drives jobs through every transition (add, start,
// heartbeat, crash, complete, fail, reschedule, re-enqueue by Reenqueue
// and by the activity monitor, remove, database delete and re-create,
// cleanup) under injected storage faults, and after each step checks
// that the jobs are what the model expects and that the view index is
// exactly what a full fold of the jobs computes, keys and counters, and
// serves the same pages.
func TestIndexModel(t *testing.T) {
	seed := testutil.SeedFrom(t, indexSeedEnv)
	defer func(rows, keys int) { viewRowsPerTx, viewKeysPerTx = rows, keys }(viewRowsPerTx, viewKeysPerTx)
	viewRowsPerTx, viewKeysPerTx = 3, 4 // pages and skips span transactions
	m := newIndexModel(t, seed)
	const steps = 400
	for i := 0; i < steps; i++ {
		m.step()
		m.checkJobs(i)
		m.checkIndex(i)
		if i%10 == 9 {
			m.checkPages(i)
		}
	}
	t.Logf("operations: %v", m.steps)
	for _, name := range []string{"start", "heartbeat", "complete", "fail", "reschedule", "crash", "park", "wake", "reenqueue", "monitor", "remove", "delete db", "re-create db", "cleanup"} {
		require.Positive(t, m.steps[name], "%s never ran", name)
	}
}

// A store indexed by version 1 (entries without owners or watch groups,
// no owner or parked keys) is brought to version 2 by the backfill at
// the next start: the owner keys and counters are what a full fold
// computes, the others unchanged, and the owners' pages right; under
// injected faults.
func TestIndexBackfillAddsOwners(t *testing.T) {
	m := newIndexModel(t, testutil.SeedFrom(t, indexSeedEnv))
	for i := 0; i < 150; i++ {
		m.step()
	}
	m.checkIndex(-1)
	s := m.s
	// Back to version 1.
	entries := m.readKeys(s.k.entries)
	m.tx(func(tr kv.Transaction) error {
		for k, v := range entries {
			e, err := unpackEntry([]byte(v))
			if err != nil {
				return err
			}
			tr.Set(kv.Key(k), tuple.Tuple{e.dbUUID, e.dbName, e.docID, e.state, e.sortID, e.node, e.expires}.Pack())
		}
		tr.ClearRange(subspaceRange(s.k.ownerJobs))
		tr.ClearRange(subspaceRange(s.k.ownerRunning))
		tr.ClearRange(subspaceRange(s.k.root.Sub(keyOwnerCounts)))
		// Version 1 predates parking: no watch-group keys, no parked count.
		tr.ClearRange(subspaceRange(s.k.parked))
		tr.Clear(s.k.parkedCountKey())
		tr.Set(s.k.indexVersionKey(), tuple.Tuple{int64(1)}.Pack())
		return nil
	})
	p, err := s.views.OwnerJobsPage(m.ctx, "u", "", "", 100, 0)
	require.NoError(t, err)
	require.Empty(t, p.Jobs, "version 1 has no owner keys")

	m.s = NewStore(m.db, s.jobs, subspace.Sub("model"))
	require.NoError(t, m.s.buildIndex(m.ctx))
	m.checkIndex(-1)
	m.checkPages(-1)
	v, err := kv.ReadTransact(m.ctx, m.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(s.k.indexVersionKey()).Get() })
	require.NoError(t, err)
	require.Equal(t, tuple.Tuple{int64(indexVersion)}.Pack(), v)
}

// fold reads every job with a full fold.
func (m *indexModel) fold() map[string]PageJob {
	out := map[string]PageJob{}
	require.NoError(m.t, m.s.FoldJobs(m.ctx, func(id string, st fdbjobs.State, d *JobData) error {
		out[id] = PageJob{ID: id, State: st, Data: d}
		return nil
	}))
	return out
}

// checkJobs compares the jobs in the store with the model.
func (m *indexModel) checkJobs(step int) {
	m.t.Helper()
	got := m.fold()
	require.Len(m.t, got, len(m.jobs), "step %d: jobs %v", step, slices.Sorted(func(yield func(string) bool) {
		for id := range got {
			if !yield(id) {
				return
			}
		}
	}))
	for id, want := range m.jobs {
		j, ok := got[id]
		require.True(m.t, ok, "step %d: job %s missing", step, id)
		v := AsSeen(j.State, j.Data)
		require.Equal(m.t, want.st, j.State, "step %d: job %s fdbjobs state", step, id)
		require.Equal(m.t, want.view, v.State, "step %d: job %s view state", step, id)
		require.Equal(m.t, want.node, nodeOf(j.State, j.Data), "step %d: job %s node", step, id)
	}
}

func nodeOf(st fdbjobs.State, d *JobData) string {
	if e := entryOf("", st, d); e != nil {
		return e.node
	}
	return ""
}

// indexState is the index's keys and nonzero counters.
type indexState struct {
	keys   map[string]string // key -> value, entries and index keys
	counts map[string]int64
}

// checkIndex compares the index with what a full fold computes.
func (m *indexModel) checkIndex(step int) {
	m.t.Helper()
	s := m.s
	want := indexState{keys: map[string]string{}, counts: map[string]int64{}}
	registered := map[string]string{}
	for name := range m.dbs {
		u, err := s.ReadRegisteredDB(m.ctx, name)
		require.NoError(m.t, err)
		registered[name] = u
	}
	for _, name := range modelDBs {
		u, err := s.ReadRegisteredDB(m.ctx, name)
		require.NoError(m.t, err)
		require.Equal(m.t, m.dbs[name], u, "step %d: registry of %s", step, name)
	}
	marks := m.readKeys(s.retention.marks)
	for id, j := range m.fold() {
		e := entryOf(id, j.State, j.Data)
		want.keys[string(s.k.entryKey(id))] = string(e.pack())
		for _, k := range s.entryKeys(id, e) {
			want.keys[string(k)] = ""
		}
		reg := e.dbUUID != "" && registered[e.dbName] == e.dbUUID
		s.countDeltas(want.counts, e, reg, 1)
		if e.dbUUID != "" && !reg {
			_, ok := marks[string(s.retention.key(e.dbUUID))]
			require.True(m.t, ok, "step %d: job %s of a retired database without a deletion mark", step, id)
		}
	}
	for k, v := range want.counts {
		if v == 0 {
			delete(want.counts, k)
		}
	}
	got := indexState{keys: map[string]string{}, counts: map[string]int64{}}
	for _, ss := range []subspace.Subspace{s.k.entries, s.k.dbJobs, s.k.docStates, s.k.unfinished, s.k.running, s.k.expiry, s.k.ownerJobs, s.k.ownerRunning, s.k.parked} {
		for k, v := range m.readKeys(ss) {
			got.keys[k] = v
		}
	}
	for _, ss := range []subspace.Subspace{s.k.dbCounts, s.k.root.Sub(keyDocCounts), s.k.root.Sub(keyJobCount), s.k.root.Sub(keyNodeCounts), s.k.root.Sub(keyOwnerCounts)} {
		for k, v := range m.readKeys(ss) {
			if n := kv.DecodeInt64([]byte(v)); n != 0 {
				got.counts[k] = n
			}
		}
	}
	for _, k := range []kv.Key{s.k.jobCountKey(), s.k.parkedCountKey()} {
		if n := m.counter(k); n != 0 {
			got.counts[string(k)] = n
		}
	}
	require.Equal(m.t, describe(want.keys), describe(got.keys), "step %d: index keys", step)
	require.Equal(m.t, describeCounts(want.counts), describeCounts(got.counts), "step %d: counters", step)
}

func (m *indexModel) readKeys(ss subspace.Subspace) map[string]string {
	out, err := kv.ReadTransact(m.ctx, m.db, func(tr kv.ReadTransaction) (map[string]string, error) {
		kvs, err := tr.GetRange(subspaceRange(ss), kv.RangeOptions{}).GetSliceWithError()
		out := map[string]string{}
		for _, e := range kvs {
			out[string(e.Key)] = string(e.Value)
		}
		return out, err
	})
	require.NoError(m.t, err)
	return out
}

func (m *indexModel) counter(k kv.Key) int64 {
	n, err := kv.ReadTransact(m.ctx, m.db, func(tr kv.ReadTransaction) (int64, error) {
		return sumCounters(tr, []kv.Key{k})
	})
	require.NoError(m.t, err)
	return n
}

// describe renders keys as unpacked tuples, for readable diffs.
func describe(keys map[string]string) []string {
	out := make([]string, 0, len(keys))
	for k, v := range keys {
		t, err := tuple.Unpack([]byte(k))
		d := fmt.Sprintf("%x", k)
		if err == nil {
			d = fmt.Sprint(t)
		}
		if v != "" {
			if vt, err := tuple.Unpack([]byte(v)); err == nil {
				d += " = " + fmt.Sprint(vt)
			}
		}
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func describeCounts(c map[string]int64) []string {
	out := make([]string, 0, len(c))
	for k, v := range c {
		t, _ := tuple.Unpack([]byte(k))
		out = append(out, fmt.Sprintf("%v = %d", t, v))
	}
	sort.Strings(out)
	return out
}

// checkPages compares pages read from the index with the same pages cut
// from a full fold: every database and each one, filtered by random
// states, with random limits, skips and start keys; the jobs view; the
// running jobs.
func (m *indexModel) checkPages(step int) {
	m.t.Helper()
	all := m.fold()
	type doc struct{ db, doc, id, state string }
	var docs []doc
	var unfinished []PageJob
	var running []string
	for id, j := range all {
		v := AsSeen(j.State, j.Data)
		if j.Data.DBUUID != "" && m.dbs[j.Data.DBName] == j.Data.DBUUID {
			docs = append(docs, doc{j.Data.DBName, j.Data.DocID, id, v.State})
		}
		if Unfinished(j.State, v) {
			unfinished = append(unfinished, j)
		}
		if n := nodeOf(j.State, j.Data); n != "" {
			running = append(running, n+"\x00"+id)
		}
	}
	sort.Slice(docs, func(i, k int) bool {
		return docs[i].db < docs[k].db || docs[i].db == docs[k].db && docs[i].doc < docs[k].doc
	})
	sortID := func(j PageJob) string { return cmpOr(j.Data.RepID, j.ID) }
	sort.Slice(unfinished, func(i, k int) bool {
		a, b := sortID(unfinished[i]), sortID(unfinished[k])
		return a < b || a == b && unfinished[i].ID < unfinished[k].ID
	})
	sort.Strings(running)

	for round := 0; round < 4; round++ {
		q := DocsQuery{Limit: m.rng.IntN(8), Skip: m.rng.IntN(6)}
		if m.rng.IntN(2) == 0 {
			q.DB = m.pick(modelDBs)
		}
		for _, st := range viewStates {
			if m.rng.IntN(3) == 0 {
				q.States = append(q.States, st)
			}
		}
		var want []string
		total := 0
		for _, d := range docs {
			if q.DB != "" && d.db != q.DB || len(q.States) > 0 && !slices.Contains(q.States, d.state) {
				continue
			}
			total++
			if m.rng.IntN(6) == 0 && q.StartDoc == "" && q.StartDB == "" {
				if q.DB == "" {
					q.StartDB = d.db
				}
				q.StartDoc = d.doc
				if m.rng.IntN(2) == 0 {
					q.StartDoc += "~" // between documents
				}
			}
		}
		for _, d := range docs {
			if q.DB != "" && d.db != q.DB || len(q.States) > 0 && !slices.Contains(q.States, d.state) {
				continue
			}
			if q.DB == "" && (d.db < q.StartDB || d.db == q.StartDB && d.doc < q.StartDoc) || q.DB != "" && d.doc < q.StartDoc {
				continue
			}
			want = append(want, d.id)
		}
		want = want[min(q.Skip, len(want)):]
		want = want[:min(q.Limit, len(want))]
		p, err := m.s.views.DocsPage(m.ctx, q)
		require.NoError(m.t, err)
		require.Equal(m.t, total, p.Total, "step %d: %+v total", step, q)
		require.Equal(m.t, min(q.Skip, total), p.Offset, "step %d: %+v offset", step, q)
		require.Equal(m.t, nonNilIDs(want), pageIDs(p), "step %d: %+v", step, q)

		jq, wantJobs := m.jobsQuery(unfinished, unfinished)
		jp, err := m.s.views.JobsPage(m.ctx, jq.startID, jq.startJob, jq.limit, jq.skip)
		require.NoError(m.t, err)
		require.Equal(m.t, len(unfinished), jp.Total, "step %d: jobs total", step)
		require.Equal(m.t, nonNilIDs(wantJobs), pageIDs(jp), "step %d: jobs %+v", step, jq)

		// The same among one owner's jobs (the start key maybe another's).
		owner := m.pick(modelOwners)
		var mine []PageJob
		for _, j := range unfinished {
			if owner != "" && j.Data.Owner() == owner {
				mine = append(mine, j)
			}
		}
		jq, wantJobs = m.jobsQuery(unfinished, mine)
		op, err := m.s.views.OwnerJobsPage(m.ctx, owner, jq.startID, jq.startJob, jq.limit, jq.skip)
		require.NoError(m.t, err)
		require.Equal(m.t, len(mine), op.Total, "step %d: %q's jobs total", step, owner)
		require.Equal(m.t, min(jq.skip, len(mine)), op.Offset, "step %d: %q's jobs offset", step, owner)
		require.Equal(m.t, nonNilIDs(wantJobs), pageIDs(op), "step %d: %q's jobs %+v", step, owner, jq)
	}
	rj, err := m.s.views.RunningJobs(m.ctx, "")
	require.NoError(m.t, err)
	var got []string
	for _, j := range rj {
		got = append(got, j.Data.Node+"\x00"+j.ID)
	}
	require.Equal(m.t, running, got, "step %d: running jobs", step)
	for _, owner := range modelOwners {
		var want []string
		for _, r := range running {
			id := r[strings.IndexByte(r, 0)+1:]
			if owner != "" && all[id].Data.Owner() == owner {
				want = append(want, r)
			}
		}
		rj, err := m.s.views.OwnerRunningJobs(m.ctx, owner)
		require.NoError(m.t, err)
		got := []string(nil)
		for _, j := range rj {
			got = append(got, j.Data.Node+"\x00"+j.ID)
		}
		require.Equal(m.t, want, got, "step %d: %q's running jobs", step, owner)
	}
	for _, node := range modelNodes {
		n, err := m.s.views.NodeRunning(m.ctx, nil, node)
		require.NoError(m.t, err)
		c := 0
		for _, r := range running {
			if bytes.HasPrefix([]byte(r), []byte(node+"\x00")) {
				c++
			}
		}
		require.Equal(m.t, c, n, "step %d: running on %s", step, node)
	}
}

// jobsQuery is a page of _scheduler/jobs.
type jobsQuery struct {
	startID, startJob string
	limit, skip       int
}

// jobsQuery picks a random page, its start key maybe one of unfinished's
// jobs, and returns it with the ids it cuts from rows (in _scheduler/jobs
// order).
func (m *indexModel) jobsQuery(unfinished, rows []PageJob) (jobsQuery, []string) {
	q := jobsQuery{limit: m.rng.IntN(8), skip: m.rng.IntN(6)}
	if len(unfinished) > 0 && m.rng.IntN(2) == 0 {
		j := unfinished[m.rng.IntN(len(unfinished))]
		q.startID = cmpOr(j.Data.RepID, j.ID)
		if m.rng.IntN(2) == 0 {
			q.startJob = j.ID
		}
	}
	var want []string
	for _, j := range rows {
		if s := cmpOr(j.Data.RepID, j.ID); s < q.startID || s == q.startID && j.ID < q.startJob {
			continue
		}
		want = append(want, j.ID)
	}
	want = want[min(q.skip, len(want)):]
	return q, want[:min(q.limit, len(want))]
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func pageIDs(p Page) []string {
	out := []string{}
	for _, j := range p.Jobs {
		out = append(out, j.ID)
	}
	return out
}

func nonNilIDs(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
