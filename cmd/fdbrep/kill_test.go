package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
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

// TestChaos SIGKILLs a node (both roles, one data directory) at seeded
// moments while clients write, update and delete replication documents,
// read the scheduler, run transient replications and keep writing to the
// sources of continuous replications. After the last restart:
//   - every acknowledged document write is there (or the write that was in
//     flight at a kill, which may have landed), and every document has its
//     job;
//   - every replication resumes: one-shot ones complete with targets equal
//     to their sources, continuous ones catch up with everything written
//     to their sources;
//   - no request was answered with an error that no kill explains (5xx,
//     or a conflict on a document only one client writes).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pouchdb-server and kills fdbrep processes")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	peer := couchtest.StartPouchDB(t)
	bin := buildBinary(t)
	const onceReps, onceDocs, contReps = 3, 1000, 2
	for i := range onceReps {
		peer.CreateDB(t, fmt.Sprintf("once-src%d", i))
		peer.AddDocs(t, fmt.Sprintf("once-src%d", i), 0, onceDocs)
	}
	peer.CreateDB(t, "transient-src")
	peer.AddDocs(t, "transient-src", 0, 50)
	for i := range contReps {
		peer.CreateDB(t, fmt.Sprintf("cont-src%d", i))
		peer.AddDocs(t, fmt.Sprintf("cont-src%d", i), 0, 100)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String() // the same address after every restart
	require.NoError(t, ln.Close())
	base := "http://" + addr
	env := append(os.Environ(), "FDBREP_ADMINS__ADM=pass", "FDBREP_CHTTPD_AUTH__ITERATIONS=10",
		"FDBREP_LOG__REQUESTS=false", "FDBREP_REPLICATOR__INTERVAL_SEC=1", "FDBREP_REPLICATOR__STARTUP_JITTER=100",
		"FDBREP_REPLICATOR__MIN_BACKOFF_PENALTY_SEC=1", "FDBREP_REPLICATOR__CHECKPOINT_INTERVAL=200",
		"FDBREP_REPLICATOR__WORKER_BATCH_SIZE=50")
	args := []string{"serve", "-bind", addr, "-log-format", "json", "-node-name", "chaos@127.0.0.1",
		"-data-dir", filepath.Join(t.TempDir(), "data")}
	start := func() *process {
		p := startProcess(t, bin, env, args...)
		p.waitLog(t, "HTTP API listening")
		return p
	}
	adm := &testutil.Creds{Name: "adm", Pass: "pass"}
	node := start()

	for i := range onceReps {
		r := testutil.Do(t, "PUT", fmt.Sprintf("%s/_replicator/once%d", base, i), adm, map[string]any{
			"source": peer.DBURL(fmt.Sprintf("once-src%d", i)), "target": peer.DBURL(fmt.Sprintf("once-tgt%d", i)),
			"create_target": true})
		require.Equal(t, 201, r.Status, r.Raw)
	}
	for i := range contReps {
		r := testutil.Do(t, "PUT", fmt.Sprintf("%s/_replicator/cont%d", base, i), adm, map[string]any{
			"source": peer.DBURL(fmt.Sprintf("cont-src%d", i)), "target": peer.DBURL(fmt.Sprintf("cont-tgt%d", i)),
			"create_target": true, "continuous": true})
		require.Equal(t, 201, r.Status, r.Raw)
	}

	load := newChaosLoad(base, peer, rng.Uint64())
	load.start(contReps)
	const kills = 3
	for k := range kills {
		// A seeded moment: 0.2 to 1.5 s into this incarnation.
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		require.NoError(t, node.cmd.Process.Signal(syscall.SIGKILL))
		_ = node.wait(t)
		t.Logf("kill %d: %s", k+1, load.progress())
		node = start()
	}
	load.stop()
	t.Logf("load done: %s; %d transient replications cut or refused", load.progress(), load.transientCut)
	require.Empty(t, load.unexpected, "answers that no kill explains")

	// Acknowledged writes are there; every document has its job.
	docs := map[string]map[string]any{}
	var all struct {
		Rows []struct {
			ID  string         `json:"id"`
			Doc map[string]any `json:"doc"`
		} `json:"rows"`
	}
	r := testutil.Do(t, "GET", base+"/_replicator/_all_docs?include_docs=true", adm, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &all))
	for _, row := range all.Rows {
		if row.ID[0] != '_' {
			docs[row.ID] = row.Doc
		}
	}
	for id, want := range load.model {
		got, exists := docs[id]
		v, _ := got["v"].(float64)
		ok := exists == want.acked.exists && (!exists || int(v) == want.acked.v)
		if want.maybe != nil {
			ok = ok || exists == want.maybe.exists && (!exists || int(v) == want.maybe.v)
		}
		require.True(t, ok, "document %s: stored (exists %v, v %v), acknowledged %+v, in flight %+v", id, exists, v, want.acked, want.maybe)
	}
	testutil.Eventually(t, "a job for every document", func() bool {
		var sched struct {
			Docs []struct {
				DocID string `json:"doc_id"`
			} `json:"docs"`
		}
		r := testutil.Do(t, "GET", base+"/_scheduler/docs/_replicator?limit=100000", adm, nil)
		if r.Status != 200 || json.Unmarshal([]byte(r.Raw), &sched) != nil || len(sched.Docs) != len(docs) {
			return false
		}
		for _, d := range sched.Docs {
			if docs[d.DocID] == nil {
				return false
			}
		}
		return true
	})

	// Every replication resumes and finishes its work.
	for i := range onceReps {
		waitState(t, base, adm, fmt.Sprintf("once%d", i), "completed")
		enginetest.RequireSame(t, peer.DBURL(fmt.Sprintf("once-src%d", i)), peer.DBURL(fmt.Sprintf("once-tgt%d", i)))
	}
	for i := range contReps {
		src, tgt := peer.DBURL(fmt.Sprintf("cont-src%d", i)), peer.DBURL(fmt.Sprintf("cont-tgt%d", i))
		want := docCount(t, src)
		require.GreaterOrEqual(t, want, 100+load.sourceDocs(i), "acknowledged source writes")
		testutil.Eventually(t, fmt.Sprintf("cont%d caught up", i), func() bool { return docCount(t, tgt) == want })
		enginetest.RequireSame(t, src, tgt)
		waitState(t, base, adm, fmt.Sprintf("cont%d", i), "running")
	}
	if load.transientOK() > 0 { // acknowledged: the target has it all
		enginetest.RequireSame(t, peer.DBURL("transient-src"), peer.DBURL("transient-tgt"))
	}
}

// waitState waits until /_scheduler/docs shows _replicator/id in state.
func waitState(t *testing.T, base string, c *testutil.Creds, id, state string) {
	t.Helper()
	testutil.Eventually(t, id+" "+state, func() bool {
		r := testutil.Do(t, "GET", base+"/_scheduler/docs/_replicator/"+url.PathEscape(id), c, nil)
		return r.Status == 200 && r.Body["state"] == state
	})
}

// docCount returns a peer database's doc_count (-1 when unreadable).
func docCount(t *testing.T, dbURL string) int {
	t.Helper()
	r := testutil.Do(t, "GET", dbURL, nil, nil)
	var info struct {
		DocCount *int `json:"doc_count"`
	}
	if r.Status != 200 || json.Unmarshal([]byte(r.Raw), &info) != nil || info.DocCount == nil {
		return -1
	}
	return *info.DocCount
}

// docState is what a replication document should be: present with field
// v, or absent.
type docState struct {
	exists bool
	v      int
}

// docModel is one document's expected state: the last acknowledged one,
// and the outcome of a write whose answer was lost in a kill (it may or
// may not have landed; the document is not written again).
type docModel struct {
	acked docState
	rev   string
	maybe *docState
}

// chaosLoad is the clients of TestChaos. Its goroutines stop by
// themselves after a bounded number of operations, or at stop.
type chaosLoad struct {
	base   string
	peer   *couchtest.Server
	seed   uint64
	client *http.Client
	done   chan struct{}
	wg     sync.WaitGroup

	mu           sync.Mutex
	model        map[string]*docModel
	srcDocs      map[int]int // continuous source -> documents acknowledged by the peer
	transients   int         // acknowledged POST /_replicate
	transientCut int
	reads        int
	unexpected   []string // answers that no kill explains
}

func newChaosLoad(base string, peer *couchtest.Server, seed uint64) *chaosLoad {
	return &chaosLoad{base: base, peer: peer, seed: seed, client: &http.Client{Timeout: 2 * testutil.WaitTimeout},
		done: make(chan struct{}), model: map[string]*docModel{}, srcDocs: map[int]int{}}
}

func (l *chaosLoad) start(contReps int) {
	for w := range 2 {
		l.run(func(rng *rand.Rand) bool { return l.writeDoc(w, rng) })
	}
	l.run(func(*rand.Rand) bool { return l.read() })
	l.run(func(*rand.Rand) bool { return l.transient() })
	for i := range contReps {
		n := 0
		l.run(func(*rand.Rand) bool { n++; return l.writeSource(i, n) })
	}
}

// run runs op in a goroutine until stop, at most 10,000 times; op returns
// false to pause briefly (the node is down).
func (l *chaosLoad) run(op func(*rand.Rand) bool) {
	rng := rand.New(rand.NewPCG(l.seed, l.seed+1))
	l.seed++
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for range 10_000 {
			select {
			case <-l.done:
				return
			default:
			}
			if !op(rng) {
				select {
				case <-l.done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
}

func (l *chaosLoad) stop() {
	close(l.done)
	l.wg.Wait()
}

func (l *chaosLoad) progress() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d documents, %d source writes, %d transient replications, %d reads",
		len(l.model), l.srcDocs[0]+l.srcDocs[1], l.transients, l.reads)
}

func (l *chaosLoad) sourceDocs(i int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.srcDocs[i]
}

func (l *chaosLoad) transientOK() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.transients
}

// do sends a request as the admin; status 0 means no answer.
func (l *chaosLoad) do(method, path string, body any) (int, map[string]any) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, l.base+path, rd)
	req.SetBasicAuth("adm", "pass")
	req.Header.Set("Content-Type", "application/json")
	res, err := l.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// writeDoc creates, updates or deletes one of writer's 25 documents, whose
// replications never run (their endpoints refuse connections).
func (l *chaosLoad) writeDoc(writer int, rng *rand.Rand) bool {
	id := fmt.Sprintf("w%d-%02d", writer, rng.IntN(25))
	l.mu.Lock()
	m := l.model[id]
	if m == nil {
		m = &docModel{}
		l.model[id] = m
	}
	cur, rev, frozen := m.acked, m.rev, m.maybe != nil
	l.mu.Unlock()
	if frozen {
		return true
	}

	next := docState{exists: true, v: rng.IntN(1 << 30)}
	var status int
	var out map[string]any
	if cur.exists && rng.IntN(3) == 0 {
		next = docState{}
		status, out = l.do("DELETE", "/_replicator/"+id+"?rev="+rev, nil)
	} else {
		doc := map[string]any{"source": "http://127.0.0.1:9/src-" + id, "target": "http://127.0.0.1:9/tgt", "v": next.v}
		if cur.exists {
			doc["_rev"] = rev
		}
		status, out = l.do("PUT", "/_replicator/"+id, doc)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case status == 200 || status == 201:
		m.acked = next
		m.rev, _ = out["rev"].(string)
		return true
	case status == 0:
		m.maybe = &next // the node died with the answer
		return false
	default:
		m.maybe = &next
		l.unexpected = append(l.unexpected, fmt.Sprintf("write %s: %d %v", id, status, out))
		return true
	}
}

// read reads the scheduler and the replicator database.
func (l *chaosLoad) read() bool {
	for _, path := range []string{"/_scheduler/docs", "/_scheduler/jobs", "/_active_tasks", "/_replicator/_all_docs"} {
		status, out := l.do("GET", path, nil)
		if status == 0 {
			return false
		}
		l.mu.Lock()
		l.reads++
		if status >= 500 {
			l.unexpected = append(l.unexpected, fmt.Sprintf("GET %s: %d %v", path, status, out))
		}
		l.mu.Unlock()
	}
	return true
}

// transient runs a one-shot POST /_replicate (at most 5 acknowledged).
func (l *chaosLoad) transient() bool {
	if l.transientOK() >= 5 {
		return false
	}
	status, out := l.do("POST", "/_replicate", map[string]any{
		"source": l.peer.DBURL("transient-src"), "target": l.peer.DBURL("transient-tgt"), "create_target": true})
	if status != 200 {
		l.mu.Lock()
		l.transientCut++
		if status != 0 {
			l.unexpected = append(l.unexpected, fmt.Sprintf("POST /_replicate: %d %v", status, out))
		}
		l.mu.Unlock()
		return false // cut by a kill: a transient replication dies with its node
	}
	l.mu.Lock()
	l.transients++
	l.mu.Unlock()
	return true
}

// writeSource adds 5 documents to continuous source i (the peer is never
// killed, so its answers always come).
func (l *chaosLoad) writeSource(i, n int) bool {
	docs := make([]map[string]any, 5)
	for j := range docs {
		docs[j] = map[string]any{"_id": fmt.Sprintf("live-%06d-%d", n, j), "n": n}
	}
	b, _ := json.Marshal(map[string]any{"docs": docs})
	res, err := l.client.Post(l.peer.DBURL(fmt.Sprintf("cont-src%d", i))+"/_bulk_docs", "application/json", bytes.NewReader(b))
	if err != nil {
		return false
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		return false
	}
	l.mu.Lock()
	l.srcDocs[i] += len(docs)
	l.mu.Unlock()
	// Paced: a steady trickle of changes, not a flood.
	select {
	case <-l.done:
	case <-time.After(50 * time.Millisecond):
	}
	return true
}
