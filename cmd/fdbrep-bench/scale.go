package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

func init() { register("scale", runScaleBench) }

// runScaleBench is make bench-scale (issue 13, item 6): -jobs continuous
// _replicator documents on -nodes replication nodes with -max-jobs each,
// all in one process on one durable embedded store, with the simulated
// engine (replicator/simengine: the figures are the scheduler's and the
// job layer's, not a peer's). It prints the time until every job has
// started once, the store's bytes per job (keys and values as the store
// holds them, read across transactions), memory (the nodes share one
// process, so per node is the process's figure divided), then starts one
// more node and prints the time until every node runs within 10% of the
// mean; last, the scheduler views' page latency at -view-sizes jobs
// (make bench-views' measurement on a store of its own).
func runScaleBench(args []string) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	jobs := fs.Int("jobs", 100_000, "continuous replication jobs (_replicator documents)")
	nodes := fs.Int("nodes", 3, "replication nodes at the start (one more joins later)")
	maxJobs := fs.Int("max-jobs", 500, "max_jobs per node")
	maxChurn := fs.Int("max-churn", 500, "max_churn per node")
	interval := fs.Duration("interval", time.Second, "rescheduling interval (CouchDB: 60s)")
	minRun := fs.Duration("min-run-time", time.Second, "min_run_time (CouchDB: 60s)")
	dbs := fs.Int("dbs", 10, "_replicator databases the documents are spread over")
	balanceWait := fs.Duration("balance-wait", 3*time.Minute, "how long to wait for the cluster to balance after a node joins")
	viewSizes := fs.String("view-sizes", "1000,10000,100000", "job counts for the view page latencies (add 1000000 for the full run; it needs a few GB of memory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobs < 1 || *nodes < 1 || *maxJobs < 1 || *maxChurn < 1 || *dbs < 1 {
		return errors.New("-jobs, -nodes, -max-jobs, -max-churn and -dbs must be positive")
	}
	env := newBenchEnv("scale", "")
	defer env.close()
	db, err := env.openStore("store", false)
	if err != nil {
		return err
	}
	ctx := context.Background()
	fmt.Printf("scale: %d continuous jobs in %d databases on %d replication nodes (+1 joining), max_jobs %d, max_churn %d, interval %v, min_run_time %v (simengine; durable store on disk; %d cores)\n",
		*jobs, *dbs, *nodes, *maxJobs, *maxChurn, *interval, *minRun, runtime.NumCPU())

	plane, err := newPlane(ctx, db, replicator.Config{})
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := writeRepDocs(ctx, db, plane, 0, *jobs, func(i int) string { return "db" + strconv.Itoa(i%*dbs) + "/_replicator" }); err != nil {
		return fmt.Errorf("writing documents: %w", err)
	}
	created := time.Since(t0)
	fmt.Printf("  wrote %d documents with their jobs in %v (%.0f docs/s, %d per transaction)\n",
		*jobs, created.Round(time.Millisecond), float64(*jobs)/created.Seconds(), benchDocsPerTx)
	keys, bytes, err := storeSize(ctx, db)
	if err != nil {
		return err
	}
	fmt.Printf("  store: %d keys, %.1f MiB of keys and values = %.0f bytes and %.1f keys per job (documents, jobs, indexes)\n",
		keys, float64(bytes)/(1<<20), float64(bytes)/float64(*jobs), float64(keys)/float64(*jobs))

	cfg := scheduler.Config{
		Config:  replicator.Config{StartupJitter: 200 * time.Millisecond},
		MaxJobs: *maxJobs, MaxChurn: *maxChurn, Interval: *interval, MinRunTime: *minRun,
		TransientJobMaxAge: time.Hour,
		ParkAfter:          -1, // rotation and balance measured; bench-dormant measures parking
	}
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg.Logger = &logger
	sim := simengine.New()
	sim.CheckpointEvery = 5 * time.Second
	cl := &scaleCluster{db: db, sim: sim, cfg: cfg}
	defer cl.stop()

	var ms0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	for i := 0; i < *nodes; i++ {
		if err := cl.add(ctx); err != nil {
			return err
		}
	}
	var peakHeap uint64
	last := time.Now()
	for {
		distinct, _, _, _ := sim.Stats()
		if distinct >= *jobs {
			break
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, ms.HeapAlloc)
			fmt.Printf("  %6.1fs: %d of %d jobs have started once\n", time.Since(start).Seconds(), distinct, *jobs)
		}
		if time.Since(start) > 60*time.Minute {
			return fmt.Errorf("only %d of %d jobs started in an hour", distinct, *jobs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	allRan := time.Since(start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	peakHeap = max(peakHeap, ms.HeapAlloc)
	bound := (*jobs-*nodes**maxJobs+*nodes**maxChurn-1)/(*nodes**maxChurn) + 1
	fmt.Printf("  every job started once after %v (%.1f intervals; the churn allows %d)\n",
		allRan.Round(time.Millisecond), allRan.Seconds()/interval.Seconds(), max(bound, 1))
	fmt.Printf("  memory: heap %.1f MiB before the nodes started, peak %.1f MiB with them = about %.1f MiB per node (one process; Go runtime total %.1f MiB)\n",
		float64(ms0.HeapAlloc)/(1<<20), float64(peakHeap)/(1<<20), float64(peakHeap-min(peakHeap, ms0.HeapAlloc))/(1<<20)/float64(*nodes), float64(ms.Sys)/(1<<20))
	fmt.Printf("  running per node: %s\n", cl.running())

	joined := time.Now()
	if err := cl.add(ctx); err != nil {
		return err
	}
	for {
		if cl.balanced() {
			fmt.Printf("  a node joined: every node within 10%% of the mean after %v (%s)\n", time.Since(joined).Round(time.Millisecond), cl.running())
			break
		}
		if time.Since(joined) > *balanceWait {
			fmt.Printf("  a node joined: NOT balanced after %v (%s)\n", *balanceWait, cl.running())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cl.stop()

	fmt.Println("  scheduler views, a store of their own:")
	return runViewsBench([]string{"-sizes", *viewSizes, "-dbs", strconv.Itoa(*dbs)})
}

// scaleCluster is replication nodes, each with its own job-layer client
// and membership (which the schedulers balance with, as in fdbrep serve),
// on one store.
type scaleCluster struct {
	db      kv.Database
	sim     *simengine.Engine
	cfg     scheduler.Config
	nodes   []*scheduler.Node
	clients []*fdbjobs.Client
	members []*cluster.Node
}

func (c *scaleCluster) add(ctx context.Context) error {
	jc, err := fdbjobs.New(c.db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	if err := jc.Start(ctx); err != nil {
		return err
	}
	c.clients = append(c.clients, jc)
	cfg := c.cfg
	cfg.NodeName = fmt.Sprintf("node%d", len(c.nodes))
	base, err := config.FromMap(map[string]map[string]string{"node": {"name": cfg.NodeName, "roles": config.RoleReplication}})
	if err != nil {
		return err
	}
	m, err := cluster.New(c.db, cluster.Options{Base: base, Version: "bench"})
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	c.members = append(c.members, m)
	cfg.Cluster = m
	n, err := scheduler.New(replicator.NewStore(c.db, jc, nil), c.sim, cfg)
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	c.nodes = append(c.nodes, n)
	return nil
}

// running lists each node's running jobs.
func (c *scaleCluster) running() string {
	var parts []string
	for i, n := range c.nodes {
		parts = append(parts, fmt.Sprintf("node%d %d", i, n.Stats().Running))
	}
	return strings.Join(parts, ", ")
}

// balanced reports whether every node runs within 10% of the mean.
func (c *scaleCluster) balanced() bool {
	sum := 0
	counts := make([]int, len(c.nodes))
	for i, n := range c.nodes {
		counts[i] = n.Stats().Running
		sum += counts[i]
	}
	mean := float64(sum) / float64(len(counts))
	for _, x := range counts {
		if d := float64(x) - mean; d > mean/10 || -d > mean/10 {
			return false
		}
	}
	return true
}

func (c *scaleCluster) stop() {
	for _, n := range c.nodes {
		n.Stop()
	}
	for _, jc := range c.clients {
		jc.Stop()
	}
	for _, m := range c.members {
		m.Stop()
	}
	c.nodes, c.clients, c.members = nil, nil, nil
}

// storeSize counts the store's keys and their bytes (keys plus values),
// 10,000 keys per transaction.
func storeSize(ctx context.Context, db kv.Database) (keys, bytes int64, err error) {
	err = kv.ReadPages(ctx, db, kv.KeyRange{Begin: kv.Key{}, End: kv.Key{0xff}}, 10_000, func(page []kv.KeyValue) (bool, error) {
		for _, e := range page {
			keys++
			bytes += int64(len(e.Key) + len(e.Value))
		}
		return false, nil
	})
	return keys, bytes, err
}
