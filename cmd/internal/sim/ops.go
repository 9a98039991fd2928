package sim

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"time"
)

// workDocs is how many documents a Work operation has a run read and
// write.
const workDocs = 10

// OpKind is what an operation does.
type OpKind int

// The operations, each on fixed small namespaces (database, document,
// host and node slots), so that a sequence stays meaningful when
// operations are removed from it (shrinking).
const (
	PutDoc        OpKind = iota // create or update a _replicator document
	DeleteDoc                   // delete it
	Replicate                   // POST /_replicate, waiting for a one-shot's result
	ReplicateCont               // POST /_replicate of a continuous replication
	CancelRep                   // POST /_replicate "cancel" of an earlier one
	GiveUp                      // the client of a waiting POST /_replicate goes away
	CreateDB                    // create a replicator database
	DeleteDB                    // delete it, and with it its documents' jobs
	SetMaxJobs                  // [replicator] max_jobs, cluster-wide
	SetMaxChurn                 // [replicator] max_churn
	SetInterval                 // [replicator] interval_sec
	StartNode                   // start (or restart) a replication node
	StopNode                    // stop it gracefully
	KillNode                    // kill it: its store is cut, its jobs stay running until taken back
	HostDown                    // an endpoint host fails every request
	HostUp                      // and answers again
	ChangeFilter                // the code of a filtered document's filter changes on its source
	PartitionNode               // cut a replication node off from the store, leaving it running (until stopped or killed)
	Work                        // a running job reads and writes documents (between its checkpoints)
	Change                      // a document is written to a continuous job's source
	ChangeLost                  // the same, and its server's _db_updates feed loses its row
	RewindFeed                  // a server's _db_updates feed gives its last rows again
	opKinds
)

var opNames = [...]string{"put-doc", "delete-doc", "replicate", "replicate-continuous", "cancel", "give-up",
	"create-db", "delete-db", "max_jobs", "max_churn", "interval_sec", "start-node", "stop-node", "kill-node",
	"host-down", "host-up", "change-filter", "partition-node", "work", "change", "change-lost", "rewind-feed"}

func (k OpKind) String() string { return opNames[k] }

// Op is one operation at a time since the start of the simulation.
type Op struct {
	At   time.Duration
	Kind OpKind
	DB   int  // replicator database slot (0 is _replicator)
	Doc  int  // document slot
	Cont bool // continuous
	// Filter: the document's replication has a design document filter.
	Filter bool
	Host   int // endpoint host slot
	Node   int // replication node slot
	N      int // a POST /_replicate's number, or a setting's value
}

func (o Op) String() string {
	at := o.At.Round(time.Millisecond)
	switch o.Kind {
	case PutDoc:
		return fmt.Sprintf("%v %s %s/d%d continuous=%v filter=%v host=h%d", at, o.Kind, dbName(o.DB), o.Doc, o.Cont, o.Filter, o.Host)
	case DeleteDoc, ChangeFilter:
		return fmt.Sprintf("%v %s %s/d%d", at, o.Kind, dbName(o.DB), o.Doc)
	case Replicate, ReplicateCont:
		return fmt.Sprintf("%v %s #%d host=h%d", at, o.Kind, o.N, o.Host)
	case CancelRep, GiveUp, Work, Change, ChangeLost:
		return fmt.Sprintf("%v %s #%d", at, o.Kind, o.N)
	case CreateDB, DeleteDB:
		return fmt.Sprintf("%v %s %s", at, o.Kind, dbName(o.DB))
	case SetMaxJobs, SetMaxChurn, SetInterval:
		return fmt.Sprintf("%v %s=%d", at, o.Kind, o.N)
	case StartNode, StopNode, KillNode, PartitionNode:
		return fmt.Sprintf("%v %s r%d", at, o.Kind, o.Node)
	default:
		return fmt.Sprintf("%v %s h%d", at, o.Kind, o.Host)
	}
}

// dbName is the name of replicator database slot i.
func dbName(i int) string {
	if i == 0 {
		return "_replicator"
	}
	return fmt.Sprintf("s%d/_replicator", i)
}

// Setup is a simulation's cluster and starting configuration.
type Setup struct {
	Frontends   int           // api_frontend-only nodes (always up)
	Both        bool          // one more node with both roles, as fdbrep serve runs by default (always up)
	Replicas    int           // replication-only node slots
	Started     int           // of which start at once
	IntervalSec int           // [replicator] interval_sec at start
	MaxJobs     int           // max_jobs at start
	MaxChurn    int           // max_churn at start
	MinRunTime  int           // min_run_time_sec
	MinBackoff  int           // min_backoff_penalty_sec
	MaxBackoff  int           // max_backoff_penalty_sec
	OneShot     time.Duration // how long a one-shot run takes
	DBs         int           // replicator database slots
	Docs        int           // document slots per database
	Hosts       int           // endpoint host slots
	FairShare   bool          // fair share on (else fair_share_window_sec = 0: first come first served)
	// ParkAfter is park_after_sec (0: replications never park), and
	// NoFeedHost a host slot whose server refuses _db_updates (its parked
	// replications are polled; -1: none).
	ParkAfter  int
	NoFeedHost int
}

// genSetup draws a Setup.
func genSetup(rng *rand.Rand) Setup {
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	s := Setup{
		Frontends:   1 + rng.IntN(2),
		Both:        rng.IntN(2) == 0,
		Replicas:    1 + rng.IntN(3),
		IntervalSec: pick(1, 2, 5, 15),
		MaxJobs:     1 + rng.IntN(6),
		MaxChurn:    1 + rng.IntN(3),
		MinRunTime:  pick(1, 10, 60),
		MinBackoff:  pick(1, 4, 32),
		MaxBackoff:  pick(60, 600),
		OneShot:     time.Duration(pick(500, 5000, 30000)) * time.Millisecond,
		DBs:         1 + rng.IntN(3),
		Docs:        4 + rng.IntN(10),
		Hosts:       3,
		FairShare:   rng.IntN(2) == 0,
		ParkAfter:   pick(0, 0, 20, 120),
		NoFeedHost:  pick(-1, 2),
	}
	s.Started = 1 + rng.IntN(s.Replicas)
	return s
}

// genOps draws the operations of a simulation of about intervals
// intervals.
func genOps(rng *rand.Rand, s Setup, intervals int) []Op {
	var ops []Op
	interval := time.Duration(s.IntervalSec) * time.Second
	end := time.Duration(intervals) * interval
	reps := 0
	// Weights of the operation kinds: mostly documents, now and then the
	// rest.
	weights := [opKinds]int{PutDoc: 30, DeleteDoc: 12, Replicate: 5, ReplicateCont: 3, CancelRep: 3, GiveUp: 1,
		CreateDB: 2, DeleteDB: 1, SetMaxJobs: 2, SetMaxChurn: 1, SetInterval: 1, StartNode: 3, StopNode: 1,
		KillNode: 1, HostDown: 2, HostUp: 3, ChangeFilter: 2, PartitionNode: 1, Work: 6, Change: 6, ChangeLost: 1,
		RewindFeed: 1}
	total := 0
	for _, w := range weights {
		total += w
	}
	for at := time.Duration(0); ; {
		// About one operation per interval, in bursts now and then.
		gap := time.Duration(rng.Float64() * 2 * float64(interval))
		if rng.IntN(10) == 0 {
			gap = time.Duration(rng.IntN(50)) * time.Millisecond
		}
		at += gap
		if at >= end {
			return ops
		}
		x := rng.IntN(total)
		kind := OpKind(0)
		for ; x >= weights[kind]; kind++ {
			x -= weights[kind]
		}
		op := Op{At: at, Kind: kind, DB: rng.IntN(s.DBs), Doc: rng.IntN(s.Docs), Cont: rng.IntN(3) > 0, Filter: rng.IntN(4) == 0,
			Host: rng.IntN(s.Hosts), Node: rng.IntN(s.Replicas)}
		switch kind {
		case Replicate, ReplicateCont:
			reps++
			op.N = reps
		case CancelRep, GiveUp:
			if reps == 0 {
				continue
			}
			op.N = 1 + rng.IntN(reps)
		case Work:
			op.N = rng.IntN(1000) // which of the open runs
		case Change, ChangeLost:
			op.N = rng.IntN(1000) // which of the continuous jobs alive
		case SetMaxJobs:
			op.N = 1 + rng.IntN(8)
		case SetMaxChurn:
			op.N = 1 + rng.IntN(4)
		case SetInterval:
			op.N = []int{1, 2, 5, 15}[rng.IntN(4)]
			interval = time.Duration(op.N) * time.Second
		}
		ops = append(ops, op)
	}
}

// sourceURL is the source of a job: unique per document version (v) or
// POST /_replicate (n), on a host slot.
func sourceURL(host int, path string) string {
	return fmt.Sprintf("http://h%d.sim/%s/", host, url.PathEscape(path))
}

// writeAttempts bounds the reads and writes of a document that conflicts
// with the nodes' own updates of it: each conflict is a write that
// committed in between, so a few attempts suffice.
const writeAttempts = 100

// postWrites bounds the simulated time a POST /_replicate takes to write
// its job (a few transactions, under injected latency too): a cancel sent
// sooner after it may find no job, and answer 404 rightly.
const postWrites = time.Second

// runner applies operations to a World and tells the Model.
type runner struct {
	w       *World
	m       *Model
	version int                        // document versions written, for unique sources
	waits   map[int]context.CancelFunc // waiting POST /_replicate by number
	results chan repResult
}

type repResult struct {
	n      int
	status int
	body   map[string]any
	err    error
}

// frontend returns an up node serving the API, chosen by i.
func (r *runner) frontend(i int) *Node {
	var fs []*Node
	for _, n := range r.w.nodes {
		if n.Up && n.Frontend() {
			fs = append(fs, n)
		}
	}
	return fs[i%len(fs)]
}

// apply runs op at now; an error is a failure of the simulation (the API
// answered what it must not).
func (r *runner) apply(op Op, now time.Time, i int) error {
	m := r.m
	ctx := context.Background()
	f := r.frontend(i)
	docPath := func() string { return "/" + url.PathEscape(dbName(op.DB)) + "/d" + fmt.Sprint(op.Doc) }
	key := fmt.Sprintf("%s/d%d", dbName(op.DB), op.Doc)
	switch op.Kind {
	case PutDoc, DeleteDoc:
		if !m.dbs[dbName(op.DB)] {
			res, err := f.Do(ctx, "PUT", docPath(), map[string]any{"source": sourceURL(op.Host, "x"), "target": "http://t.sim/x/"})
			if err == nil && res.Status != 404 {
				return fmt.Errorf("%s in a missing database: %d %s", op, res.Status, res.Raw)
			}
			return err
		}
		// A write races the nodes' own updates of the document (its
		// _replication_state): a 409 reads it again, as a client does.
		var rev string
		write := func(method, path string, body map[string]any, want int) error {
			for attempt := 0; ; attempt++ {
				if attempt == writeAttempts {
					return fmt.Errorf("%s: still 409 after %d attempts", op, attempt)
				}
				cur, err := f.Do(ctx, "GET", docPath(), nil)
				if err != nil {
					return err
				}
				rev, _ = cur.Body["_rev"].(string)
				target := path
				if method == "DELETE" {
					if rev == "" {
						return nil
					}
					target += "?rev=" + rev
				} else if rev != "" {
					body["_rev"] = rev
				}
				var b any // a DELETE sends no body
				if body != nil {
					b = body
				}
				res, err := f.Do(ctx, method, target, b)
				if err == nil && res.Status == 409 {
					continue
				}
				if err != nil || res.Status != want {
					return fmt.Errorf("%s: %d %s %v", op, res.Status, res.Raw, err)
				}
				return nil
			}
		}
		if op.Kind == DeleteDoc {
			if err := write("DELETE", docPath(), nil, 200); err != nil || rev == "" {
				return err
			}
			if j := m.docs[key]; j != nil {
				j.gone = now
				delete(m.docs, key)
			}
			return nil
		}
		r.version++
		src := sourceURL(op.Host, fmt.Sprintf("%s-v%d", key, r.version))
		doc := map[string]any{"source": src, "target": fmt.Sprintf("http://t.sim/%s/", url.PathEscape(key)),
			"continuous": op.Cont}
		if op.Filter {
			doc["filter"] = "d/f"
			r.w.eng.inner.SetFilterCode(src, "function(doc) { return true } // 1")
		}
		if err := write("PUT", docPath(), doc, 201); err != nil {
			return err
		}
		if old := m.docs[key]; old != nil {
			old.gone = now
		}
		j := &job{src: src, doc: key, cont: op.Cont, host: hostOf(src), created: now}
		m.jobs[src], m.docs[key] = j, j
	case Replicate, ReplicateCont:
		src := sourceURL(op.Host, fmt.Sprintf("rep-%d", op.N))
		body := map[string]any{"source": src, "target": fmt.Sprintf("http://t.sim/rep-%d/", op.N), "continuous": op.Kind == ReplicateCont}
		m.jobs[src] = &job{src: src, rep: op.N, cont: op.Kind == ReplicateCont, host: hostOf(src), created: now}
		m.reps[op.N] = &replicate{n: op.N, src: src, cont: op.Kind == ReplicateCont, sent: now}
		wctx, cancel := context.WithCancel(ctx)
		r.waits[op.N] = cancel
		go func() {
			res, err := f.Do(wctx, "POST", "/_replicate", body)
			r.results <- repResult{n: op.N, status: res.Status, body: res.Body, err: err}
		}()
	case CancelRep:
		rp := m.reps[op.N]
		if rp == nil {
			return nil
		}
		res, err := f.Do(ctx, "POST", "/_replicate", map[string]any{"source": rp.src,
			"target": fmt.Sprintf("http://t.sim/rep-%d/", op.N), "continuous": rp.cont, "cancel": true})
		if err != nil {
			return err
		}
		j := m.jobs[rp.src]
		switch {
		case res.Status == 200:
			j.gone = now
		case res.Status == 404 && !j.alive():
		case res.Status == 404 && !rp.done && now.Sub(rp.sent) < postWrites:
			// The POST is on its way (ops that fell behind run back to
			// back): its job may not be written yet, which the cancel
			// then does not find. The POST goes on and answers.
		case res.Status == 404:
			return fmt.Errorf("%s: 404 for a replication the model has %s", op, describe(j))
		default:
			return fmt.Errorf("%s: %d %s", op, res.Status, res.Raw)
		}
	case GiveUp:
		if rp := m.reps[op.N]; rp != nil && !rp.done {
			rp.gaveUp = true
			r.waits[op.N]()
		}
	case CreateDB, DeleteDB:
		if op.DB == 0 {
			return nil // _replicator stays
		}
		name := dbName(op.DB)
		method := "PUT"
		if op.Kind == DeleteDB {
			method = "DELETE"
		}
		res, err := f.Do(ctx, method, "/"+url.PathEscape(name), nil)
		if err != nil {
			return err
		}
		want := map[bool]int{true: 412, false: 201}[m.dbs[name]]
		if op.Kind == DeleteDB {
			want = map[bool]int{true: 200, false: 404}[m.dbs[name]]
		}
		if res.Status != want {
			return fmt.Errorf("%s: %d %s (want %d)", op, res.Status, res.Raw, want)
		}
		m.dbs[name] = op.Kind == CreateDB
		if op.Kind == DeleteDB {
			for key, j := range m.docs {
				if len(key) > len(name) && key[:len(name)+1] == name+"/" {
					j.gone, j.dbGone = now, true
					delete(m.docs, key)
				}
			}
		}
	case SetMaxJobs, SetMaxChurn, SetInterval:
		k := map[OpKind]string{SetMaxJobs: "max_jobs", SetMaxChurn: "max_churn", SetInterval: "interval_sec"}[op.Kind]
		res, err := f.Do(ctx, "PUT", "/_node/_cluster/_config/replicator/"+k, fmt.Sprintf("%d", op.N))
		if err != nil || res.Status != 200 {
			return fmt.Errorf("%s: %d %s %v", op, res.Status, res.Raw, err)
		}
		switch {
		case op.Kind == SetInterval:
			m.setInterval(now, time.Duration(op.N)*time.Second)
		case op.Kind == SetMaxJobs && op.N < m.maxJobs:
			m.lowered = now
		}
		if op.Kind == SetMaxJobs {
			m.maxJobs = op.N
		}
		m.shapeChanged = later(now, m.shapeChanged)
	case Work:
		open := r.w.eng.Open()
		srcs := slices.Sorted(maps.Keys(open))
		if len(srcs) == 0 {
			return nil
		}
		src := srcs[op.N%len(srcs)]
		rec := open[src]
		if rec.run == nil {
			return nil // being started
		}
		r.w.eng.inner.Work(src, workDocs)
		m.worked[src] = work{node: rec.Node, start: rec.Start, at: now, docs: rec.run.Progress().DocsWritten}
	case RewindFeed:
		r.w.eng.inner.RewindFeed(fmt.Sprintf("http://h%d.sim/", op.Host), 5)
	case Change, ChangeLost:
		var srcs []string
		for src, j := range m.jobs {
			if j.alive() && j.cont {
				srcs = append(srcs, src)
			}
		}
		if len(srcs) == 0 {
			return nil
		}
		slices.Sort(srcs)
		src := srcs[op.N%len(srcs)]
		if op.Kind == ChangeLost {
			r.w.eng.inner.ChangeUnannounced(src)
			m.lost[src] = append(m.lost[src], now)
		} else {
			r.w.eng.inner.Change(src)
			m.changes[src] = append(m.changes[src], now)
		}
	case PartitionNode:
		n := r.w.replica(op.Node)
		if !n.Up || n.Partitioned {
			return nil
		}
		ended := r.w.eng.Ended()
		n.Partition()
		// As a death, but its runs go on until its hold on their jobs
		// expires (half the job timeout after its last heartbeat).
		m.deaths[n.Name] = append(m.deaths[n.Name], death{at: now, done: now.Add(m.tm.hold()), ended: ended})
		m.shapeChanged = now.Add(m.tm.nodeExpiry)
		m.nodesChanged(r.w, now)
	case StartNode, StopNode, KillNode:
		n := r.w.replica(op.Node)
		switch {
		case op.Kind == StartNode && !n.Up:
			if err := n.Start(); err != nil {
				return err
			}
			for i, d := range m.deaths[n.Name] {
				if d.restart.IsZero() {
					m.deaths[n.Name][i].restart = now
				}
			}
		case op.Kind == StopNode && n.Up:
			if err := n.Stop(); err != nil {
				return fmt.Errorf("%s: %v", op, err)
			}
		case op.Kind == KillNode && n.Up:
			ended := r.w.eng.Ended()
			n.Kill()
			m.deaths[n.Name] = append(m.deaths[n.Name], death{at: now, done: time.Now(), ended: ended})
			// The others learn of its death when its membership record
			// expires; until then they keep its share of the jobs.
			m.shapeChanged = now.Add(m.tm.nodeExpiry)
			m.nodesChanged(r.w, now)
			return nil
		default:
			return nil
		}
		m.nodesChanged(r.w, now)
		m.shapeChanged = later(now, m.shapeChanged)
	case ChangeFilter:
		// A running job notices at its next checkpoint and starts again
		// under its new replication id.
		if j := m.docs[key]; j != nil {
			r.version++
			r.w.eng.inner.SetFilterCode(j.src, fmt.Sprintf("function(doc) { return true } // %d", r.version))
		}
	case HostDown:
		h := fmt.Sprintf("h%d.sim", op.Host)
		r.w.eng.SetDown(h, true)
		m.hostDown[h] = true
	case HostUp:
		h := fmt.Sprintf("h%d.sim", op.Host)
		if m.hostDown[h] {
			r.w.eng.SetDown(h, false)
			m.hostDown[h] = false
			m.hostUp[h] = now
		}
	}
	return nil
}

func describe(j *job) string {
	switch {
	case j == nil:
		return "no job"
	case !j.gone.IsZero():
		return "gone at " + j.gone.Format(time.TimeOnly)
	case !j.completed.IsZero():
		return "completed at " + j.completed.Format(time.TimeOnly)
	case !j.failed.IsZero():
		return "failed at " + j.failed.Format(time.TimeOnly)
	}
	return "alive since " + j.created.Format(time.TimeOnly)
}
