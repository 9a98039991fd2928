package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

// TestKilledFrontendLosesNothing SIGKILLs an api_frontend node while
// clients write replication documents, restarts it on the same store, and
// checks that every acknowledged document is there with its job, and that
// no document exists without its job or job without its document: the
// document write and the job creation commit together or not at all.
func TestKilledFrontendLosesNothing(t *testing.T) {
	bin := buildBinary(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	env := append(os.Environ(), "FDBREP_ADMINS__ADM=pass")
	args := []string{"serve", "-bind", "127.0.0.1:0", "-log-format", "json", "-roles", "api_frontend",
		"-data-dir", filepath.Join(t.TempDir(), "data")}
	start := func() (*process, string) {
		p := startProcess(t, bin, env, args...)
		return p, "http://" + p.waitLog(t, "HTTP API listening")["addr"].(string)
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

	node, base := start()
	// Kill once a random number of writes has been acknowledged; the
	// writers report each acknowledgement.
	target := 20 + rng.IntN(200)
	var acks testsignal.Signal[int]
	acks.Init()
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
					acks.Signal(len(acked))
					mu.Unlock()
				}
			}
		}()
	}
	testutil.WaitUntil(t, &acks, fmt.Sprintf("%d acknowledged writes", target), func(n int) bool { return n >= target })
	require.NoError(t, node.cmd.Process.Signal(syscall.SIGKILL))
	wg.Wait()
	_ = node.wait(t)
	require.NotEmpty(t, acked, "no write was acknowledged before the kill")

	_, base = start()
	get := func(path string, out any) int {
		r := testutil.Do(t, "GET", base+path, &testutil.Creds{Name: "adm", Pass: "pass"}, nil)
		require.NoError(t, json.Unmarshal([]byte(r.Raw), out))
		return r.Status
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
