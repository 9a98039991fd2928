package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fdbrep/fdbrep/replicator/engine"
)

func init() { register("replication", runReplicationBench) }

// runReplicationBench replicates N documents between two in-memory
// pouchdb-server processes with fdbrep's engine and with PouchDB's own
// replicator (node, scripts/pouchdb/replicate.js, several batch sizes, the
// best one counts), and measures the endpoint limit: the same documents
// written straight into a fresh target with _bulk_docs new_edits=false.
func runReplicationBench(args []string) error {
	fs := flag.NewFlagSet("replication", flag.ContinueOnError)
	docs := fs.Int("docs", 10000, "documents to replicate")
	large := fs.Bool("large", false, "replicate 100,000 documents (overrides -docs)")
	workers := fs.Int("workers", engine.WorkerProcessesDefault, "engine worker_processes")
	batch := fs.Int("batch", engine.WorkerBatchSizeDefault, "engine worker_batch_size (also the endpoint-limit batch)")
	pouchBatches := fs.String("pouch-batch-sizes", "100,500,1000", "PouchDB.replicate batch_size values to try")
	docBytes := fs.Int("doc-bytes", 200, "approximate size of each document body")
	runs := fs.Int("runs", 3, "measurement rounds (the best of each contender counts)")
	pouchDir := fs.String("pouchdb-dir", "", "directory holding node_modules with pouchdb-server (default: scripts/pouchdb below the module root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *large {
		*docs = 100000
	}
	if *docs < 1 || *workers < 1 || *batch < 1 || *docBytes < 0 || *runs < 1 {
		return errors.New("-docs, -workers, -batch and -runs must be positive")
	}
	dir := *pouchDir
	if dir == "" {
		root, err := moduleRootDir()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, "scripts", "pouchdb")
	}
	bin := filepath.Join(dir, "node_modules", ".bin", "pouchdb-server")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("pouchdb-server not installed (run `make pouchdb`): %w", err)
	}

	src, err := startPouch(bin)
	if err != nil {
		return err
	}
	defer src.stop()
	tgt, err := startPouch(bin)
	if err != nil {
		return err
	}
	defer tgt.stop()

	fmt.Printf("replication benchmark: %d docs of ~%d bytes, source and target in two pouchdb-server processes\n", *docs, *docBytes)
	if err := loadSource(src, "src", *docs, *docBytes); err != nil {
		return err
	}

	// The replicated documents (with _revisions), for the endpoint limit.
	payload, err := fetchPayload(src, "src", *docs)
	if err != nil {
		return err
	}
	// Warm both node processes up (JIT) before measuring.
	if _, err := bulkLoad(tgt, "warmup", payload[:min(len(payload), 5000)], *batch, *workers); err != nil {
		return err
	}
	if err := deleteDB(tgt, "warmup"); err != nil {
		return err
	}

	sizes, err := parseSizes(*pouchBatches)
	if err != nil {
		return err
	}
	var limitRates, engineRates []float64
	pouchRates := map[int][]float64{}
	for run := 1; run <= *runs; run++ {
		// Endpoint limit: the documents written straight into a fresh
		// target, `workers` batches in flight.
		db := fmt.Sprintf("limit%d", run)
		tgt0 := tgt.cpu()
		d, err := bulkLoad(tgt, db, payload, *batch, *workers)
		if err != nil {
			return err
		}
		limitRates = append(limitRates, float64(*docs)/d.Seconds())
		fmt.Printf("  run %d: endpoint limit (_bulk_docs new_edits=false, batch %d, %d in flight): %6.0f docs/s (CPU: target %v)\n", run, *batch, *workers,
			limitRates[len(limitRates)-1], (tgt.cpu() - tgt0).Round(time.Millisecond))
		if err := deleteDB(tgt, db); err != nil {
			return err
		}

		// fdbrep's engine.
		db = fmt.Sprintf("engine%d", run)
		rep := engine.Replication{WorkerProcesses: *workers, WorkerBatchSize: *batch, CreateTarget: true}
		if rep.Source, err = engine.ParseEndpoint(src.url + "/src"); err != nil {
			return err
		}
		if rep.Target, err = engine.ParseEndpoint(tgt.url + "/" + db); err != nil {
			return err
		}
		cpu0, src0, tgt0 := selfCPU(), src.cpu(), tgt.cpu()
		start := time.Now()
		res, err := engine.Start(context.Background(), rep, engine.Options{ServerUUID: "fdbrep-bench"}).Wait()
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		d = time.Since(start)
		if res.Stats.DocsWritten != int64(*docs) {
			return fmt.Errorf("engine wrote %d docs, want %d", res.Stats.DocsWritten, *docs)
		}
		engineRates = append(engineRates, float64(*docs)/d.Seconds())
		fmt.Printf("  run %d: fdbrep engine (workers %d, batch %d): %6.0f docs/s (CPU: engine %v, source %v, target %v)\n", run, *workers, *batch,
			engineRates[len(engineRates)-1], (selfCPU() - cpu0).Round(time.Millisecond), (src.cpu() - src0).Round(time.Millisecond), (tgt.cpu() - tgt0).Round(time.Millisecond))
		if err := deleteDB(tgt, db); err != nil {
			return err
		}

		// PouchDB's replicator.
		for _, bs := range sizes {
			db := fmt.Sprintf("pouch%d-%d", run, bs)
			if err := putDB(tgt, db); err != nil {
				return err
			}
			d, written, err := pouchReplicate(dir, src.url+"/src", tgt.url+"/"+db, bs)
			if err != nil {
				return fmt.Errorf("PouchDB.replicate batch_size %d: %w", bs, err)
			}
			if written != int64(*docs) {
				return fmt.Errorf("PouchDB.replicate batch_size %d wrote %d docs, want %d", bs, written, *docs)
			}
			pouchRates[bs] = append(pouchRates[bs], float64(*docs)/d.Seconds())
			fmt.Printf("  run %d: PouchDB.replicate (batch_size %d): %6.0f docs/s\n", run, bs, pouchRates[bs][len(pouchRates[bs])-1])
			if err := deleteDB(tgt, db); err != nil {
				return err
			}
		}
	}

	limitRate, engineRate := best(limitRates), best(engineRates)
	bestPouch, bestBatch := 0.0, 0
	for _, bs := range sizes {
		if r := best(pouchRates[bs]); r > bestPouch {
			bestPouch, bestBatch = r, bs
		}
	}
	fmt.Printf("best of %d runs:\n", *runs)
	fmt.Printf("  endpoint limit:                          %8.0f docs/s\n", limitRate)
	fmt.Printf("  fdbrep engine:                           %8.0f docs/s\n", engineRate)
	for _, bs := range sizes {
		fmt.Printf("  PouchDB.replicate batch_size %-5d       %8.0f docs/s\n", bs, best(pouchRates[bs]))
	}
	fmt.Printf("  engine / PouchDB (best, batch_size %d):  %.2fx   (goal >= 2x)\n", bestBatch, engineRate/bestPouch)
	fmt.Printf("  engine / endpoint limit:                 %.0f%%   (goal >= 70%%)\n", 100*engineRate/limitRate)
	return nil
}

func best(xs []float64) float64 {
	b := 0.0
	for _, x := range xs {
		b = max(b, x)
	}
	return b
}

func parseSizes(list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		bs, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || bs < 1 {
			return nil, fmt.Errorf("bad -pouch-batch-sizes entry %q", s)
		}
		out = append(out, bs)
	}
	return out, nil
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpu is the server process's user+system CPU time (Linux /proc; 0 when
// unavailable).
func (s *pouchServer) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

func deleteDB(s *pouchServer, db string) error {
	_, err := doJSON(http.MethodDelete, s.url+"/"+db, nil, nil)
	return err
}

// pouchServer is a pouchdb-server child process.
type pouchServer struct {
	url string
	dir string
	cmd *exec.Cmd
}

func startPouch(bin string) (*pouchServer, error) {
	dir, err := os.MkdirTemp("", "fdbrep-bench-pouch-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(dir, "config.json")
	if err := os.WriteFile(conf, []byte(`{"log":{"file":"`+filepath.Join(dir, "log.txt")+`"}}`), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--in-memory", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--config", conf,
		"--dir", filepath.Join(dir, "db"), "-n")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &pouchServer{url: "http://127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.url + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("pouchdb-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *pouchServer) stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}

func putDB(s *pouchServer, db string) error {
	_, err := doJSON(http.MethodPut, s.url+"/"+db, nil, nil)
	return err
}

func doJSON(method, u string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, data)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}

func loadSource(s *pouchServer, db string, n, size int) error {
	if err := putDB(s, db); err != nil {
		return err
	}
	filler := strings.Repeat("x", size)
	for start := 0; start < n; start += 1000 {
		var docs []map[string]any
		for i := start; i < min(n, start+1000); i++ {
			docs = append(docs, map[string]any{"_id": fmt.Sprintf("doc-%08d", i), "n": i, "text": filler})
		}
		if _, err := doJSON(http.MethodPost, s.url+"/"+db+"/_bulk_docs", map[string]any{"docs": docs}, nil); err != nil {
			return err
		}
	}
	return nil
}

// fetchPayload reads the documents as a replicator would write them.
func fetchPayload(s *pouchServer, db string, n int) ([]json.RawMessage, error) {
	var all struct {
		Rows []struct {
			ID    string `json:"id"`
			Value struct {
				Rev string `json:"rev"`
			} `json:"value"`
		} `json:"rows"`
	}
	if _, err := doJSON(http.MethodGet, s.url+"/"+db+"/_all_docs", nil, &all); err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for start := 0; start < len(all.Rows); start += 1000 {
		var reqs []map[string]string
		for _, r := range all.Rows[start:min(len(all.Rows), start+1000)] {
			reqs = append(reqs, map[string]string{"id": r.ID, "rev": r.Value.Rev})
		}
		var reply struct {
			Results []struct {
				Docs []struct {
					OK json.RawMessage `json:"ok"`
				} `json:"docs"`
			} `json:"results"`
		}
		if _, err := doJSON(http.MethodPost, s.url+"/"+db+"/_bulk_get?revs=true", map[string]any{"docs": reqs, "revs": true}, &reply); err != nil {
			return nil, err
		}
		for _, r := range reply.Results {
			for _, d := range r.Docs {
				out = append(out, d.OK)
			}
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("payload has %d docs, want %d", len(out), n)
	}
	return out, nil
}

// bulkLoad writes docs into a fresh database in batches, `inflight` at a
// time, and returns the elapsed time.
func bulkLoad(s *pouchServer, db string, docs []json.RawMessage, batch, inflight int) (time.Duration, error) {
	if err := putDB(s, db); err != nil {
		return 0, err
	}
	var bodies [][]byte
	for start := 0; start < len(docs); start += batch {
		var b bytes.Buffer
		b.WriteString(`{"new_edits":false,"docs":[`)
		for i, d := range docs[start:min(len(docs), start+batch)] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(d)
		}
		b.WriteString("]}")
		bodies = append(bodies, b.Bytes())
	}
	start := time.Now()
	work := make(chan []byte)
	errs := make(chan error, inflight)
	var wg sync.WaitGroup
	for i := 0; i < inflight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range work {
				resp, err := http.Post(s.url+"/"+db+"/_bulk_docs", "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("_bulk_docs: %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	for _, b := range bodies {
		work <- b
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// pouchReplicate runs scripts/pouchdb/replicate.js and returns its own
// measured replication time (node start-up excluded).
func pouchReplicate(dir, src, tgt string, batch int) (time.Duration, int64, error) {
	cmd := exec.Command("node", filepath.Join(dir, "replicate.js"), src, tgt, strconv.Itoa(batch))
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s", err, stderr.String())
	}
	var res struct {
		OK          bool    `json:"ok"`
		DocsWritten int64   `json:"docs_written"`
		ElapsedMS   float64 `json:"elapsed_ms"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return 0, 0, fmt.Errorf("replicate.js output %q: %w", out, err)
	}
	return time.Duration(res.ElapsedMS * float64(time.Millisecond)), res.DocsWritten, nil
}

// moduleRootDir walks up from the working directory to go.mod.
func moduleRootDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}
