package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestSoak runs both topologies for FDBREP_SOAK_DURATION in all (see the
// package documentation).
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of real processes against CouchDB")
	}
	if os.Getenv(faultkv.EnvVar) != "" {
		// The processes' stores do not read it: this pass would repeat
		// the latency one.
		t.Skipf("%s does not reach the fdbrep processes: the soak runs in make test's latency and FoundationDB passes", faultkv.EnvVar)
	}
	if testutil.Race {
		// The processes are built without the race detector: this pass
		// would repeat the latency one, on a CPU-bound machine.
		t.Skip("the soak's fdbrep processes are built without the race detector: the soak runs in make test's latency and FoundationDB passes")
	}
	total := soakDuration
	if s := os.Getenv(soakDurationEnv); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "%s=%q", soakDurationEnv, s)
		total = d
	}
	couch := couchtest.StartCouchDB(t)
	topos := soakTopologies()
	var build []string
	if kvtest.OnFoundationDB(t) {
		// The processes run on the cluster, each topology in a tenant of
		// its own. fdbrep cluster runs on the embedded store only: the
		// roles as processes of their own on FoundationDB are the
		// deployment test's.
		build = []string{"-tags", "fdb"}
		topos = topos[:1]
	}
	bin := buildBinary(t, build...)
	seed := testutil.SeedFrom(t, soakSeedEnv)
	for i, topo := range topos {
		t.Run(topo.name, func(t *testing.T) {
			s := newSoak(t, bin, couch, topo, seed, i)
			s.run(total / time.Duration(len(topos)))
		})
	}
}

const (
	soakSeedEnv     = "FDBREP_SOAK_SEED"
	soakDurationEnv = "FDBREP_SOAK_DURATION"
	// soakDuration is the default time of operations, both topologies:
	// short enough for go test ./... (about 3 minutes in all).
	soakDuration = 2 * time.Minute
)

// The service's timing as the test configures it, and the test's own.
const (
	soakInterval = time.Second // [replicator] interval_sec
	// soakStep is the longest interval step: the interval and its third of
	// jitter.
	soakStep       = soakInterval + soakInterval/3
	soakJobTimeout = 6 * time.Second // job_timeout_sec: the activity monitor's period
	// soakTakeBack bounds when the activity monitor of a restarted process
	// re-enqueues a job an acceptor claimed as the process died (a first
	// check reads the activity clock, the next one, a timeout and up to
	// half of one later, re-enqueues).
	soakTakeBack = 2 * soakJobTimeout
	// soakStopGrace is the scheduler's grace for a stopping run's final
	// checkpoint (min(2 s, shutdown timeout / 2)).
	soakStopGrace = 2 * time.Second
	// soakOneShot bounds a one-shot run of one of the test's small
	// databases.
	soakOneShot = 5 * time.Second
	// soakPoll is the time between checks, a few per interval.
	soakPoll = 300 * time.Millisecond
	// soakOpGap is the longest seeded gap between two operations.
	soakOpGap = 1200 * time.Millisecond
	// soakMaxJobsEnd is the max_jobs set for the end: room for every job.
	soakMaxJobsEnd = 64
)

// soakSlack is added to every bound: the processes, CouchDB and the test
// share a loaded machine (2 cores, other packages' tests, maybe the race
// detector in this process, in make test-fdb the FoundationDB cluster's
// three processes and the other packages' tests on it: there a POST
// /_replicate once answered 10 s after its job completed, where the same
// seed alone answered in time).
func soakSlack() time.Duration {
	switch {
	case os.Getenv("FDBREP_KV_BACKEND") == "fdb":
		return 15 * time.Second
	case testutil.Race:
		return 8 * time.Second
	}
	return 5 * time.Second
}

// soakLag is how long a log line may trail what it reports as seen from
// another node's lines: each node logs after its transaction commits.
func soakLag() time.Duration {
	if testutil.Race {
		return 4 * time.Second
	}
	return 2 * time.Second
}

// soakSettle is how long the views may disagree (with each other or with
// the logs) before it counts: each view is its own read, and a node logs
// after it commits.
func soakSettle() time.Duration {
	if testutil.Race {
		return 10 * time.Second
	}
	return 6 * time.Second
}

// soakTopology is how the fdbrep process is started.
type soakTopology struct {
	name      string
	nodes     []string // the replication nodes' names
	frontends int      // api_frontend nodes, on consecutive ports
	ready     string   // the log line once every node serves
	args      func(dataDir string, addrs []string) []string
}

func soakTopologies() []soakTopology {
	return []soakTopology{{
		name: "serve", nodes: []string{"soak@127.0.0.1"}, frontends: 1, ready: "fdbrep node up",
		args: func(dir string, addrs []string) []string {
			return []string{"serve", "-bind", addrs[0], "-node-name", "soak@127.0.0.1", "-data-dir", dir, "-log-format", "json"}
		},
	}, {
		name: "cluster", nodes: []string{"replication1", "replication2"}, frontends: 2, ready: "fdbrep cluster up",
		args: func(dir string, addrs []string) []string {
			return []string{"cluster", "-base-bind", addrs[0], "-frontends", "2", "-replication-nodes", "2",
				"-data-dir", dir, "-log-format", "json"}
		},
	}}
}

// soak is one topology's run.
type soak struct {
	t        *testing.T
	topo     soakTopology
	rootSeed uint64
	rng      *rand.Rand // the operations' choices
	pick     *rand.Rand // the frontends' and the checks' (as many as the timing makes)
	couch    *couchtest.Server
	bin      string
	env      []string
	args     []string
	addrs    []string
	pass     string // the fdbrep admin's password (never logged)
	client   *http.Client
	postCl   *http.Client
	prefix   string // of the CouchDB databases
	closed   string // a URL on a closed port
	began    time.Time
	deadline time.Time

	proc        *soakProc
	ready       bool
	kills       int
	lastKill    time.Time
	lastRestart time.Time
	// shapeChanged is when the process last restarted or the
	// configuration changed: the bounds count from there.
	shapeChanged time.Time
	fitSince     time.Time

	maxJobs, maxChurn int
	limits            []soakLimit

	dbs      map[string]bool         // replicator databases that exist
	docs     map[string]*soakVersion // "db/doc" -> the document's version
	versions map[string]*soakVersion // key -> version
	jobVer   map[string]*soakVersion // job id -> version last seen with it
	open     map[string][]*soakRun   // job id -> runs open in the logs
	overlaps []*soakOverlap
	posts    []*soakPost
	answers  chan soakAnswer
	waiters  sync.WaitGroup
	nextKey  int

	trickle  *soakTrickle
	statics  []string
	lives    []string
	suspects map[string]time.Time // view disagreements, since when
	errors   map[string]bool
	problems []string
	ops      []string
	tail     []string
	other    []string // what earlier incarnations wrote that is not JSON
	stats    map[string]int
	maxSeen  map[string]int           // most running jobs seen on each node (views)
	worst    map[string]time.Duration // longest waits seen, against each bound
}

var soakDBSlots = map[string]int{"_replicator": 8, "s1/_replicator": 4, "s2/_replicator": 4}

func newSoak(t *testing.T, bin string, couch *couchtest.Server, topo soakTopology, seed uint64, i int) *soak {
	s := &soak{
		t: t, topo: topo, rootSeed: seed, rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), pick: rand.New(rand.NewPCG(seed, uint64(i)+100)),
		couch: couch, bin: bin,
		client: &http.Client{Timeout: testutil.WaitTimeout}, postCl: &http.Client{Timeout: 10 * time.Minute},
		prefix: fmt.Sprintf("soak%d", i), dbs: map[string]bool{"_replicator": true}, docs: map[string]*soakVersion{},
		versions: map[string]*soakVersion{}, jobVer: map[string]*soakVersion{}, open: map[string][]*soakRun{},
		answers: make(chan soakAnswer, 4096), suspects: map[string]time.Time{}, errors: map[string]bool{},
		stats: map[string]int{}, maxSeen: map[string]int{}, worst: map[string]time.Duration{},
	}
	t.Logf("%s: seed %d (stream %d)", topo.name, seed, i+1)
	// A password of this run: the test never logs it (scrub also hides it).
	s.pass = fmt.Sprintf("soak-%016x", s.rng.Uint64())
	// Small enough that the jobs often do not fit (rotation), large
	// enough that they often do.
	s.maxJobs, s.maxChurn = s.drawMaxJobs(), 1+s.rng.IntN(3)

	// CouchDB: live sources (the trickle writes to them, for continuous
	// replications), static ones (one-shot replications), 10 and 20
	// documents each; "missing" is never created.
	for j := range 3 {
		s.lives = append(s.lives, fmt.Sprintf("%s-live%d", s.prefix, j))
	}
	for j := range 2 {
		s.statics = append(s.statics, fmt.Sprintf("%s-static%d", s.prefix, j))
	}
	for _, db := range append(append([]string{}, s.lives...), s.statics...) {
		couch.CreateDB(t, db)
		n := 10
		if strings.Contains(db, "static") {
			n = 20
		}
		docs := make([]map[string]any, n)
		for k := range docs {
			docs[k] = map[string]any{"_id": fmt.Sprintf("doc-%08d", k), "n": k, "even": k%2 == 0}
		}
		for _, r := range couch.BulkDocs(t, db, docs, true) {
			require.Empty(t, r.Error, "seeding %s: %s %s", db, r.ID, r.Reason)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.closed = "http://" + ln.Addr().String() + "/nowhere"
	require.NoError(t, ln.Close())

	s.addrs = soakPorts(t, topo.frontends)
	s.env = append(os.Environ(), "FDBREP_ADMINS__ADM="+s.pass, "FDBREP_CHTTPD_AUTH__ITERATIONS=10",
		"FDBREP_LOG__REQUESTS=false",
		"FDBREP_REPLICATOR__INTERVAL_SEC="+strconv.Itoa(int(soakInterval/time.Second)),
		"FDBREP_REPLICATOR__MAX_JOBS="+strconv.Itoa(s.maxJobs),
		"FDBREP_REPLICATOR__MAX_CHURN="+strconv.Itoa(s.maxChurn),
		"FDBREP_REPLICATOR__MIN_RUN_TIME_SEC=1",
		"FDBREP_REPLICATOR__STARTUP_JITTER=100",
		"FDBREP_REPLICATOR__MIN_BACKOFF_PENALTY_SEC=1",
		"FDBREP_REPLICATOR__MAX_BACKOFF_PENALTY_SEC=8",
		// First come first served: the rotation bound is the model's
		// without fair share (which lets a lighter database go first).
		"FDBREP_REPLICATOR__FAIR_SHARE_WINDOW_SEC=0",
		// Parking off: the checks are rotation's (a job rotation stops
		// while caught up would park; parking and waking have the model
		// test, cmd/internal/sim, and the scheduler's tests).
		"FDBREP_REPLICATOR__PARK_AFTER_SEC=0",
		"FDBREP_REPLICATOR__JOB_TIMEOUT_SEC="+strconv.Itoa(int(soakJobTimeout/time.Second)),
		"FDBREP_REPLICATOR__WORKER_PROCESSES=1",
		"FDBREP_REPLICATOR__HTTP_CONNECTIONS=4",
		"FDBREP_REPLICATOR__RETRIES_PER_REQUEST=2")
	s.args = topo.args(filepath.Join(t.TempDir(), "data"), s.addrs)
	if kvtest.OnFoundationDB(t) {
		cluster, tenant := kvtest.ProcessTenant(t)
		s.args = append(s.args, "-backend", "fdb", "-cluster-file", cluster)
		s.env = append(s.env, "FDBREP_FDB__TENANT="+tenant)
	}

	cu, cp := couch.Admin()
	s.trickle = &soakTrickle{base: couch.URL(), user: cu, pass: cp, sources: s.lives, client: &http.Client{Timeout: 30 * time.Second},
		stop: make(chan struct{}), done: make(chan struct{}), sent: map[string]time.Time{}}
	t.Cleanup(func() {
		if s.proc != nil {
			_ = s.proc.cmd.Process.Kill()
			<-s.proc.exited
		}
		s.stopTrickle()
		s.waiters.Wait() // their connections broke with the process
		s.client.CloseIdleConnections()
		s.postCl.CloseIdleConnections()
		s.trickle.client.CloseIdleConnections()
	})
	return s
}

// soakPorts returns n consecutive free ports on 127.0.0.1 (the cluster's
// frontends listen on consecutive ports), for every restart.
func soakPorts(t *testing.T, n int) []string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		lns, addrs := []net.Listener{ln}, []string{ln.Addr().String()}
		for k := 1; k < n; k++ {
			a := net.JoinHostPort("127.0.0.1", strconv.Itoa(port+k))
			l, err := net.Listen("tcp", a)
			if err != nil {
				break
			}
			lns, addrs = append(lns, l), append(addrs, a)
		}
		for _, l := range lns {
			require.NoError(t, l.Close())
		}
		if len(addrs) == n {
			return addrs
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return nil
}

func (s *soak) stopTrickle() {
	select {
	case <-s.trickle.stop:
	default:
		close(s.trickle.stop)
	}
	select {
	case <-s.trickle.done:
	case <-time.After(testutil.WaitTimeout):
		s.t.Errorf("the writer to the sources did not stop within %v", testutil.WaitTimeout)
	}
}

// run runs the operations for d, then the end's checks.
func (s *soak) run(d time.Duration) {
	s.began = time.Now()
	s.limits = []soakLimit{{at: s.began, n: s.maxJobs}}
	go s.trickle.run(s.rng.Uint64())
	s.startProc()
	s.deadline = time.Now().Add(d)
	nextOp, nextPoll := time.Now(), time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for time.Now().Before(s.deadline) && len(s.problems) == 0 {
		next := nextOp
		if nextPoll.Before(next) {
			next = nextPoll
		}
		timer.Reset(time.Until(next))
		select {
		case a := <-s.answers:
			s.answered(a)
			continue
		case <-timer.C:
		}
		now := time.Now()
		if !now.Before(nextPoll) {
			s.poll()
			nextPoll = time.Now().Add(soakPoll)
		}
		if !now.Before(nextOp) && len(s.problems) == 0 {
			s.op()
			gap := time.Duration(s.rng.Float64() * float64(soakOpGap))
			if s.rng.IntN(10) == 0 {
				gap = time.Duration(s.rng.IntN(50)) * time.Millisecond // a burst
			}
			nextOp = time.Now().Add(gap)
		}
	}
	if len(s.problems) == 0 {
		s.finish()
	}
	if len(s.problems) > 0 {
		s.t.Fatal(s.report())
	}
	s.summary()
}

// startProc starts an incarnation of the process and waits until it
// serves, applying its log lines meanwhile.
func (s *soak) startProc() {
	s.ready = false
	s.proc = startSoakProc(s.t, s.bin, s.env, s.args)
	timeout := time.NewTimer(testutil.WaitTimeout)
	defer timeout.Stop()
	for !s.ready {
		select {
		case <-s.proc.notify:
			s.pump()
		case <-s.proc.exited:
			s.pump()
			if !s.ready {
				s.t.Fatalf("%s: fdbrep exited before serving: %v\n%s", s.topo.name, s.proc.cmd.ProcessState,
					s.scrub(strings.Join(append(s.tail, s.proc.otherLines()...), "\n")))
			}
		case <-timeout.C:
			s.t.Fatalf("%s: fdbrep did not serve within %v\n%s", s.topo.name, testutil.WaitTimeout, s.scrub(strings.Join(s.tail, "\n")))
		}
	}
	s.lastRestart = time.Now()
	s.shapeChanged = s.lastRestart
	s.client.CloseIdleConnections()
}

// base is the URL of a frontend, chosen at random.
func (s *soak) base() string { return "http://" + s.addrs[s.pick.IntN(len(s.addrs))] }

// do sends a request as the admin; status 0 with err means no answer.
func (s *soak) do(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.base()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.SetBasicAuth("adm", s.pass)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, raw, err
}

// must sends a request that must answer one of want; otherwise it records
// a problem and returns false.
func (s *soak) must(what, method, path string, body any, want ...int) ([]byte, bool) {
	status, raw, err := s.do(method, path, body)
	for _, w := range want {
		if status == w && err == nil {
			return raw, true
		}
	}
	s.problem("%s: %s %s answered %d %s (error %v); want %v", what, method, path, status, bytes.TrimSpace(raw), err, want)
	return raw, false
}

// problem records a violation; the run stops at the next check.
func (s *soak) problem(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	if s.errors[p] {
		return
	}
	s.errors[p] = true
	s.problems = append(s.problems, fmt.Sprintf("+%v %s", s.since(time.Now()), p))
}

func (s *soak) since(at time.Time) time.Duration {
	return at.Sub(s.began).Round(time.Millisecond)
}

func (s *soak) logOp(format string, args ...any) {
	s.ops = append(s.ops, fmt.Sprintf("+%v %s", s.since(time.Now()), fmt.Sprintf(format, args...)))
}

// soakSecret matches the password of a URL's userinfo.
var soakSecret = regexp.MustCompile(`(://[^:/@\s"]*:)[^@/\s"]*@`)

// scrub hides passwords: URLs' and the admin's.
func (s *soak) scrub(text string) string {
	text = soakSecret.ReplaceAllString(text, "${1}*****@")
	return strings.ReplaceAll(text, s.pass, "*****")
}

func (s *soak) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: soak failed at +%v (replay with %s=%d):\n", s.topo.name, s.since(time.Now()), soakSeedEnv, s.rootSeed)
	ps := s.problems
	if len(ps) > 20 {
		ps = append(ps[:20:20], fmt.Sprintf("… and %d more", len(s.problems)-20))
	}
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	fmt.Fprintf(&b, "state: max_jobs %d, max_churn %d, nodes %v, %d kills", s.maxJobs, s.maxChurn, s.topo.nodes, s.kills)
	if s.kills > 0 {
		fmt.Fprintf(&b, " (the last at +%v, restarted at +%v)", s.since(s.lastKill), s.since(s.lastRestart))
	}
	fmt.Fprintf(&b, ", last restart or configuration change at +%v\n", s.since(s.shapeChanged))
	b.WriteString("open runs (logs):\n")
	for _, r := range s.openRuns() {
		fmt.Fprintf(&b, "  %s on %s since +%v, job %s\n", r.v, r.node, s.since(r.start), r.job)
	}
	b.WriteString("recent operations:\n")
	ops := s.ops
	if len(ops) > 50 {
		ops = ops[len(ops)-50:]
	}
	for _, o := range ops {
		fmt.Fprintf(&b, "  %s\n", o)
	}
	b.WriteString("recent log lines:\n")
	tail := s.tail
	if len(tail) > 120 {
		tail = tail[len(tail)-120:]
	}
	for _, l := range tail {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if other := append(s.other, s.proc.otherLines()...); len(other) > 0 {
		b.WriteString("other output:\n  " + strings.Join(other, "\n  ") + "\n")
	}
	return s.scrub(b.String())
}

func (s *soak) summary() {
	kinds := make([]string, 0, len(s.stats))
	for k := range s.stats {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.stats[k]))
	}
	s.trickle.mu.Lock()
	written, errs := s.trickle.written, s.trickle.errs
	s.trickle.mu.Unlock()
	s.t.Logf("%s: %v, %d operations, %d kills, %d versions, %d source writes (%d failed); most running per node during the operations %v; "+
		"longest waits beyond their bounds (slack %v) %v; %s",
		s.topo.name, time.Since(s.began).Round(time.Second), len(s.ops), s.kills, len(s.versions), written, errs, s.maxSeen,
		soakSlack(), s.worst, strings.Join(parts, ", "))
	if other := append(s.other, s.proc.otherLines()...); len(other) > 0 {
		s.t.Logf("%s: fdbrep's output that is not a JSON log line:\n  %s", s.topo.name, s.scrub(strings.Join(other, "\n  ")))
	}
	var crashed []string
	for _, v := range s.versions {
		if v.works() && v.crashes > 0 {
			crashed = append(crashed, fmt.Sprintf("%s: %d crashes, the last %s", v, v.crashes, v.crashInfo))
		}
	}
	if len(crashed) > 0 {
		sort.Strings(crashed)
		s.t.Logf("%s: replications with working endpoints that crashed (they retried):\n  %s", s.topo.name, s.scrub(strings.Join(crashed, "\n  ")))
	}
}

// --- the log ---------------------------------------------------------

func soakStr(m map[string]any, k string) string {
	v, _ := m[k].(string)
	return v
}

// soakTargetKey returns the database of a (redacted) target URL.
func soakTargetKey(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	path := strings.Trim(p.EscapedPath(), "/")
	if i := strings.LastIndex(path, "/"); i >= 0 {
		path = path[i+1:]
	}
	k, err := url.PathUnescape(path)
	if err != nil {
		return ""
	}
	return k
}

// buildBinary builds fdbrep with flags into a temporary directory and
// returns its path.
func buildBinary(t *testing.T, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fdbrep")
	args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/fdbrep/fdbrep/cmd/fdbrep")
	out, err := exec.Command("go", args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}
