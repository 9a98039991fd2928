package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/cmd/internal/node"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/replicator"
)

// Admin is the server admin of the simulated cluster.
const (
	adminName = "admin"
	adminPass = "pass"
)

// World is a simulated cluster: one store and the nodes that share it,
// each run by node.Run as fdbrep serve runs it (with the simulation's
// engine and no listener), all on the fake clock of a testing/synctest
// bubble.
type World struct {
	db    kv.Database
	store *replicator.Store // the model's reads of the replicator's state
	eng   *Engine
	base  map[string]map[string]string // every node's start-up configuration
	log   *ring
	nodes []*Node
}

// Node is a node of the World.
type Node struct {
	Name  string
	Roles string

	w      *World
	db     *faultkv.Cuttable
	cancel context.CancelFunc
	done   chan error
	parts  *node.Parts
	// Up is whether the node runs; Killed when it died last (its jobs
	// stay running in the store until taken back); Partitioned while it
	// runs cut off from the store.
	Up, Killed, Partitioned bool
	// Since is when it last started, stopped or was killed.
	Since time.Time
}

// newWorld returns a World on db whose nodes start with base.
func newWorld(db kv.Database, eng *Engine, base map[string]map[string]string) (*World, error) {
	jobs, err := fdbjobs.New(db, fdbjobs.Config{}) // never started: reads only
	if err != nil {
		return nil, err
	}
	return &World{db: db, store: replicator.NewStore(db, jobs, nil), eng: eng, base: base, log: newRing(400)}, nil
}

// AddNode adds a node that is not started.
func (w *World) AddNode(name, roles string) *Node {
	n := &Node{Name: name, Roles: roles, w: w}
	w.nodes = append(w.nodes, n)
	return n
}

// Start runs the node (again) on a fresh view of the store.
func (n *Node) Start() error {
	if n.Up {
		return nil
	}
	m := map[string]map[string]string{}
	for s, kvs := range n.w.base {
		m[s] = map[string]string{}
		for k, v := range kvs {
			m[s][k] = v
		}
	}
	m["node"] = map[string]string{"name": n.Name, "roles": n.Roles}
	cfg, err := config.FromMap(m)
	if err != nil {
		return err
	}
	n.db = faultkv.NewCuttable(n.w.db)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *node.Parts, 1)
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Options{Config: cfg, DB: n.db, Log: node.NewLog(cfg, n.w.log.writer(n.Name)),
			Version: "sim", Engine: n.w.eng.For(n.Name), NoListen: true, Lookup: noDNS,
			Ready: func(p *node.Parts) { ready <- p }})
	}()
	select {
	case p := <-ready:
		n.parts, n.cancel, n.done = p, cancel, done
		n.Up, n.Killed, n.Since = true, false, time.Now()
		return nil
	case err := <-done:
		cancel()
		return fmt.Errorf("node %s did not start: %v", n.Name, err)
	}
}

// Stop shuts the node down gracefully and waits for it.
func (n *Node) Stop() error {
	if !n.Up {
		return nil
	}
	n.cancel()
	err := <-n.done
	n.Up, n.Partitioned, n.parts, n.Since = false, false, nil, time.Now()
	return err
}

// Partition cuts the node off from the store and leaves it running, as a
// network partition or a firewall rule does.
func (n *Node) Partition() {
	n.db.Cut()
	n.Partitioned, n.Since = true, time.Now()
}

// Serving reports whether the node runs with its store: a partitioned
// node runs but can take no job.
func (n *Node) Serving() bool { return n.Up && !n.Partitioned }

// Kill stops the node as if its process died: its store is cut off
// first, so nothing it does from then on is stored.
func (n *Node) Kill() {
	if !n.Up {
		return
	}
	n.db.Cut()
	n.w.eng.Kill(n.Name)
	n.cancel()
	<-n.done
	n.Up, n.Killed, n.Partitioned, n.parts, n.Since = false, true, false, nil, time.Now()
}

// Replication reports whether the node has the replication role.
func (n *Node) Replication() bool { return strings.Contains(n.Roles, config.RoleReplication) }

// Frontend reports whether the node has the api_frontend role.
func (n *Node) Frontend() bool { return strings.Contains(n.Roles, config.RoleAPIFrontend) }

// MaxJobs is the max_jobs the node's scheduler applies now (0 when it
// runs no scheduler).
func (n *Node) MaxJobs() int {
	if !n.Serving() || n.parts.Scheduler == nil {
		return 0
	}
	return n.parts.Scheduler.Config().MaxJobs
}

// Resp is an HTTP reply of the API.
type Resp struct {
	Status int
	Body   map[string]any
	Raw    string
}

// Do sends a request to the node's API as the admin, in the caller's
// goroutine; ctx may end it early (a client that gives up).
func (n *Node) Do(ctx context.Context, method, path string, body any) (Resp, error) {
	if !n.Up || n.parts.API == nil {
		return Resp{}, fmt.Errorf("node %s serves no API", n.Name)
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Resp{}, err
		}
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequestWithContext(ctx, method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.SetBasicAuth(adminName, adminPass)
	rec := httptest.NewRecorder()
	n.parts.API.ServeHTTP(rec, req)
	out := Resp{Status: rec.Code, Raw: rec.Body.String()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(rec.Body.Bytes(), &out.Body)
	}
	return out, nil
}

// ring keeps the last lines the nodes logged, to print when a check
// fails.
type ring struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newRing(n int) *ring { return &ring{lines: make([]string, n)} }

func (r *ring) writer(node string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if bytes.Contains(p, []byte(`"message":"request"`)) {
			return len(p), nil // the operations say as much
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lines[r.next] = time.Now().Format(time.TimeOnly) + " " + node + " " + strings.TrimRight(string(p), "\n")
		r.next = (r.next + 1) % len(r.lines)
		r.full = r.full || r.next == 0
		return len(p), nil
	})
}

// Lines returns the lines kept, oldest first.
func (r *ring) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]string(nil), r.lines[:r.next]...)
	}
	return append(append([]string(nil), r.lines[r.next:]...), r.lines[:r.next]...)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// noDNS is the nodes' resolver of endpoints' names: the simulated hosts
// (h0.sim, t.sim) resolve to nothing, and no query leaves the process.
func noDNS(context.Context, string) ([]netip.Addr, error) { return nil, nil }
