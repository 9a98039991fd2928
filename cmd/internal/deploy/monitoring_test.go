//go:build fdb && linux

package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fdbrep/fdbrep/cmd/internal/proctest"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
)

// The monitoring of DEPLOY.md's section 5, "Metrics": a Prometheus server
// on the monitoring host with deploy/prometheus/prometheus.yml (and
// alerts.yml), scraping the frontends as the metrics user through their
// firewall, and on each replication host a Prometheus agent with
// agent.yml, pushing its node's series to the server by remote write.
// Both run with the flags DEPLOY.md gives them, and with the files as
// written but for the example addresses, which become the test's.

// The flags of DEPLOY.md's server and agents (it must say them).
var (
	serverFlags = []string{"--web.enable-remote-write-receiver"}
	agentFlags  = []string{"--enable-feature=agent,expand-external-labels", "--web.listen-address=127.0.0.1:9090"}
)

// metricsUser is the user prometheus.yml scrapes the frontends as, which
// DEPLOY.md creates with the _metrics role.
const metricsUser = "prometheus"

// promDir is where deploy/prometheus's files are, from the module root.
const promDir = "deploy/prometheus"

// scrapeBound: from the monitoring's start until the server holds a
// series of every node: the files' scrape interval (15 s) twice, the
// remote write's batching (5 s), a slow start.
func scrapeBound() time.Duration { return 2*15*time.Second + 5*time.Second + slack() }

// monitoring is the test's Prometheus server and agents.
type monitoring struct {
	url    string // the server's HTTP API, from the client host
	server *proctest.Proc
	agents []*proctest.Proc
}

// yamlFile reads a YAML file of deploy/prometheus as a generic map.
func (d *deployment) yamlFile(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(d.root, promDir, name))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &m), name)
	return m
}

// only returns the single element of a YAML list, failing t otherwise.
func only(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	list, ok := v.([]any)
	require.True(t, ok && len(list) == 1, "%s: one entry, got %v", what, v)
	m, ok := list[0].(map[string]any)
	require.True(t, ok, "%s: %v", what, list[0])
	return m
}

// prometheusPort is the port of agent.yml's remote write, the server's:
// the test's define block opens it.
func (d *deployment) prometheusPort(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(only(t, d.yamlFile(t, "agent.yml")["remote_write"], "agent.yml remote_write")["url"].(string))
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err, "agent.yml's remote_write url names the server's port")
	return port
}

// serverConfig is prometheus.yml with the test's frontends for the
// example ones; it checks the rest is what DEPLOY.md says.
func (d *deployment) serverConfig(t *testing.T) []byte {
	t.Helper()
	m := d.yamlFile(t, "prometheus.yml")
	require.Equal(t, []any{"alerts.yml"}, m["rule_files"], "prometheus.yml loads the alert rules beside it")
	job := only(t, m["scrape_configs"], "prometheus.yml scrape_configs")
	require.Equal(t, "/_node/_local/_prometheus", job["metrics_path"])
	require.Equal(t, map[string]any{"username": metricsUser, "password_file": "metrics_password"}, job["basic_auth"])
	var static []any
	for i, v := range job["static_configs"].([]any) {
		sc := v.(map[string]any)
		targets := sc["targets"].([]any)
		require.Len(t, targets, 1, "one frontend per entry, each with its node label")
		_, port, err := net.SplitHostPort(targets[0].(string))
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(d.apiPort), port, "prometheus.yml scrapes the frontends' API port")
		labels := sc["labels"].(map[string]any)
		require.NotEmpty(t, labels["node"], "static_configs[%d] labels the node", i)
	}
	for _, name := range []string{"fe1", "fe2"} {
		static = append(static, map[string]any{
			"targets": []any{fmt.Sprintf("%s:%d", d.net.hosts[name].addr, d.apiPort)},
			"labels":  map[string]any{"node": name},
		})
	}
	job["static_configs"] = static
	out, err := yaml.Marshal(m)
	require.NoError(t, err)
	return out
}

// agentConfig is agent.yml with the test's server for the example one; it
// checks that the agent scrapes replication.ini's health port.
func (d *deployment) agentConfig(t *testing.T) []byte {
	t.Helper()
	m := d.yamlFile(t, "agent.yml")
	global := m["global"].(map[string]any)
	require.Equal(t, map[string]any{"node": "${FDBREP_NODE__NAME}"}, global["external_labels"])
	job := only(t, m["scrape_configs"], "agent.yml scrape_configs")
	require.Equal(t, "/_node/_local/_prometheus", job["metrics_path"])
	sc := only(t, job["static_configs"], "agent.yml static_configs")
	require.Equal(t, []any{d.health}, sc["targets"], "the agent scrapes [node] health_address of replication.ini")
	rw := only(t, m["remote_write"], "agent.yml remote_write")
	u, err := url.Parse(rw["url"].(string))
	require.NoError(t, err)
	u.Host = net.JoinHostPort(d.net.hosts["mon"].addr, u.Port())
	rw["url"] = u.String()
	out, err := yaml.Marshal(m)
	require.NoError(t, err)
	return out
}

// startMonitoring creates the metrics user as DEPLOY.md does, then starts
// the server on the monitoring host and an agent on each replication host.
// Without Prometheus it returns nil, saying so (under CI, which installs
// it, it fails).
func (d *deployment) startMonitoring(t *testing.T) *monitoring {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus is missing: CI must run the monitoring of DEPLOY.md (apt-get install prometheus)")
		}
		t.Log("prometheus not found (apt-get install prometheus): the monitoring of DEPLOY.md is not run")
		return nil
	}
	doc, err := os.ReadFile(filepath.Join(d.root, "docs", "DEPLOY.md"))
	require.NoError(t, err)
	for _, f := range append(slices.Clone(serverFlags), agentFlags...) {
		require.Contains(t, string(doc), f, "DEPLOY.md runs Prometheus with %s", f)
	}

	pass := randomHex(t)
	fe1 := d.nodes["fe1"]
	for _, kv := range [][2]string{{"users/" + metricsUser, pass}, {"user_roles/" + metricsUser, "_metrics"}} {
		r := testutil.Do(t, "PUT", d.api(fe1)+"/_node/_cluster/_config/"+kv[0], d.admin, strconv.Quote(kv[1]))
		require.Equal(t, http.StatusOK, r.Status, "PUT %s: %s", kv[0], r.Raw)
	}

	dir := filepath.Join(d.dir, "prometheus")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	alerts, err := os.ReadFile(filepath.Join(d.root, promDir, "alerts.yml"))
	require.NoError(t, err)
	for name, content := range map[string][]byte{
		"prometheus.yml": d.serverConfig(t), "alerts.yml": alerts, "agent.yml": d.agentConfig(t),
		"metrics_password": []byte(pass + "\n"),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), content, 0o600))
	}

	mon := d.net.hosts["mon"]
	m := &monitoring{url: fmt.Sprintf("http://%s:%d", mon.addr, d.promPort)}
	args := mon.exec(append([]string{bin, "--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=:" + strconv.Itoa(d.promPort),
		"--log.format=json"}, serverFlags...)...)
	m.server = proctest.Start(t, "prometheus", exec.Command(args[0], args[1:]...))
	proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "Prometheus ready", func() bool {
		require.False(t, m.server.Exited(), "prometheus exited:\n%s", m.server.Tail())
		res, err := http.Get(m.url + "/-/ready")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			env = append(env, kv)
		}
	}
	for _, name := range []string{"rep1", "rep2"} {
		args := d.nodes[name].host.exec(append(slices.Clone(append([]string{bin}, agentFlags...)),
			"--config.file="+filepath.Join(dir, "agent.yml"), "--storage.agent.path="+filepath.Join(dir, "agent-"+name),
			"--log.format=json")...)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(slices.Clone(env), "FDBREP_NODE__NAME="+name)
		m.agents = append(m.agents, proctest.Start(t, "agent on "+name, cmd))
	}
	return m
}

// promSample is one series of a query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value(t *testing.T) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s.Value[1].(string), 64)
	require.NoError(t, err, "%v", s)
	return f
}

// query asks the server for an instant vector.
func (m *monitoring) query(t *testing.T, q string) []promSample {
	t.Helper()
	res, err := http.Get(m.url + "/api/v1/query?query=" + url.QueryEscape(q))
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct {
		Status string `json:"status"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out), q)
	require.Equal(t, "success", out.Status, q)
	return out.Data.Result
}

// byNode is a query's values by their label node.
func (m *monitoring) byNode(t *testing.T, q string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range m.query(t, q) {
		out[s.Metric["node"]] = s.value(t)
	}
	return out
}

// checkMonitoring checks that the server has every node's series, each
// with its node label: the frontends scraped as the metrics user, the
// replication nodes' pushed by their agents, what they run among them;
// and that it loaded the alert rules.
func (d *deployment) checkMonitoring(t *testing.T) {
	if d.mon == nil {
		return
	}
	defer d.phase(t, "2b. Prometheus has every node's metrics")()
	m := d.mon
	for _, p := range append([]*proctest.Proc{m.server}, m.agents...) {
		require.False(t, p.Exited(), "%s exited:\n%s", p.Name, p.Tail())
	}
	want := map[string]float64{"fe1": 1, "fe2": 1}
	wantRep := map[string]float64{"rep1": 1, "rep2": 1}
	var fronts, reps map[string]float64
	proctest.WaitUntil(t, time.Now().Add(scrapeBound()), "up = 1 for every node", func() bool {
		fronts = m.byNode(t, `up{job="fdbrep_api_frontend"}`)
		reps = m.byNode(t, `up{job="fdbrep_replication"}`)
		return maps.Equal(fronts, want) && maps.Equal(reps, wantRep)
	})
	t.Logf("up: frontends %v (scraped as %s), replication nodes %v (pushed by their agents)", fronts, metricsUser, reps)

	// The sync series of each replication node count the jobs it runs.
	var running, synced map[string]float64
	proctest.WaitUntil(t, time.Now().Add(scrapeBound()), "the replication nodes' sync series", func() bool {
		on := d.placement(t, d.nodes["fe1"])
		running = map[string]float64{"rep1": float64(len(d.on(on, "rep1"))), "rep2": float64(len(d.on(on, "rep2")))}
		synced = m.byNode(t, `sum by (node) (couchdb_couch_replicator_sync_jobs{job="fdbrep_replication",database="_replicator"})`)
		return maps.Equal(running, synced)
	})
	t.Logf("couchdb_couch_replicator_sync_jobs by node: %v, as _scheduler/jobs places them", synced)

	res, err := http.Get(m.url + "/api/v1/rules")
	require.NoError(t, err)
	defer res.Body.Close()
	var rules struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []any  `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&rules))
	var groups []string
	for _, g := range rules.Data.Groups {
		require.NotEmpty(t, g.Rules, g.Name)
		groups = append(groups, g.Name)
	}
	require.Equal(t, []string{"fdbrep-replication"}, groups, "the server loaded alerts.yml")
}
