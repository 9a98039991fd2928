package main

// The simulated run of bench-dormant: parking and waking at a scale one CouchDB does not reach.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// runSim is the simulated run: simN replications whose sources change,
// on simNodes nodes with the simulated engine (replicator/simengine: its
// servers have a _db_updates feed), to measure parking and waking at a
// scale a CouchDB on this machine does not reach: once every replication
// parked, memory, goroutines and CPU while idle, the store's keys and
// bytes per replication, then the time from a change at a random source
// to its replication's run.
func (b *dormantBench) runSim() error {
	ctx := context.Background()
	fmt.Printf("\nsimulated: %d continuous replications from as many databases of %d servers (the simulated engine, its _db_updates feed) on %d nodes with max_jobs %d; parking after %v\n",
		b.simN, b.simServers, b.simNodes, b.simMaxJobs, b.simParkAfter)
	db, drop, err := b.env.openFreshStore("sim", b.inMemory)
	if err != nil {
		return err
	}
	defer drop()
	plane, err := newPlane(ctx, db, replicator.Config{})
	if err != nil {
		return err
	}
	src := func(i int) string { return fmt.Sprintf("http://s%d.sim/u%07d", i%b.simServers, i) }
	t0 := time.Now()
	if err := writeDocs(ctx, db, plane, 0, b.simN, func(i int) (string, string, any) {
		return "_replicator", fmt.Sprintf("r%07d", i), map[string]any{"source": src(i), "target": "http://shared.sim/shared", "continuous": true}
	}); err != nil {
		return err
	}
	fmt.Printf("  %d documents with their jobs written in %v\n", b.simN, time.Since(t0).Round(time.Second))
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	sim := simengine.New()
	cl := &scaleCluster{db: db, sim: sim, cfg: scheduler.Config{
		Config:  replicator.Config{StartupJitter: 200 * time.Millisecond, Logger: &logger},
		MaxJobs: b.simMaxJobs, MaxChurn: b.simMaxJobs, Interval: time.Second, MinRunTime: time.Second,
		TransientJobMaxAge: time.Hour, ParkAfter: b.simParkAfter,
	}}
	defer cl.stop()
	stopProfile, err := startCPUProfile(b.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	start := time.Now()
	for range b.simNodes {
		if err := cl.add(ctx); err != nil {
			return err
		}
	}
	saved := b.n
	b.n = b.simN
	settled, err := b.settle(start, func() (int, error) {
		list, err := plane.SchedulerDocs(ctx, "_replicator", []string{replicator.StateParked}, api.PageQuery{Limit: 0})
		return int(list.TotalRows), err
	}, "parked")
	b.n = saved
	stopProfile()
	if err != nil {
		return err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goroutines := runtime.NumGoroutine()
	stopIdleProfile, err := startCPUProfile(b.idleProfile)
	if err != nil {
		return err
	}
	cpu0 := cpuTime()
	time.Sleep(b.idle)
	idleCPU := (cpuTime() - cpu0).Seconds() / b.idle.Seconds()
	stopIdleProfile()
	keys, bytes, err := storeSize(ctx, db)
	if err != nil {
		return err
	}
	var lags []time.Duration
	for range b.writes {
		s := src(b.rng.IntN(b.simN)) + "/"
		before := sim.Starts(s)
		t := time.Now()
		sim.Change(s)
		for sim.Starts(s) == before {
			if time.Since(t) > b.giveUp {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if sim.Starts(s) > before {
			lags = append(lags, time.Since(t))
		}
		time.Sleep(b.writeGap)
	}
	slices.Sort(lags)
	fmt.Printf("  every replication parked after %v; idle: Go heap %.0f MiB, %d goroutines, %.3f cores (%d nodes); store %.1f keys, %.0f bytes per replication\n",
		settled.Round(time.Second), float64(ms.HeapAlloc)/(1<<20), goroutines, idleCPU, b.simNodes, float64(keys)/float64(b.simN), float64(bytes)/float64(b.simN))
	fmt.Printf("  %d of %d changes ran their replication within %v: from the change to the run, p50 %s p99 %s max %s\n",
		len(lags), b.writes, b.giveUp, pctOr(lags, 50), pctOr(lags, 99), pctOr(lags, 100))
	return nil
}
