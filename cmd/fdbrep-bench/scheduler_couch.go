package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// couchSchedulerBench runs the same jobs jobs on CouchDB 3.5's scheduler
// and on one fdbrep replication node (the real engine, an embedded or
// FoundationDB store as the run's): continuous replications between two
// databases of one CouchDB, each of one document (doc_ids), so that each
// has a replication id of its own, with the same max_jobs, max_churn and
// interval. It reports, for each, the time until every job has run once
// (a "started" event in its _scheduler/jobs history), the CPU CouchDB
// and this process used meanwhile, and their memory. The two runs take
// turns on the one CouchDB: CouchDB's jobs are removed (its _replicator
// deleted) before fdbrep's start.
func couchSchedulerBench(ctx context.Context, env *benchEnv, jobs, maxJobs, maxChurn int, interval time.Duration, inMemory bool) error {
	c, err := launchBenchCouch()
	if c == nil || err != nil {
		return err
	}
	defer c.stop()
	base := c.base
	fmt.Printf("\nscheduler against CouchDB 3.5's: %d continuous jobs on one node each, max_jobs %d, max_churn %d, interval %v, real replications between two databases of one CouchDB\n",
		jobs, maxJobs, maxChurn, interval)
	if err := loadSource(base, "src", jobs, 50); err != nil {
		return err
	}
	for _, db := range []string{"tgt_couch", "tgt_fdbrep"} {
		if err := putDB(base, db); err != nil {
			return err
		}
	}
	spec := func(i int, tgt string) map[string]any {
		return map[string]any{"source": base + "/src", "target": base + "/" + tgt, "continuous": true,
			"doc_ids": []string{fmt.Sprintf("doc-%08d", i)}}
	}

	// CouchDB's scheduler.
	for k, v := range map[string]string{"max_jobs": strconv.Itoa(maxJobs), "max_churn": strconv.Itoa(maxChurn),
		"interval": strconv.FormatInt(interval.Milliseconds(), 10)} {
		if _, err := doJSON(http.MethodPut, base+"/_node/_local/_config/replicator/"+k, v, nil); err != nil {
			return err
		}
	}
	// The scheduler reads its interval when it starts (a change applies
	// after the current one, 60 s by default): restart CouchDB's
	// applications with the new settings, which _config persisted.
	if _, err := doJSON(http.MethodPost, base+"/_node/_local/_restart", nil, nil); err != nil {
		return err
	}
	// The restart is asynchronous: wait for CouchDB to go down (at most
	// 5 s), then to answer again.
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; time.Sleep(50 * time.Millisecond) {
		http.DefaultClient.CloseIdleConnections()
		if _, err := doJSON(http.MethodGet, base+"/_up", nil, nil); err != nil {
			break
		}
	}
	for t0 := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		http.DefaultClient.CloseIdleConnections() // the restart closed them
		if _, err := doJSON(http.MethodGet, base+"/_up", nil, nil); err == nil {
			break
		}
		if time.Since(t0) > time.Minute {
			return fmt.Errorf("CouchDB did not come back within a minute of its restart")
		}
	}
	if _, err := doJSON(http.MethodPut, base+"/_replicator", nil, nil); err != nil && !strings.Contains(err.Error(), "412") {
		return err
	}
	cpu0, rss := procCPU(c.pid), procRSS(c.pid)
	start := time.Now()
	for from := 0; from < jobs; from += 1000 {
		var docs []map[string]any
		for i := from; i < min(jobs, from+1000); i++ {
			d := spec(i, "tgt_couch")
			d["_id"] = fmt.Sprintf("r%08d", i)
			docs = append(docs, d)
		}
		if _, err := doJSON(http.MethodPost, base+"/_replicator/_bulk_docs", map[string]any{"docs": docs}, nil); err != nil {
			return err
		}
	}
	couchAll, err := waitAllRan(start, jobs, func() (int, error) {
		rss = max(rss, procRSS(c.pid))
		var list struct {
			Jobs []struct {
				History []struct {
					Type string `json:"type"`
				} `json:"history"`
			} `json:"jobs"`
		}
		if _, err := doJSON(http.MethodGet, fmt.Sprintf("%s/_scheduler/jobs?limit=%d", base, jobs), nil, &list); err != nil {
			return 0, err
		}
		n := 0
		for _, j := range list.Jobs {
			for _, h := range j.History {
				if h.Type == "started" {
					n++
					break
				}
			}
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("CouchDB: %w", err)
	}
	couchCPU := procCPU(c.pid) - cpu0
	fmt.Printf("  CouchDB 3.5: every job ran once after %v; CouchDB CPU %v (%.2f cores); CouchDB resident memory up to %.0f MiB\n",
		couchAll.Round(time.Millisecond), couchCPU.Round(time.Millisecond), couchCPU.Seconds()/couchAll.Seconds(), float64(rss)/(1<<20))
	if _, err := doJSON(http.MethodDelete, base+"/_replicator", nil, nil); err != nil {
		return err
	}

	// fdbrep: one replication node with the real engine.
	db, drop, err := env.openFreshStore("couch-scheduler", inMemory)
	if err != nil {
		return err
	}
	defer drop()
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg := scheduler.Config{
		Config:  replicator.Config{StartupJitter: 200 * time.Millisecond, Logger: &logger},
		MaxJobs: maxJobs, MaxChurn: maxChurn, Interval: interval, MinRunTime: interval,
		TransientJobMaxAge: time.Hour, NodeName: "node0", ParkAfter: -1, // rotation measured; bench-dormant measures parking
	}
	feJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	plane, err := control.New(replicator.NewStore(db, feJobs, nil), cfg.Config)
	if err != nil {
		return err
	}
	nodeJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	if err := nodeJobs.Start(ctx); err != nil {
		return err
	}
	defer nodeJobs.Stop()
	node, err := scheduler.New(replicator.NewStore(db, nodeJobs, nil), nil, cfg)
	if err != nil {
		return err
	}
	ru0, cpu0 := schedRusage(), procCPU(c.pid)
	var peakHeap uint64
	start = time.Now()
	if err := node.Start(ctx); err != nil {
		return err
	}
	defer node.Stop()
	if err := writeDocs(ctx, db, plane, 0, jobs, func(i int) (string, string, any) {
		return "_replicator", fmt.Sprintf("r%08d", i), spec(i, "tgt_fdbrep")
	}); err != nil {
		return err
	}
	fdbrepAll, err := waitAllRan(start, jobs, func() (int, error) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapAlloc)
		list, err := plane.SchedulerJobs(ctx, api.Admin(), api.PageQuery{Limit: jobs})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, j := range list.Jobs {
			for _, h := range j.History {
				if h.Type == replicator.EventStarted {
					n++
					break
				}
			}
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("fdbrep: %w", err)
	}
	cpu := schedRusage().Sub(ru0)
	fdbrepCPU, couchCPU2 := cpu.user+cpu.sys, procCPU(c.pid)-cpu0
	fmt.Printf("  fdbrep, one node: every job ran once after %v; this process's CPU %v (%.2f cores: node, engine, store, and these reads), CouchDB CPU %v serving it; Go heap up to %.0f MiB\n",
		fdbrepAll.Round(time.Millisecond), fdbrepCPU.Round(time.Millisecond), fdbrepCPU.Seconds()/fdbrepAll.Seconds(),
		couchCPU2.Round(time.Millisecond), float64(peakHeap)/(1<<20))
	fmt.Printf("  time until every job ran once, CouchDB / fdbrep: %.2fx\n", couchAll.Seconds()/fdbrepAll.Seconds())
	return nil
}

// waitAllRan polls ran (how many jobs have run once) every 250 ms until
// it reaches jobs, and returns the time since start; at most 30 minutes.
func waitAllRan(start time.Time, jobs int, ran func() (int, error)) (time.Duration, error) {
	last := time.Now()
	for {
		n, err := ran()
		if err != nil {
			return 0, err
		}
		if n >= jobs {
			return time.Since(start), nil
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			fmt.Printf("    %5.1fs: %d of %d jobs have run\n", time.Since(start).Seconds(), n, jobs)
		}
		if time.Since(start) > 30*time.Minute {
			return 0, fmt.Errorf("only %d of %d jobs ran in 30 minutes", n, jobs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// procRSS returns process pid's resident memory in bytes (0 when
// unknown).
func procRSS(pid int) uint64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
