package engine_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
)

const endpointSecret = "endpoint-pw-71c"

// securedPeer starts a real CouchDB 3.5 whose user "replicator" (not an
// admin; password endpointSecret) alone may read and write the databases
// "src" (with docs documents) and targets.
func securedPeer(t *testing.T, docs int, targets ...string) *couchtest.Server {
	t.Helper()
	srv := couchtest.StartCouchDB(t)
	srv.AddUser(t, "replicator", endpointSecret)
	only := map[string]any{"members": map[string]any{"names": []string{"replicator"}}}
	for _, db := range append([]string{"src"}, targets...) {
		db = dbNameOf(db)
		srv.CreateDB(t, db)
		srv.SetSecurity(t, db, only)
	}
	srv.AddDocs(t, "src", 0, docs)
	return srv
}

// dbNameOf is a test case's name as a CouchDB database name.
func dbNameOf(name string) string { return strings.ToLower(strings.ReplaceAll(name, " ", "-")) }

// authed is the endpoint base/db with the user replicator's credentials
// in an auth object.
func authed(t *testing.T, base, db string) couch.Endpoint {
	t.Helper()
	ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(`{"url":%q,"auth":{"basic":{"username":"replicator","password":%q}}}`,
		base+"/"+db, endpointSecret)))
	require.NoError(t, err)
	return ep
}

// Replications from and to a TLS endpoint with a private CA: refused with
// a reason naming the setting without the CA, replicated with it, with
// verification off, and with the client certificate the endpoint asks for.
func TestTLSReplication(t *testing.T) {
	t.Parallel()
	const docs = 30
	cases := []string{"no CA", "CA", "no verification", "no client certificate", "client certificate"}
	srv := securedPeer(t, docs, cases...)
	root := couchtest.NewCA(t, "private root")
	caFile := root.WriteCert(t)
	plain := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t)})
	mutual := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t), ClientCAs: root.Pool()})
	certFile, keyFile := couchtest.WriteKeyPair(t, root.Client(t, "replicator"))

	tests := []struct {
		name  string
		proxy *couchtest.FaultProxy
		s     couch.TLSSettings
		want  string // "" for success, else in the error
	}{
		{"no CA", plain, couch.TLSSettings{}, "certificate signed by unknown authority: set [replicator] ssl_trusted_certificates_file"},
		{"CA", plain, couch.TLSSettings{CAFile: caFile}, ""},
		{"no verification", plain, couch.TLSSettings{NoVerify: true}, ""},
		{"no client certificate", mutual, couch.TLSSettings{CAFile: caFile}, "requires a client certificate: set [replicator] cert_file and key_file"},
		{"client certificate", mutual, couch.TLSSettings{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.s.Config()
			require.NoError(t, err)
			logs := &testutil.SyncBuffer{}
			rep := engine.Replication{Source: authed(t, tt.proxy.URL(), "src"), Target: authed(t, tt.proxy.URL(), dbNameOf(tt.name))}
			opts := engine.Options{Client: engine.ClientSettings{TLS: cfg}, Logger: zerolog.New(logs).Level(zerolog.DebugLevel)}
			res, err := start(t, rep, opts).Wait()
			requireNoEndpointSecret(t, logs.String())
			if tt.want == "" {
				require.NoError(t, err)
				require.Equal(t, int64(docs), res.Stats.DocsWritten)
				enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL(dbNameOf(tt.name)))
				return
			}
			require.ErrorIs(t, err, couch.ErrTLS)
			require.ErrorIs(t, err, engine.ErrHTTP, "crashes as http_request_failed")
			require.ErrorContains(t, err, tt.want)
			requireNoEndpointSecret(t, err.Error())
		})
	}
}

// A replication between peers that require authentication logs in once
// per endpoint and then sends cookies; with Basic it sends the password
// on every request. Either way the password is in no log line or error.
func TestSessionReplication(t *testing.T) {
	t.Parallel()
	const docs = 120
	srv := securedPeer(t, docs, "session", "basic")
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{})
	tests := []struct {
		name string
		auth couch.AuthMode
	}{{"session", couch.AuthSession}, {"basic", couch.AuthBasic}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &testutil.SyncBuffer{}
			before := proxy.Counts()
			rep := engine.Replication{Source: authed(t, proxy.URL(), "src"), Target: authed(t, proxy.URL(), dbNameOf(tt.name)), WorkerBatchSize: 20}
			res := runOnce(t, rep, engine.Options{Client: engine.ClientSettings{Auth: tt.auth}, Logger: zerolog.New(logs).Level(zerolog.DebugLevel)})
			require.Equal(t, int64(docs), res.Stats.DocsWritten)
			enginetest.RequireSame(t, srv.AuthDBURL("src"), srv.AuthDBURL(dbNameOf(tt.name)))
			c := proxy.Counts()
			requests, logins, basic, cookie := c.Requests-before.Requests, c.Logins-before.Logins, c.Basic-before.Basic, c.Cookie-before.Cookie
			t.Logf("%s: %d requests, %d logins, %d with Basic, %d with a cookie", tt.name, requests, logins, basic, cookie)
			if tt.auth == couch.AuthSession {
				require.Equal(t, int64(2), logins, "one login per endpoint")
				require.Zero(t, basic)
				require.Equal(t, requests-logins, cookie)
			} else {
				require.Zero(t, logins)
				require.Zero(t, cookie)
				require.Equal(t, requests, basic)
			}
			requireNoEndpointSecret(t, logs.String())
		})
	}
}

// A replication's socket_options reach its connections; options fdbrep
// cannot apply are refused with the replication.
func TestSocketOptionsReplication(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 20)
	o, err := couch.ParseSocketOptions("[{keepalive, false}, {nodelay, false}, {sndbuf, 65536}, {recbuf, 65536}]")
	require.NoError(t, err)
	rep := srcTo(t, srv, "tgt", engine.Replication{CreateTarget: true, SocketOptions: &o})
	require.Equal(t, int64(20), runOnce(t, rep, engine.Options{}).Stats.DocsWritten)

	rep.SocketOptions = &couch.SocketOptions{SendBuffer: couch.SocketBufferMax + 1}
	err = rep.Validate()
	require.ErrorIs(t, err, engine.ErrInvalidSpec)
	require.ErrorContains(t, err, "parameter `socket_options`: sndbuf takes an integer from 1 to")
}

func requireNoEndpointSecret(t *testing.T, texts ...string) {
	t.Helper()
	for _, s := range texts {
		require.False(t, strings.Contains(s, endpointSecret), "the password leaked: %s", s)
	}
}

// A run that cannot start says which endpoint refused what, with the
// peer's reason: a refused login (and a locked-out account, named as
// such), a database the user may not read, an endpoint that refuses
// connections. The "replication setup failed" line carries the job
// layer's fields (Options.LogFields).
func TestSetupFailureReasons(t *testing.T) {
	t.Parallel()
	srv := securedPeer(t, 1, "tgt")
	srv.AddUser(t, "stranger", endpointSecret)
	srv.AddUser(t, "locked", endpointSecret)
	// CouchDB 3.5 locks a user out (from this address) after 5 failed
	// logins ([chttpd_auth_lockout] threshold), right password or not.
	for range 5 {
		resp, err := http.PostForm(srv.URL()+"/_session", url.Values{"name": {"locked"}, "password": {"wrong-" + endpointSecret}})
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	host := strings.TrimPrefix(srv.URL(), "http://")
	as := func(user, password, base, db string) couch.Endpoint {
		ep := authed(t, base, db)
		ep.Username, ep.Password = user, password
		return ep
	}
	tgt := authed(t, srv.URL(), "tgt")
	tests := []struct {
		name     string
		src, tgt couch.Endpoint
		is       error
		want     string
	}{
		{"wrong password", as("replicator", "wrong-"+endpointSecret, srv.URL(), "src"), tgt, engine.ErrUnauthorized,
			"unauthorized: unauthorized to access or create database http://replicator:*****@" + host + "/src/: " +
				"the peer refused the login: Name or password is incorrect."},
		{"not a member", as("stranger", endpointSecret, srv.URL(), "src"), tgt, engine.ErrForbidden,
			"forbidden: forbidden to access database http://stranger:*****@" + host + "/src/: You are not allowed to access this db."},
		{"locked out", as("locked", endpointSecret, srv.URL(), "src"), tgt, engine.ErrForbidden,
			"forbidden: forbidden to access database http://locked:*****@" + host + "/src/: the peer refused the login: " +
				"Account is temporarily locked due to multiple authentication failures (the account is locked out: CouchDB's " +
				"[chttpd_auth_lockout] refuses a user's logins from an address, right password or not, after threshold failed ones " +
				"from there, until max_lifetime after the first; 5 and 5 minutes by default)"},
		{"source refuses connections", as("replicator", endpointSecret, "http://127.0.0.1:1", "src"), tgt, engine.ErrHTTP,
			"http_request_failed: source http://replicator:*****@127.0.0.1:1/src/ refused the connection (POST /_session, 1 attempt)"},
		{"target refuses connections", authed(t, srv.URL(), "src"), endpoint(t, "http://127.0.0.1:1/tgt"), engine.ErrHTTP,
			"http_request_failed: target http://127.0.0.1:1/tgt/ refused the connection (GET /tgt/, 1 attempt)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &testutil.SyncBuffer{}
			rep := engine.Replication{Source: tt.src, Target: tt.tgt, RetriesPerRequest: couch.NoRetries}
			_, err := start(t, rep, engine.Options{Logger: zerolog.New(logs),
				LogFields: []any{"job_id", "j1", "db", "_replicator", "doc_id", "d1"}}).Wait()
			require.ErrorIs(t, err, tt.is)
			require.EqualError(t, err, tt.want)
			var line struct {
				JobID string `json:"job_id"`
				DB    string `json:"db"`
				DocID string `json:"doc_id"`
				Error string `json:"error"`
			}
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, "replication setup failed") {
					require.NoError(t, json.Unmarshal([]byte(l), &line))
				}
			}
			require.Equal(t, "j1 _replicator d1 "+tt.want, line.JobID+" "+line.DB+" "+line.DocID+" "+line.Error)
			requireNoEndpointSecret(t, logs.String())
		})
	}
}

// create_target creates the target only once the source answered, as
// CouchDB 3.5 does: a missing source or a wrong source password leaves no
// empty target behind (a document with a typo would leave one at every
// retry).
func TestCreateTargetAfterTheSource(t *testing.T) {
	t.Parallel()
	srv := securedPeer(t, 1)
	wrong := authed(t, srv.URL(), "src")
	wrong.Password = "wrong-" + endpointSecret
	tests := []struct {
		name string
		src  couch.Endpoint
		is   error
	}{
		{"missing source", authed(t, srv.URL(), "nope"), engine.ErrDBNotFound},
		{"wrong source password", wrong, engine.ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tgt := "tgt-" + dbNameOf(tt.name)
			rep := engine.Replication{Source: tt.src, Target: endpoint(t, srv.AuthDBURL(tgt)), CreateTarget: true,
				RetriesPerRequest: couch.NoRetries}
			_, err := start(t, rep, engine.Options{}).Wait()
			require.ErrorIs(t, err, tt.is)
			require.Equal(t, http.StatusNotFound, srv.Request(t, http.MethodGet, "/"+tgt, nil, nil), "no target was created")
		})
	}
	// With the source there, the target is created.
	runOnce(t, engine.Replication{Source: authed(t, srv.URL(), "src"), Target: endpoint(t, srv.AuthDBURL("tgt-created")),
		CreateTarget: true}, engine.Options{})
	require.Equal(t, http.StatusOK, srv.Request(t, http.MethodGet, "/tgt-created", nil, nil))
}
