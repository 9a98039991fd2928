package sim

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

var (
	intervals = flag.Int("sim.intervals", intervalsDefault(), "intervals each simulation runs")
	soak      = flag.Duration("sim.soak", 0, "run simulations of new seeds, one after the other, for this long (make soak)")
	shrink    = flag.Duration("sim.shrink", ShrinkDefault, "real time spent shrinking a failing operation sequence")
)

// TestModel runs one simulation of -sim.intervals intervals (a seed from
// FDBREP_SIM_SEED, or a new one), or with -sim.soak new seeds for that
// long. A failure prints the seed, what failed, the nodes' last log lines
// and the shortest operation sequence found that still fails.
func TestModel(t *testing.T) {
	if kvtest.OnFoundationDB(t) {
		// FoundationDB's client blocks goroutines in C and on mutexes
		// (futures, watches), which testing/synctest cannot tell from
		// goroutines at work: its clock would never move.
		t.Skip("the model test runs on the embedded store: testing/synctest's clock cannot advance while FoundationDB's client blocks in C; on FoundationDB the real-process soak (cmd/internal/soak) checks the same invariants")
	}
	if *soak == 0 {
		simulate(t, testutil.SeedFrom(t, "FDBREP_SIM_SEED"), *intervals)
		return
	}
	seed := uint64(time.Now().UnixNano())
	for end, n := time.Now().Add(*soak), 0; time.Now().Before(end); n++ {
		s := seed + uint64(n)
		t.Run(fmt.Sprint(s), func(t *testing.T) { simulate(t, s, *intervals) })
		if t.Failed() {
			return
		}
	}
}

// intervalsDefault is IntervalsDefault, or a tenth of it in make test's
// passes on a store that injects faults (FDBREP_KV_FAULTS) or waits as
// over a network (FDBREP_KV_LATENCY, FoundationDB), and a twentieth under
// the race detector (which makes the simulation ten times slower, in
// CI's pass that is CPU-bound): their value here is the data races, or
// the store's behaviour under the scheduler, which a shorter run shows as
// well (each pass draws a new seed), and make soak runs new seeds at full
// length.
func intervalsDefault() int {
	switch {
	case testutil.Race:
		return IntervalsDefault / 20
	case os.Getenv("FDBREP_KV_FAULTS") != "" || os.Getenv("FDBREP_KV_LATENCY") != "" || os.Getenv("FDBREP_KV_BACKEND") == "fdb":
		return IntervalsDefault / 10
	}
	return IntervalsDefault
}

func simulate(t *testing.T, seed uint64, intervals int) {
	t.Logf("seed %d (replay with FDBREP_SIM_SEED=%d)", seed, seed)
	start := time.Now()
	cfg := Config{Seed: seed, Intervals: intervals, Views: true}
	res := Run(t, cfg)
	t.Logf("setup %+v", res.Setup)
	t.Logf("%d intervals, %d of %d operations, %d runs: %v simulated in %v", res.Intervals, res.Applied, len(res.Ops),
		res.Runs, res.SimTime.Round(time.Second), time.Since(start).Round(time.Millisecond))
	if res.Failure == nil {
		return
	}
	f := res.Failure
	t.Errorf("seed %d failed at %v (replay with FDBREP_SIM_SEED=%d):\n%s\nthe nodes' last log lines:\n%s",
		seed, f.At.Round(time.Millisecond), seed, f.Problems, strings.Join(f.Log, "\n"))
	ops, sf := Shrink(t, cfg, res, *shrink)
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "  %s\n", op)
	}
	t.Errorf("seed %d: shortest failing sequence found (%d of %d operations), failing at %v with:\n%s\n%s",
		seed, len(ops), res.Applied, sf.At.Round(time.Millisecond), sf.Problems, b.String())
}
