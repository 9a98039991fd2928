package frontend

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Test accounts (testutil's test users): passwords in plaintext, hashed
// by NewAccounts.
const (
	adminName, adminPass = testutil.AdminName, testutil.AdminPass
	aliceName, alicePass = testutil.AliceName, testutil.AlicePass
	bobName, bobPass     = testutil.BobName, testutil.BobPass
)

// fakeReplicator stands in for the replication control plane: it
// validates like the real parser would for the fields tests use, and
// records each hook call as a key written in the caller's transaction, so
// tests can check that jobs commit with the documents.
type fakeReplicator struct {
	sub subspace.Subspace
	mu  sync.Mutex
	// failWritten makes DocWritten fail (the write must not be stored).
	failWritten bool
}

// fakeDoc is fakeReplicator's parsed document.
type fakeDoc struct {
	db, id string
	body   map[string]any
}

// forbiddenDoc is the fake's refusal of a document (an api.TaggedError,
// as the control plane's).
type forbiddenDoc string

func (e forbiddenDoc) Error() string  { return string(e) }
func (e forbiddenDoc) Tag() string    { return "forbidden" }
func (e forbiddenDoc) Reason() string { return string(e) }

func (d *fakeDoc) DocRef() (db, docID string) { return d.db, d.id }
func (d *fakeDoc) Stored() json.RawMessage    { return nil }

func (f *fakeReplicator) ParseDoc(db, docID string, raw json.RawMessage, _ api.User) (api.ParsedDoc, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, forbiddenDoc("a replication document must be a JSON object")
	}
	parsed := &fakeDoc{db: db, id: docID, body: doc}
	for _, field := range []string{"source", "target"} {
		switch v := doc[field].(type) {
		case string:
			if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
				return parsed, forbiddenDoc("endpoint has an invalid url")
			}
		case map[string]any:
		case nil:
			return parsed, forbiddenDoc("Missing replicator database")
		default:
			return parsed, forbiddenDoc("endpoint has an invalid url")
		}
	}
	if c, ok := doc["continuous"]; ok {
		if _, ok := c.(bool); !ok {
			return parsed, forbiddenDoc("parameter `continuous` must be a boolean")
		}
	}
	return parsed, nil
}

// CheckEndpoints resolves nothing.
func (f *fakeReplicator) CheckEndpoints(context.Context, api.ParsedDoc) error { return nil }

// DocWritten records the job; like the real one it reports a restarted
// job unless the document records a terminal state.
func (f *fakeReplicator) DocWritten(ctx context.Context, tr kv.Transaction, parsed api.ParsedDoc) (bool, error) {
	f.mu.Lock()
	fail := f.failWritten
	f.mu.Unlock()
	if fail {
		return false, errors.New("job layer refused")
	}
	d := parsed.(*fakeDoc)
	b, _ := json.Marshal(d.body)
	tr.Set(f.sub.Pack(tuple.Tuple{"job", d.db, d.id}), b)
	state := d.body["_replication_state"]
	return state != "completed" && state != "failed", nil
}

func (f *fakeReplicator) DocDeleted(ctx context.Context, tr kv.Transaction, db, docID string) error {
	f.mu.Lock()
	fail := f.failWritten
	f.mu.Unlock()
	if fail {
		return errors.New("job layer refused")
	}
	tr.Clear(f.sub.Pack(tuple.Tuple{"job", db, docID}))
	return nil
}

func (f *fakeReplicator) DBCreated(ctx context.Context, tr kv.Transaction, db string) error {
	tr.Set(f.sub.Pack(tuple.Tuple{"db", db}), []byte("1"))
	return nil
}

func (f *fakeReplicator) DBDeleted(ctx context.Context, tr kv.Transaction, db string) error {
	tr.Clear(f.sub.Pack(tuple.Tuple{"db", db}))
	tr.ClearRange(f.sub.Sub("job", db))
	return nil
}

// job reads the fake job of a document (nil when none).
func (f *fakeReplicator) job(t *testing.T, db kv.Database, repDB, docID string) map[string]any {
	t.Helper()
	v, err := kv.ReadTransact(context.Background(), db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(f.sub.Pack(tuple.Tuple{"job", repDB, docID})).Get()
	})
	require.NoError(t, err)
	if v == nil {
		return nil
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal(v, &m))
	return m
}

type testEnv struct {
	t    testing.TB
	db   kv.Database
	srv  *Server
	hs   *HTTPServer
	url  string
	rep  *fakeReplicator
	logs *testutil.SyncBuffer
}

func testAccounts(t testing.TB) *Accounts {
	t.Helper()
	a, plain, err := NewAccounts(
		map[string]string{adminName: adminPass},
		map[string]string{aliceName: alicePass, bobName: bobPass},
		map[string][]string{aliceName: {"dev"}},
		AccountsOptions{PRF: "sha256", Iterations: 10},
	)
	require.NoError(t, err)
	require.Len(t, plain, 3)
	return a
}

// newEnv starts a frontend on a real loopback listener over a fresh store.
func newEnv(t testing.TB, mod ...func(*Options)) *testEnv {
	t.Helper()
	db := kvtest.NewDB(t)
	logs := &testutil.SyncBuffer{}
	logger := zerolog.New(logs)
	rep := &fakeReplicator{sub: subspace.Sub("fakejobs")}
	opts := Options{DB: db, Accounts: testAccounts(t), Logger: &logger, LogRequests: true, Replicator: rep, Version: "test",
		PasswordHashing: AccountsOptions{PRF: "sha256", Iterations: 10}}
	for _, m := range mod {
		m(&opts)
	}
	srv, err := New(opts)
	require.NoError(t, err)
	require.NoError(t, srv.Init(context.Background()))
	hs, err := NewHTTPServer(srv, opts.Limits)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, hs.Close())
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	return &testEnv{t: t, db: db, srv: srv, hs: hs, url: "http://" + ln.Addr().String(), rep: rep, logs: logs}
}

type creds = testutil.Creds

var (
	asAdmin, asAlice, asBob = testutil.AsAdmin, testutil.AsAlice, testutil.AsBob
	anon                    = (*creds)(nil)
)

type resp = testutil.Resp

// do sends a request to the frontend (see testutil.Do).
func (e *testEnv) do(method, path string, c *creds, body any, hdr ...string) resp {
	e.t.Helper()
	return testutil.Do(e.t, method, e.url+path, c, body, hdr...)
}

var requireError = testutil.RequireError

// repDoc is a valid replication document.
func repDoc(extra ...any) map[string]any {
	d := map[string]any{"source": "http://src.example/db", "target": "http://tgt.example/db"}
	for i := 0; i+1 < len(extra); i += 2 {
		d[extra[i].(string)] = extra[i+1]
	}
	return d
}

func decodeJSONBody(res *http.Response, v any) error {
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(v)
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// mustHex computes a PBKDF2 key independently of the code under test's
// parsing, to build CouchDB-format hashes.
func mustHex(t *testing.T, password, prf, salt string, iter int) string {
	t.Helper()
	h, size, ok := prfFunc(prf)
	require.True(t, ok)
	k, err := pbkdf2.Key(h, password, []byte(salt), iter, size)
	require.NoError(t, err)
	return hex.EncodeToString(k)
}

// requireUp checks that GET /_up answers 200 without a user. Its store
// probe may meet an injected fault (a 503 for that answer: seed
// 9279236026593257774 in a clean-clone CI run), so it is asked until it
// answers 200, at most 20 times, and never answers 401. It returns the
// 200 answer.
func (e *testEnv) requireUp(t *testing.T) resp {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := e.do("GET", "/_up", anon, nil)
		require.NotEqual(t, 401, r.Status)
		if r.Status == 200 {
			return r
		}
		require.Less(t, attempt, 20, "/_up kept answering %d", r.Status)
	}
}
