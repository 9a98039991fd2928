package deploy_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fdbrep/fdbrep/deploy"
	"github.com/fdbrep/fdbrep/pkg/config"
	_ "github.com/fdbrep/fdbrep/replicator" // its [replicator] keys, which the role files set
)

// promtool is Debian's prometheus package's, which .ci/run installs;
// elsewhere the tests that need it skip with a message.
func promtool(t *testing.T, what string) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool is missing: CI must check %s (apt-get install prometheus)", what)
		}
		t.Skipf("promtool not found (apt-get install prometheus): %s are not checked", what)
	}
	return bin
}

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
}

// The alert rules of deploy/prometheus are valid (promtool check rules)
// and fire on the series that should fire them (promtool test rules,
// alerts_test.yml).
func TestAlertRules(t *testing.T) {
	bin := promtool(t, "the alert rules")
	runPromtool(t, bin, "check", "rules", "alerts.yml")
	runPromtool(t, bin, "test", "rules", "alerts_test.yml")
}

// The Prometheus configurations of deploy/prometheus are valid: the
// server's (prometheus.yml, with the alert rules it loads) and the
// replication hosts' agent's (agent.yml, in agent mode). The deployment
// test (cmd/internal/deploy) runs them.
func TestPrometheusConfigs(t *testing.T) {
	bin := promtool(t, "the Prometheus configurations")
	runPromtool(t, bin, "check", "config", "prometheus.yml")
	runPromtool(t, bin, "check", "config", "--agent", "agent.yml")
}

// They scrape what the role files serve: the frontends' API port, the
// replication nodes' health port, at the metrics path.
func TestPrometheusConfigsMatchTheRoleFiles(t *testing.T) {
	load := func(name string) map[string]any {
		raw, err := os.ReadFile(filepath.Join("prometheus", name))
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, yaml.Unmarshal(raw, &m))
		return m
	}
	role := func(r string) *config.Config {
		cfg, err := config.Load([]string{deploy.File(r)}, nil)
		require.NoError(t, err)
		return cfg
	}
	targets := func(m map[string]any) []string {
		jobs := m["scrape_configs"].([]any)
		require.Len(t, jobs, 1)
		job := jobs[0].(map[string]any)
		require.Equal(t, "/_node/_local/_prometheus", job["metrics_path"])
		var out []string
		for _, sc := range job["static_configs"].([]any) {
			for _, target := range sc.(map[string]any)["targets"].([]any) {
				out = append(out, target.(string))
			}
		}
		require.NotEmpty(t, out)
		return out
	}
	port := strconv.Itoa(int(role(config.RoleAPIFrontend).Int("chttpd", "port")))
	for _, target := range targets(load("prometheus.yml")) {
		_, p, err := net.SplitHostPort(target)
		require.NoError(t, err)
		require.Equal(t, port, p, "prometheus.yml scrapes the frontends' [chttpd] port")
	}
	require.Equal(t, []string{role(config.RoleReplication).String("node", "health_address")}, targets(load("agent.yml")),
		"agent.yml scrapes the replication node's [node] health_address")
}
