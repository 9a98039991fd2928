package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// jobsNodeCmd is the hidden subcommand each process of burnDownProcesses
// runs.
const jobsNodeCmd = "jobs-node"

func init() {
	register(jobsNodeCmd, runJobsNode)
	hidden[jobsNodeCmd] = true
}

// Bounds on burnDownProcesses' waits: for each process to open the store
// and say it is ready, and for the whole run (processes still running
// then are killed).
const (
	nodeStartLimit = time.Minute
	nodeRunLimit   = time.Hour
)

// nodeMembers is fdbjobs.Config.Members for node i of k: self is
// "node-<i>", the members "node-0" to "node-<k-1>".
func nodeMembers(i, k int) func() (self string, members []string) {
	names := make([]string, k)
	for j := range names {
		names[j] = "node-" + strconv.Itoa(j)
	}
	return func() (string, []string) { return names[i], names }
}

// nodeResult is the JSON line a jobs-node process prints once the queue is
// empty: the jobs it finished, the seconds it worked and what its
// transactions cost the store.
type nodeResult struct {
	Jobs    int64   `json:"jobs"`
	Seconds float64 `json:"seconds"`
	Cost    kvCost  `json:"cost"`
}

// runJobsNode is one node of burnDownProcesses: it opens the FoundationDB
// tenant -tenant with a Client that is node -node of -nodes, prints
// "ready", waits for a line on stdin, then works off the burn-down's jobs
// with -workers workers until the queue is empty and prints its
// nodeResult. It stops with an error when stdin ends before (its parent
// is gone).
func runJobsNode(args []string) error {
	fs := flag.NewFlagSet(jobsNodeCmd, flag.ContinueOnError)
	tenant := fs.String("tenant", "", "the store's FoundationDB tenant")
	i := fs.Int("node", 0, "this node's number, from 0")
	k := fs.Int("nodes", 1, "how many nodes there are")
	var o jobsOpts
	fs.IntVar(&o.workers, "workers", 1, "workers of this node")
	fs.IntVar(&o.batch, "batch", 50, "jobs per AcceptBatch / FinishBatch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !onFDB() || openFDBTenant == nil || *tenant == "" {
		return fmt.Errorf("%s runs on a FoundationDB tenant: -tenant, %s=%s, a binary built with -tags fdb", jobsNodeCmd, EnvBenchStores, storeFDB)
	}
	if *i < 0 || *i >= *k || o.workers < 1 || o.batch < 1 || o.batch > fdbjobs.MaxBatch {
		return errors.New("-node must be in [0, -nodes), -workers positive, -batch from 1 to 10000")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := openFDBTenant(*tenant)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := kv.Probe(ctx, db, 0); err != nil {
		return err
	}
	cdb := &countingDB{Database: db}
	c, err := fdbjobs.New(cdb, fdbjobs.Config{Members: nodeMembers(*i, *k)})
	if err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("node %d: waiting for the start: %w", *i, err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	s := &fdbjobsRun{ctx: ctx, c: c, db: cdb, o: o}
	var done atomic.Int64
	before, t0 := cdb.cost(), time.Now()
	err = s.work(ctx, burnType, false, &done)
	r := nodeResult{Jobs: done.Load(), Seconds: time.Since(t0).Seconds(), Cost: cdb.cost().sub(before)}
	if err == nil && ctx.Err() != nil {
		err = errors.New("stopped: stdin ended")
	}
	if err != nil {
		return fmt.Errorf("node %d: %w", *i, err)
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// burnDownProcesses is the scale-out's burn-down of o.scaleJobs jobs by k
// processes (on FoundationDB): it inserts the jobs, starts k jobs-node
// processes of this binary on the run's tenant, the o.workers workers
// spread among them as among burnDownClients' Clients, lets them all
// start at once when all are ready, and sums their results: the jobs, the
// slowest one's seconds, what their transactions cost the store. On an
// error it kills the processes; it reaps them in any case.
func (s *fdbjobsRun) burnDownProcesses(k int) (res runResult, cost kvCost, err error) {
	fail := func(err error) (runResult, kvCost, error) { return runResult{}, kvCost{}, err }
	n := s.o.scaleJobs
	if res, err = s.fillBurn(n); err != nil {
		return fail(err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(fmt.Errorf("finding this binary: %w", err))
	}
	ctx, cancel := context.WithTimeout(s.ctx, nodeRunLimit)
	defer cancel()
	var procs []*nodeProc
	defer func() {
		cancel() // kills those still running, after an error
		for _, p := range procs {
			_ = p.wait()
		}
	}()
	for i := range k {
		w := s.o.workers / k
		if i < s.o.workers%k {
			w++
		}
		p, err := startNode(ctx, exe, "-tenant", s.tenant, "-node", strconv.Itoa(i), "-nodes", strconv.Itoa(k),
			"-workers", strconv.Itoa(w), "-batch", strconv.Itoa(s.o.batch))
		if err != nil {
			return fail(fmt.Errorf("starting node %d: %w", i, err))
		}
		procs = append(procs, p)
	}
	start, cancelStart := context.WithTimeout(ctx, nodeStartLimit)
	defer cancelStart()
	for i, p := range procs {
		l, err := p.line(start)
		if err == nil && l != "ready" {
			err = fmt.Errorf("it said %q", l)
		}
		if err != nil {
			return fail(fmt.Errorf("node %d not ready: %w", i, err))
		}
	}
	for i, p := range procs {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			return fail(fmt.Errorf("starting node %d's work: %w", i, err))
		}
	}
	for i, p := range procs {
		l, err := p.line(ctx)
		if err != nil {
			return fail(fmt.Errorf("node %d: %w", i, err))
		}
		var r nodeResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return fail(fmt.Errorf("node %d's result %q: %w", i, l, err))
		}
		res.worked += r.Jobs
		res.workSec = max(res.workSec, r.Seconds)
		cost = cost.add(r.Cost)
	}
	for i, p := range procs {
		if err := p.wait(); err != nil {
			return fail(fmt.Errorf("node %d: %w", i, err))
		}
	}
	if res.worked != int64(n) {
		return fail(fmt.Errorf("burn-down by %d processes worked %d jobs, want %d", k, res.worked, n))
	}
	return res, cost, nil
}

// nodeProc is a jobs-node process.
type nodeProc struct {
	cmd    *exec.Cmd
	in     io.Writer   // its stdin
	lines  chan string // its stdout's lines, closed at its end
	waited bool
	err    error // how it ended, once waited
}

// startNode starts a jobs-node process of exe with args on FoundationDB,
// its stderr this process's; the end of ctx kills it.
func startNode(ctx context.Context, exe string, args ...string) (*nodeProc, error) {
	cmd := exec.CommandContext(ctx, exe, append([]string{jobsNodeCmd}, args...)...)
	cmd.Env = append(os.Environ(), EnvBenchStores+"="+benchStore) // the same cluster
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &nodeProc{cmd: cmd, in: in, lines: make(chan string)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return p, nil
}

// line returns the process's next line of stdout, or an error when its
// stdout ended or ctx did first.
func (p *nodeProc) line(ctx context.Context) (string, error) {
	select {
	case l, ok := <-p.lines:
		if ok {
			return l, nil
		}
		if err := p.wait(); err != nil {
			return "", fmt.Errorf("its output ended: %w", err)
		}
		return "", errors.New("its output ended")
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// wait reads the rest of the process's stdout and reaps it, once, and
// returns how it ended.
func (p *nodeProc) wait() error {
	if !p.waited {
		for range p.lines {
		}
		p.waited, p.err = true, p.cmd.Wait()
	}
	return p.err
}
