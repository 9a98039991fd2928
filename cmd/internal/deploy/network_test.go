//go:build fdb && linux

package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/health"
)

// The test's network: a network namespace per host, each with a veth
// pair into a Linux bridge that a "switch" namespace holds, an address in
// a private /24 and no default route, so that nothing leaves it. The test
// process's own namespace joins the switch too, as the client host: the
// test's HTTP requests are the clients' (net/http, directly), and
// client_nets is that one address. Requests from other hosts (a
// connection attempt, a GET of a loopback health port) run the test
// binary itself there, through ip netns exec, as a helper (probeFrom).

// nsPrefix starts the names of the test's namespaces:
// fdbrep-<the test's pid>-<host>.
const nsPrefix = "fdbrep-"

// hostIDs are the hosts and the last byte of their addresses; the client
// (this namespace) is .1, the monitoring host (Prometheus) "mon".
var hostIDs = map[string]int{"fdb": 2, "couch": 3, "mon": 5, "fe1": 11, "fe2": 12, "rep1": 21, "rep2": 22}

// host is a host of the test's network. The client host has no namespace
// of its own (ns "").
type host struct {
	name, ns, addr string
}

// exec prefixes args with what runs them on h.
func (h *host) exec(args ...string) []string {
	if h.ns == "" {
		return args
	}
	return append([]string{"ip", "netns", "exec", h.ns}, args...)
}

// run runs args on h, failing t with the output if it fails.
func (h *host) run(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, h.exec(args...)...)
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
	return string(out)
}

type network struct {
	prefix string       // of the namespaces' names
	subnet netip.Prefix // every host's address is in it
	link   string       // the client's end of its veth pair, in this namespace
	client *host
	hosts  map[string]*host
}

// requireNetns skips the test where it cannot create namespaces and
// firewalls, saying how to run it; under CI ($CI set) it fails instead,
// as scripts/with-fdb.sh does for FoundationDB.
func requireNetns(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		skipOrFail(t, "it needs "+strings.Join(missing, ", "))
	}
}

// deployNeeds begins the message of a skipped deployment test.
const deployNeeds = "the deployment test builds its hosts out of network namespaces with their own nftables firewalls (run it as root where iproute2 (ip) and nftables (nft) are installed: sudo make test-deploy), and "

// skipOrFail skips the test for what the machine lacks; under CI, whose
// .ci/run installs nftables and runs as root, it fails instead.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	msg := deployNeeds + why
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// newNetwork builds the network, after removing what crashed runs left;
// t.Cleanup removes it (deleting a namespace deletes its veths).
func newNetwork(t *testing.T) *network {
	t.Helper()
	removeStale(t)
	pid := os.Getpid()
	n := &network{prefix: fmt.Sprintf("%s%d-", nsPrefix, pid), link: fmt.Sprintf("fdbrep%d", pid), hosts: map[string]*host{}}
	n.subnet = pickSubnet(t)
	t.Cleanup(n.remove)
	sw := n.prefix + "switch"
	if out, err := exec.Command("ip", "netns", "add", sw).CombinedOutput(); err != nil {
		// A machine (a container) that cannot make namespaces is not a
		// missing install: skipped, under CI too.
		t.Skip(deployNeeds + fmt.Sprintf("this machine refused to create one (%v: %s)", err, strings.TrimSpace(string(out))))
	}
	run(t, "ip", "-n", sw, "link", "set", "lo", "up")
	run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", sw, "link", "set", "br0", "up")
	names := make([]string, 0, len(hostIDs))
	for name := range hostIDs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := &host{name: name, ns: n.prefix + name, addr: n.addr(hostIDs[name])}
		run(t, "ip", "netns", "add", h.ns)
		run(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", sw, "link", "add", "v-"+name, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		run(t, "ip", "-n", sw, "link", "set", "v-"+name, "master", "br0", "up")
		run(t, "ip", "-n", h.ns, "addr", "add", h.addr+"/24", "dev", "eth0")
		run(t, "ip", "-n", h.ns, "link", "set", "eth0", "up")
		n.hosts[name] = h
	}
	n.client = &host{name: "client", addr: n.addr(1)}
	run(t, "ip", "link", "add", n.link, "type", "veth", "peer", "name", "v-client", "netns", sw)
	run(t, "ip", "-n", sw, "link", "set", "v-client", "master", "br0", "up")
	run(t, "ip", "addr", "add", n.client.addr+"/24", "dev", n.link)
	run(t, "ip", "link", "set", n.link, "up")
	return n
}

func (n *network) addr(id int) string {
	a := n.subnet.Addr().As4()
	a[3] = byte(id)
	return netip.AddrFrom4(a).String()
}

// remove stops whatever still runs in the test's namespaces and deletes
// them.
func (n *network) remove() {
	_ = exec.Command("ip", "link", "del", n.link).Run()
	for _, ns := range namespaces() {
		if strings.HasPrefix(ns, n.prefix) {
			removeNamespace(ns)
		}
	}
}

// pickSubnet picks a 10.231.x.0/24 that no route of this host covers.
func pickSubnet(t *testing.T) netip.Prefix {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-4", "route", "show", "table", "all").Output()
	require.NoError(t, err, "ip route")
	var routes []struct {
		Dst string `json:"dst"`
	}
	if len(strings.TrimSpace(string(out))) > 0 {
		require.NoError(t, json.Unmarshal(out, &routes), "ip -j route: %s", out)
	}
	var used []netip.Prefix
	for _, r := range routes {
		p, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			a, err := netip.ParseAddr(r.Dst)
			if err != nil {
				continue // default, or a keyword
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		used = append(used, p)
	}
	for range 100 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(rand.IntN(256)), 0}), 24)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p
		}
	}
	t.Fatal("no 10.231.x.0/24 is free of this host's routes")
	return netip.Prefix{}
}

// namespaces lists the network namespaces of this test, this run's and
// earlier runs'.
func namespaces() []string {
	out, _ := exec.Command("ip", "netns", "list").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
			names = append(names, f[0])
		}
	}
	return names
}

// removeNamespace SIGKILLs every process in ns and deletes it.
func removeNamespace(ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = exec.Command("ip", "netns", "delete", ns).Run()
}

// staleLink is the client's veth of a run: fdbrep<pid>.
var staleLink = regexp.MustCompile(`^\d+: (fdbrep(\d+))[@:]`)

// removeStale removes the namespaces (and the client veth) of earlier
// runs whose process is gone: a run killed before its cleanup ran (go
// test's -timeout, a SIGKILL).
func removeStale(t *testing.T) {
	t.Helper()
	gone := func(pid string) bool {
		_, err := os.Stat("/proc/" + pid)
		return errors.Is(err, os.ErrNotExist)
	}
	for _, ns := range namespaces() {
		pid, _, ok := strings.Cut(strings.TrimPrefix(ns, nsPrefix), "-")
		if ok && pid != "" && strings.Trim(pid, "0123456789") == "" && gone(pid) {
			t.Logf("removing %s, left by an earlier run (pid %s is gone)", ns, pid)
			removeNamespace(ns)
		}
	}
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if m := staleLink.FindStringSubmatch(line); m != nil && gone(m[2]) {
			_ = exec.Command("ip", "link", "del", m[1]).Run()
		}
	}
}

// defines is the test's define block for DEPLOY.md's rulesets: its own
// addresses in place of the example's.
func (n *network) defines(fdbPorts [2]int, apiPort, couchPort, prometheusPort int) string {
	h := n.hosts
	return fmt.Sprintf(`define fdb_hosts = { %s }
define frontend_hosts = { %s, %s }
define replication_hosts = { %s, %s }
define client_nets = { %s }
define endpoint_nets = { %s }
define fdb_ports = { %d-%d }
define api_port = %d
define endpoint_ports = { %d }
define monitoring_hosts = { %s }
define prometheus_port = %d
`, h["fdb"].addr, h["fe1"].addr, h["fe2"].addr, h["rep1"].addr, h["rep2"].addr, n.client.addr, h["couch"].addr,
		fdbPorts[0], fdbPorts[1], apiPort, couchPort, h["mon"].addr, prometheusPort)
}

// applyRuleset loads a ruleset on h as DEPLOY.md installs it: a file that
// flushes the ruleset and includes the define block, then the node
// type's ruleset, each written as given.
func applyRuleset(t *testing.T, h *host, dir, defines, ruleset string) {
	t.Helper()
	dir = filepath.Join(dir, h.name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	hosts, rules, conf := filepath.Join(dir, "fdbrep-hosts.nft"), filepath.Join(dir, "fdbrep.nft"), filepath.Join(dir, "nftables.conf")
	require.NoError(t, os.WriteFile(hosts, []byte(defines), 0o644))
	require.NoError(t, os.WriteFile(rules, []byte(ruleset), 0o644))
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("flush ruleset\ninclude %q\ninclude %q\n", hosts, rules)), 0o644))
	h.run(t, "nft", "-f", conf)
}

// cut drops, on h, the traffic between h and addr in the directions
// given: one nft rule per direction, in a table of its own that uncut
// deletes.
func cut(t *testing.T, h *host, dir, addr string, in, out bool) {
	t.Helper()
	var b strings.Builder
	b.WriteString("table inet cut {\n")
	if in {
		fmt.Fprintf(&b, "\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n\t\tip saddr %s drop\n\t}\n", addr)
	}
	if out {
		fmt.Fprintf(&b, "\tchain output {\n\t\ttype filter hook output priority -10; policy accept;\n\t\tip daddr %s drop\n\t}\n", addr)
	}
	b.WriteString("}\n")
	file := filepath.Join(dir, h.name, "cut.nft")
	require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o644))
	h.run(t, "nft", "-f", file)
}

func uncut(t *testing.T, h *host) {
	t.Helper()
	h.run(t, "nft", "delete", "table", "inet", "cut")
}

// helperEnv makes the test binary a helper (TestMain): "dial ADDR" tries a
// TCP connection, "get URL" sends a GET; it prints a probe as JSON.
const helperEnv = "FDBREP_DEPLOY_HELPER"

// dialTimeout bounds a connection attempt: one that a firewall drops
// never completes, and one that a host answers does so well within it.
const dialTimeout = 3 * time.Second

// probe is what a helper saw.
type probe struct {
	// Connected: the connection was made (and, for a GET, a reply came).
	Connected bool `json:"connected"`
	// Refused: a host answered with a reset (nothing listens there): no
	// firewall dropped the attempt.
	Refused bool   `json:"refused,omitempty"`
	Err     string `json:"err,omitempty"`
	Status  int    `json:"status,omitempty"`
	Body    string `json:"body,omitempty"`
}

// helper runs a helper's request and prints what it saw.
func helper(spec string) int {
	verb, arg, _ := strings.Cut(spec, " ")
	var p probe
	switch verb {
	case "dial":
		c, err := net.DialTimeout("tcp", arg, dialTimeout)
		if err != nil {
			p = probe{Refused: errors.Is(err, syscall.ECONNREFUSED), Err: err.Error()}
			break
		}
		_ = c.Close()
		p.Connected = true
	case "get":
		// Longer than /_up's probe of the store, so that a node cut off
		// from it is heard saying so.
		c := &http.Client{Timeout: 4 * health.ProbeTimeoutDefault}
		res, err := c.Get(arg)
		if err != nil {
			p.Err = err.Error()
			break
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		p = probe{Connected: true, Status: res.StatusCode, Body: string(body)}
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown request %q\n", helperEnv, spec)
		return 2
	}
	_ = json.NewEncoder(os.Stdout).Encode(p)
	return 0
}

// probeFrom runs a helper on h ("dial ADDR" or "get URL"); from the client
// host it runs it here, in a child all the same.
func probeFrom(h *host, spec string) (probe, error) {
	self, err := os.Executable()
	if err != nil {
		return probe{}, err
	}
	args := h.exec(self)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+spec)
	out, err := cmd.Output()
	if err != nil {
		return probe{}, fmt.Errorf("%s on %s: %w", spec, h.name, err)
	}
	var p probe
	if err := json.Unmarshal(out, &p); err != nil {
		return probe{}, fmt.Errorf("%s on %s: %w: %q", spec, h.name, err, out)
	}
	return p, nil
}
