package wire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/wire"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// The package's tests run the whole service in one process, as fdbrep
// serve does with every role: the HTTP API wired to the control plane, a
// replication node running the real engine, one store, and real
// pouchdb-server peers.

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

// service is one node with every role, on a loopback listener.
type service struct {
	t    *testing.T
	url  string
	node *scheduler.Node
	logs *testutil.Logs // the API's, the control plane's and the node's
	db   kv.Database
	cfg  scheduler.Config // the node's
}

// addNode starts another replication node named name on the service's
// store, with the first node's configuration.
func (s *service) addNode(name string) *scheduler.Node {
	s.t.Helper()
	cfg := s.cfg
	cfg.NodeName = name
	n, err := scheduler.New(replicator.NewStore(s.db, replicatortest.JobsClient(s.t, s.db), nil), nil, cfg)
	require.NoError(s.t, err)
	require.NoError(s.t, n.Start(context.Background()))
	s.t.Cleanup(n.Stop)
	return n
}

// nodeConfig is a replication node's configuration with short intervals.
func nodeConfig() scheduler.Config {
	return scheduler.Config{
		Config:   replicator.Config{StartupJitter: 50 * time.Millisecond, JobTimeout: 5 * time.Second, Metrics: replicator.NewMetrics()},
		Interval: 100 * time.Millisecond, MinRunTime: 1,
		MaxJobs: 10, MaxChurn: 10, MaxAcceptors: 2,
		MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second, HealthThreshold: time.Minute,
		StatsUpdateInterval: 100 * time.Millisecond,
		TransientJobMaxAge:  time.Hour, ShutdownTimeout: 5 * time.Second, NodeName: "node1@127.0.0.1",
	}
}

// newService starts one node; opts adjust the HTTP API's options.
func newService(t *testing.T, opts ...func(*frontend.Options)) *service {
	t.Helper()
	return newServiceWith(t, nil, opts...)
}

// newServiceWith is newService with node adjusting the replication
// node's configuration (nil: nodeConfig's).
func newServiceWith(t *testing.T, node func(*scheduler.Config), opts ...func(*frontend.Options)) *service {
	t.Helper()
	db := kvtest.NewDB(t)
	logs := &testutil.Logs{}
	accounts, _, err := frontend.NewAccounts(
		map[string]string{adminName: adminPass},
		map[string]string{aliceName: alicePass, bobName: bobPass},
		map[string][]string{aliceName: {"dev"}},
		frontend.AccountsOptions{PRF: "sha256", Iterations: 10},
	)
	require.NoError(t, err)
	cfg := nodeConfig()
	if node != nil {
		node(&cfg)
	}
	cfg.Logger = logs.Logger()
	cfg.DocUpdater = repdb.New(db, repdb.Options{})
	plane, err := control.New(replicator.NewStore(db, replicatortest.JobsClient(t, db), nil), cfg.Config)
	require.NoError(t, err)
	fopts := frontend.Options{DB: db, Accounts: accounts, Logger: cfg.Logger, LogRequests: true, Version: "test"}
	for _, o := range opts {
		o(&fopts)
	}
	wire.Frontend(&fopts, plane)
	api, err := frontend.New(fopts)
	require.NoError(t, err)
	require.NoError(t, api.Init(context.Background()))
	n, err := scheduler.New(replicator.NewStore(db, replicatortest.JobsClient(t, db), nil), nil, cfg)
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(n.Stop)
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	return &service{t: t, url: ts.URL, node: n, logs: logs, db: db, cfg: cfg}
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
