package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The River peer: a PostgreSQL cluster made for the run, and the peer
// binary (module cmd/fdbrep-bench/river, built by make bench-jobs) that
// runs River against it, one process per run, reporting through one line
// of JSON on its standard output.

// pgPortDefault is the port of the throwaway cluster; it only names its
// unix socket, in the cluster's own directory (the cluster listens on no
// TCP address), so it cannot collide with another server.
const pgPortDefault = 5432

// pgCluster is a throwaway PostgreSQL cluster in a temporary directory.
type pgCluster struct {
	bin     string // directory of initdb, pg_ctl and postgres
	dir     string // the cluster's directory: data/, its log and its socket
	version string
	cred    *syscall.Credential // the user the server runs as when we are root
	pid     int                 // the postmaster
}

// findPGBin returns the directory holding initdb and pg_ctl: dir when
// given, else the one of initdb on PATH, else the newest
// /usr/lib/postgresql/*/bin (Debian's layout). "" when there is none.
func findPGBin(dir string) string {
	has := func(d string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return false
			}
		}
		return true
	}
	if dir != "" {
		if has(dir) {
			return dir
		}
		return ""
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(p)) {
			return filepath.Dir(p)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return pgMajor(b) - pgMajor(a) })
	for _, d := range dirs {
		if has(d) {
			return d
		}
	}
	return ""
}

// pgMajor is the major version in a path /usr/lib/postgresql/N/bin.
func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// startPG creates a cluster in a new temporary directory with binaries
// from bin and starts it. PostgreSQL refuses to run as root: when we are
// root, the cluster belongs to, and runs as, the user postgres (nobody
// when there is none).
func startPG(bin string) (*pgCluster, error) {
	dir, err := os.MkdirTemp("", "fdbrep-bench-pg-")
	if err != nil {
		return nil, err
	}
	c := &pgCluster{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		if c.cred, err = unprivileged(); err == nil {
			err = os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid))
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	out, err := c.run("postgres", "--version")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.version = strings.TrimSpace(out)
	// Durable commits (fsync, synchronous_commit) as PostgreSQL's
	// defaults; only initdb skips its final sync of a cluster that is
	// thrown away anyway.
	if _, err := c.run("initdb", "-D", c.data(), "-U", "bench", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-k %s -c listen_addresses= -p %d", dir, pgPortDefault)
	if _, err := c.run("pg_ctl", "-D", c.data(), "-l", filepath.Join(dir, "log"), "-w", "-t", "120", "-o", opts, "start"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pidFile, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err == nil {
		c.pid, err = strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	}
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("postgres pid: %v", err)
	}
	return c, nil
}

func (c *pgCluster) data() string { return filepath.Join(c.dir, "data") }

// dsn is the peer's connection string: the superuser bench over the
// cluster's unix socket.
func (c *pgCluster) dsn() string {
	return fmt.Sprintf("host=%s port=%d user=bench dbname=postgres sslmode=disable", c.dir, pgPortDefault)
}

// run runs one of the cluster's programs as the cluster's user and
// returns its standard output.
func (c *pgCluster) run(prog string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v: %s", prog, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// stop stops the server (fast shutdown) and removes the cluster.
func (c *pgCluster) stop() {
	if _, err := c.run("pg_ctl", "-D", c.data(), "-m", "fast", "-w", "stop"); err != nil {
		fmt.Fprintln(os.Stderr, "fdbrep-bench: stopping PostgreSQL:", err)
	}
	os.RemoveAll(c.dir)
}

// unprivileged returns the credentials of the user postgres, or nobody.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root, and there is no user postgres or nobody to run PostgreSQL as")
}

// riverResult is the peer's line of JSON (the peer's Result type).
type riverResult struct {
	Mode           string  `json:"mode"`
	Inserted       int64   `json:"inserted"`
	InsertSeconds  float64 `json:"insert_seconds"`
	InsertCPU      float64 `json:"insert_cpu_seconds"`
	Worked         int64   `json:"worked"`
	Seconds        float64 `json:"seconds"`
	CPUSeconds     float64 `json:"cpu_seconds"`
	PGCPUSeconds   float64 `json:"pg_cpu_seconds"`
	WakeFromCall   []int64 `json:"wake_from_call"`
	WakeFromCommit []int64 `json:"wake_from_commit"`
	MemBase        int64   `json:"mem_base_bytes"`
	MemPeak        int64   `json:"mem_peak_bytes"`
	Concurrency    int     `json:"concurrency"`
}

// riverPeer runs the peer binary against a cluster.
type riverPeer struct {
	bin string
	pg  *pgCluster
	// workSleep is how long each job's work takes (-work-sleep), and
	// workers how many jobs it works at once (-concurrency).
	workSleep time.Duration
	workers   int
}

// run runs the peer in mode with args; its progress lines pass through to
// our standard output.
func (p *riverPeer) run(mode string, args ...string) (*riverResult, error) {
	args = append([]string{"-dsn", p.pg.dsn(), "-pg-pid", strconv.Itoa(p.pg.pid), "-mode", mode, "-work-sleep", p.workSleep.String(),
		"-max-workers", strconv.Itoa(p.workers)}, args...)
	cmd := exec.Command(p.bin, args...)
	// The peer must not outlive the bench.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("river peer (%s): %v", mode, err)
	}
	var r riverResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("river peer (%s): bad output %q: %v", mode, stdout.String(), err)
	}
	return &r, nil
}

// startRiver prepares the River peer: nil, with the reason printed, when
// the peer binary or PostgreSQL is missing.
func startRiver(env *benchEnv, peerBin, pgBin string) (*riverPeer, error) {
	if peerBin == "" {
		fmt.Println("River: skipped (no -river-bin; make bench-jobs builds the peer, module cmd/fdbrep-bench/river)")
		return nil, nil
	}
	bin := findPGBin(pgBin)
	if bin == "" {
		fmt.Println("River: skipped (PostgreSQL not found: apt-get install postgresql, or pass -pg-bin)")
		return nil, nil
	}
	if _, err := os.Stat(peerBin); err != nil {
		return nil, fmt.Errorf("-river-bin: %v", err)
	}
	t0 := time.Now()
	pg, err := startPG(bin)
	if err != nil {
		return nil, err
	}
	env.closers = append(env.closers, pg.stop)
	fmt.Printf("River: %s, peer %s; throwaway cluster in %s (started in %.1fs)\n", pg.version, peerBin, pg.dir, time.Since(t0).Seconds())
	return &riverPeer{bin: peerBin, pg: pg}, nil
}
