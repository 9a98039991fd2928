//go:build fdb && linux

package deploy

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/cmd/internal/proctest"
	"github.com/fdbrep/fdbrep/deploy"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	_ "github.com/fdbrep/fdbrep/replicator" // its [replicator] keys, which the role files set
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helper(spec))
	}
	testutil.VerifyTestMain(m)
}

// The nodes' [replicator] timing, shortened from the defaults so that
// each failure plays out in seconds; every node gets the same
// (job_timeout_sec must be the same on all).
const (
	interval   = time.Second     // interval_sec
	jobTimeout = 6 * time.Second // job_timeout_sec: a hold lasts half of it
	minRunTime = 2 * time.Second // min_run_time_sec: the balance moves jobs that ran this long
)

var timingEnv = []string{
	"FDBREP_REPLICATOR__INTERVAL_SEC=" + strconv.Itoa(int(interval/time.Second)),
	"FDBREP_REPLICATOR__JOB_TIMEOUT_SEC=" + strconv.Itoa(int(jobTimeout/time.Second)),
	"FDBREP_REPLICATOR__MIN_RUN_TIME_SEC=" + strconv.Itoa(int(minRunTime/time.Second)),
	"FDBREP_REPLICATOR__STARTUP_JITTER=100",
	"FDBREP_REPLICATOR__MIN_BACKOFF_PENALTY_SEC=1",
	"FDBREP_REPLICATOR__MAX_BACKOFF_PENALTY_SEC=8",
	"FDBREP_REPLICATOR__CHECKPOINT_INTERVAL=1000",
}

// slack is added to every bound for a loaded machine (the test may run
// beside the rest of the suite on two cores): a hang detector, not a speed
// expectation.
func slack() time.Duration {
	if testutil.Race {
		return 30 * time.Second
	}
	return 15 * time.Second
}

// monitorPeriod is the activity monitor's longest period: the job timeout
// plus a random jitter of at most half of it ([couch_jobs]
// activity_monitor_max_jitter_msec, 10 s, caps it only above that).
const monitorPeriod = jobTimeout + jobTimeout/2

// moveBound: from a replication node's last heartbeat (at the latest its
// SIGKILL, or its cut) until its jobs run on another node. An activity
// monitor re-enqueues a job at its second check after the job's last
// heartbeat at the latest (the first reads an activity clock newer than
// the heartbeat, the next re-enqueues what is older), two periods; then a
// node's waiting acceptor takes it, within a couple of interval steps.
func moveBound() time.Duration { return 2*monitorPeriod + 2*interval + slack() }

// holdBound: from a cut until the node has stopped the jobs it ran. A hold
// lasts half the job timeout (fdbjobs.HoldFraction) from the start of the
// last renewal that committed, which began before the cut.
func holdBound() time.Duration { return jobTimeout/fdbjobs.HoldFraction + slack() }

// rebalanceBound: from a replication node's (re)joining until it runs its
// share: at the next interval a node above its share moves the jobs that
// ran min_run_time, and this node takes them.
func rebalanceBound() time.Duration { return minRunTime + 3*interval + slack() }

// retakeBound: from the link's return until the cut-off node answers 200
// and runs a job again: its membership record, which may have expired, is
// renewed within a heartbeat interval; then as rebalanceBound.
func retakeBound() time.Duration { return cluster.HeartbeatIntervalDefault + rebalanceBound() }

// The FoundationDB processes' ports (on the FoundationDB host) and
// CouchDB's (on the endpoints' host).
const fdbPort, fdbProcesses, couchPort = 4500, 3, 5984

// Sizes of the workload.
const (
	oneShotDocs = 300 // the POST /_replicate source
	continuous  = 6   // continuous replications c0…c5
	seedDocs    = 20  // in each of their sources at first
)

// deployment is the deployed cluster and what the test knows of it.
type deployment struct {
	net      *network
	root     string // the module root: deploy/ and docs/ are there
	bin      string // fdbrep, built with -tags fdb
	dir      string // the test's files: cluster file copies, rulesets
	fdb      *proctest.FDB
	couch    *couchtest.Server
	nodes    map[string]*node
	procs    []*proctest.Proc // every node process, restarts included, for the overlap checks
	admin    *testutil.Creds
	secret   string
	apiPort  int    // [chttpd] port of api_frontend.ini
	health   string // [node] health_address of replication.ini
	promPort int    // the Prometheus server's port (deploy/prometheus/agent.yml)
	mon      *monitoring
	timings  []string
	started  time.Time
	couchLog string
	// sealPub and sealPriv are the deployment's sealing key pair (sealKey).
	sealPub, sealPriv string
}

// node is an fdbrep serve process on its host.
type node struct {
	*proctest.Proc
	name, role string
	host       *host
}

func (d *deployment) api(n *node) string { return fmt.Sprintf("http://%s:%d", n.host.addr, d.apiPort) }

// phase logs the start of a phase; the returned func logs its duration
// and keeps it for the summary.
func (d *deployment) phase(t *testing.T, name string) func() {
	t.Helper()
	t.Logf("=== %s", name)
	start := time.Now()
	return func() {
		took := time.Since(start).Round(100 * time.Millisecond)
		t.Logf("--- %s: %v", name, took)
		d.timings = append(d.timings, fmt.Sprintf("%-72s %v", name, took))
	}
}

func TestDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hosts out of network namespaces and runs FoundationDB, CouchDB and four fdbrep nodes on them")
	}
	requireNetns(t)
	d := setUp(t)
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"fe1", "fe2", "rep1", "rep2"} {
				t.Logf("%s's last lines:\n%s", name, d.nodes[name].Tail())
			}
			if d.mon != nil {
				for _, p := range append([]*proctest.Proc{d.mon.server}, d.mon.agents...) {
					t.Logf("%s's last lines:\n%s", p.Name, p.Tail())
				}
			}
		}
	})
	d.checkFirewalls(t)
	d.checkStrangerRefused(t)
	d.checkFrontends(t)
	d.checkMonitoring(t)
	w := startWriter(t, d.couch)
	d.killReplicationNode(t)
	for _, c := range []struct {
		name    string
		in, out bool
	}{
		{"both directions", true, true},
		{"outbound only (rep1 to FoundationDB dropped)", false, true},
		{"inbound only (FoundationDB to rep1 dropped)", true, false},
	} {
		d.cutOff(t, c.name, c.in, c.out)
	}
	if os.Getenv(fullEnv) != "" {
		d.stopFrontendWhileWaiting(t, d.nodes["fe1"], d.nodes["fe2"], false)
		d.stopFrontendWhileWaiting(t, d.nodes["fe2"], d.nodes["fe1"], true)
		d.rollingRestart(t)
	} else {
		t.Logf("%s unset: the frontend stops while clients wait and the rolling restart are left to make test-deploy", fullEnv)
	}
	d.checkEnd(t, w)
	t.Logf("phases:\n%s\n%-72s %v", strings.Join(d.timings, "\n"), "whole test", time.Since(d.started).Round(100*time.Millisecond))
}

// setUp builds the binary and the network, loads each host's firewall,
// then starts FoundationDB, CouchDB and the nodes under those rules.
func setUp(t *testing.T) *deployment {
	d := &deployment{started: time.Now(), root: proctest.ModuleRoot(t), dir: t.TempDir(), nodes: map[string]*node{}}
	done := d.phase(t, "build fdbrep with -tags fdb")
	d.bin = proctest.BuildFDBBinary(t)
	done()

	done = d.phase(t, "set-up: hosts, firewalls, FoundationDB, CouchDB, nodes")
	frontend, err := config.Load([]string{d.roleFile(config.RoleAPIFrontend)}, nil)
	require.NoError(t, err)
	replication, err := config.Load([]string{d.roleFile(config.RoleReplication)}, nil)
	require.NoError(t, err)
	d.apiPort, d.health = int(frontend.Int("chttpd", "port")), replication.String("node", "health_address")
	d.admin = &testutil.Creds{Name: "admin", Pass: randomHex(t)}
	d.secret = randomHex(t)

	d.net = newNetwork(t)
	t.Logf("network: %s, client %s; namespaces %s*", d.net.subnet, d.net.client.addr, d.net.prefix)
	blocks := rulesets(t)
	d.promPort = d.prometheusPort(t)
	defines := d.net.defines([2]int{fdbPort, fdbPort + fdbProcesses - 1}, d.apiPort, couchPort, d.promPort)
	require.ElementsMatch(t, defined(blocks[nftDefines]), defined(defines), "the test defines what DEPLOY.md's define block does")
	for name, ruleset := range map[string]string{"fdb": nftFDB, "fe1": nftFrontend, "fe2": nftFrontend, "rep1": nftReplication, "rep2": nftReplication} {
		applyRuleset(t, d.net.hosts[name], filepath.Join(d.dir, "nft"), defines, blocks[ruleset])
	}

	fdbHost, couchHost := d.net.hosts["fdb"], d.net.hosts["couch"]
	d.fdb = proctest.StartFDB(t, proctest.FDBOptions{Exec: fdbHost.exec(), Address: fdbHost.addr, Port: fdbPort, Processes: fdbProcesses, TLS: true})
	d.couch = couchtest.StartCouchDBOn(t, couchtest.CouchDBHost{Exec: couchHost.exec(), Address: couchHost.addr, Port: couchPort})
	d.couchLog = filepath.Join(d.couch.Dir(), "couchdb.log")
	for _, name := range []string{"fe1", "fe2", "rep1", "rep2"} {
		role := config.RoleAPIFrontend
		if strings.HasPrefix(name, "rep") {
			role = config.RoleReplication
		}
		d.nodes[name] = &node{name: name, role: role, host: d.net.hosts[name]}
		d.start(t, d.nodes[name])
	}
	d.mon = d.startMonitoring(t)
	done()
	return d
}

func (d *deployment) roleFile(role string) string {
	return filepath.Join(d.root, "deploy", deploy.File(role))
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// start runs n's fdbrep serve on its host with its role's file, as a host
// of that role runs it: in its environment only the host's own variables
// (deploy.HostVariables; nothing of the test's FDBREP_ environment) and
// the test's timing. It waits until the node is up.
func (d *deployment) start(t *testing.T, n *node) {
	t.Helper()
	clusterFile := filepath.Join(d.dir, n.name, "fdb.cluster")
	if _, err := os.Stat(clusterFile); err != nil { // a restart keeps the copy, which the client may rewrite
		raw, err := os.ReadFile(d.fdb.File)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(clusterFile), 0o755))
		require.NoError(t, os.WriteFile(clusterFile, raw, 0o644))
	}
	own := d.hostTLS(t, n.name, n.host.addr)
	own["FDBREP_NODE__NAME"], own["FDBREP_FDB__CLUSTER_FILE"] = n.name, clusterFile
	own[deploy.SealVariables[n.role]] = d.sealKey(t, n.role)
	if n.role == config.RoleAPIFrontend {
		own["FDBREP_CHTTPD__BIND_ADDRESS"] = n.host.addr
		own["FDBREP_ADMINS__ADMIN"] = d.admin.Pass
		own["FDBREP_CHTTPD_AUTH__SECRET"] = d.secret
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(own)) {
		require.Contains(t, deploy.HostVariables[n.role], k, "a %s host sets only its own values", n.role)
		env = append(env, k+"="+own[k])
	}
	args := n.host.exec(d.bin, "serve", "-config", d.roleFile(n.role))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(env, timingEnv...)
	n.Proc = proctest.Start(t, n.name, cmd)
	d.procs = append(d.procs, n.Proc)
	n.WaitLog(t, "fdbrep node up")
}

// probe runs probeFrom, failing t if the helper could not run.
func (d *deployment) probe(t *testing.T, h *host, spec string) probe {
	t.Helper()
	p, err := probeFrom(h, spec)
	require.NoError(t, err)
	return p
}

// up is a replication node's GET /_up on its loopback health port, from
// its host.
func (d *deployment) up(t *testing.T, n *node) (int, map[string]any) {
	t.Helper()
	p := d.probe(t, n.host, "get http://"+d.health+"/_up")
	require.True(t, p.Connected, "%s's health port: %s", n.name, p.Err)
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(p.Body), &body), "%s /_up: %s", n.name, p.Body)
	return p.Status, body
}

// healthGet is a GET of path on a replication node's health port, from its
// host, decoded.
func (d *deployment) healthGet(t *testing.T, n *node, path string) string {
	t.Helper()
	p := d.probe(t, n.host, "get http://"+d.health+path)
	require.Equal(t, http.StatusOK, p.Status, "%s %s: %s %s", n.name, path, p.Err, p.Body)
	return p.Body
}

// checkFirewalls checks that the rules hold in practice.
func (d *deployment) checkFirewalls(t *testing.T) {
	defer d.phase(t, "1. the firewalls hold")()
	h, c := d.net.hosts, d.net.client
	at := func(name string, port int) string { return fmt.Sprintf("%s:%d", h[name].addr, port) }
	_, healthPort, _ := strings.Cut(d.health, ":")
	hp, err := strconv.Atoi(healthPort)
	require.NoError(t, err)
	type check struct {
		from    *host
		to      string
		what    string
		connect bool
	}
	checks := []check{
		{c, at("fe1", d.apiPort), "a client reaches fe1's API", true},
		{c, at("fe2", d.apiPort), "a client reaches fe2's API", true},
		{h["rep1"], at("couch", couchPort), "a replication node reaches the endpoints", true},
		{h["rep1"], at("fdb", d.fdb.Base), "a replication node reaches FoundationDB", true},
		{h["fe1"], at("fdb", d.fdb.Base), "a frontend reaches FoundationDB", true},
		{h["fe1"], at("couch", couchPort), "a frontend reaches the endpoints", false},
		{c, at("fdb", d.fdb.Base), "a client reaches FoundationDB", false},
		{h["couch"], at("fdb", d.fdb.Base), "the endpoints' host reaches FoundationDB", false},
		{h["mon"], at("fe1", d.apiPort), "the monitoring host reaches fe1's API", true},
		{h["fe1"], at("mon", d.promPort), "a frontend reaches the monitoring host's Prometheus", false},
	}
	if d.mon != nil { // something listens there
		checks = append(checks, check{h["rep1"], at("mon", d.promPort), "a replication node reaches the monitoring host's Prometheus", true})
	}
	for _, from := range []*host{c, h["fe1"], h["couch"], h["mon"]} {
		for _, port := range []int{d.apiPort, hp} {
			checks = append(checks, check{from, at("rep1", port), fmt.Sprintf("%s connects to rep1's port %d", from.name, port), false})
		}
	}
	results := make([]probe, len(checks))
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, ch := range checks {
		wg.Go(func() { results[i], errs[i] = probeFrom(ch.from, "dial "+ch.to) })
	}
	wg.Wait()
	for i, ch := range checks {
		require.NoError(t, errs[i])
		p := results[i]
		if ch.connect {
			require.True(t, p.Connected, "%s (%s to %s): %s", ch.what, ch.from.name, ch.to, p.Err)
			t.Logf("%-60s yes", ch.what)
			continue
		}
		// Dropped: neither a connection nor a reset, which would mean the
		// attempt reached a host where nothing listens.
		require.False(t, p.Connected, "%s (%s to %s): it did", ch.what, ch.from.name, ch.to)
		require.False(t, p.Refused, "%s (%s to %s): refused, not dropped: %s", ch.what, ch.from.name, ch.to, p.Err)
		t.Logf("%-60s no (%s)", ch.what, p.Err)
	}
	for _, name := range []string{"fe1", "fe2"} {
		r := testutil.Do(t, "GET", d.api(d.nodes[name])+"/_up", nil, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		requireSelf(t, r.Body, "ok", name, config.RoleAPIFrontend)
		t.Logf("%s /_up: %s", name, strings.TrimSpace(r.Raw))
	}
	for _, name := range []string{"rep1", "rep2"} {
		status, body := d.up(t, d.nodes[name])
		require.Equal(t, http.StatusOK, status, "%s /_up: %v", name, body)
		requireSelf(t, body, "ok", name, config.RoleReplication)
		t.Logf("%s /_up on its loopback health port: %v", name, body)
	}
}

// requireSelf checks what a node says of itself in /_up.
func requireSelf(t *testing.T, body map[string]any, status, name, role string) {
	t.Helper()
	require.Equal(t, status, body["status"], "%v", body)
	require.Equal(t, name, body["node"], "%v", body)
	require.Equal(t, []any{role}, body["roles"], "%v", body)
	require.IsType(t, float64(0), body["heartbeat_age_ms"], "%v", body)
}

// checkFrontends checks that both frontends serve one cluster, and starts
// the continuous replications.
func (d *deployment) checkFrontends(t *testing.T) {
	defer d.phase(t, "2. both frontends serve the cluster; continuous jobs spread")()
	fe1, fe2 := d.nodes["fe1"], d.nodes["fe2"]
	d.couch.CreateDB(t, "src")
	d.couch.AddDocs(t, "src", 0, oneShotDocs)
	for _, fe := range []*node{fe1, fe2} {
		target := "tgt-" + fe.name
		start := time.Now()
		r := testutil.Do(t, "POST", d.api(fe)+"/_replicate", d.admin, map[string]any{
			"source": d.couch.AuthDBURL("src"), "target": d.couch.AuthDBURL(target), "create_target": true})
		took := time.Since(start)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		require.Equal(t, true, r.Body["ok"], r.Raw)
		history, _ := r.Body["history"].([]any)
		require.NotEmpty(t, history, r.Raw)
		require.EqualValues(t, oneShotDocs, history[0].(map[string]any)["docs_written"], r.Raw)
		enginetest.RequireSame(t, d.couch.AuthDBURL("src"), d.couch.AuthDBURL(target))
		ran := d.ranOn(t, "/"+target+"/")
		t.Logf("POST /_replicate through %s: 200, %d docs written, in %v; run by %s", fe.name, oneShotDocs,
			took.Round(10*time.Millisecond), ran)
	}

	// _replicator documents written through fe1 are read through fe2.
	for i := range continuous {
		src := fmt.Sprintf("src-c%d", i)
		d.couch.CreateDB(t, src)
		d.couch.AddDocs(t, src, 0, seedDocs)
		id := fmt.Sprintf("c%d", i)
		r := testutil.Do(t, "PUT", d.api(fe1)+"/_replicator/"+id, d.admin, map[string]any{
			"source": d.couch.AuthDBURL(src), "target": d.couch.AuthDBURL(fmt.Sprintf("tgt-c%d", i)),
			"create_target": true, "continuous": true})
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		got := testutil.Do(t, "GET", d.api(fe2)+"/_replicator/"+id, d.admin, nil)
		require.Equal(t, http.StatusOK, got.Status, got.Raw)
		require.Equal(t, r.Body["rev"], got.Body["_rev"], "fe2 reads %s as fe1 wrote it", id)
	}
	start := time.Now()
	proctest.WaitUntil(t, start.Add(testutil.WaitTimeout), "the continuous jobs running on both replication nodes", func() bool {
		on := d.placement(t, fe2)
		return len(on) == continuous && len(d.on(on, "rep1")) > 0 && len(d.on(on, "rep2")) > 0 && len(d.on(on, "")) == 0
	})
	on := d.placement(t, fe1)
	t.Logf("continuous jobs running %v after their documents: rep1 runs %v, rep2 runs %v", time.Since(start).Round(100*time.Millisecond),
		d.on(on, "rep1"), d.on(on, "rep2"))

	// The views answer the same through both frontends (read until two
	// reads agree: a job may move between them), and _membership counts
	// what each replication node runs.
	var v1, v2 clusterView
	proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "the same views through fe1 and fe2", func() bool {
		v1, v2 = d.view(t, fe1), d.view(t, fe2)
		return v1.equal(v2) && v1.running["rep1"] == len(d.on(v1.placement, "rep1")) && v1.running["rep2"] == len(d.on(v1.placement, "rep2"))
	})
	require.Equal(t, []string{"fe1 api_frontend", "fe2 api_frontend", "rep1 replication", "rep2 replication"}, v1.members)
	require.Len(t, v1.jobs, continuous, "%v", v1.jobs)
	require.Len(t, v1.tasks, continuous, "%v", v1.tasks)
	t.Logf("through both frontends: _scheduler/jobs %v; _scheduler/docs %v; _active_tasks %v; _membership %v (running %v)",
		v1.jobs, v1.docs, v1.tasks, v1.members, v1.running)
	for i := range continuous {
		src, tgt := d.couch.AuthDBURL(fmt.Sprintf("src-c%d", i)), d.couch.AuthDBURL(fmt.Sprintf("tgt-c%d", i))
		proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "tgt-c"+strconv.Itoa(i)+" caught up", func() bool {
			return proctest.DocCount(tgt) == seedDocs
		})
		enginetest.RequireSame(t, src, tgt)
	}
	// At rest before the failures: no job is moving between the nodes.
	d.waitBalanced(t, time.Now().Add(rebalanceBound()))
}

// ranOn names the replication node that ran the one-shot replication to
// target: the one that logged its start and completion (exactly one).
func (d *deployment) ranOn(t *testing.T, target string) string {
	t.Helper()
	var ran []string
	for _, name := range []string{"rep1", "rep2"} {
		n := d.nodes[name]
		for _, s := range n.Find("replication started", "target", target) {
			if len(n.Find("replication completed", "job_id", s.Str("job_id"))) > 0 {
				ran = append(ran, name)
			}
		}
	}
	require.Len(t, ran, 1, "one replication node ran the replication to %s", target)
	return ran[0]
}

// placement reads _scheduler/jobs through fe: each continuous job's
// document id and the node that runs it ("" unless running).
func (d *deployment) placement(t *testing.T, fe *node) map[string]string {
	t.Helper()
	var list api.JobList
	d.getJSON(t, fe, "/_scheduler/jobs", &list)
	return placementOf(list)
}

func placementOf(list api.JobList) map[string]string {
	out := map[string]string{}
	for _, j := range list.Jobs {
		if j.DocID == nil {
			continue
		}
		out[*j.DocID] = ""
		if j.State == "running" && j.Node != nil {
			out[*j.DocID] = *j.Node
		}
	}
	return out
}

// on returns the jobs of a placement that run on node, sorted.
func (d *deployment) on(placement map[string]string, node string) []string {
	var ids []string
	for id, n := range placement {
		if n == node {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (d *deployment) getJSON(t *testing.T, fe *node, path string, out any) {
	t.Helper()
	r := testutil.Do(t, "GET", d.api(fe)+path, d.admin, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s %s: %s", fe.name, path, r.Raw)
	require.NoError(t, json.Unmarshal([]byte(r.Raw), out), r.Raw)
}

// clusterView is what a frontend answers for the cluster-wide views,
// reduced to what every frontend must answer alike.
type clusterView struct {
	jobs, docs, tasks, members []string
	placement                  map[string]string
	running                    map[string]int // _membership's "running" of each node
}

func (v clusterView) equal(o clusterView) bool {
	return slices.Equal(v.jobs, o.jobs) && slices.Equal(v.docs, o.docs) && slices.Equal(v.tasks, o.tasks) &&
		slices.Equal(v.members, o.members) && maps.Equal(v.running, o.running)
}

func (d *deployment) view(t *testing.T, fe *node) clusterView {
	t.Helper()
	str := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	var v clusterView
	var jobs api.JobList
	d.getJSON(t, fe, "/_scheduler/jobs", &jobs)
	for _, j := range jobs.Jobs {
		v.jobs = append(v.jobs, fmt.Sprintf("%s:%s@%s", str(j.DocID), j.State, str(j.Node)))
	}
	v.placement = placementOf(jobs)
	var docs api.DocList
	d.getJSON(t, fe, "/_scheduler/docs", &docs)
	for _, doc := range docs.Docs {
		v.docs = append(v.docs, fmt.Sprintf("%s:%s@%s", doc.DocID, doc.State, str(doc.Node)))
	}
	var tasks []api.ActiveTask
	d.getJSON(t, fe, "/_active_tasks", &tasks)
	for _, task := range tasks {
		v.tasks = append(v.tasks, fmt.Sprintf("%s@%s", str(task.DocID), task.Node))
	}
	var members struct {
		AllNodes []string `json:"all_nodes"`
		Nodes    map[string]struct {
			Roles   []string `json:"roles"`
			Seen    string   `json:"seen"`
			Expires string   `json:"expires"`
			Running *int     `json:"running"`
		} `json:"nodes"`
	}
	d.getJSON(t, fe, "/_membership", &members)
	v.running = map[string]int{}
	for _, name := range members.AllNodes {
		m := members.Nodes[name]
		v.members = append(v.members, name+" "+strings.Join(m.Roles, ","))
		require.NotEmpty(t, m.Seen, "_membership: %s's seen", name)
		require.NotEmpty(t, m.Expires, "_membership: %s's expires", name)
		if m.Running != nil {
			v.running[name] = *m.Running
		}
	}
	for _, s := range [][]string{v.jobs, v.docs, v.tasks, v.members} {
		slices.Sort(s)
	}
	return v
}

// killReplicationNode SIGKILLs rep2: its jobs run on rep1 within the
// activity monitor's bound; started again, it gets its share back.
func (d *deployment) killReplicationNode(t *testing.T) {
	defer d.phase(t, "3. a replication node SIGKILLed, then started again")()
	fe1, rep1, rep2 := d.nodes["fe1"], d.nodes["rep1"], d.nodes["rep2"]
	held := d.on(d.placement(t, fe1), "rep2")
	require.NotEmpty(t, held, "rep2 runs jobs")
	killed := time.Now()
	rep2.Kill()
	proctest.WaitUntil(t, killed.Add(moveBound()), "rep2's jobs running on rep1", func() bool {
		return len(d.on(d.placement(t, fe1), "rep1")) == continuous
	})
	moved := time.Since(killed)
	taken := 0
	for _, l := range rep1.Find("replication started", "taken_over_from", "rep2") {
		if l.At.After(killed) {
			taken++
		}
	}
	require.GreaterOrEqual(t, taken, len(held), "rep1 says it took rep2's jobs over")
	t.Logf("rep2 (running %v) SIGKILLed: its jobs ran on rep1 %v later (bound %v)", held, moved.Round(100*time.Millisecond), moveBound())
	proctest.RequireNoOverlap(t, "rep2 killed", d.procs...)

	restarted := time.Now()
	d.start(t, rep2)
	d.waitBalanced(t, time.Now().Add(rebalanceBound()))
	t.Logf("rep2 started again: up and running its share %v %v later (bound once up: %v)", d.on(d.placement(t, fe1), "rep2"),
		time.Since(restarted).Round(100*time.Millisecond), rebalanceBound())
}

// waitBalanced waits until each replication node runs half the
// continuous jobs: the balance's only resting state with two nodes (a
// node at more than its share and 10% over the mean moves the excess).
func (d *deployment) waitBalanced(t *testing.T, deadline time.Time) {
	t.Helper()
	proctest.WaitUntil(t, deadline, "the continuous jobs balanced over rep1 and rep2", func() bool {
		on := d.placement(t, d.nodes["fe1"])
		return len(d.on(on, "rep1")) == continuous/2 && len(d.on(on, "rep2")) == continuous/2
	})
}

// holdLost are a node's lines saying it stopped a job because it could not
// renew its hold, since a moment, by document id.
func holdLost(n *node, since time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, l := range n.Find("replication stopped", "why", "could not renew its hold") {
		if l.At.After(since) {
			out[l.Str("doc_id")] = l.At
		}
	}
	return out
}

// startedSince are a node's "replication started" lines since a moment,
// the first per document id.
func startedSince(n *node, since time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, l := range n.Find("replication started") {
		if id := l.Str("doc_id"); l.At.After(since) && id != "" {
			if _, ok := out[id]; !ok {
				out[id] = l.At
			}
		}
	}
	return out
}

// cutOff cuts rep1 off from FoundationDB (in, out: the directions
// dropped) and checks what follows, then restores the link.
func (d *deployment) cutOff(t *testing.T, name string, in, out bool) {
	defer d.phase(t, "4. rep1 cut off from FoundationDB, "+name)()
	fe1, rep1, rep2 := d.nodes["fe1"], d.nodes["rep1"], d.nodes["rep2"]
	// Balanced first (rep1 moves none of its jobs while it is cut off).
	d.waitBalanced(t, time.Now().Add(retakeBound()))
	held := d.on(d.placement(t, fe1), "rep1")
	cutAt := time.Now()
	cut(t, rep1.host, filepath.Join(d.dir, "nft"), d.net.hosts["fdb"].addr, in, out)

	// The jobs run on rep2: the activity monitors see to that, whatever
	// rep1 does.
	proctest.WaitUntil(t, cutAt.Add(moveBound()), "rep1's jobs running on rep2", func() bool {
		on := d.placement(t, fe1)
		return !slices.ContainsFunc(held, func(id string) bool { return on[id] != "rep2" })
	})
	t.Logf("rep1's jobs %v ran on rep2 %v after the cut (bound %v)", held, time.Since(cutAt).Round(100*time.Millisecond), moveBound())

	// rep1 says it is cut off: 503 storage_unavailable, and a heartbeat
	// age that grows; the metric says the same.
	var ages []float64
	for range 2 {
		status, body := d.up(t, rep1)
		require.Equal(t, http.StatusServiceUnavailable, status, "rep1 /_up while cut off: %v", body)
		requireSelf(t, body, "storage_unavailable", "rep1", config.RoleReplication)
		ages = append(ages, body["heartbeat_age_ms"].(float64))
	}
	require.Greater(t, ages[1], ages[0], "rep1's heartbeat age grows while it is cut off")
	metric := prometheusValue(t, d.healthGet(t, rep1, "/_node/_local/_prometheus"), "couchdb_couch_replicator_node_heartbeat_age_seconds")
	require.GreaterOrEqual(t, metric, math.Floor(ages[1]/1000), "the heartbeat age metric")
	t.Logf("rep1 /_up while cut off: 503 storage_unavailable, heartbeat_age_ms %v then %v; couchdb_couch_replicator_node_heartbeat_age_seconds %v",
		ages[0], ages[1], metric)

	// No job ran on two nodes: rep1 stopped each before its hold on it
	// expired, which is before anyone else could start it; from the
	// nodes' lifecycle lines; and from CouchDB's request log, where rep1
	// writes nothing to a job's endpoints once rep2 runs it. Every
	// violation is reported at once.
	var problems []string
	lost := holdLost(rep1, cutAt)
	var latest time.Time
	for _, id := range held {
		at, ok := lost[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("rep1 has not stopped %s for want of its hold, %v after the cut (bound %v)",
				id, time.Since(cutAt).Round(100*time.Millisecond), holdBound()))
		case at.After(cutAt.Add(holdBound())):
			problems = append(problems, fmt.Sprintf("rep1 stopped %s %v after the cut (bound %v)", id, at.Sub(cutAt).Round(100*time.Millisecond), holdBound()))
		case at.After(latest):
			latest = at
		}
	}
	problems = append(problems, proctest.Overlaps(d.procs...)...)
	problems = append(problems, d.writesFromCutOff(t, rep1, rep2, held, cutAt)...)
	if len(problems) > 0 {
		t.Fatalf("rep1 cut off from FoundationDB, %s: a job ran on two nodes at once:\n%s", name, strings.Join(problems, "\n"))
	}
	t.Logf("rep1 stopped them %v after the cut (bound %v), saying %q", latest.Sub(cutAt).Round(100*time.Millisecond), holdBound(),
		rep1.Find("replication stopped", "why", "could not renew")[0].Str("why"))

	// The link returns: rep1 answers 200 and runs jobs again.
	back := time.Now()
	uncut(t, rep1.host)
	proctest.WaitUntil(t, back.Add(retakeBound()), "rep1 /_up 200 again", func() bool {
		status, _ := d.up(t, rep1)
		return status == http.StatusOK
	})
	upAgain := time.Since(back)
	proctest.WaitUntil(t, back.Add(retakeBound()), "rep1 running a job again", func() bool {
		return len(startedSince(rep1, back)) > 0
	})
	t.Logf("link back: rep1 /_up 200 after %v, runs %v again after %v (bound %v)", upAgain.Round(100*time.Millisecond),
		slices.Sorted(maps.Keys(startedSince(rep1, back))), time.Since(back).Round(100*time.Millisecond), retakeBound())
	var stats struct {
		Value float64 `json:"value"`
	}
	require.NoError(t, json.Unmarshal([]byte(d.healthGet(t, rep1, "/_node/_local/_stats/couch_replicator/jobs/holds_lost")), &stats))
	require.EqualValues(t, len(rep1.Find("replication stopped", "why", "could not renew its hold")), stats.Value,
		"jobs.holds_lost counts the jobs rep1 gave up")
	proctest.RequireNoOverlap(t, "rep1 back, "+name, d.procs...)
}

// prometheusValue is the value of metric in a Prometheus text page.
func prometheusValue(t *testing.T, page, metric string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, metric+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("no %s in:\n%s", metric, page)
	return 0
}

// couchRequest is a request in CouchDB's log: when it ended, from where.
type couchRequest struct {
	at                 time.Time
	peer, method, path string
}

// couchRequestLine is CouchDB's request log line: [notice] TIME NODE PID
// NONCE HOST PEER USER METHOD PATH CODE ...
var couchRequestLine = regexp.MustCompile(`^\[notice\] (\S+) \S+ <[^>]*> \S+ \S+ (\S+) \S+ ([A-Z]+) (\S+) \d{3} `)

func (d *deployment) couchRequests(t *testing.T) []couchRequest {
	t.Helper()
	f, err := os.Open(d.couchLog)
	require.NoError(t, err)
	defer f.Close()
	var out []couchRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := couchRequestLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		out = append(out, couchRequest{at: at, peer: m[2], method: m[3], path: m[4]})
	}
	require.NoError(t, sc.Err())
	return out
}

// writesFromCutOff checks, from CouchDB's own request log, what issue 22
// saw go wrong: once rep2 runs a job that the cut-off rep1 held, rep1
// sends no POST or PUT (_bulk_docs, _revs_diff, _bulk_get, checkpoints) to
// that job's endpoints. It waits until rep2 sends some to each (the writer
// keeps adding documents to the sources), so that the log has something
// to tell, and describes what rep1 sent.
func (d *deployment) writesFromCutOff(t *testing.T, rep1, rep2 *node, held []string, cutAt time.Time) []string {
	t.Helper()
	starts := startedSince(rep2, cutAt)
	endpoints := map[string]*regexp.Regexp{}
	for _, id := range held {
		require.Contains(t, starts, id, "rep2 logged the start of %s", id)
		endpoints[id] = regexp.MustCompile(`^/(src|tgt)-` + id + `(/|\?|$)`)
	}
	writes := func(r couchRequest, id, from string) bool {
		return r.peer == from && r.at.After(starts[id]) && (r.method == "POST" || r.method == "PUT") && endpoints[id].MatchString(r.path)
	}
	require.NotEmpty(t, d.couchRequests(t), "no line of %s is a request line as this test reads them (%s)", d.couchLog, couchRequestLine)
	proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "rep2 writing to the endpoints of the jobs it took", func() bool {
		reqs := d.couchRequests(t)
		return !slices.ContainsFunc(held, func(id string) bool {
			return !slices.ContainsFunc(reqs, func(r couchRequest) bool { return writes(r, id, rep2.host.addr) })
		})
	})
	reqs := d.couchRequests(t)
	var problems []string
	for _, id := range held {
		var bad []couchRequest
		for _, r := range reqs {
			if writes(r, id, rep1.host.addr) {
				bad = append(bad, r)
			}
		}
		if len(bad) > 0 {
			problems = append(problems, fmt.Sprintf("CouchDB's log: rep1, cut off, sent %d POST and PUT requests to %s's endpoints while rep2 ran it (since %s), from %s (%s %s) to %s (%s %s)",
				len(bad), id, starts[id].Format(time.StampMilli), bad[0].at.Format(time.StampMilli), bad[0].method, bad[0].path,
				bad[len(bad)-1].at.Format(time.StampMilli), bad[len(bad)-1].method, bad[len(bad)-1].path))
		}
	}
	t.Logf("CouchDB's log: %d requests; rep2 writes to the endpoints of %v since it runs them", len(reqs), held)
	return problems
}

// checkEnd stops the writer and checks that every continuous target
// holds its source, and that no job ever ran on two nodes.
func (d *deployment) checkEnd(t *testing.T, w *writer) {
	defer d.phase(t, "the end: every target holds its source")()
	w.stop()
	for i := range continuous {
		src, tgt := d.couch.AuthDBURL(fmt.Sprintf("src-c%d", i)), d.couch.AuthDBURL(fmt.Sprintf("tgt-c%d", i))
		want := proctest.DocCount(src)
		proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), fmt.Sprintf("tgt-c%d caught up", i), func() bool {
			return proctest.DocCount(tgt) == want
		})
		enginetest.RequireSame(t, src, tgt)
	}
	t.Logf("writer: %s", w)
	proctest.RequireNoOverlap(t, "the end", d.procs...)
	runs := 0
	for _, rs := range proctest.Runs(d.procs...) {
		runs += len(rs)
	}
	t.Logf("%d runs in the nodes' logs, none on two nodes at once", runs)
}

// client bounds the writer's requests to CouchDB.
var client = &http.Client{Timeout: 30 * time.Second}

// writer adds a document to the continuous replications' sources in turn,
// a few per second, until stopped.
type writer struct {
	done, stopped chan struct{}
	mu            sync.Mutex
	written       int
	failed        int
}

func startWriter(t *testing.T, couch *couchtest.Server) *writer {
	w := &writer{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			url := fmt.Sprintf("%s/w%06d", couch.AuthDBURL(fmt.Sprintf("src-c%d", n%continuous)), n)
			req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(fmt.Sprintf(`{"n":%d}`, n)))
			res, err := client.Do(req)
			w.mu.Lock()
			if err == nil && res.StatusCode == http.StatusCreated {
				w.written++
			} else {
				w.failed++
			}
			w.mu.Unlock()
			if err == nil {
				_ = res.Body.Close()
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *writer) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.stopped
}

func (w *writer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d documents added to the sources, %d writes failed", w.written, w.failed)
}

// fullEnv asks for the whole test (make test-deploy): the phases below too.
const fullEnv = "FDBREP_DEPLOY_FULL"

// post sends a POST /_replicate and returns the reply, or the error of a
// client whose connection broke.
func (d *deployment) post(fe *node, body map[string]any) (int, map[string]any, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, d.api(fe)+"/_replicate", strings.NewReader(string(raw)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(d.admin.Name, d.admin.Pass)
	res, err := (&http.Client{Timeout: 2 * testutil.WaitTimeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return res.StatusCode, nil, err
	}
	return res.StatusCode, out, nil
}

// stopFrontendWhileWaiting stops fe (SIGTERM, or SIGKILL when kill) while
// clients wait on POST /_replicate through it: each gets the result, or
// an error after which the same request through other gets it; every
// target ends up with its source, and no replication ran twice at once.
func (d *deployment) stopFrontendWhileWaiting(t *testing.T, fe, other *node, kill bool) {
	how := "stopped (SIGTERM)"
	if kill {
		how = "SIGKILLed"
	}
	defer d.phase(t, fmt.Sprintf("5. %s %s while clients wait on POST /_replicate through it", fe.name, how))()
	const clients, docs = 4, 2000
	if proctest.DocCount(d.couch.AuthDBURL("big")) < 0 {
		d.couch.CreateDB(t, "big")
		d.couch.AddDocs(t, "big", 0, docs)
	}
	bodies := make([]map[string]any, clients)
	for i := range bodies {
		// Small batches and one worker, so that the replications are
		// still running when the frontend goes.
		bodies[i] = map[string]any{"source": d.couch.AuthDBURL("big"), "target": d.couch.AuthDBURL(fmt.Sprintf("tgt-%s-%d", fe.name, i)),
			"create_target": true, "worker_processes": 1, "worker_batch_size": 50}
	}
	type outcome struct {
		status int
		body   map[string]any
		err    error
	}
	results := make([]outcome, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() { results[i].status, results[i].body, results[i].err = d.post(fe, bodies[i]) })
	}
	target := func(i int) string { return fmt.Sprintf("/tgt-%s-%d/", fe.name, i) }
	proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "the posted replications running", func() bool {
		for i := range clients {
			if len(d.nodes["rep1"].Find("replication started", "target", target(i)))+len(d.nodes["rep2"].Find("replication started", "target", target(i))) == 0 {
				return false
			}
		}
		return true
	})
	stopped := time.Now()
	if kill {
		fe.Kill()
	} else {
		require.True(t, fe.Stop(time.Now().Add(testutil.WaitTimeout)), "%s stops by itself", fe.name)
	}
	wg.Wait()
	retried := 0
	for i, r := range results {
		if r.err != nil {
			t.Logf("client %d: %v, %v after the stop; the same request through %s", i, r.err, time.Since(stopped).Round(100*time.Millisecond), other.name)
			retried++
			r.status, r.body, r.err = d.post(other, bodies[i])
			require.NoError(t, r.err)
		}
		require.Equal(t, http.StatusOK, r.status, "client %d: %v", i, r.body)
		require.Equal(t, true, r.body["ok"], "client %d: %v", i, r.body)
		enginetest.RequireSame(t, d.couch.AuthDBURL("big"), d.couch.AuthDBURL(fmt.Sprintf("tgt-%s-%d", fe.name, i)))
	}
	t.Logf("%d clients: %d got the result from %s, %d an error and then the result through %s", clients, clients-retried, fe.name, retried, other.name)
	d.start(t, fe)
	proctest.RequireNoOverlap(t, fe.name+" "+how, d.procs...)
}

// rollingRestart stops (SIGTERM) and starts every node, one at a time,
// while a client sends requests to the frontend not being restarted: none
// fails.
func (d *deployment) rollingRestart(t *testing.T) {
	defer d.phase(t, "6. a rolling restart, one node at a time; the other frontend fails no request")()
	fe1, fe2 := d.nodes["fe1"], d.nodes["fe2"]
	use, used := make(chan *node), make(chan struct{})
	done := make(chan struct{})
	var mu sync.Mutex
	var failures []string
	requests := 0
	go func() {
		defer close(used)
		cur := fe2
		c := &http.Client{Timeout: testutil.WaitTimeout}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case next := <-use: // no request to the previous target is in flight
				cur = next
				used <- struct{}{}
				continue
			case <-tick.C:
			}
			var req *http.Request
			switch n % 3 {
			case 0:
				req, _ = http.NewRequest(http.MethodGet, d.api(cur)+"/_scheduler/jobs", nil)
			case 1:
				req, _ = http.NewRequest(http.MethodGet, d.api(cur)+"/_replicator/c0", nil)
			default:
				req, _ = http.NewRequest(http.MethodPut, fmt.Sprintf("%s/_replicator/_local/rolling-%d", d.api(cur), n), strings.NewReader(`{"n":1}`))
				req.Header.Set("Content-Type", "application/json")
			}
			req.SetBasicAuth(d.admin.Name, d.admin.Pass)
			res, err := c.Do(req)
			mu.Lock()
			requests++
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("%s %s: %v", req.Method, req.URL.Path, err))
			case res.StatusCode >= 300:
				failures = append(failures, fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, res.StatusCode))
			}
			mu.Unlock()
			if err == nil {
				_ = res.Body.Close()
			}
		}
	}()
	switchTo := func(n *node) {
		use <- n
		<-used
	}
	for _, name := range []string{"rep1", "rep2", "fe1", "fe2"} {
		n := d.nodes[name]
		switch name {
		case "fe1":
			switchTo(fe2)
		case "fe2":
			switchTo(fe1)
		}
		start := time.Now()
		require.True(t, n.Stop(time.Now().Add(testutil.WaitTimeout)), "%s stops by itself", name)
		stopped := time.Since(start)
		d.start(t, n)
		back := "up"
		if n.role == config.RoleReplication {
			d.waitBalanced(t, time.Now().Add(rebalanceBound()))
			back = "up and running its share of the jobs"
		}
		t.Logf("%s: stopped in %v, %s again %v after the stop", name, stopped.Round(100*time.Millisecond), back,
			time.Since(start).Round(100*time.Millisecond))
	}
	close(done)
	<-used
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failures, "requests to the frontend not being restarted failed")
	t.Logf("%d requests to the frontend not being restarted, none failed", requests)
	proctest.RequireNoOverlap(t, "rolling restart", d.procs...)
}
