//go:build fdb

package fdbfault

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// The nodes' timing, and the test's.
const (
	interval   = time.Second     // [replicator] interval_sec
	jobTimeout = 6 * time.Second // job_timeout_sec: the hold is half of it
	// outage is how long each fault lasts: longer than the hold, so that
	// the nodes give their jobs up during the whole cluster's outages.
	outage = 8 * time.Second
	// poll is the time between two looks at /_up during an outage.
	poll = 500 * time.Millisecond
)

// recoverBound is how long after the cluster answers again every job runs
// again: the activity monitor takes a job back between one and a bit over
// two job timeouts after its last heartbeat, and a node takes it within
// two interval steps; plus a slack for a loaded machine (this test runs
// beside the rest of the suite).
func recoverBound() time.Duration {
	slack := 15 * time.Second
	if testutil.Race {
		slack = 30 * time.Second
	}
	return 2*jobTimeout + jobTimeout/2 + 3*interval + slack
}

var admin = &testutil.Creds{Name: "adm", Pass: "pass"}

func TestFoundationDBFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a FoundationDB cluster, CouchDB and fdbrep processes")
	}
	fdb := startFDB(t)
	couch := couchtest.StartCouchDB(t)
	bin := buildBinary(t)

	const sources = 3
	for i := range sources {
		couch.CreateDB(t, fmt.Sprintf("src%d", i))
		couch.AddDocs(t, fmt.Sprintf("src%d", i), 0, 30)
	}
	couch.CreateDB(t, "static")
	couch.AddDocs(t, "static", 0, 20)

	a := startNode(t, bin, fdb, "node-a", "api_frontend,replication")
	b := startNode(t, bin, fdb, "node-b", "replication")
	nodes := []*node{a, b}
	api := "http://" + a.addr

	for i := range sources {
		r := testutil.Do(t, "PUT", fmt.Sprintf("%s/_replicator/c%d", api, i), admin, map[string]any{
			"source": couch.AuthDBURL(fmt.Sprintf("src%d", i)), "target": couch.AuthDBURL(fmt.Sprintf("tgt%d", i)),
			"create_target": true, "continuous": true})
		require.Equal(t, 201, r.Status, r.Raw)
	}
	load := startLoad(t, api, couch, sources)

	checkpoint := func(fault string, down time.Time) {
		t.Helper()
		t.Logf("%s: the cluster answers again; checking", fault)
		back := time.Now()
		for _, n := range nodes {
			require.False(t, n.exited(), "%s: %s exited during the fault:\n%s", fault, n.name, n.tail())
		}
		// Every continuous job runs again and catches up with its source.
		deadline := back.Add(recoverBound())
		for i := range sources {
			waitUntil(t, deadline, fmt.Sprintf("%s: c%d running again and caught up", fault, i), func() bool {
				st := docState(api, "_replicator", fmt.Sprintf("c%d", i))
				return st == "running" && docCount(couch.AuthDBURL(fmt.Sprintf("tgt%d", i))) >= load.written(i)
			})
		}
		t.Logf("%s: every continuous job ran again and caught up %v after the cluster answered (bound %v)",
			fault, time.Since(back).Round(100*time.Millisecond), recoverBound())
		// Every acknowledged document is there, nothing else.
		load.checkDocs(t, fault)
		// No job ran on two nodes at once.
		requireNoOverlap(t, fault, nodes)
		_ = down
	}

	runFault := func(name string, do, undo func()) {
		t.Helper()
		t.Logf("%s", name)
		down := time.Now()
		do()
		unavailable := map[string]bool{}
		for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(poll) {
			for _, n := range nodes {
				if n.upStatus() == http.StatusServiceUnavailable {
					unavailable[n.name] = true
				}
			}
		}
		undo()
		fdb.waitAvailable(t)
		if strings.Contains(name, "cluster is down") || strings.Contains(name, "whole cluster") {
			// With one process down a majority keeps the database up (a
			// controller's loss costs a recovery of a few seconds); with
			// none, every node sees it unavailable.
			for _, n := range nodes {
				if n.name != "node-c" {
					require.True(t, unavailable[n.name], "%s: %s's /_up never said the store did not answer", name, n.name)
				}
			}
		}
		checkpoint(name, down)
	}

	runFault("an fdbserver process SIGKILLed and restarted", func() { fdb.kill(t, 1) }, func() { fdb.restart(t, 1) })
	cc := fdb.controller(t)
	runFault(fmt.Sprintf("the cluster controller (process %d) SIGKILLed and restarted", cc),
		func() { fdb.kill(t, cc) }, func() { fdb.restart(t, cc) })
	// The controller alone does not take the database down for long: the
	// check above only asks for its return. The whole cluster does.
	runFault("the whole cluster down", fdb.killAll(t), fdb.restartAll(t))
	var c *node
	runFault("a node started while the cluster is down", func() {
		fdb.killAll(t)()
		c = startNodeNoWait(t, bin, fdb, "node-c", "replication")
	}, fdb.restartAll(t))
	c.waitLog(t, "fdbrep node up")
	nodes = append(nodes, c)
	require.NotEmpty(t, c.find("waiting for FoundationDB"), "node-c said what it waited for")

	// The nodes that ran jobs through the whole cluster's outages gave
	// them up, and said so.
	lost, started, waits := 0, 0, len(c.find("waiting for FoundationDB"))
	for _, n := range nodes {
		lost += len(n.find("replication stopped", "why", "could not renew its hold"))
		started += len(n.find("replication started"))
	}
	require.Positive(t, lost, "no node gave a job up while the cluster was down")
	// And counted it: jobs.holds_lost in the nodes' stats.
	counted := 0.0
	for _, n := range nodes[:2] {
		url := "http://" + n.addr + "/_node/_local/_stats/couch_replicator/jobs/holds_lost"
		creds := admin
		if n.addr == "" {
			url, creds = "http://"+n.health+"/_node/_local/_stats/couch_replicator/jobs/holds_lost", nil
		}
		status, body := get(url, creds)
		require.Equal(t, 200, status, "%s: holds_lost", n.name)
		v, _ := body["value"].(float64)
		counted += v
	}
	require.EqualValues(t, lost, counted, "jobs.holds_lost counts the jobs given up")
	t.Logf("%d runs started on %d nodes; %d given up when a node could not renew its hold; node-c waited through %d failed probes",
		started, len(nodes), lost, waits)

	load.stop()
	t.Logf("load: %s", load)
	checkpointFinal(t, api, couch, load, sources)
	requireNoOverlap(t, "the end", nodes)
}

// checkpointFinal checks the end state: every continuous target holds
// exactly its source, every one-shot document completed with its target
// equal to its source.
func checkpointFinal(t *testing.T, api string, couch *couchtest.Server, load *load, sources int) {
	t.Helper()
	deadline := time.Now().Add(recoverBound())
	for i := range sources {
		src, tgt := couch.AuthDBURL(fmt.Sprintf("src%d", i)), couch.AuthDBURL(fmt.Sprintf("tgt%d", i))
		want := docCount(src)
		waitUntil(t, deadline, fmt.Sprintf("tgt%d caught up", i), func() bool { return docCount(tgt) == want })
		enginetest.RequireSame(t, src, tgt)
	}
	for _, id := range load.acked() {
		waitUntil(t, deadline, id+" completed", func() bool { return docState(api, "_replicator", id) == "completed" })
		enginetest.RequireSame(t, couch.AuthDBURL("static"), couch.AuthDBURL("t-"+id))
	}
}

// waitUntil polls cond until it holds, failing t at deadline.
func waitUntil(t *testing.T, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within its bound", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// client is the test's HTTP client: a request to a node waiting for its
// store gives up, rather than hang the test.
var client = &http.Client{Timeout: 30 * time.Second}

func get(url string, c *testutil.Creds) (int, map[string]any) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, nil
	}
	if c != nil {
		req.SetBasicAuth(c.Name, c.Pass)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body
}

// docState is a _replicator document's state in _scheduler/docs ("" when
// unknown).
func docState(api, db, id string) string {
	status, body := get(fmt.Sprintf("%s/_scheduler/docs/%s/%s", api, db, id), admin)
	if status != 200 {
		return ""
	}
	s, _ := body["state"].(string)
	return s
}

// docCount is a CouchDB database's doc_count (-1 when unknown).
func docCount(dbURL string) int {
	status, body := get(dbURL, nil)
	if status != 200 {
		return -1
	}
	n, _ := body["doc_count"].(float64)
	return int(n)
}

// load writes documents to the continuous replications' sources and
// one-shot _replicator documents through the frontend, one after the
// other, and remembers which writes were acknowledged.
type load struct {
	api   string
	couch *couchtest.Server
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	sources []int           // documents acknowledged per source
	ackedID []string        // _replicator documents acknowledged
	maybe   map[string]bool // written without an answer: may be there
	errs    int
}

func startLoad(t *testing.T, api string, couch *couchtest.Server, sources int) *load {
	l := &load{api: api, couch: couch, done: make(chan struct{}), sources: make([]int, sources), maybe: map[string]bool{}}
	for i := range sources {
		l.sources[i] = 30
	}
	l.wg.Add(2)
	go l.writeSources()
	go l.writeDocs()
	t.Cleanup(l.stop)
	return l
}

func (l *load) stop() {
	select {
	case <-l.done:
		return
	default:
	}
	close(l.done)
	l.wg.Wait()
}

// writeSources adds a document to each source in turn (CouchDB, which
// no fault touches: every write is acknowledged).
func (l *load) writeSources() {
	defer l.wg.Done()
	for n := 0; ; n++ {
		select {
		case <-l.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
		i := n % len(l.sources)
		l.mu.Lock()
		next := l.sources[i]
		l.mu.Unlock()
		status, _ := put(l.couch.AuthDBURL(fmt.Sprintf("src%d", i))+fmt.Sprintf("/w%06d", next), nil, map[string]any{"n": next})
		if status == 201 {
			l.mu.Lock()
			l.sources[i]++
			l.mu.Unlock()
		}
	}
}

// writeDocs writes one-shot _replicator documents through the frontend;
// during an outage their requests fail or time out, which leaves them
// maybe written.
func (l *load) writeDocs() {
	defer l.wg.Done()
	for n := 0; ; n++ {
		select {
		case <-l.done:
			return
		case <-time.After(time.Second):
		}
		id := fmt.Sprintf("o%05d", n)
		status, _ := put(l.api+"/_replicator/"+id, admin, map[string]any{
			"source": l.couch.AuthDBURL("static"), "target": l.couch.AuthDBURL("t-" + id), "create_target": true})
		l.mu.Lock()
		switch status {
		case 201:
			l.ackedID = append(l.ackedID, id)
		default:
			l.maybe[id] = true
			l.errs++
		}
		l.mu.Unlock()
	}
}

func put(url string, c *testutil.Creds, body any) (int, map[string]any) {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest("PUT", url, bytes.NewReader(raw))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if c != nil {
		req.SetBasicAuth(c.Name, c.Pass)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// written is how many documents source i holds as far as the load knows.
func (l *load) written(i int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sources[i]
}

func (l *load) acked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ackedID)
}

func (l *load) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%v source documents, %d _replicator documents acknowledged, %d not answered", l.sources, len(l.ackedID), l.errs)
}

// checkDocs checks the _replicator database against the load: every
// acknowledged document is there, and any other only if its write went
// unanswered.
func (l *load) checkDocs(t *testing.T, fault string) {
	t.Helper()
	status, body := get(l.api+"/_replicator/_all_docs", admin)
	require.Equal(t, 200, status, "%s: _all_docs", fault)
	have := map[string]bool{}
	for _, r := range body["rows"].([]any) {
		have[r.(map[string]any)["id"].(string)] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.ackedID {
		require.True(t, have[id], "%s: acknowledged document %s is missing", fault, id)
		delete(have, id)
	}
	for id := range have {
		if strings.HasPrefix(id, "_design") || strings.HasPrefix(id, "c") && len(id) == 2 {
			continue
		}
		require.True(t, l.maybe[id], "%s: document %s is there, which no write asked for", fault, id)
	}
}

// requireNoOverlap rebuilds each replication's runs per node from the
// nodes' lifecycle lines (rep_id, node, time) and requires that no two
// nodes ran one replication at the same time.
func requireNoOverlap(t *testing.T, when string, nodes []*node) {
	t.Helper()
	type run struct {
		node       string
		start, end time.Time
	}
	runs := map[string][]*run{}
	open := map[string]*run{} // by rep_id and node
	var lines []line
	for _, n := range nodes {
		lines = append(lines, n.all()...)
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	for _, l := range lines {
		rep, _ := l.m["rep_id"].(string)
		node, _ := l.m["node"].(string)
		if rep == "" {
			continue
		}
		switch l.m["message"] {
		case "replication started":
			r := &run{node: node, start: l.at}
			open[rep+"|"+node] = r
			runs[rep] = append(runs[rep], r)
		case "replication stopped", "replication completed", "replication crashed", "replication failed":
			if r := open[rep+"|"+node]; r != nil {
				r.end = l.at
				delete(open, rep+"|"+node)
			}
		}
	}
	for rep, rs := range runs {
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if a.node == b.node {
					continue
				}
				aEnd, bEnd := a.end, b.end
				if aEnd.IsZero() {
					aEnd = time.Now()
				}
				if bEnd.IsZero() {
					bEnd = time.Now()
				}
				overlap := a.start.Before(bEnd) && b.start.Before(aEnd)
				require.False(t, overlap, "%s: replication %s ran on %s (%s to %s) and on %s (%s to %s) at once", when, rep,
					a.node, a.start.Format(time.StampMilli), aEnd.Format(time.StampMilli),
					b.node, b.start.Format(time.StampMilli), bEnd.Format(time.StampMilli))
			}
		}
	}
}

// fdbCluster is a FoundationDB cluster of three processes started with
// ../shared/fdb/fdb.sh.
type fdbCluster struct {
	sh, dir, file string
	base          int
}

// fdbScript returns the script that runs FoundationDB for tests:
// $FDBREP_FDB_SH, or ../shared/fdb/fdb.sh beside the module root.
func fdbScript(t *testing.T) string {
	if p := os.Getenv("FDBREP_FDB_SH"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "fdb", "fdb.sh")
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the working directory")
		dir = parent
	}
}

func startFDB(t *testing.T) *fdbCluster {
	t.Helper()
	sh := fdbScript(t)
	if _, err := os.Stat(sh); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no FoundationDB under CI: %s is absent (set FDBREP_FDB_SH)", sh)
		}
		t.Skipf("no FoundationDB here (%s is absent; set FDBREP_FDB_SH): this test runs where it is, as in CI", sh)
	}
	c := &fdbCluster{sh: sh, dir: t.TempDir(), base: freePorts(t, 3)}
	out, err := exec.Command("bash", sh, "start", strconv.Itoa(c.base), c.dir, "3").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("bash", sh, "stop", c.dir).Run() })
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	c.file = lines[len(lines)-1]
	return c
}

// freePorts returns the first of n free consecutive ports on 127.0.0.1.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		base := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		free := true
		for i := 1; i < n && free; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				free = false
				continue
			}
			_ = l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

func (c *fdbCluster) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{c.sh}, args...)...).CombinedOutput()
	require.NoError(t, err, "fdb.sh %v: %s", args, out)
	return string(out)
}

func (c *fdbCluster) kill(t *testing.T, i int)    { c.run(t, "kill", c.dir, strconv.Itoa(i)) }
func (c *fdbCluster) restart(t *testing.T, i int) { c.run(t, "restart", c.dir, strconv.Itoa(i)) }

func (c *fdbCluster) killAll(t *testing.T) func() {
	return func() {
		for i := range 3 {
			c.kill(t, i)
		}
	}
}

func (c *fdbCluster) restartAll(t *testing.T) func() {
	return func() {
		for i := range 3 {
			c.restart(t, i)
		}
	}
}

// status is the cluster's status document, read with fdbcli.
func (c *fdbCluster) status(t *testing.T) map[string]any {
	t.Helper()
	out := c.run(t, "cli", c.dir, "--exec", "status json", "--timeout", "20")
	i := strings.IndexByte(out, '{')
	require.GreaterOrEqual(t, i, 0, "status json: %s", out)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(out[i:]), &st), "status json: %s", out)
	return st
}

// controller returns the index of the process acting as cluster
// controller.
func (c *fdbCluster) controller(t *testing.T) int {
	t.Helper()
	procs, _ := c.status(t)["cluster"].(map[string]any)["processes"].(map[string]any)
	for _, p := range procs {
		pm := p.(map[string]any)
		roles, _ := pm["roles"].([]any)
		for _, r := range roles {
			if r.(map[string]any)["role"] == "cluster_controller" {
				addr, _ := pm["address"].(string)
				_, port, _ := net.SplitHostPort(addr)
				n, _ := strconv.Atoi(port)
				return n - c.base
			}
		}
	}
	t.Fatal("no cluster controller in the status")
	return -1
}

// waitAvailable waits until the cluster's database is available again.
func (c *fdbCluster) waitAvailable(t *testing.T) {
	t.Helper()
	waitUntil(t, time.Now().Add(testutil.WaitTimeout), "the cluster available again", func() bool {
		out, err := exec.Command("bash", c.sh, "cli", c.dir, "--exec", "status minimal", "--timeout", "5").CombinedOutput()
		return err == nil && strings.Contains(string(out), "The database is available")
	})
}

// buildBinary builds fdbrep with the FoundationDB backend.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fdbrep")
	out, err := exec.Command("go", "build", "-tags", "fdb", "-o", bin, "github.com/fdbrep/fdbrep/cmd/fdbrep").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// node is an fdbrep serve process on the cluster.
type node struct {
	name, addr, health string
	cmd                *exec.Cmd
	done               chan struct{}

	mu    sync.Mutex
	lines []line
	other []string // output that is not a JSON line
}

type line struct {
	at time.Time
	m  map[string]any
}

// startNode starts a node with roles and waits until it serves.
func startNode(t *testing.T, bin string, fdb *fdbCluster, name, roles string) *node {
	t.Helper()
	n := startNodeNoWait(t, bin, fdb, name, roles)
	n.waitLog(t, "fdbrep node up")
	return n
}

func startNodeNoWait(t *testing.T, bin string, fdb *fdbCluster, name, roles string) *node {
	t.Helper()
	n := &node{name: name, done: make(chan struct{})}
	args := []string{"serve", "-backend", "fdb", "-cluster-file", fdb.file, "-node-name", name, "-roles", roles,
		"-log-format", "json"}
	port := freePorts(t, 1)
	if strings.Contains(roles, "api_frontend") {
		n.addr = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "-bind", n.addr)
	} else {
		n.health = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "-health-bind", n.health)
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Env = append(os.Environ(), "FDBREP_ADMINS__ADM="+admin.Pass, "FDBREP_CHTTPD_AUTH__ITERATIONS=10",
		"FDBREP_LOG__REQUESTS=false",
		"FDBREP_REPLICATOR__INTERVAL_SEC="+strconv.Itoa(int(interval/time.Second)),
		"FDBREP_REPLICATOR__JOB_TIMEOUT_SEC="+strconv.Itoa(int(jobTimeout/time.Second)),
		"FDBREP_REPLICATOR__STARTUP_JITTER=100",
		"FDBREP_REPLICATOR__MIN_BACKOFF_PENALTY_SEC=1",
		"FDBREP_REPLICATOR__MAX_BACKOFF_PENALTY_SEC=8",
		"FDBREP_REPLICATOR__CHECKPOINT_INTERVAL=500")
	stderr, err := n.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, n.cmd.Start())
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			n.mu.Lock()
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				at := time.Now()
				if s, ok := m["time"].(string); ok {
					if p, err := time.Parse(time.RFC3339Nano, s); err == nil {
						at = p
					}
				}
				n.lines = append(n.lines, line{at: at, m: m})
			} else {
				n.other = append(n.other, sc.Text())
			}
			n.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = n.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
	})
	return n
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

func (n *node) all() []line {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.lines)
}

// find returns the node's lines with message msg, and key (when given)
// containing value.
func (n *node) find(msg string, kv ...string) []line {
	var out []line
	for _, l := range n.all() {
		if l.m["message"] != msg {
			continue
		}
		if len(kv) == 2 {
			v, _ := l.m[kv[0]].(string)
			if !strings.Contains(v, kv[1]) {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}

// waitLog waits until the node logged msg.
func (n *node) waitLog(t *testing.T, msg string) {
	t.Helper()
	waitUntil(t, time.Now().Add(testutil.WaitTimeout), fmt.Sprintf("%s logs %q", n.name, msg), func() bool {
		if n.exited() {
			t.Fatalf("%s exited:\n%s", n.name, n.tail())
		}
		return len(n.find(msg)) > 0
	})
}

// upStatus is the status of the node's GET /_up (0 when it did not
// answer).
func (n *node) upStatus() int {
	addr := n.addr
	if addr == "" {
		addr = n.health
	}
	status, _ := get("http://"+addr+"/_up", nil)
	return status
}

// tail is the node's last output, for a failure message.
func (n *node) tail() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b strings.Builder
	for _, l := range n.lines[max(0, len(n.lines)-40):] {
		raw, _ := json.Marshal(l.m)
		b.Write(raw)
		b.WriteByte('\n')
	}
	for _, s := range n.other {
		b.WriteString(s + "\n")
	}
	return b.String()
}
