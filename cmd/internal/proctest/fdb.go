package proctest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// FDBScript returns the script that runs FoundationDB for tests:
// $FDBREP_FDB_SH, or ../shared/fdb/fdb.sh beside the module root.
func FDBScript(t testing.TB) string {
	if p := os.Getenv("FDBREP_FDB_SH"); p != "" {
		return p
	}
	return filepath.Join(ModuleRoot(t), "..", "shared", "fdb", "fdb.sh")
}

// ModuleRoot returns the directory holding go.mod, above the working
// directory.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the working directory")
		dir = parent
	}
}

// FDBOptions say where StartFDB runs a cluster.
type FDBOptions struct {
	// Exec is the command that runs a command on the cluster's host
	// (ip netns exec NAME); empty: this host.
	Exec []string
	// Address is the processes' address (fdb.sh's FDB_ADDRESS); empty:
	// 127.0.0.1.
	Address string
	// Port is the first process's port; 0 picks free ports on 127.0.0.1.
	Port int
	// Processes is the number of fdbserver processes; 0 is 3, which
	// fdb.sh configures with double redundancy (one may die and the
	// database stays up).
	Processes int
	// TLS runs the cluster on mutual TLS (fdb.sh's FDB_TLS=1): :tls
	// addresses, a throwaway CA and certificates in TLSFile's directory.
	TLS bool
}

// FDB is a FoundationDB cluster started with fdb.sh.
type FDB struct {
	// File is the cluster file fdb.sh wrote.
	File string
	// Base is the first process's port: process i listens on Base+i.
	Base int
	// Processes is the number of fdbserver processes.
	Processes int

	sh, dir string
	opts    FDBOptions
}

// StartFDB starts a cluster as opts say and stops it in t.Cleanup. Where
// fdb.sh is absent the test is skipped, saying so, and failed under CI
// ($CI set), which must run it.
func StartFDB(t testing.TB, opts FDBOptions) *FDB {
	t.Helper()
	sh := FDBScript(t)
	if _, err := os.Stat(sh); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no FoundationDB under CI: %s is absent (set FDBREP_FDB_SH)", sh)
		}
		t.Skipf("no FoundationDB here (%s is absent; set FDBREP_FDB_SH): this test runs where it is, as in CI", sh)
	}
	c := &FDB{sh: sh, dir: t.TempDir(), opts: opts, Base: opts.Port, Processes: opts.Processes}
	if c.Processes == 0 {
		c.Processes = 3
	}
	if c.Base == 0 {
		c.Base = FreePorts(t, c.Processes)
	}
	t.Cleanup(func() { _ = c.command("stop", c.dir).Run() })
	out := c.Run(t, "start", strconv.Itoa(c.Base), c.dir, strconv.Itoa(c.Processes))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	c.File = lines[len(lines)-1]
	return c
}

// command is fdb.sh with args, run on the cluster's host.
func (c *FDB) command(args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, c.opts.Exec...), "bash", c.sh), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	if c.opts.Address != "" {
		cmd.Env = append(cmd.Env, "FDB_ADDRESS="+c.opts.Address)
	}
	if c.opts.TLS {
		cmd.Env = append(cmd.Env, "FDB_TLS=1")
	}
	return cmd
}

// TLSFile returns the path of a file fdb.sh made for a TLS cluster:
// ca.pem, cert.pem and key.pem (the CA, and a certificate and key it
// signed, which the processes and their clients use), rogue-ca.pem,
// rogue-cert.pem and rogue-key.pem (another CA's).
func (c *FDB) TLSFile(name string) string { return filepath.Join(c.dir, "tls", name) }

// Run runs fdb.sh with args on the cluster's host and returns its output;
// it fails t if fdb.sh fails.
func (c *FDB) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.command(args...).CombinedOutput()
	require.NoError(t, err, "fdb.sh %v: %s", args, out)
	return string(out)
}

// Kill SIGKILLs process i; Restart starts it again on its data.
func (c *FDB) Kill(t testing.TB, i int)    { c.Run(t, "kill", c.dir, strconv.Itoa(i)) }
func (c *FDB) Restart(t testing.TB, i int) { c.Run(t, "restart", c.dir, strconv.Itoa(i)) }

// KillAll SIGKILLs every process; RestartAll starts them again.
func (c *FDB) KillAll(t testing.TB) {
	for i := range c.Processes {
		c.Kill(t, i)
	}
}

func (c *FDB) RestartAll(t testing.TB) {
	for i := range c.Processes {
		c.Restart(t, i)
	}
}

// Status is the cluster's status document, read with fdbcli.
func (c *FDB) Status(t testing.TB) map[string]any {
	t.Helper()
	out := c.Run(t, "cli", c.dir, "--exec", "status json", "--timeout", "20")
	i := strings.IndexByte(out, '{')
	require.GreaterOrEqual(t, i, 0, "status json: %s", out)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(out[i:]), &st), "status json: %s", out)
	return st
}

// Controller returns the index of the process acting as cluster
// controller.
func (c *FDB) Controller(t testing.TB) int {
	t.Helper()
	procs, _ := c.Status(t)["cluster"].(map[string]any)["processes"].(map[string]any)
	for _, p := range procs {
		pm := p.(map[string]any)
		roles, _ := pm["roles"].([]any)
		for _, r := range roles {
			if r.(map[string]any)["role"] == "cluster_controller" {
				addr, _ := pm["address"].(string)
				_, port, _ := net.SplitHostPort(addr)
				n, _ := strconv.Atoi(port)
				return n - c.Base
			}
		}
	}
	t.Fatal("no cluster controller in the status")
	return -1
}

// WaitAvailable waits until the cluster's database is available.
func (c *FDB) WaitAvailable(t testing.TB) {
	t.Helper()
	WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "the cluster available again", func() bool {
		out, err := c.command("cli", c.dir, "--exec", "status minimal", "--timeout", "5").CombinedOutput()
		return err == nil && strings.Contains(string(out), "The database is available")
	})
}

// FreePorts returns the first of n free consecutive ports on 127.0.0.1.
func FreePorts(t testing.TB, n int) int {
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

// BuildFDBBinary builds fdbrep with the FoundationDB backend (-tags fdb)
// into a temporary directory and returns its path.
func BuildFDBBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fdbrep")
	out, err := exec.Command("go", "build", "-tags", "fdb", "-o", bin, "github.com/fdbrep/fdbrep/cmd/fdbrep").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// WaitUntil polls cond until it holds, failing t at deadline: for state
// in other processes, which no signal reports.
func WaitUntil(t testing.TB, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within its bound", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
