package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

func init() { register("dormant", runDormantBench) }

// dormantBench is "many replications, few active" (make bench-dormant):
// -n continuous replications from -n user databases of one CouchDB 3.5
// into a shared one, as a database-per-user deployment runs them, with the
// same max_jobs, max_churn and interval for CouchDB 3.5's own replicator
// and for one fdbrep node (the real engine, fdbrep's default parking
// settings unless -park-after is set), fdbrep once with CouchDB's
// _db_updates feed (_global_changes created) and once without it. From
// -write-after after the replications were written (0: once they have
// settled) it writes -writes documents to random user databases, one every
// -write-gap, and times each until it is readable in the shared database,
// giving up at -give-up. Once they have settled (CouchDB's all ran once;
// fdbrep's too) it measures what they cost while idle
// (connections to CouchDB, CPU, memory, store keys and bytes per
// replication). Then, without _global_changes, -few replications (fewer
// than max_jobs) on both, their writes timed the same way: where parking
// buys nothing, fdbrep must not be slower than CouchDB.
type dormantBench struct {
	n, writes                 int
	maxJobs, maxChurn         int
	interval, parkAfter       time.Duration
	writeAfter                time.Duration
	few                       int
	writeGap, giveUp, idle    time.Duration
	settleMax, couchSettleMax time.Duration
	inMemory, couchdb, noFeed bool
	feed, template            bool
	base                      string // CouchDB's URL, with the admin's credentials
	couchPID, couchPort       int
	env                       *benchEnv
	rng                       *rand.Rand
	results                   []dormantResult
	// The simulated run: simN replications over simServers servers on
	// simNodes nodes of simMaxJobs each, parking after simParkAfter.
	simN, simServers, simNodes, simMaxJobs int
	simParkAfter                           time.Duration
	cpuProfile, idleProfile                string // the simulated run's settling and idle window, profiled
}

// dormantResult is one run's figures.
type dormantResult struct {
	name           string
	settled        time.Duration // until every replication ran once
	lags           []time.Duration
	missed         int
	conns          int     // connections to CouchDB held while idle
	cpu, couchCPU  float64 // cores while idle: the replicator's process, and CouchDB serving it (fdbrep's runs)
	mem            uint64  // the replicator's memory: CouchDB's resident set, or fdbrep's Go heap
	keys, bytes    float64 // store keys and bytes per replication (fdbrep)
	watches, polls int     // watches following _db_updates, and polling (fdbrep)
}

func runDormantBench(args []string) error {
	fs := flag.NewFlagSet("dormant", flag.ContinueOnError)
	b := &dormantBench{rng: rand.New(rand.NewPCG(1, 2))}
	fs.IntVar(&b.n, "n", 600, "continuous replications, one per user database")
	fs.IntVar(&b.writes, "writes", 40, "documents written to random user databases, each timed")
	fs.IntVar(&b.maxJobs, "max-jobs", 100, "max_jobs (both)")
	fs.IntVar(&b.maxChurn, "max-churn", 20, "max_churn (both)")
	fs.DurationVar(&b.interval, "interval", 5*time.Second, "scheduling interval (both)")
	fs.DurationVar(&b.parkAfter, "park-after", 0, "fdbrep's park_after_sec (0: its default)")
	fs.DurationVar(&b.writeAfter, "write-after", 30*time.Second, "start the timed writes this long after the replications were written (0: once they have settled)")
	fs.IntVar(&b.few, "few", 20, "then this many replications (fewer than max_jobs) without _global_changes on both, their writes timed; 0 skips it")
	fs.DurationVar(&b.writeGap, "write-gap", 500*time.Millisecond, "time between two timed writes")
	fs.DurationVar(&b.giveUp, "give-up", 150*time.Second, "a write not readable in the shared database by then is missed")
	fs.DurationVar(&b.idle, "idle", 20*time.Second, "idle window over which CPU is measured")
	fs.DurationVar(&b.settleMax, "settle-max", 20*time.Minute, "longest wait for the replications to settle (then measured as they stand)")
	fs.DurationVar(&b.couchSettleMax, "couch-settle-max", 0, "longest wait for CouchDB's replications to have all run once (0: -settle-max)")
	fs.BoolVar(&b.inMemory, "in-memory", false, "in-memory store instead of a durable one in a temporary directory")
	fs.BoolVar(&b.couchdb, "couchdb", true, "run CouchDB 3.5's own replicator too")
	fs.BoolVar(&b.feed, "feed", true, "run fdbrep with _db_updates (_global_changes created)")
	fs.BoolVar(&b.template, "template", true, "run fdbrep again with _db_updates, with one template document (\"databases\": \"u?????\") in place of the -n replication documents")
	fs.BoolVar(&b.noFeed, "no-feed", true, "run fdbrep a second time without _db_updates (_global_changes deleted: its watches poll)")
	fs.IntVar(&b.simN, "sim-n", 100_000, "then a simulated run (the simulated engine, no peer): this many replications; 0 skips it")
	fs.IntVar(&b.simServers, "sim-servers", 10, "simulated run: source servers")
	fs.IntVar(&b.simNodes, "sim-nodes", 3, "simulated run: replication nodes")
	fs.IntVar(&b.simMaxJobs, "sim-max-jobs", 1000, "simulated run: max_jobs (and max_churn) per node")
	fs.DurationVar(&b.simParkAfter, "sim-park-after", 5*time.Second, "simulated run: park_after")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a CPU profile of the simulated run's settling to this file")
	fs.StringVar(&b.idleProfile, "idle-cpuprofile", "", "write a CPU profile of the simulated run's idle window to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := launchBenchCouch()
	if c == nil || err != nil {
		return err
	}
	defer c.stop()
	b.base, b.couchPID = c.base, c.pid
	u, _ := url.Parse(c.base)
	b.couchPort, _ = strconv.Atoi(u.Port())
	b.env = newBenchEnv("dormant", "")
	defer b.env.close()
	parking := "fdbrep's default parking settings"
	if b.parkAfter > 0 {
		parking = fmt.Sprintf("fdbrep parks after %v idle", b.parkAfter)
	}
	fmt.Printf("\nmany replications, few active: %d continuous replications from as many user databases of one CouchDB 3.5 into one shared database; "+
		"max_jobs %d, max_churn %d, interval %v for both; %s; %d writes to random user databases from %v after the replications were written, one every %v, each timed until readable, given up at %v\n",
		b.n, b.maxJobs, b.maxChurn, b.interval, parking, b.writes, b.writeAfter, b.writeGap, b.giveUp)
	t0 := time.Now()
	if err := b.createUserDBs(); err != nil {
		return err
	}
	fmt.Printf("  %d user databases created in %v\n", b.n, time.Since(t0).Round(time.Second))
	if b.couchdb {
		if err := b.runCouch("shared_couch", "c"); err != nil {
			return fmt.Errorf("CouchDB's replicator: %w", err)
		}
	}
	if _, err := doJSON(http.MethodPut, b.base+"/_global_changes", nil, nil); err != nil && !strings.Contains(err.Error(), "412") {
		return err
	}
	if b.feed {
		if err := b.runFdbrep("fdbrep, _db_updates", "shared_feed"); err != nil {
			return fmt.Errorf("fdbrep: %w", err)
		}
	}
	if b.template {
		if err := b.runFdbrep("fdbrep, one template, _db_updates", "shared_tmpl"); err != nil {
			return fmt.Errorf("fdbrep with a template: %w", err)
		}
	}
	if b.noFeed || b.few > 0 {
		if _, err := doJSON(http.MethodDelete, b.base+"/_global_changes", nil, nil); err != nil {
			return err
		}
	}
	if b.noFeed {
		if err := b.runFdbrep("fdbrep, no _db_updates", "shared_poll"); err != nil {
			return fmt.Errorf("fdbrep without _db_updates: %w", err)
		}
	}
	b.report()
	if b.few > 0 {
		if err := b.runFew(); err != nil {
			return err
		}
	}
	if b.simN > 0 {
		return b.runSim()
	}
	return nil
}

// userDB is the name of user database i.
func userDB(i int) string { return fmt.Sprintf("u%05d", i) }

// createUserDBs creates the user databases (one shard each, as small
// per-user databases are made) with one document each.
func (b *dormantBench) createUserDBs() error {
	for i := range b.n {
		if _, err := doJSON(http.MethodPut, b.base+"/"+userDB(i)+"?q=1", nil, nil); err != nil {
			return err
		}
		if _, err := doJSON(http.MethodPut, b.base+"/"+userDB(i)+"/first", map[string]any{"user": i}, nil); err != nil {
			return err
		}
	}
	return nil
}

// spec is replication i's document, into target.
func (b *dormantBench) spec(i int, target string) map[string]any {
	return map[string]any{"source": b.base + "/" + userDB(i), "target": b.base + "/" + target, "continuous": true}
}

// runCouch runs the replications on CouchDB 3.5's own replicator, with
// the same settings, into target (its timed writes' ids tagged run).
func (b *dormantBench) runCouch(target, run string) error {
	if err := putDB(b.base, target+"?q=1"); err != nil {
		return err
	}
	for k, v := range map[string]string{"max_jobs": strconv.Itoa(b.maxJobs), "max_churn": strconv.Itoa(b.maxChurn),
		"interval": strconv.FormatInt(b.interval.Milliseconds(), 10)} {
		if _, err := doJSON(http.MethodPut, b.base+"/_node/_local/_config/replicator/"+k, v, nil); err != nil {
			return err
		}
	}
	// The scheduler reads its interval when it starts: restart CouchDB's
	// applications with the settings _config persisted.
	if err := b.restartCouch(); err != nil {
		return err
	}
	if _, err := doJSON(http.MethodPut, b.base+"/_replicator", nil, nil); err != nil && !strings.Contains(err.Error(), "412") {
		return err
	}
	start := time.Now()
	for from := 0; from < b.n; from += 1000 {
		var docs []map[string]any
		for i := from; i < min(b.n, from+1000); i++ {
			d := b.spec(i, target)
			d["_id"] = fmt.Sprintf("r%05d", i)
			docs = append(docs, d)
		}
		if _, err := doJSON(http.MethodPost, b.base+"/_replicator/_bulk_docs", map[string]any{"docs": docs}, nil); err != nil {
			return err
		}
	}
	res := dormantResult{name: "CouchDB 3.5's replicator"}
	var err error
	if b.writeAfter > 0 {
		time.Sleep(time.Until(start.Add(b.writeAfter)))
		if res.lags, res.missed, err = b.timeWrites(run, target); err != nil {
			return err
		}
	}
	res.settled, err = b.settleWithin(cmp.Or(b.couchSettleMax, b.settleMax), start, func() (int, error) {
		var list struct {
			Jobs []struct {
				History []struct {
					Type string `json:"type"`
				} `json:"history"`
			} `json:"jobs"`
		}
		if _, err := doJSON(http.MethodGet, fmt.Sprintf("%s/_scheduler/jobs?limit=%d", b.base, b.n), nil, &list); err != nil {
			return 0, err
		}
		n := 0
		for _, j := range list.Jobs {
			if slices.ContainsFunc(j.History, func(h struct {
				Type string `json:"type"`
			}) bool {
				return h.Type == "started"
			}) {
				n++
			}
		}
		return n, nil
	}, "ran once")
	if err != nil {
		return err
	}
	http.DefaultClient.CloseIdleConnections()
	cpu0, rss := procCPU(b.couchPID), procRSS(b.couchPID)
	time.Sleep(b.idle)
	res.cpu = (procCPU(b.couchPID) - cpu0).Seconds() / b.idle.Seconds()
	res.conns, res.mem = connections(b.couchPID, b.couchPort), max(rss, procRSS(b.couchPID))
	if b.writeAfter == 0 {
		if res.lags, res.missed, err = b.timeWrites(run, target); err != nil {
			return err
		}
	}
	b.results = append(b.results, res)
	b.line(res)
	// CouchDB's replications stop with their database, but one by one
	// (with 10,000, half were still scheduled and 490 running three
	// minutes after the delete, loading CouchDB while fdbrep's run was
	// measured): restart CouchDB's applications, which then find no
	// replicator database, and wait until no replication runs.
	if _, err = doJSON(http.MethodDelete, b.base+"/_replicator", nil, nil); err != nil {
		return err
	}
	if err := b.restartCouch(); err != nil {
		return err
	}
	for t0 := time.Now(); ; time.Sleep(time.Second) {
		var jobs struct {
			TotalRows int `json:"total_rows"`
		}
		if _, err := doJSON(http.MethodGet, b.base+"/_scheduler/jobs?limit=0", nil, &jobs); err == nil && jobs.TotalRows == 0 {
			return nil
		}
		if time.Since(t0) > 5*time.Minute {
			return fmt.Errorf("CouchDB's replicator still has %d jobs 5 minutes after its database was deleted", jobs.TotalRows)
		}
	}
}

// restartCouch restarts CouchDB's applications (POST
// /_node/_local/_restart) and waits until it answers again.
func (b *dormantBench) restartCouch() error {
	if _, err := doJSON(http.MethodPost, b.base+"/_node/_local/_restart", nil, nil); err != nil {
		return err
	}
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; time.Sleep(50 * time.Millisecond) {
		http.DefaultClient.CloseIdleConnections()
		if _, err := doJSON(http.MethodGet, b.base+"/_up", nil, nil); err != nil {
			break
		}
	}
	for t0 := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		http.DefaultClient.CloseIdleConnections()
		if _, err := doJSON(http.MethodGet, b.base+"/_up", nil, nil); err == nil {
			return nil
		}
		if time.Since(t0) > time.Minute {
			return fmt.Errorf("CouchDB did not come back within a minute of its restart")
		}
	}
}

// runFdbrep runs the replications on one fdbrep node.
func (b *dormantBench) runFdbrep(name, target string) error {
	if err := putDB(b.base, target+"?q=1"); err != nil {
		return err
	}
	db, drop, err := b.env.openFreshStore(target, b.inMemory)
	if err != nil {
		return err
	}
	defer drop()
	ctx := context.Background()
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg := scheduler.Config{
		Config:  replicator.Config{Logger: &logger, Metrics: replicator.NewMetrics()},
		MaxJobs: b.maxJobs, MaxChurn: b.maxChurn, Interval: b.interval, ParkAfter: b.parkAfter, // 0: the default
		TransientJobMaxAge: time.Hour, NodeName: "node0",
	}
	feJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	plane, err := control.New(replicator.NewStore(db, feJobs, nil), cfg.Config)
	if err != nil {
		return err
	}
	nodeJobs, err := fdbjobs.New(db, fdbjobs.Config{TimeUnit: replicator.TimeUnit})
	if err != nil {
		return err
	}
	if err := nodeJobs.Start(ctx); err != nil {
		return err
	}
	defer nodeJobs.Stop()
	eng := replicator.EngineDefault{Logger: logger, Logins: couch.NewLogins(0, nil), Pools: couch.NewPools()} // as a node runs it
	node, err := scheduler.New(replicator.NewStore(db, nodeJobs, nil), eng, cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := node.Start(ctx); err != nil {
		return err
	}
	defer node.Stop()
	docs, doc := b.n, func(i int) (string, string, any) { return "_replicator", fmt.Sprintf("r%05d", i), b.spec(i, target) }
	if target == "shared_tmpl" {
		// One template: a replication per user database (u00000, …).
		docs, doc = 1, func(int) (string, string, any) {
			return "_replicator", "users", map[string]any{"source": map[string]any{"url": b.base + "/", "databases": "u?????"},
				"target": b.base + "/" + target, "continuous": true}
		}
	}
	if err := writeDocs(ctx, db, plane, 0, docs, doc); err != nil {
		return err
	}
	res := dormantResult{name: name}
	if b.writeAfter > 0 {
		time.Sleep(time.Until(start.Add(b.writeAfter)))
		if res.lags, res.missed, err = b.timeWrites(strings.TrimPrefix(target, "shared_"), target); err != nil {
			return err
		}
	}
	res.settled, err = b.settle(start, func() (int, error) { return settledDocs(ctx, plane) }, "ran once")
	if err != nil {
		return err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.mem = ms.HeapAlloc
	cpu0, couch0 := cpuTime(), procCPU(b.couchPID)
	time.Sleep(b.idle)
	res.cpu = (cpuTime() - cpu0).Seconds() / b.idle.Seconds()
	res.couchCPU = (procCPU(b.couchPID) - couch0).Seconds() / b.idle.Seconds()
	res.conns = connections(os.Getpid(), b.couchPort)
	keys, bytes, err := storeSize(ctx, db)
	if err != nil {
		return err
	}
	res.keys, res.bytes = float64(keys)/float64(b.n), float64(bytes)/float64(b.n)
	w := node.Watches()
	res.watches, res.polls = w.DBUpdates, w.Refused+w.Missing
	if b.writeAfter == 0 {
		if res.lags, res.missed, err = b.timeWrites(strings.TrimPrefix(target, "shared_"), target); err != nil {
			return err
		}
	}
	b.results = append(b.results, res)
	b.line(res)
	return nil
}

// settledDocs counts the replications that have settled on an fdbrep
// node as CouchDB's are counted: those that ran once (each then parked,
// kept its slot caught up, or went back to the queue in a rotation).
func settledDocs(ctx context.Context, plane *control.Plane) (int, error) {
	list, err := plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: 1 << 30})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range list.Jobs {
		if slices.ContainsFunc(j.History, func(h api.HistoryEntry) bool { return h.Type == replicator.EventStarted }) {
			n++
		}
	}
	return n, nil
}

// runFew runs -few replications, fewer than max_jobs, on CouchDB 3.5's
// replicator and on fdbrep, without _global_changes, and times their
// writes as the main runs do: with nothing waiting for a slot and no
// _db_updates feed, parking buys nothing, and a change must arrive as
// soon as CouchDB's own replication brings it.
func (b *dormantBench) runFew() error {
	saved, savedResults := b.n, b.results
	defer func() { b.n = saved }()
	b.n, b.results = b.few, nil
	fmt.Printf("\nfewer replications than slots: %d continuous replications (max_jobs %d), no _global_changes (no _db_updates feed), fdbrep's default parking settings\n",
		b.few, b.maxJobs)
	if b.couchdb {
		if err := b.runCouch("shared_couch_few", "cfew"); err != nil {
			return fmt.Errorf("CouchDB's replicator, few: %w", err)
		}
	}
	if err := b.runFdbrep("fdbrep, few, no _db_updates", "shared_few"); err != nil {
		return fmt.Errorf("fdbrep, few: %w", err)
	}
	b.report()
	b.results = append(savedResults, b.results...)
	return nil
}

// settle waits until done says every replication has settled (what says
// it), printing progress, at most settleMax.
func (b *dormantBench) settle(start time.Time, done func() (int, error), what string) (time.Duration, error) {
	return b.settleWithin(b.settleMax, start, done, what)
}

// settleWithin is settle, waiting at most limit.
func (b *dormantBench) settleWithin(limit time.Duration, start time.Time, done func() (int, error), what string) (time.Duration, error) {
	last := time.Now()
	for {
		n, err := done()
		if err != nil {
			return 0, err
		}
		if n >= b.n {
			return time.Since(start), nil
		}
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Printf("    %5.0fs: %d of %d %s\n", time.Since(start).Seconds(), n, b.n, what)
		}
		if time.Since(start) > limit {
			// Measured as it stands: a rotation that has not come round
			// by then is part of what is measured.
			fmt.Printf("    not settled after %v: %d of %d %s; measured as it stands\n", limit, n, b.n, what)
			return time.Since(start), nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// timeWrites writes b.writes documents to random user databases, one
// every writeGap, and times each until target has it; those not there by
// giveUp are missed.
func (b *dormantBench) timeWrites(run, target string) ([]time.Duration, int, error) {
	written := map[string]time.Time{}
	var ids []string
	arrived := map[string]time.Duration{}
	check := func() error {
		var pending []string
		for _, id := range ids {
			if _, ok := arrived[id]; !ok {
				pending = append(pending, id)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		var res struct {
			Rows []struct {
				Key   string `json:"key"`
				Error string `json:"error"`
			} `json:"rows"`
		}
		if _, err := doJSON(http.MethodPost, b.base+"/"+target+"/_all_docs", map[string]any{"keys": pending}, &res); err != nil {
			return err
		}
		now := time.Now()
		for _, r := range res.Rows {
			if r.Error == "" {
				arrived[r.Key] = now.Sub(written[r.Key])
			}
		}
		return nil
	}
	next := time.Now()
	for k := range b.writes {
		id := fmt.Sprintf("w-%s-%03d", run, k)
		i := b.rng.IntN(b.n)
		if _, err := doJSON(http.MethodPut, b.base+"/"+userDB(i)+"/"+id, map[string]any{"k": k}, nil); err != nil {
			return nil, 0, err
		}
		written[id], ids = time.Now(), append(ids, id)
		for next = next.Add(b.writeGap); time.Now().Before(next); time.Sleep(50 * time.Millisecond) {
			if err := check(); err != nil {
				return nil, 0, err
			}
		}
	}
	for end := time.Now().Add(b.giveUp); len(arrived) < len(ids) && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := check(); err != nil {
			return nil, 0, err
		}
	}
	var lags []time.Duration
	missed := 0
	for _, id := range ids {
		if d, ok := arrived[id]; ok && d <= b.giveUp {
			lags = append(lags, d)
		} else {
			missed++
		}
	}
	slices.Sort(lags)
	return lags, missed, nil
}

// connections counts process pid's established TCP connections to port.
func connections(pid, port int) int {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "01" || !inodes[fs[9]] {
				continue
			}
			if _, p, ok := strings.Cut(fs[2], ":"); ok {
				if v, err := strconv.ParseInt(p, 16, 32); err == nil && int(v) == port {
					n++
				}
			}
		}
	}
	return n
}

// line prints one run's figures.
func (b *dormantBench) line(r dormantResult) {
	fmt.Printf("  %s: settled after %v; %d of %d writes arrived within %v, lag p50 %v p90 %v p99 %v max %v; idle: %d connections to CouchDB, %.3f cores",
		r.name, r.settled.Round(time.Second), len(r.lags), b.writes, b.giveUp, pctOr(r.lags, 50), pctOr(r.lags, 90), pctOr(r.lags, 99), pctOr(r.lags, 100),
		r.conns, r.cpu)
	if r.keys > 0 {
		fmt.Printf(" (CouchDB serving it %.3f cores), Go heap %.0f MiB; store %.1f keys, %.0f bytes per replication; watches: %d on _db_updates, %d polling\n",
			r.couchCPU, float64(r.mem)/(1<<20), r.keys, r.bytes, r.watches, r.polls)
	} else {
		fmt.Printf(", resident memory %.0f MiB\n", float64(r.mem)/(1<<20))
	}
}

// pctOr is the p-th percentile of sorted lags, rounded, or "-" for none.
func pctOr(lags []time.Duration, p int) string {
	if len(lags) == 0 {
		return "-"
	}
	i := min(len(lags)-1, (len(lags)*p+99)/100-1)
	return lags[max(0, i)].Round(10 * time.Millisecond).String()
}

// report prints the runs side by side, and fdbrep's ratios to CouchDB's.
func (b *dormantBench) report() {
	fmt.Printf("\n  | | arrived within %v | lag p50 | lag p99 | max | connections while idle | replicator's CPU while idle | CouchDB's CPU meanwhile |\n  | --- | --- | --- | --- | --- | --- | --- | --- |\n", b.giveUp)
	for _, r := range b.results {
		couchCPU := fmt.Sprintf("%.3f cores", r.couchCPU)
		if r.keys == 0 {
			couchCPU = "(the replicator's)" // CouchDB's own replicator runs in CouchDB
		}
		fmt.Printf("  | %s | %d of %d | %s | %s | %s | %d | %.3f cores | %s |\n", r.name, len(r.lags), b.writes, pctOr(r.lags, 50),
			pctOr(r.lags, 99), pctOr(r.lags, 100), r.conns, r.cpu, couchCPU)
	}
	if len(b.results) > 1 && b.results[0].keys == 0 && len(b.results[0].lags) > 0 {
		c := b.results[0]
		for _, r := range b.results[1:] {
			if len(r.lags) == 0 {
				continue
			}
			fmt.Printf("  %s / CouchDB: lag p99 %.3fx, connections while idle %d / %d\n", r.name,
				float64(pctDur(r.lags, 99))/float64(pctDur(c.lags, 99)), r.conns, c.conns)
		}
	}
	var docs, tmpl *dormantResult
	for i := range b.results {
		switch b.results[i].name {
		case "fdbrep, _db_updates":
			docs = &b.results[i]
		case "fdbrep, one template, _db_updates":
			tmpl = &b.results[i]
		}
	}
	if docs != nil && tmpl != nil && len(docs.lags) > 0 && len(tmpl.lags) > 0 {
		fmt.Printf("  one template / %d documents: store keys per replication %.1f / %.1f, bytes %.0f / %.0f; idle CPU %.3f / %.3f cores, "+
			"connections %d / %d; lag p50 %v / %v, p99 %v / %v\n", b.n, tmpl.keys, docs.keys, tmpl.bytes, docs.bytes, tmpl.cpu, docs.cpu,
			tmpl.conns, docs.conns, pctOr(tmpl.lags, 50), pctOr(docs.lags, 50), pctOr(tmpl.lags, 99), pctOr(docs.lags, 99))
	}
}

func pctDur(lags []time.Duration, p int) time.Duration {
	i := min(len(lags)-1, (len(lags)*p+99)/100-1)
	return lags[max(0, i)]
}
