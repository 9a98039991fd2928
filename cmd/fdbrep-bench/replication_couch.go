package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// couchBench replicates docs documents between two databases of one real
// Apache CouchDB 3.5 (../shared/couchdb's, see couchtest.LaunchCouchDB)
// by CouchDB's own replicator (POST /_replicate, waiting) and by fdbrep's
// engine, in alternating rounds, and measures CouchDB's limit: the same
// documents written with _bulk_docs new_edits=false, workers batches in
// flight. Both replicators run with the same worker_processes,
// worker_batch_size and http_connections. CouchDB's replicator runs
// inside the server it replicates from and to; fdbrep's engine in this
// process: the CPU each used is printed beside its rate.
func couchBench(docs, docBytes, workers, batch, runs int) error {
	c, err := launchBenchCouch()
	if c == nil || err != nil {
		return err
	}
	defer c.stop()
	base, pid := c.base, c.pid

	fmt.Printf("\nCouchDB 3.5 -> CouchDB 3.5, one server: %d docs of ~%d bytes, worker_processes %d, worker_batch_size %d\n",
		docs, docBytes, workers, batch)
	if err := loadSource(base, "src", docs, docBytes); err != nil {
		return err
	}
	payload, err := fetchPayload(base, "src", docs)
	if err != nil {
		return err
	}
	// Warm CouchDB up (its first writes open files and caches).
	if _, err := bulkLoad(base, "warmup", payload[:min(len(payload), 5000)], batch, workers); err != nil {
		return err
	}
	if err := deleteDB(base, "warmup"); err != nil {
		return err
	}

	var limitRates, engineRates, couchRates []float64
	for run := 1; run <= runs; run++ {
		db := fmt.Sprintf("limit%d", run)
		c0 := procCPU(pid)
		d, err := bulkLoad(base, db, payload, batch, workers)
		if err != nil {
			return err
		}
		limitRates = append(limitRates, float64(docs)/d.Seconds())
		fmt.Printf("  run %d: CouchDB limit (_bulk_docs new_edits=false, batch %d, %d in flight): %6.0f docs/s (CouchDB CPU %v)\n",
			run, batch, workers, limitRates[len(limitRates)-1], (procCPU(pid) - c0).Round(time.Millisecond))
		if err := deleteDB(base, db); err != nil {
			return err
		}

		// CouchDB's own replicator, then fdbrep's engine, and the other
		// way round in the next round.
		for i := range 2 {
			if (run+i)%2 == 1 {
				db := fmt.Sprintf("couch%d", run)
				c0 := procCPU(pid)
				start := time.Now()
				var res struct {
					OK      bool `json:"ok"`
					History []struct {
						DocsWritten int64 `json:"docs_written"`
					} `json:"history"`
				}
				body := map[string]any{"source": base + "/src", "target": base + "/" + db, "create_target": true,
					"worker_processes": workers, "worker_batch_size": batch, "http_connections": engine.HTTPConnectionsDefault}
				if _, err := doJSON(http.MethodPost, base+"/_replicate", body, &res); err != nil {
					return fmt.Errorf("CouchDB's replicator: %w", err)
				}
				d := time.Since(start)
				if !res.OK || len(res.History) == 0 || res.History[0].DocsWritten != int64(docs) {
					return fmt.Errorf("CouchDB's replicator: %+v, want %d docs written", res, docs)
				}
				couchRates = append(couchRates, float64(docs)/d.Seconds())
				fmt.Printf("  run %d: CouchDB's replicator:                      %6.0f docs/s (CouchDB CPU %v)\n",
					run, couchRates[len(couchRates)-1], (procCPU(pid) - c0).Round(time.Millisecond))
				if err := deleteDB(base, db); err != nil {
					return err
				}
				continue
			}
			db := fmt.Sprintf("engine%d", run)
			rep := engine.Replication{WorkerProcesses: workers, WorkerBatchSize: batch, CreateTarget: true}
			if rep.Source, err = couch.ParseEndpoint(json.RawMessage(strconv.Quote(base + "/src"))); err != nil {
				return err
			}
			if rep.Target, err = couch.ParseEndpoint(json.RawMessage(strconv.Quote(base + "/" + db))); err != nil {
				return err
			}
			c0, e0 := procCPU(pid), cpuTime()
			start := time.Now()
			res, err := engine.Start(context.Background(), rep, engine.Options{ServerUUID: "fdbrep-bench"}).Wait()
			if err != nil {
				return fmt.Errorf("engine: %w", err)
			}
			d := time.Since(start)
			if res.Stats.DocsWritten != int64(docs) {
				return fmt.Errorf("engine wrote %d docs, want %d", res.Stats.DocsWritten, docs)
			}
			engineRates = append(engineRates, float64(docs)/d.Seconds())
			fmt.Printf("  run %d: fdbrep engine:                             %6.0f docs/s (CouchDB CPU %v, engine CPU %v)\n",
				run, engineRates[len(engineRates)-1], (procCPU(pid) - c0).Round(time.Millisecond), (cpuTime() - e0).Round(time.Millisecond))
			if err := deleteDB(base, db); err != nil {
				return err
			}
		}
	}
	limit, eng, cdb := best(limitRates), best(engineRates), best(couchRates)
	fmt.Printf("best of %d runs:\n", runs)
	fmt.Printf("  CouchDB limit:                        %8.0f docs/s\n", limit)
	fmt.Printf("  fdbrep engine:                        %8.0f docs/s\n", eng)
	fmt.Printf("  CouchDB's replicator:                 %8.0f docs/s\n", cdb)
	fmt.Printf("  engine / CouchDB's replicator:        %.2fx   (goal >= 3x)\n", eng/cdb)
	fmt.Printf("  engine / CouchDB limit:               %.0f%%   (goal >= 90%%)\n", 100*eng/limit)
	ratios := make([]float64, len(engineRates))
	for i := range ratios {
		ratios[i] = engineRates[i] / couchRates[i]
	}
	fmt.Printf("  engine / CouchDB's replicator, median of rounds: %.2fx\n", median(ratios))
	for i := range ratios {
		ratios[i] = engineRates[i] / limitRates[i]
	}
	fmt.Printf("  engine / CouchDB limit, median of rounds:        %.0f%%\n", 100*median(ratios))
	return nil
}

// benchCouch is a CouchDB 3.5 started for a benchmark.
type benchCouch struct {
	srv  *couchtest.Server
	base string // its root URL with the admin's credentials
	pid  int    // 0 when unknown
	dir  string
}

// launchBenchCouch starts a CouchDB 3.5 with ../shared/couchdb's script;
// nil, said so, where the script is absent.
func launchBenchCouch() (*benchCouch, error) {
	script, ok := couchtest.CouchDBScript()
	if !ok {
		fmt.Printf("\nCouchDB 3.5: skipped (%s is absent; set %s to its couchdb.sh)\n", script, couchtest.EnvCouchDBScript)
		return nil, nil
	}
	dir, err := os.MkdirTemp("", "fdbrep-bench-couchdb-")
	if err != nil {
		return nil, err
	}
	n := 0
	srv, err := couchtest.LaunchCouchDB(script, func() string {
		n++
		d := fmt.Sprintf("%s/%d", dir, n)
		_ = os.MkdirAll(d, 0o755)
		return d
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		srv.Stop()
		os.RemoveAll(dir)
		return nil, err
	}
	u.User = url.UserPassword(couchtest.CouchAdmin, couchtest.CouchPassword)
	pid, _ := couchPID(srv)
	return &benchCouch{srv: srv, base: u.String(), pid: pid, dir: dir}, nil
}

func (c *benchCouch) stop() {
	c.srv.Stop()
	os.RemoveAll(c.dir)
}

// couchPID returns the process id couchdb.sh recorded for srv (0 when it
// cannot be read).
func couchPID(srv *couchtest.Server) (int, error) {
	b, err := os.ReadFile(srv.Dir() + "/couchdb.pid")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// procCPU returns the user and system CPU time process pid and its
// children that ended used so far, from /proc (Linux; 0 elsewhere or when
// pid is 0), in clock ticks of 10 ms.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces), from field 3 on.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, x := range f[11:15] { // utime, stime, cutime, cstime
		n, _ := strconv.ParseInt(x, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
