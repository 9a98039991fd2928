package wire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/node"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// The package's tests run the whole service in one process, started as
// fdbrep serve starts a node with every role (node.Run): the HTTP API
// wired to the control plane, a replication node running the real engine,
// one store, and real pouchdb-server and CouchDB peers.

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// Test accounts (testutil's test users).
const (
	adminName, adminPass = testutil.AdminName, testutil.AdminPass
	aliceName, alicePass = testutil.AliceName, testutil.AlicePass
	bobName, bobPass     = testutil.BobName, testutil.BobPass
)

type creds = testutil.Creds

var (
	asAdmin, asAlice, asBob = testutil.AsAdmin, testutil.AsAlice, testutil.AsBob
	anon                    = (*creds)(nil)
)

// service is one node with every role, started by node.Run as fdbrep
// serve starts it, on an embedded store and a loopback listener.
type service struct {
	t    *testing.T
	url  string
	node *scheduler.Node
	logs *testutil.Logs // every node's
	db   kv.Database
	tune func(*scheduler.Config) // node.Options.Tune of every node
	// parts are the first node's.
	parts *node.Parts
}

// addNode starts another replication node named name on the service's
// store, tuned as the first.
func (s *service) addNode(name string) *scheduler.Node {
	s.t.Helper()
	return startNode(s.t, s.db, s.logs, settings(name, config.RoleReplication), s.tune).Scheduler
}

// settings is the configuration of the test nodes: the test accounts
// (hashed cheaply), a listener on a free loopback port, small limits, and
// the job timeout and jitter tests can wait out.
func settings(name, roles string) map[string]map[string]string {
	return map[string]map[string]string{
		"node":        {"name": name, "roles": roles},
		"chttpd":      {"bind_address": "127.0.0.1", "port": "0"},
		"chttpd_auth": {"iterations": "10", "pbkdf2_prf": "sha256"},
		"admins":      {adminName: adminPass},
		"users":       {aliceName: alicePass, bobName: bobPass},
		"user_roles":  {aliceName: "dev"},
		"log":         {"requests": "true", "level": "debug", "format": "json"},
		"replicator": {"max_jobs": "10", "max_churn": "10", "max_acceptors": "2",
			"job_timeout_sec": "5", "startup_jitter": "50", "health_threshold_sec": "60",
			"transient_job_max_age_sec": "3600"},
	}
}

// tuneDefault gives the replication nodes the short intervals the tests
// wait out, under what the configuration's ranges allow.
func tuneDefault(c *scheduler.Config) {
	c.Interval, c.MinRunTime = 100*time.Millisecond, 1
	c.MinBackoff, c.MaxBackoff = 200*time.Millisecond, 2*time.Second
	c.StatsUpdateInterval, c.ShutdownTimeout = 100*time.Millisecond, 5*time.Second
}

// startNode runs node.Run with the configuration m on db until the test
// ends, and returns its parts once it serves.
func startNode(t *testing.T, db kv.Database, logs *testutil.Logs, m map[string]map[string]string, tune func(*scheduler.Config)) *node.Parts {
	t.Helper()
	p, stop := runNode(t, db, logs, m, tune)
	t.Cleanup(stop)
	return p
}

// runNode is startNode whose node runs until stop (which waits for it).
func runNode(t *testing.T, db kv.Database, logs *testutil.Logs, m map[string]map[string]string, tune func(*scheduler.Config)) (*node.Parts, func()) {
	t.Helper()
	cfg, err := config.FromMap(m)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan *node.Parts, 1), make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Options{Config: cfg, DB: db, Log: node.NewLog(cfg, logs), Version: "test",
			Tune: tune, Ready: func(p *node.Parts) { ready <- p }})
	}()
	select {
	case p := <-ready:
		var once sync.Once
		return p, func() {
			once.Do(func() {
				cancel()
				require.NoError(t, <-done)
			})
		}
	case err := <-done:
		cancel()
		require.NoError(t, err, "node %s did not start", cfg.NodeName())
		require.FailNow(t, "node.Run returned before it served")
		return nil, nil
	}
}

// newService starts one node; opts adjust its configuration.
func newService(t *testing.T, opts ...func(map[string]map[string]string)) *service {
	t.Helper()
	return newServiceWith(t, nil, opts...)
}

// newServiceWith is newService with tune adjusting the replication
// node's settings after tuneDefault (nil: tuneDefault alone).
func newServiceWith(t *testing.T, tune func(*scheduler.Config), opts ...func(map[string]map[string]string)) *service {
	t.Helper()
	db := kvtest.NewDB(t)
	logs := &testutil.Logs{}
	m := settings("node1@127.0.0.1", config.RoleAPIFrontend+","+config.RoleReplication)
	for _, o := range opts {
		o(m)
	}
	all := func(c *scheduler.Config) {
		tuneDefault(c)
		if tune != nil {
			tune(c)
		}
	}
	p := startNode(t, db, logs, m, all)
	return &service{t: t, url: "http://" + p.Addr, node: p.Scheduler, logs: logs, db: db, tune: all, parts: p}
}

type resp = testutil.Resp

// do sends a request to the service (see testutil.Do).
func (s *service) do(method, path string, c *creds, body any, hdr ...string) resp {
	s.t.Helper()
	return testutil.Do(s.t, method, s.url+path, c, body, hdr...)
}

var requireError = testutil.RequireError

// waitDocState waits until /_scheduler/docs shows a document in one of
// states and returns that entry.
func (s *service) waitDocState(db, id string, states ...string) map[string]any {
	s.t.Helper()
	var last map[string]any
	testutil.Eventually(s.t, fmt.Sprintf("%s/%s in %v", db, id, states), func() bool {
		r := s.do("GET", "/_scheduler/docs/"+url.PathEscape(db)+"/"+url.PathEscape(id), asAdmin, nil)
		last = r.Body
		st, _ := r.Body["state"].(string)
		return r.Status == 200 && slices.Contains(states, st)
	})
	return last
}

// repDoc is a valid replication document.
func repDoc(extra ...any) map[string]any {
	d := map[string]any{"source": "http://src.example/db", "target": "http://tgt.example/db"}
	for i := 0; i+1 < len(extra); i += 2 {
		d[extra[i].(string)] = extra[i+1]
	}
	return d
}

// docCount returns a peer database's doc_count, or -1 when it cannot be
// read (yet).
func docCount(dbURL string) int {
	res, err := http.Get(dbURL)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	var info struct {
		DocCount *int `json:"doc_count"`
	}
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&info) != nil || info.DocCount == nil {
		return -1
	}
	return *info.DocCount
}
