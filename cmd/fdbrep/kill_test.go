package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKilledFrontendLosesNothing SIGKILLs an api_frontend node while
// clients write replication documents, restarts it on the same store, and
// checks that every acknowledged document is there with its job, and that
// no document exists without its job or job without its document: the
// document write and the job creation commit together or not at all.
func TestKilledFrontendLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	dir := t.TempDir()
	bin := filepath.Join(dir, "fdbrep")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	env := append(os.Environ(), "FDBREP_ADMINS__ADM=pass")
	args := []string{"-roles", "api_frontend", "-data-dir", filepath.Join(dir, "data")}

	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(bin, append([]string{"serve", "-bind", "127.0.0.1:0", "-log-format", "json"}, args...)...)
		cmd.Env = env
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrc := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				var m map[string]any
				if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == "HTTP API listening" {
					addrc <- m["addr"].(string)
				}
			}
		}()
		select {
		case addr := <-addrc:
			return cmd, "http://" + addr
		case <-time.After(60 * time.Second):
			t.Fatal("node did not listen within 60s")
			return nil, ""
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	put := func(base, id string) (int, error) {
		body := fmt.Sprintf(`{"source":"http://127.0.0.1:9/src_%s","target":"http://127.0.0.1:9/tgt","continuous":true}`, id)
		req, _ := http.NewRequest("PUT", base+"/_replicator/"+id, bytes.NewBufferString(body))
		req.SetBasicAuth("adm", "pass")
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}

	cmd, base := start()
	// Writers keep writing until the node dies under them.
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100_000; i++ {
				id := fmt.Sprintf("w%d_%06d", w, i)
				status, err := put(base, id)
				if err != nil {
					return // the node is gone
				}
				if status == http.StatusCreated {
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				}
			}
		}()
	}
	// Kill once a random number of writes has been acknowledged.
	target := 20 + rng.IntN(200)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= target || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	wg.Wait()
	_ = cmd.Wait()
	require.NotEmpty(t, acked, "no write was acknowledged before the kill")

	_, base = start()
	get := func(path string, out any) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.SetBasicAuth("adm", "pass")
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.NoError(t, json.NewDecoder(res.Body).Decode(out))
		return res.StatusCode
	}
	var all struct {
		Rows []struct {
			ID string `json:"id"`
		} `json:"rows"`
	}
	require.Equal(t, http.StatusOK, get("/_replicator/_all_docs", &all))
	docs := map[string]bool{}
	for _, r := range all.Rows {
		if r.ID[0] != '_' {
			docs[r.ID] = true
		}
	}
	var sched struct {
		TotalRows int `json:"total_rows"`
		Docs      []struct {
			DocID string `json:"doc_id"`
			State string `json:"state"`
		} `json:"docs"`
	}
	require.Equal(t, http.StatusOK, get("/_scheduler/docs/_replicator?limit=1000000", &sched))
	jobs := map[string]bool{}
	for _, d := range sched.Docs {
		jobs[d.DocID] = true
		require.Equal(t, "pending", d.State, "doc %s", d.DocID)
	}
	for id := range acked {
		require.True(t, docs[id], "acknowledged document %s lost", id)
	}
	require.Equal(t, docs, jobs, "documents and jobs differ")
	t.Logf("%d acknowledged, %d stored (writes in flight at the kill may land), %d jobs", len(acked), len(docs), len(jobs))
}
