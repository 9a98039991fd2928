package replicator

import (
	"context"
	"errors"
	"math"
	"sort"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Views reads the views (_scheduler/jobs and docs, and their per-user
// forms) from the Store's view index (see doc.go, "View index"); it
// writes nothing. A page costs what it lists, not what the cluster holds.
// Rows are read in transactions of at most viewRowsPerTx jobs, so a page
// of up to that many rows is one consistent snapshot; a bigger one is
// several (rows that change between them may be missed or shifted, as
// between two pages). skip costs O(skip) keys-only reads, viewKeysPerTx
// per transaction, except that whole databases are skipped by their
// counters.
type Views struct {
	s *Store
}

// Reads of job rows (readRows) stop once a transaction has read rowBudget
// bytes (FoundationDB advises staying under 1 MB): rows are read in
// chunks issued together, the first of firstRowChunk (before any size is
// known: that many of the largest rows, about 70 kB each, stay under
// 1 MB), the next as many as the budget left allows at the largest row
// seen so far.
const (
	rowBudget     = kv.PageBytes
	firstRowChunk = 8
	rowGuess      = 2_000 // bytes assumed for a row before one is seen
)

// readRows reads the jobs ids (a prefix of them when rowBudget runs out;
// at least one) in tr.
func (s *Store) readRows(ctx context.Context, tr kv.ReadTransaction, ids []string) ([]fdbjobs.JobInfo, error) {
	var out []fdbjobs.JobInfo
	used, largest := 0, rowGuess
	for len(out) < len(ids) && used < rowBudget {
		n := firstRowChunk
		if len(out) > 0 {
			n = max(1, (rowBudget-used)/largest)
		}
		n = min(n, len(ids)-len(out))
		rows, err := s.jobs.ReadJobs(ctx, tr, JobType, ids[len(out):len(out)+n])
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			size := len(r.ID) + len(r.Data)
			used, largest = used+size, max(largest, size)
		}
		out = append(out, rows...)
	}
	return out, nil
}

// (Variables so that tests can make pages span transactions.)
var (
	// viewRowsPerTx is how many jobs one transaction of a view reads
	// (job data is typically 2 kB, at most 100 kB).
	viewRowsPerTx = 100
	// viewKeysPerTx is how many index keys one transaction of a view
	// reads while skipping (about 100 bytes each; up to 1 kB with the
	// longest document ids).
	viewKeysPerTx = 1000
)

// Page is one page of a view, in the view's order.
type Page struct {
	// Total is the view's total_rows: every row it selects (a start key
	// does not change it), from the index counters.
	Total int
	// Offset is the rows skipped (skip, at most Total).
	Offset int
	Jobs   []PageJob
}

// PageJob is a listed job: its id, fdbjobs state and data.
type PageJob struct {
	ID    string
	State fdbjobs.State
	Data  *JobData
}

// DocsQuery selects a page of _scheduler/docs.
type DocsQuery struct {
	// DB is the database to list; "" lists every registered one, in name
	// order.
	DB string
	// States keeps the documents in these view states (none: all). They
	// must be known states (ViewStates).
	States []string
	// StartDB and StartDoc are where the page starts (inclusive): the
	// first row is the first at or after (StartDB, StartDoc). StartDB
	// applies when DB is "".
	StartDB, StartDoc string
	Limit, Skip       int
}

// DocsPage returns a page of the jobs of _replicator documents, sorted by
// database name and document id; a deleted database's documents never
// show (only registered instances are walked).
func (v *Views) DocsPage(ctx context.Context, q DocsQuery) (Page, error) {
	states := q.States
	if len(states) == 0 {
		states = viewStates
	}
	states = append([]string(nil), states...)
	sort.Strings(states)
	c := docsCursor{s: v.s, states: states, filtered: len(q.States) > 0, one: q.DB != "", db: q.StartDB, doc: q.StartDoc, inclDB: true, inclDoc: true}
	if c.one {
		c.db = q.DB
	}
	total := func(tr kv.ReadTransaction) (int64, error) {
		var keys []kv.Key
		if c.one {
			u, err := v.s.RegisteredDB(tr, q.DB)
			if err != nil || u == "" {
				return 0, err
			}
			for _, st := range states {
				keys = append(keys, v.s.k.dbCountKey(u, st))
			}
		} else {
			for _, st := range states {
				keys = append(keys, v.s.k.docCountKey(st))
			}
		}
		return sumCounters(tr, keys)
	}
	return v.page(ctx, c, total, q.Limit, q.Skip)
}

// JobsPage returns a page of _scheduler/jobs: the unfinished jobs
// (Unfinished) sorted by replication id (job id when they have none yet),
// then job id, starting at (startID, startJobID) inclusive.
func (v *Views) JobsPage(ctx context.Context, startID, startJobID string, limit, skip int) (Page, error) {
	rng := subspaceRange(v.s.k.unfinished)
	if startID != "" || startJobID != "" {
		rng.Begin = v.s.k.unfinishedKey(startID, startJobID)
	}
	total := func(tr kv.ReadTransaction) (int64, error) { return sumCounters(tr, []kv.Key{v.s.k.jobCountKey()}) }
	return v.page(ctx, rangeCursor{ss: v.s.k.unfinished, rng: rng}, total, limit, skip)
}

// OwnerJobsPage is JobsPage among the unfinished jobs of owner
// (JobData.Owner), read from their own keys (20) and counter (21): a
// user's page costs what it lists, whoever else has jobs. Owner "" has
// none.
func (v *Views) OwnerJobsPage(ctx context.Context, owner, startID, startJobID string, limit, skip int) (Page, error) {
	if owner == "" {
		return Page{Jobs: []PageJob{}}, nil
	}
	rng := prefixRange(v.s.k.ownerJobs, tuple.Tuple{owner})
	if startID != "" || startJobID != "" {
		rng.Begin = v.s.k.ownerJobKey(owner, startID, startJobID)
	}
	total := func(tr kv.ReadTransaction) (int64, error) {
		return sumCounters(tr, []kv.Key{v.s.k.ownerCountKey(owner)})
	}
	return v.page(ctx, rangeCursor{ss: v.s.k.ownerJobs, rng: rng}, total, limit, skip)
}

// OwnerRunningJobs returns the jobs of owner that run, sorted by node and
// job id, read from their own keys (22): it costs owner's running jobs,
// not the cluster's. Owner "" has none.
func (v *Views) OwnerRunningJobs(ctx context.Context, owner string) ([]PageJob, error) {
	if owner == "" {
		return []PageJob{}, nil
	}
	rng := prefixRange(v.s.k.ownerRunning, tuple.Tuple{owner})
	p, err := v.page(ctx, rangeCursor{ss: v.s.k.ownerRunning, rng: rng}, nil, math.MaxInt, 0)
	return p.Jobs, err
}

// RunningJobs returns the jobs running on node ("" for every node),
// sorted by node and job id: a node runs max_jobs jobs at most, so this
// costs the running jobs, not all of them.
func (v *Views) RunningJobs(ctx context.Context, node string) ([]PageJob, error) {
	rng := subspaceRange(v.s.k.running)
	if node != "" {
		rng = prefixRange(v.s.k.running, tuple.Tuple{node})
	}
	p, err := v.page(ctx, rangeCursor{ss: v.s.k.running, rng: rng}, nil, math.MaxInt, 0)
	return p.Jobs, err
}

// NodeRunning returns how many jobs the index has running on node (its
// counter).
func (v *Views) NodeRunning(ctx context.Context, tr kv.ReadTransactor, node string) (int, error) {
	if tr == nil {
		tr = v.s.db
	}
	return kv.ReadTransact(ctx, tr, func(tr kv.ReadTransaction) (int, error) {
		n, err := sumCounters(tr, []kv.Key{v.s.k.nodeCountKey(node)})
		return int(n), err
	})
}

// Job is Store.Job for the views: the job's data with the live counters of
// its current run (see Progress), its failed documents
// (JobData.FailedDocs) and, for a parked job, its group's watch
// (JobData.Watch), read in one transaction.
func (v *Views) Job(ctx context.Context, jobID string) (*JobData, fdbjobs.State, error) {
	type res struct {
		d  *JobData
		st fdbjobs.State
	}
	r, err := kv.ReadTransact(ctx, v.s.db, func(tr kv.ReadTransaction) (res, error) {
		d, st, err := v.s.Job(ctx, tr, jobID)
		if err != nil || d == nil {
			return res{}, err
		}
		jobs := []PageJob{{ID: jobID, State: st, Data: d}}
		if err := v.s.progress.overlay(tr, jobs); err != nil {
			return res{}, err
		}
		failed, err := v.s.failed.read(tr, jobID)
		if err != nil {
			return res{}, err
		}
		if failed == nil {
			failed = []FailedDoc{}
		}
		d.FailedDocs = &failed
		if d.State == StateParked && d.Parked != nil {
			wst, raw, err := v.s.jobs.Job(ctx, tr, WatchType, WatchJobID(d.Parked.Group))
			if err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
				return res{}, err
			}
			if err == nil && wst != fdbjobs.Finished {
				d.Watch, _ = DecodeWatchData(raw)
			}
		}
		return res{d: d, st: st}, nil
	})
	return r.d, r.st, err
}

// cursor is a position in a view's index. Methods return the moved
// cursor and leave the receiver as it was, so that a transaction that
// runs again starts from the same place.
type cursor interface {
	// next returns the ids of up to n more rows (fewer only at the end).
	next(tr kv.ReadTransaction, n int) ([]string, cursor, error)
	// skip passes over up to n rows, reading about n keys at most (keys
	// only), or fewer when it can; it returns how many rows it passed (0
	// only at the end) and how many keys it read.
	skip(tr kv.ReadTransaction, n int) (passed, read int, c cursor, err error)
	done() bool
}

// page reads a page from c: skip rows, then up to limit, with total_rows
// from total (nil: 0), paging across transactions.
func (v *Views) page(ctx context.Context, c cursor, total func(kv.ReadTransaction) (int64, error), limit, skip int) (Page, error) {
	p := Page{Jobs: []PageJob{}}
	first, skipLeft := true, skip
	for {
		type step struct {
			c        cursor
			skipLeft int
			total    int64
			jobs     []PageJob
		}
		st, err := kv.ReadTransact(ctx, v.s.db, func(tr kv.ReadTransaction) (step, error) {
			out := step{c: c, skipLeft: skipLeft}
			var err error
			if first && total != nil {
				if out.total, err = total(tr); err != nil {
					return step{}, err
				}
			}
			if limit == 0 {
				return out, nil
			}
			for budget := viewKeysPerTx; out.skipLeft > 0 && budget > 0 && !out.c.done(); {
				var n, read int
				if n, read, out.c, err = out.c.skip(tr, min(out.skipLeft, budget)); err != nil {
					return step{}, err
				}
				out.skipLeft -= n
				budget -= max(read, 1)
			}
			if out.skipLeft > 0 || out.c.done() {
				return out, nil
			}
			var ids []string
			at := out.c
			if ids, out.c, err = at.next(tr, min(limit-len(p.Jobs), viewRowsPerTx)); err != nil {
				return step{}, err
			}
			rows, err := v.s.readRows(ctx, tr, ids)
			if err != nil {
				return step{}, err
			}
			if len(rows) < len(ids) {
				// The byte budget ran out: the next transaction goes on
				// after the last row read.
				if _, out.c, err = at.next(tr, len(rows)); err != nil {
					return step{}, err
				}
			}
			for _, r := range rows {
				if r.State == fdbjobs.NotFound {
					continue
				}
				if d, err := DecodeJobData(r.Data); err == nil {
					out.jobs = append(out.jobs, PageJob{ID: r.ID, State: r.State, Data: d})
				}
			}
			return out, v.s.progress.overlay(tr, out.jobs)
		})
		if err != nil {
			return Page{}, err
		}
		if first {
			p.Total, first = int(st.total), false
		}
		c, skipLeft = st.c, st.skipLeft
		p.Jobs = append(p.Jobs, st.jobs...)
		if limit == 0 || c.done() || len(p.Jobs) >= limit {
			p.Offset = min(skip, p.Total)
			return p, nil
		}
	}
}

// rangeCursor walks one range of index subspace ss whose keys end in a
// job id.
type rangeCursor struct {
	ss  subspace.Subspace
	rng kv.KeyRange
	end bool
}

func (c rangeCursor) done() bool { return c.end }

func (c rangeCursor) read(tr kv.ReadTransaction, n int) ([]kv.KeyValue, cursor, error) {
	kvs, err := tr.GetRange(c.rng, kv.RangeOptions{Limit: n}).GetSliceWithError()
	if err != nil {
		return nil, c, err
	}
	if len(kvs) < n {
		c.end = true
	} else {
		c.rng.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
	return kvs, c, nil
}

func (c rangeCursor) next(tr kv.ReadTransaction, n int) ([]string, cursor, error) {
	kvs, next, err := c.read(tr, n)
	ids := make([]string, 0, len(kvs))
	for _, e := range kvs {
		if t, err := c.ss.Unpack(e.Key); err == nil && len(t) > 0 {
			if id, ok := t[len(t)-1].(string); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids, next, err
}

func (c rangeCursor) skip(tr kv.ReadTransaction, n int) (int, int, cursor, error) {
	kvs, next, err := c.read(tr, n)
	return len(kvs), len(kvs), next, err
}

// docsCursor walks _scheduler/docs: the registered databases in name
// order (or one), in each its documents in id order, through (4, DBUUID,
// DocID) or, filtered by states, the union of (10, DBUUID, State, DocID)
// for those states.
type docsCursor struct {
	s        *Store
	states   []string // sorted; every view state when not filtered
	filtered bool
	one      bool // only database db

	db      string // the current database (or the one to start at)
	inclDB  bool   // db itself is still to come (its uuid not read yet)
	uuid    string // of db, once read; "" before
	doc     string // position in db
	inclDoc bool   // doc itself is still to come
	end     bool
}

func (c docsCursor) done() bool { return c.end }

// enter moves c to the database it stands at or after: it reads db's
// identity, or the next registered name. c.end when there is none.
func (c docsCursor) enter(tr kv.ReadTransaction) (docsCursor, error) {
	if c.uuid != "" || c.end {
		return c, nil
	}
	if c.one {
		u, err := c.s.RegisteredDB(tr, c.db)
		if err != nil {
			return c, err
		}
		c.uuid, c.end = u, u == ""
		return c, nil
	}
	rng := subspaceRange(c.s.k.dbs)
	if c.inclDB {
		rng.Begin = c.s.k.dbKey(c.db)
	} else {
		rng.Begin = kv.KeyAfter(c.s.k.dbKey(c.db))
	}
	kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: 1}).GetSliceWithError()
	if err != nil || len(kvs) == 0 {
		c.end = err == nil
		return c, err
	}
	t, err := c.s.k.dbs.Unpack(kvs[0].Key)
	name, _ := tupleString(t, err)
	if name != c.db {
		c.doc, c.inclDoc = "", true // a database after the start one: from its first document
	}
	c.db, c.inclDB, c.uuid = name, false, string(kvs[0].Value)
	return c, nil
}

func tupleString(t tuple.Tuple, err error) (string, bool) {
	if err != nil || len(t) != 1 {
		return "", false
	}
	s, ok := t[0].(string)
	return s, ok
}

// leave moves c past its database.
func (c docsCursor) leave() docsCursor {
	if c.one {
		c.end = true
		return c
	}
	c.uuid, c.inclDB, c.doc, c.inclDoc = "", false, "", true
	return c
}

// docRange is the range of db's documents in state st ("" unfiltered)
// from c's position.
func (c docsCursor) docRange(st string) kv.KeyRange {
	var prefix tuple.Tuple
	var at kv.Key
	ss := c.s.k.dbJobs
	if st == "" {
		prefix, at = tuple.Tuple{c.uuid}, c.s.k.dbJobKey(c.uuid, c.doc)
	} else {
		ss = c.s.k.docStates
		prefix, at = tuple.Tuple{c.uuid, st}, c.s.k.docStateKey(c.uuid, st, c.doc)
	}
	rng := prefixRange(ss, prefix)
	if c.inclDoc {
		rng.Begin = at
	} else {
		rng.Begin = kv.KeyAfter(at)
	}
	return rng
}

// ranges are the states whose ranges inDB reads ("" for all).
func (c docsCursor) ranges() []string {
	if c.filtered {
		return c.states
	}
	return []string{""}
}

// inDB returns up to n document ids of the current database from c's
// position, whether the database has no more, and how many keys it read.
// Filtered by states, it reads up to n from each state's range: the first
// n of their union are exact (each is among the first n of its own range).
func (c docsCursor) inDB(tr kv.ReadTransaction, n int) ([]string, bool, int, error) {
	ranges := c.ranges()
	results := make([]kv.RangeResult, len(ranges))
	for i, st := range ranges {
		results[i] = tr.GetRange(c.docRange(st), kv.RangeOptions{Limit: n})
	}
	var docs []string
	exhausted, read := true, 0
	for i, r := range results {
		kvs, err := r.GetSliceWithError()
		if err != nil {
			return nil, false, 0, err
		}
		read += len(kvs)
		exhausted = exhausted && len(kvs) < n
		ss := c.s.k.dbJobs
		if ranges[i] != "" {
			ss = c.s.k.docStates
		}
		for _, e := range kvs {
			if t, err := ss.Unpack(e.Key); err == nil && len(t) > 0 {
				if id, ok := t[len(t)-1].(string); ok {
					docs = append(docs, id)
				}
			}
		}
	}
	if len(ranges) > 1 {
		sort.Strings(docs) // a document is in one state at a time: no duplicates
		if len(docs) > n {
			docs, exhausted = docs[:n], false
		}
	}
	return docs, exhausted, read, nil
}

// advance moves c past docs, the ids inDB returned, and past the database
// when it is exhausted.
func (c docsCursor) advance(docs []string, exhausted bool) docsCursor {
	if exhausted {
		return c.leave()
	}
	if len(docs) > 0 {
		c.doc, c.inclDoc = docs[len(docs)-1], false
	}
	return c
}

func (c docsCursor) next(tr kv.ReadTransaction, n int) ([]string, cursor, error) {
	var ids []string
	for len(ids) < n {
		var err error
		if c, err = c.enter(tr); err != nil || c.end {
			return ids, c, err
		}
		docs, exhausted, _, err := c.inDB(tr, n-len(ids))
		if err != nil {
			return nil, c, err
		}
		for _, d := range docs {
			ids = append(ids, indexJobID(c.uuid, d))
		}
		c = c.advance(docs, exhausted)
	}
	return ids, c, nil
}

// skip passes a whole database by its counters when it stands at the
// database's start and the database has no more rows than n; otherwise
// it reads keys within the database, n over the number of states filtered
// by from each state's range, so about n in all.
func (c docsCursor) skip(tr kv.ReadTransaction, n int) (int, int, cursor, error) {
	c, err := c.enter(tr)
	if err != nil || c.end {
		return 0, 1, c, err
	}
	if c.doc == "" && c.inclDoc {
		keys := make([]kv.Key, len(c.states))
		for i, st := range c.states {
			keys[i] = c.s.k.dbCountKey(c.uuid, st)
		}
		total, err := sumCounters(tr, keys)
		if err != nil {
			return 0, 0, c, err
		}
		if total <= int64(n) {
			return int(total), 1 + len(keys), c.leave(), nil
		}
	}
	docs, exhausted, read, err := c.inDB(tr, max(1, n/len(c.ranges())))
	if err != nil {
		return 0, 0, c, err
	}
	return len(docs), read, c.advance(docs, exhausted), nil
}
