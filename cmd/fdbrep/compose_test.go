package main

import (
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fdbrep/fdbrep/deploy"
	"github.com/fdbrep/fdbrep/pkg/config"
)

// Static checks of the deployment files (docker-compose.yml, Dockerfile,
// .dockerignore, scripts/docker): no Docker engine runs the tests, so the
// rules that make the deployment start, restart and keep the roles apart
// are checked on the files themselves.

const repoRoot = "../.."

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Networks map[string]composeNetwork `yaml:"networks"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Restart     string            `yaml:"restart"`
	Volumes     []string          `yaml:"volumes"`
	Environment map[string]string `yaml:"environment"`
	Command     []string          `yaml:"command"`
	Networks    any               `yaml:"networks"` // a list of names or a map
	Ports       []string          `yaml:"ports"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeNetwork struct {
	Internal bool `yaml:"internal"`
	IPAM     struct {
		Config []struct {
			Subnet string `yaml:"subnet"`
		} `yaml:"config"`
	} `yaml:"ipam"`
}

// networks returns the service's networks and their fixed addresses ("" if
// none).
func (s composeService) networks(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch n := s.Networks.(type) {
	case []any:
		for _, name := range n {
			out[name.(string)] = ""
		}
	case map[string]any:
		for name, v := range n {
			addr := ""
			if m, ok := v.(map[string]any); ok {
				addr, _ = m["ipv4_address"].(string)
			}
			out[name] = addr
		}
	case nil:
	default:
		t.Fatalf("networks of unexpected form %T", n)
	}
	return out
}

// configFile is the role configuration file the service runs (its
// command's -config), "" for a service that is no fdbrep node.
func (s composeService) configFile() string {
	for i, a := range s.Command {
		if a == "-config" && i+1 < len(s.Command) {
			return s.Command[i+1]
		}
	}
	return ""
}

// roleFile is the repository's copy of a role file of the image.
func roleFile(t *testing.T, imagePath string) string {
	t.Helper()
	require.Equal(t, deploy.ImageDir, path.Dir(imagePath), "the image holds the role files in %s", deploy.ImageDir)
	return filepath.Join(repoRoot, "deploy", path.Base(imagePath))
}

// startup is the service's start-up configuration, as fdbrep serve reads
// it: its role file under its environment; nil for a service that is no
// fdbrep node.
func (s composeService) startup(t *testing.T) *config.Config {
	t.Helper()
	file := s.configFile()
	if file == "" {
		return nil
	}
	var env []string
	for k, v := range s.Environment {
		env = append(env, k+"="+v)
	}
	cfg, err := config.Load([]string{roleFile(t, file)}, env)
	require.NoError(t, err)
	return cfg
}

// roles are the service's fdbrep roles (none for other services).
func (s composeService) roles(t *testing.T) []string {
	if cfg := s.startup(t); cfg != nil {
		return cfg.Roles()
	}
	return nil
}

// mount is one entry of a service's volumes.
type mount struct{ source, target string }

func (s composeService) mounts(t *testing.T) []mount {
	t.Helper()
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		require.GreaterOrEqual(t, len(parts), 2, "volume %q", v)
		out = append(out, mount{source: parts[0], target: parts[1]})
		if len(parts) == 3 {
			require.Contains(t, []string{"ro", "rw"}, parts[2], "volume %q", v)
		}
	}
	return out
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	require.NoError(t, err)
	return string(b)
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	require.NoError(t, yaml.Unmarshal([]byte(readRepoFile(t, "docker-compose.yml")), &c))
	require.NotEmpty(t, c.Services)
	return c
}

// oneShot are the services that run once and exit.
var oneShot = []string{"fdb-init"}

func TestComposeRules(t *testing.T) {
	c := loadCompose(t)
	fdb, ok := c.Services["fdb"]
	require.True(t, ok, "a service named fdb runs FoundationDB")
	var frontends, replicators []string
	for name, s := range c.Services {
		switch roles := s.roles(t); {
		case slices.Contains(roles, config.RoleAPIFrontend):
			frontends = append(frontends, name)
		case slices.Contains(roles, config.RoleReplication):
			replicators = append(replicators, name)
		}
	}
	require.NotEmpty(t, frontends)
	require.NotEmpty(t, replicators)

	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"the coordinator has a fixed address the cluster file names", func(t *testing.T) {
			addrs := fdb.networks(t)
			require.Len(t, addrs, 1, "one network: the public address is that network's")
			for net, addr := range addrs {
				require.NotEmpty(t, addr, "fixed ipv4_address on %s", net)
				subnets := c.Networks[net].IPAM.Config
				require.Len(t, subnets, 1, "network %s has a fixed subnet", net)
				prefix := netip.MustParsePrefix(subnets[0].Subnet)
				require.True(t, prefix.Contains(netip.MustParseAddr(addr)), "%s in %s", addr, prefix)
				require.Equal(t, "docker:docker@"+addr+":4500", fdb.Environment["FDB_CLUSTER_FILE_CONTENTS"])
			}
		}},
		{"every long-running service restarts", func(t *testing.T) {
			for name, s := range c.Services {
				if slices.Contains(oneShot, name) {
					continue
				}
				require.Contains(t, []string{"always", "unless-stopped"}, s.Restart, "service %s", name)
			}
		}},
		{"no volume hides the FoundationDB image's own files", func(t *testing.T) {
			for name, s := range c.Services {
				for _, m := range s.mounts(t) {
					target := path.Clean(m.target)
					for _, protected := range []string{"/var/fdb/scripts", "/var/fdb/lib", "/var/fdb/version"} {
						require.False(t, protected == target || strings.HasPrefix(protected, target+"/"),
							"service %s mounts %s over %s", name, m.target, protected)
					}
				}
			}
		}},
		{"the cluster file is shared read-write", func(t *testing.T) {
			var clusterFile string
			for name, s := range c.Services {
				file := s.Environment["FDB_CLUSTER_FILE"] + s.Environment["FDBREP_FDB__CLUSTER_FILE"]
				if file == "" {
					continue
				}
				if clusterFile == "" {
					clusterFile = file
				}
				require.Equal(t, clusterFile, file, "service %s", name)
				found := false
				for i, m := range s.mounts(t) {
					if path.Clean(m.target) == path.Dir(file) {
						found = true
						require.Equal(t, "fdb-config", m.source, "service %s", name)
						require.NotContains(t, s.Volumes[i], ":ro", "service %s: FoundationDB's client rewrites the cluster file", name)
					}
				}
				require.True(t, found, "service %s mounts the cluster file's directory", name)
			}
			require.NotEmpty(t, clusterFile)
			require.Contains(t, c.Volumes, "fdb-config")
		}},
		{"api_frontend nodes are on internal networks only and listen on the api network", func(t *testing.T) {
			for _, name := range frontends {
				s := c.Services[name]
				require.Empty(t, s.Ports, "service %s publishes nothing itself", name)
				bind := s.startup(t).String("chttpd", "bind_address")
				var onNet string
				for net, addr := range s.networks(t) {
					require.True(t, c.Networks[net].Internal, "service %s on network %s, which has a route out", name, net)
					if addr != "" && addr == bind {
						onNet = net
					}
				}
				require.NotEmpty(t, onNet, "service %s binds the HTTP API to its fixed address (got %q)", name, bind)
				require.NotEqual(t, "fdb", onNet, "not on the network replication nodes share")
				require.Contains(t, strings.Join(s.Healthcheck.Test, " "), "http://"+bind+":")
			}
		}},
		{"replication nodes take no inbound traffic and share no network with the proxy", func(t *testing.T) {
			proxyNets := map[string]bool{}
			for _, s := range c.Services {
				if len(s.Ports) > 0 {
					for net := range s.networks(t) {
						proxyNets[net] = true
					}
				}
			}
			for _, name := range replicators {
				s := c.Services[name]
				require.Empty(t, s.Ports, "service %s", name)
				health := s.startup(t).String("node", "health_address")
				require.True(t, strings.HasPrefix(health, "127.0.0.1:"), "service %s: health on loopback, got %q", name, health)
				require.NotContains(t, s.Environment, "FDBREP_CHTTPD__BIND_ADDRESS")
				require.NotContains(t, s.roles(t), config.RoleAPIFrontend)
				hasEgress := false
				for net := range s.networks(t) {
					require.False(t, proxyNets[net], "service %s on the ingress proxy's network %s", name, net)
					hasEgress = hasEgress || !c.Networks[net].Internal
				}
				require.True(t, hasEgress, "service %s reaches replication endpoints", name)
			}
		}},
		{"only the ingress proxy publishes ports, on loopback", func(t *testing.T) {
			for name, s := range c.Services {
				if len(s.Ports) == 0 {
					continue
				}
				require.Empty(t, s.roles(t), "service %s is an fdbrep node", name)
				for _, p := range s.Ports {
					require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "service %s publishes %s beyond loopback", name, p)
				}
			}
		}},
		{"the proxy forwards to the frontends' addresses", func(t *testing.T) {
			conf := readRepoFile(t, "scripts/docker/ingress.conf")
			var want []string
			for _, name := range frontends {
				cfg := c.Services[name].startup(t)
				want = append(want, cfg.String("chttpd", "bind_address")+":"+cfg.String("chttpd", "port"))
			}
			var got []string
			for _, m := range regexp.MustCompile(`proxy_pass\s+([0-9.]+:[0-9]+);`).FindAllStringSubmatch(conf, -1) {
				got = append(got, m[1])
			}
			require.ElementsMatch(t, want, got)
		}},
		{"no default secrets", func(t *testing.T) {
			required := regexp.MustCompile(`^\$\{[A-Z0-9_]+:\?[^}]+\}$`)
			for name, s := range c.Services {
				for key, value := range s.Environment {
					if strings.Contains(key, "SECRET") || strings.Contains(key, "PASSWORD") || strings.HasPrefix(key, "FDBREP_ADMINS__") {
						require.Regexp(t, required, value, "service %s: %s must fail when unset", name, key)
					}
				}
			}
			require.NotRegexp(t, regexp.MustCompile(`\$\{FDBREP_[A-Z_]*(SECRET|PASSWORD)[A-Z_]*:-`), readRepoFile(t, "docker-compose.yml"))
		}},
		{"FoundationDB's image and client package are one version", func(t *testing.T) {
			m := regexp.MustCompile(`(?m)^ARG FDB_VERSION=(\S+)$`).FindStringSubmatch(readRepoFile(t, "Dockerfile"))
			require.NotNil(t, m, "the Dockerfile pins FDB_VERSION")
			for name, s := range c.Services {
				if strings.HasPrefix(s.Image, "foundationdb/") {
					require.Equal(t, "foundationdb/foundationdb:"+m[1], s.Image, "service %s", name)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.check)
	}
}

// dockerfileCode is the Dockerfile without its comments.
func dockerfileCode(t *testing.T) string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(readRepoFile(t, "Dockerfile"), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// The image builds for amd64 and arm64 with a checked client package.
func TestComposeDockerfileRules(t *testing.T) {
	dockerfile := dockerfileCode(t)
	install := readRepoFile(t, "scripts/docker/install-fdb-clients.sh")
	ignore := strings.Fields(readRepoFile(t, ".dockerignore"))
	tests := []struct {
		name string
		ok   bool
	}{
		{"the client package follows TARGETARCH", strings.Contains(dockerfile, "ARG TARGETARCH") &&
			strings.Contains(dockerfile, `install-fdb-clients.sh "$FDB_VERSION" "$TARGETARCH"`)},
		{"no architecture is hard-wired", !strings.Contains(dockerfile, "_amd64.deb")},
		{"arm64 maps to FoundationDB's aarch64 package", strings.Contains(install, "arm64) pkg_arch=aarch64")},
		{"downloads are checked", strings.Contains(install, "sha256sum -c") &&
			strings.Contains(dockerfile, "FDB_CLIENTS_SHA256_AMD64") && strings.Contains(dockerfile, "FDB_CLIENTS_SHA256_ARM64")},
		{"no ADD of remote files without a checksum", !regexp.MustCompile(`(?m)^ADD\s+https?://`).MatchString(dockerfile)},
		{".dockerignore keeps history and local stores out", slices.Contains(ignore, ".git") && slices.Contains(ignore, "data") &&
			slices.Contains(ignore, "**/node_modules")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { require.True(t, tc.ok) })
	}
}

// Compose runs each role with the file of deploy/ that every host of the
// role uses and that the deployment test (cmd/internal/deploy) runs: the
// image holds the files, each fdbrep service's command names its role's,
// and its environment sets only a host's own values (deploy.HostVariables).
func TestComposeRunsTheRoleFiles(t *testing.T) {
	dockerfile := dockerfileCode(t)
	require.Regexp(t, `(?m)^COPY deploy/\*\.ini `+regexp.QuoteMeta(deploy.ImageDir)+`/$`, dockerfile, "the image holds the role files")
	require.Regexp(t, `(?m)^ENTRYPOINT \["/usr/local/bin/fdbrep"\]$`, dockerfile, "a service's command is fdbrep's arguments")
	for _, role := range deploy.Roles {
		cfg, err := config.Load([]string{filepath.Join(repoRoot, "deploy", deploy.File(role))}, nil)
		require.NoError(t, err)
		require.Equal(t, []string{role}, cfg.Roles(), "deploy/%s runs its role only", deploy.File(role))
	}
	c := loadCompose(t)
	runs := map[string]int{}
	for name, s := range c.Services {
		file := s.configFile()
		if file == "" {
			require.NotEqual(t, "fdbrep:latest", s.Image, "service %s runs fdbrep without a role file", name)
			continue
		}
		own, err := config.Load([]string{roleFile(t, file)}, nil)
		require.NoError(t, err)
		require.Len(t, own.Roles(), 1, "service %s: %s", name, file)
		role := own.Roles()[0]
		require.Equal(t, []string{"serve", "-config", path.Join(deploy.ImageDir, deploy.File(role))}, s.Command, "service %s", name)
		for key := range s.Environment {
			if strings.HasPrefix(key, config.EnvPrefix) {
				require.Contains(t, deploy.HostVariables[role], key,
					"service %s sets %s: a setting of every %s host belongs in deploy/%s", name, key, role, deploy.File(role))
			}
		}
		runs[role]++
	}
	for _, role := range deploy.Roles {
		require.Positive(t, runs[role], "no service runs %s", role)
	}
}
