package replicator

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// The view index: what _scheduler/docs, _scheduler/jobs and _active_tasks
// read instead of every job (see doc.go, "View index"). Every write of a
// job's row writes its index entries in the same transaction, through the
// Store's job methods; the entry last written for each job is kept, so
// that a write compares the new entry with it and changes keys and
// counters only by the difference: a transaction run again after
// commit_unknown_result finds its entry current and changes nothing.

// AsSeen is a job's data as the views show it: a job whose data says
// running while fdbjobs has it pending was re-enqueued (by the activity
// monitor after its node died, or by the node on restart) and is pending,
// with no node, until a node takes it. (The Store's re-enqueue hook
// rewrites such data to pending; older stores may still hold it.)
func AsSeen(st fdbjobs.State, d *JobData) *JobData {
	if d.State != StateRunning || st == fdbjobs.Running {
		return d
	}
	return Unheld(d)
}

// Unheld is a copy of d shown as a running job that no node holds any
// more is shown: pending, on no node (a job re-enqueued, or running on a
// node that died).
func Unheld(d *JobData) *JobData {
	x := *d
	x.State, x.Node = StatePending, ""
	return &x
}

// Unfinished reports whether _scheduler/jobs lists a job: pending,
// running or crashing (a document that did not parse is failed from its
// start, though fdbjobs has it pending until a node fails it).
func Unfinished(st fdbjobs.State, d *JobData) bool {
	return st != fdbjobs.Finished && d.State != StateFailed && d.State != StateCompleted
}

// entry is a job's place in the view index, derived from its fdbjobs state
// and data by entryOf.
type entry struct {
	dbUUID, dbName, docID string // a document's job; all "" for a transient one
	state                 string // the view state (AsSeen)
	sortID                string // _scheduler/jobs order (rep id, else job id); "" when not listed
	node                  string // the node running it; "" unless running
	expires               int64  // a finished transient job's last update (Unix ms); else 0
	owner                 string // JobData.Owner; "" for none (entries written before version 2 too)
	group, srcDB          string // a parked job's watch group and source database; else ""
	hosts                 string // a running job's JobData.BudgetHosts, space-separated; else ""
}

// entryOf is the index entry of a job; nil when the job is gone or its
// data does not decode (the views skip such jobs).
func entryOf(jobID string, st fdbjobs.State, d *JobData) *entry {
	if d == nil || st == fdbjobs.NotFound {
		return nil
	}
	v := AsSeen(st, d)
	e := &entry{dbUUID: d.DBUUID, dbName: d.DBName, docID: d.IndexDocID(), state: v.State, owner: d.Owner()}
	if e.dbUUID == "" {
		e.dbName, e.docID = "", ""
	}
	if Unfinished(st, v) {
		e.sortID = d.RepID
		if e.sortID == "" {
			e.sortID = jobID
		}
	}
	if st == fdbjobs.Running && v.State == StateRunning {
		e.node = v.Node
		e.hosts = strings.Join(d.BudgetHosts, " ")
	}
	if d.Transient() && st == fdbjobs.Finished && d.State != StatePaused {
		e.expires = max(d.LastUpdated, 1) // a paused one stays until resumed or cancelled
	}
	if st == fdbjobs.Pending && d.State == StateParked && d.Parked != nil {
		e.group, e.srcDB = d.Parked.Group, d.Parked.SourceDB
	}
	return e
}

func (e *entry) pack() []byte {
	t := tuple.Tuple{e.dbUUID, e.dbName, e.docID, e.state, e.sortID, e.node, e.expires, e.owner}
	if e.group != "" || e.hosts != "" {
		t = append(t, e.group, e.srcDB)
	}
	if e.hosts != "" {
		t = append(t, e.hosts)
	}
	return t.Pack()
}

// unpackEntry decodes an entry; one of index version 1 has no owner (seven
// elements): it reads as owner "", so the job's next write, or the
// backfill to version 2, adds its owner's keys. A parked job's has its
// watch group and source database last (ten elements), and a running job
// that holds places in its hosts' budgets those hosts after them (eleven).
func unpackEntry(v []byte) (*entry, error) {
	t, err := tuple.Unpack(v)
	if err != nil || len(t) != 7 && len(t) != 8 && len(t) != 10 && len(t) != 11 {
		return nil, fmt.Errorf("replicator: bad index entry %x", v)
	}
	var e entry
	strs := map[int]*string{0: &e.dbUUID, 1: &e.dbName, 2: &e.docID, 3: &e.state, 4: &e.sortID, 5: &e.node}
	if len(t) >= 8 {
		strs[7] = &e.owner // after expires
	}
	if len(t) >= 10 {
		strs[8], strs[9] = &e.group, &e.srcDB
	}
	if len(t) == 11 {
		strs[10] = &e.hosts
	}
	for i, dst := range strs {
		s, ok := t[i].(string)
		if !ok {
			return nil, fmt.Errorf("replicator: bad index entry %x", v)
		}
		*dst = s
	}
	if e.expires, err = int64Elem(t[6]); err != nil {
		return nil, fmt.Errorf("replicator: bad index entry %x", v)
	}
	return &e, nil
}

func int64Elem(x tuple.TupleElement) (int64, error) {
	switch n := x.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	}
	return 0, fmt.Errorf("not an integer: %v", x)
}

// keys are the index keys the entry of jobID sets.
func (s *Store) entryKeys(jobID string, e *entry) []kv.Key {
	if e == nil {
		return nil
	}
	var ks []kv.Key
	if e.dbUUID != "" {
		ks = append(ks, s.k.dbJobKey(e.dbUUID, e.docID), s.k.docStateKey(e.dbUUID, e.state, e.docID))
	}
	if e.sortID != "" {
		ks = append(ks, s.k.unfinishedKey(e.sortID, jobID))
	}
	if e.node != "" {
		ks = append(ks, s.k.runningKey(e.node, jobID))
	}
	if e.owner != "" && e.sortID != "" {
		ks = append(ks, s.k.ownerJobKey(e.owner, e.sortID, jobID))
	}
	if e.owner != "" && e.node != "" {
		ks = append(ks, s.k.ownerRunningKey(e.owner, e.node, jobID))
	}
	if e.group != "" {
		ks = append(ks, s.k.parkedKey(e.group, e.srcDB, jobID))
	}
	return ks
}

// countDeltas adds sign to the counters the entry counts in. registered
// says whether the entry's database instance is the registered one of its
// name (only those count in the all-databases counters).
func (s *Store) countDeltas(deltas map[string]int64, e *entry, registered bool, sign int64) {
	if e == nil {
		return
	}
	if e.dbUUID != "" {
		deltas[string(s.k.dbCountKey(e.dbUUID, e.state))] += sign
		if registered {
			deltas[string(s.k.docCountKey(e.state))] += sign
		}
	}
	if e.sortID != "" {
		deltas[string(s.k.jobCountKey())] += sign
		if e.owner != "" {
			deltas[string(s.k.ownerCountKey(e.owner))] += sign
		}
	}
	if e.node != "" {
		deltas[string(s.k.nodeCountKey(e.node))] += sign
	}
	if e.group != "" {
		deltas[string(s.k.parkedCountKey())] += sign
	}
}

// indexedJob is a job as the index sees it after a write: its fdbjobs
// state and data (nil: gone, or data that does not decode).
type indexedJob struct {
	id string
	st fdbjobs.State
	d  *JobData
}

// index makes the index entries of jobs those of their given states, in
// tr. It reads each job's last entry (all at once) and changes keys and
// counters only where the entry changed.
func (s *Store) index(tr kv.Transaction, jobs []indexedJob) error {
	if len(jobs) == 0 {
		return nil
	}
	futs := make([]kv.FutureByteSlice, len(jobs))
	for i, j := range jobs {
		futs[i] = tr.Get(s.k.entryKey(j.id))
	}
	olds := make([]*entry, len(jobs))
	oldRaw := make([][]byte, len(jobs))
	news := make([]*entry, len(jobs))
	names := map[string]kv.FutureByteSlice{}
	for i, j := range jobs {
		v, err := futs[i].Get()
		if err != nil {
			return err
		}
		if v != nil {
			oldRaw[i] = v
			if olds[i], err = unpackEntry(v); err != nil {
				return err
			}
		}
		news[i] = entryOf(j.id, j.st, j.d)
		for _, e := range []*entry{olds[i], news[i]} {
			if e != nil && e.dbUUID != "" && names[e.dbName] == nil {
				names[e.dbName] = tr.Get(s.k.dbKey(e.dbName))
			}
		}
	}
	registered := map[string]string{}
	for name, f := range names {
		v, err := f.Get()
		if err != nil {
			return err
		}
		registered[name] = string(v)
	}
	isReg := func(e *entry) bool { return e != nil && e.dbUUID != "" && registered[e.dbName] == e.dbUUID }
	deltas := map[string]int64{}
	var changes []hookChange
	for i, j := range jobs {
		old, cur := olds[i], news[i]
		if old == nil && cur == nil {
			continue
		}
		if old != nil && cur != nil && *old == *cur {
			if p := cur.pack(); !bytes.Equal(oldRaw[i], p) {
				tr.Set(s.k.entryKey(j.id), p) // an older version's encoding, same keys
			}
			continue
		}
		if err := s.leaveHosts(tr, j.id, old, cur); err != nil {
			return err
		}
		for _, k := range s.entryKeys(j.id, old) {
			tr.Clear(k)
		}
		for _, k := range s.entryKeys(j.id, cur) {
			tr.Set(k, nil)
		}
		// A finished transient job's retention is the job layer's: its
		// sweeper removes the job transient_job_max_age after its mark.
		if old != nil && old.expires != 0 {
			s.jobs.UnretainTx(tr, JobType, j.id, time.UnixMilli(old.expires))
		}
		if cur != nil && cur.expires != 0 {
			s.jobs.RetainTx(tr, JobType, j.id, time.UnixMilli(cur.expires))
		}
		if cur == nil {
			tr.Clear(s.k.entryKey(j.id))
		} else {
			tr.Set(s.k.entryKey(j.id), cur.pack())
		}
		c, changed, err := s.emitChange(tr, j.id, old, cur)
		if err != nil {
			return err
		}
		if changed {
			changes = append(changes, hookChange{jobID: j.id, c: c})
		}
		s.countDeltas(deltas, old, isReg(old), -1)
		s.countDeltas(deltas, cur, isReg(cur), 1)
	}
	for k, d := range deltas {
		if d != 0 {
			tr.Add(kv.Key(k), kv.Int64(d))
		}
	}
	return s.webhooks.enqueue(tr, changes)
}

// leaveHosts gives back the places in its hosts' budgets that a job's run
// held (old's hosts) and no longer holds (cur's): it stopped running, or
// runs again under other hosts.
func (s *Store) leaveHosts(tr kv.Transaction, jobID string, old, cur *entry) error {
	if old == nil || old.hosts == "" {
		return nil
	}
	var now []string
	if cur != nil && cur.hosts != "" {
		now = strings.Fields(cur.hosts)
	}
	var gone []string
	for _, h := range strings.Fields(old.hosts) {
		if !slices.Contains(now, h) {
			gone = append(gone, h)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return s.jobs.LeavePlaces(tr, JobType, jobID, gone)
}

// reindex indexes jobs ids as their rows stand in tr (after this
// transaction's own writes): for writes whose outcome the caller does not
// know exactly (an fdbjobs Finish that recognised its own earlier commit
// writes nothing, and the job may have moved on since).
func (s *Store) reindex(ctx context.Context, tr kv.Transaction, ids ...string) error {
	rows, err := s.jobs.ReadJobs(ctx, tr, JobType, ids)
	if err != nil {
		return err
	}
	jobs := make([]indexedJob, len(rows))
	for i, r := range rows {
		jobs[i] = indexedJob{id: r.ID, st: r.State}
		if r.State != fdbjobs.NotFound {
			jobs[i].d, _ = DecodeJobData(r.Data) // undecodable: not indexed
		}
	}
	return s.index(tr, jobs)
}

// readCounters reads int64 counters at once (absent ones are 0).
func readCounters(tr kv.ReadTransaction, keys []kv.Key) ([]int64, error) {
	futs := make([]kv.FutureByteSlice, len(keys))
	for i, k := range keys {
		futs[i] = tr.Get(k)
	}
	out := make([]int64, len(keys))
	for i, f := range futs {
		v, err := f.Get()
		if err != nil {
			return nil, err
		}
		out[i] = kv.DecodeInt64(v)
	}
	return out, nil
}

// sumCounters reads int64 counters at once and returns their sum.
func sumCounters(tr kv.ReadTransaction, keys []kv.Key) (int64, error) {
	ns, err := readCounters(tr, keys)
	var sum int64
	for _, n := range ns {
		sum += n
	}
	return sum, err
}
