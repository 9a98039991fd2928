//go:build fdb

package fdbfault

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/proctest"
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
	fdb := proctest.StartFDB(t, proctest.FDBOptions{})
	couch := couchtest.StartCouchDB(t)
	bin := proctest.BuildFDBBinary(t)

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
			require.False(t, n.Exited(), "%s: %s exited during the fault:\n%s", fault, n.name, n.Tail())
		}
		// Every continuous job runs again and catches up with its source.
		deadline := back.Add(recoverBound())
		for i := range sources {
			proctest.WaitUntil(t, deadline, fmt.Sprintf("%s: c%d running again and caught up", fault, i), func() bool {
				st := docState(api, "_replicator", fmt.Sprintf("c%d", i))
				return st == "running" && proctest.DocCount(couch.AuthDBURL(fmt.Sprintf("tgt%d", i))) >= load.written(i)
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
		fdb.WaitAvailable(t)
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

	runFault("an fdbserver process SIGKILLed and restarted", func() { fdb.Kill(t, 1) }, func() { fdb.Restart(t, 1) })
	cc := fdb.Controller(t)
	runFault(fmt.Sprintf("the cluster controller (process %d) SIGKILLed and restarted", cc),
		func() { fdb.Kill(t, cc) }, func() { fdb.Restart(t, cc) })
	// The controller alone does not take the database down for long: the
	// check above only asks for its return. The whole cluster does.
	runFault("the whole cluster down", func() { fdb.KillAll(t) }, func() { fdb.RestartAll(t) })
	var c *node
	runFault("a node started while the cluster is down", func() {
		fdb.KillAll(t)
		c = startNodeNoWait(t, bin, fdb, "node-c", "replication")
	}, func() { fdb.RestartAll(t) })
	c.WaitLog(t, "fdbrep node up")
	nodes = append(nodes, c)
	require.NotEmpty(t, c.Find("waiting for FoundationDB"), "node-c said what it waited for")

	// The nodes that ran jobs through the whole cluster's outages gave
	// them up, and said so.
	lost, started, waits := 0, 0, len(c.Find("waiting for FoundationDB"))
	for _, n := range nodes {
		lost += len(n.Find("replication stopped", "why", "could not renew its hold"))
		started += len(n.Find("replication started"))
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
		want := proctest.DocCount(src)
		proctest.WaitUntil(t, deadline, fmt.Sprintf("tgt%d caught up", i), func() bool { return proctest.DocCount(tgt) == want })
		enginetest.RequireSame(t, src, tgt)
	}
	for _, id := range load.acked() {
		proctest.WaitUntil(t, deadline, id+" completed", func() bool { return docState(api, "_replicator", id) == "completed" })
		enginetest.RequireSame(t, couch.AuthDBURL("static"), couch.AuthDBURL("t-"+id))
	}
}

// client is the test's HTTP client: a request to a node waiting for its
// store gives up, rather than hang the test.
var client = &http.Client{Timeout: 30 * time.Second}

// get and put send a request with c's credentials (nil: none) and
// return its status and JSON body; 0 when no answer came (the cluster or
// the node may be down on purpose).
func get(url string, c *testutil.Creds) (int, map[string]any) { return send("GET", url, c, nil) }

func put(url string, c *testutil.Creds, body any) (int, map[string]any) {
	return send("PUT", url, c, body)
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
	asked   map[string]bool // _replicator documents written, answered or not
	errs    int
}

func startLoad(t *testing.T, api string, couch *couchtest.Server, sources int) *load {
	l := &load{api: api, couch: couch, done: make(chan struct{}), sources: make([]int, sources), asked: map[string]bool{}}
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
		l.mu.Lock()
		l.asked[id] = true
		l.mu.Unlock()
		status, _ := put(l.api+"/_replicator/"+id, admin, map[string]any{
			"source": l.couch.AuthDBURL("static"), "target": l.couch.AuthDBURL("t-" + id), "create_target": true})
		l.mu.Lock()
		if status == 201 {
			l.ackedID = append(l.ackedID, id)
		} else {
			l.errs++
		}
		l.mu.Unlock()
	}
}

func send(method, url string, c *testutil.Creds, body any) (int, map[string]any) {
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return 0, nil
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
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
// document acknowledged before the read is there, and any other only if a
// write asked for it (one unanswered, or still waiting, or acknowledged
// since: the load goes on during the check).
func (l *load) checkDocs(t *testing.T, fault string) {
	t.Helper()
	acked := l.acked()
	status, body := get(l.api+"/_replicator/_all_docs", admin)
	require.Equal(t, 200, status, "%s: _all_docs", fault)
	have := map[string]bool{}
	for _, r := range body["rows"].([]any) {
		have[r.(map[string]any)["id"].(string)] = true
	}
	for _, id := range acked {
		require.True(t, have[id], "%s: acknowledged document %s is missing", fault, id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range have {
		if strings.HasPrefix(id, "_design") || strings.HasPrefix(id, "c") && len(id) == 2 {
			continue
		}
		require.True(t, l.asked[id], "%s: document %s is there, which no write asked for", fault, id)
	}
}

// node is an fdbrep serve process on the cluster.
type node struct {
	*proctest.Proc
	name, addr, health string
}

// startNode starts a node with roles and waits until it serves.
func startNode(t *testing.T, bin string, fdb *proctest.FDB, name, roles string) *node {
	t.Helper()
	n := startNodeNoWait(t, bin, fdb, name, roles)
	n.WaitLog(t, "fdbrep node up")
	return n
}

func startNodeNoWait(t *testing.T, bin string, fdb *proctest.FDB, name, roles string) *node {
	t.Helper()
	n := &node{name: name}
	args := []string{"serve", "-backend", "fdb", "-cluster-file", fdb.File, "-node-name", name, "-roles", roles,
		"-log-format", "json"}
	port := proctest.FreePorts(t, 1)
	if strings.Contains(roles, "api_frontend") {
		n.addr = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "-bind", n.addr)
	} else {
		n.health = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "-health-bind", n.health)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "FDBREP_ADMINS__ADM="+admin.Pass, "FDBREP_CHTTPD_AUTH__ITERATIONS=10",
		"FDBREP_LOG__REQUESTS=false",
		"FDBREP_REPLICATOR__INTERVAL_SEC="+strconv.Itoa(int(interval/time.Second)),
		"FDBREP_REPLICATOR__JOB_TIMEOUT_SEC="+strconv.Itoa(int(jobTimeout/time.Second)),
		"FDBREP_REPLICATOR__STARTUP_JITTER=100",
		"FDBREP_REPLICATOR__MIN_BACKOFF_PENALTY_SEC=1",
		"FDBREP_REPLICATOR__MAX_BACKOFF_PENALTY_SEC=8",
		"FDBREP_REPLICATOR__CHECKPOINT_INTERVAL=500")
	n.Proc = proctest.Start(t, name, cmd)
	return n
}

// requireNoOverlap requires that no job ran on two of the nodes at once.
func requireNoOverlap(t *testing.T, when string, nodes []*node) {
	t.Helper()
	procs := make([]*proctest.Proc, len(nodes))
	for i, n := range nodes {
		procs[i] = n.Proc
	}
	proctest.RequireNoOverlap(t, when, procs...)
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
