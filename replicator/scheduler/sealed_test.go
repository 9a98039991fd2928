package scheduler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// A node that holds no private key runs no job whose credentials are
// sealed: each crashes with a reason naming the key, the engine never
// sees it, and the node says so once.
func TestNoSealingKey(t *testing.T) {
	pub, _ := testutil.SealKeys(t)
	s, err := seal.LoadPublicKey(pub)
	require.NoError(t, err)
	logs := &testutil.Logs{}
	cfg := testConfig()
	cfg.Sealer, cfg.Logger = s, logs.Logger()
	c, eng := simCluster(t, 1, cfg, 0, 0)
	for _, id := range []string{"a", "b"} {
		c.PutDoc("_replicator", id, repDoc("http://bob:pw@h/"+id, "http://h/t", true))
	}
	for _, id := range []string{"a", "b"} {
		d := c.WaitDocState("_replicator", id, replicator.StateCrashing)
		require.Contains(t, string(d.Info), scheduler.TagSealed)
		require.Contains(t, string(d.Info), s.ID(), "the reason names the key")
		require.Zero(t, eng.Starts("http://h/"+id+"/"))
	}
	line, ok := logs.Find(scheduler.MsgNoSealingKey, nil)
	require.True(t, ok)
	require.Equal(t, s.ID(), line["key_id"])
	require.Equal(t, 1, strings.Count(logs.String(), scheduler.MsgNoSealingKey), "said once")
}

// A key rotation while a replication runs: the reseal pass of a node that
// holds the new key leaves the running job to the node running it, and
// says it held one back; the job's credentials move to the new key in the
// transaction that starts it on a node that holds that key.
func TestRotationMovesARunningJobAtItsStart(t *testing.T) {
	ctx := context.Background()
	r := startRotation(t)
	c, sealA, newID := r.c, r.old, r.newID
	body, _ := json.Marshal(map[string]any{"source": "http://bob:pw@h/a", "target": "http://h/t", "continuous": true})
	o, err := c.Plane.Replicate(ctx, body, replicator.UserCtx{Name: "bob"})
	require.NoError(t, err)
	require.Equal(t, api.Running, o.Outcome, "%+v", o)
	var jobID string
	require.NoError(t, c.Store.FoldJobs(ctx, func(id string, _ fdbjobs.State, d *replicator.JobData) error {
		if d.Transient() {
			jobID = id
		}
		return nil
	}))
	running := func(node, key string) func(fdbjobs.State, *replicator.JobData) bool {
		return func(st fdbjobs.State, d *replicator.JobData) bool {
			return st == fdbjobs.Running && d.State == replicator.StateRunning && d.Node == node && d.Rep.SealedKeyID() == key
		}
	}
	c.WaitJob("running on node0, sealed to the old key", jobID, running("node0", sealA.ID()))

	ended := r.roll(t)
	require.EqualValues(t, 1, ended["held"], "%v", ended)
	require.Equal(t, false, ended["clean"])
	_, st := c.JobSTime(jobID)
	d, _, err := c.Store.Job(ctx, nil, jobID)
	require.NoError(t, err)
	require.True(t, running("node0", sealA.ID())(st, d), "the pass left the running job as it was")

	c.Nodes[0].Stop()
	c.WaitJob("running on node1, sealed to the new key", jobID, running("node1", newID))
	r.requireOpens(t, jobID)
}

// A credential whose stored document now sends it elsewhere than it was
// sealed for (written around the HTTP API, which refuses such an edit)
// is not sent: the node does not open it, the job fails naming the field,
// and the listener the document now names hears nothing.
func TestSealedCredentialNotSentElsewhere(t *testing.T) {
	pub, priv := testutil.SealKeys(t)
	s, err := seal.LoadPublicKey(pub)
	require.NoError(t, err)
	o, err := seal.LoadPrivateKeys(priv)
	require.NoError(t, err)
	var mu sync.Mutex
	var heard strings.Builder
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dump, _ := httputil.DumpRequest(r, true)
		mu.Lock()
		heard.Write(dump)
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(listener.Close)

	cfg := testConfig()
	cfg.Sealer, cfg.Opener = s, o
	c := newCluster(t, 1, replicator.EngineDefault{}, cfg)
	sealed, err := replicator.SealJSON(s, json.RawMessage(`{"source":"http://svcacct:S3rvicePW@127.0.0.1:1/svc","target":"http://127.0.0.1:1/tgt"}`),
		replicator.DocScope("_replicator", "svc"))
	require.NoError(t, err)
	elsewhere := strings.TrimPrefix(listener.URL, "http://")
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.ReplaceAll(string(sealed), "127.0.0.1:1/", elsewhere+"/")), &doc))
	c.PutDoc("_replicator", "svc", doc)
	d := c.WaitDocState("_replicator", "svc", replicator.StateFailed, replicator.StateCrashing)
	require.Equal(t, replicator.StateFailed, d.State, "%s", d.Info)
	require.Contains(t, string(d.Info), scheduler.TagSealed)
	require.Contains(t, string(d.Info), "`source.password` was not sealed for http://"+elsewhere)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, heard.String(), "the listener heard the replication")
}

// A key rotation with a template: the reseal pass moves the template's
// document and leaves its running template to the node that runs it (held
// back); the template's credentials move once a node holding the new key
// runs it, and its replications' at their starts there, each opening to
// what the document gave.
func TestRotationMovesATemplate(t *testing.T) {
	ctx := context.Background()
	r := startRotation(t)
	c, eng, newID := r.c, r.eng, r.newID
	const server = "http://h:5984/"
	for _, db := range []string{"u-1", "u-2"} {
		eng.CreateDB(server, db)
	}
	c.PutDoc("_replicator", "tmpl", map[string]any{
		"source": map[string]any{"url": "http://bob:pw@h:5984/", "databases": "u-*"}, "target": "http://b:5984/copy-{db}", "continuous": true,
	})
	u := c.DocJobID("_replicator", "tmpl")
	dbUUID := u[:strings.IndexByte(u, '|')]
	children := []string{replicator.ChildJobID(dbUUID, "tmpl", "u-1"), replicator.ChildJobID(dbUUID, "tmpl", "u-2")}
	for _, id := range children {
		c.WaitJob("running on node0", id, runningOn("node0"))
	}

	ended := r.roll(t)
	require.Equal(t, false, ended["clean"], "%v", ended)

	c.Nodes[0].Stop()
	testutil.Eventually(t, "the template's credentials sealed to the new key", func() bool {
		tmpl, _, err := c.Store.Templates().Get(ctx, c.Store, u)
		require.NoError(t, err)
		return tmpl.Rep.SealedKeyID() == newID
	})
	tmpl, _, err := c.Store.Templates().Get(ctx, c.Store, u)
	require.NoError(t, err)
	spec, err := tmpl.Rep.Open(r.newKeys, tmpl.SealScope())
	require.NoError(t, err)
	require.Equal(t, "pw", spec.Source.Password, "the template's credential moved, not lost")
	for _, id := range children {
		c.WaitJob("running on node1, sealed to the new key", id, func(st fdbjobs.State, d *replicator.JobData) bool {
			return runningOn("node1")(st, d) && d.Rep.SealedKeyID() == newID
		})
		r.requireOpens(t, id)
	}
}

// rotation is a key rotation: a cluster of one node (node0) holding the
// old key, and the keys a node added by roll holds, the new first.
type rotation struct {
	c       *replicatortest.Cluster
	eng     *simengine.Engine
	logs    *testutil.Logs
	old     *seal.Sealer
	newKeys *seal.Opener
	newID   string
}

// startRotation starts the cluster of a rotation, sealing to the old key.
func startRotation(t *testing.T) *rotation {
	t.Helper()
	pubA, privA := testutil.SealKeys(t)
	_, privB := testutil.SealKeys(t)
	r := &rotation{logs: &testutil.Logs{}}
	var err error
	r.old, err = seal.LoadPublicKey(pubA)
	require.NoError(t, err)
	onlyA, err := seal.LoadPrivateKeys(privA)
	require.NoError(t, err)
	r.newKeys, err = seal.LoadPrivateKeys(privB, privA)
	require.NoError(t, err)
	r.newID = r.newKeys.Current().ID()
	cfg := testConfig()
	cfg.Sealer, cfg.Opener, cfg.Logger = r.old, onlyA, r.logs.Logger()
	r.c, r.eng = simCluster(t, 1, cfg, 0, 0)
	return r
}

// roll adds node1, holding the new keys, and returns the log line of the
// end of its reseal pass, to the new key.
func (r *rotation) roll(t *testing.T) map[string]any {
	t.Helper()
	r.c.Config.Opener = r.newKeys
	r.c.AddNode("node1")
	ended := r.logs.WaitFor(t, scheduler.MsgResealEnded, func(m map[string]any) bool { return m["node"] == "node1" })
	require.Equal(t, r.newID, ended["key"])
	return ended
}

// requireOpens checks that job id's source password opens with the new
// keys to what was written, "pw".
func (r *rotation) requireOpens(t *testing.T, id string) {
	t.Helper()
	d, _, err := r.c.Store.Job(context.Background(), nil, id)
	require.NoError(t, err)
	spec, err := d.Rep.Open(r.newKeys, d.SealScope())
	require.NoError(t, err)
	require.Equal(t, "pw", spec.Source.Password, "%s: the credential moved, not lost", id)
}
