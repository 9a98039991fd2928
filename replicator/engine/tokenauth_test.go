package engine_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// tokenServer is a token endpoint a test runs: it exchanges an IAM API
// key (grant urn:ibm:params:oauth:grant-type:apikey) or OAuth 2.0 client
// credentials (HTTP Basic) for a JWT CouchDB accepts as its admin, valid
// for life; it counts the tokens it gave.
type tokenServer struct {
	*httptest.Server
	given atomic.Int64
}

const (
	tokenKey      = "an-iam-api-key"
	tokenClient   = "replicator-client"
	tokenSecret   = "a-client-secret"
	tokenHMACKey  = "a-32-byte-hmac-key-for-couchdb!!"
	tokenGrantIAM = "urn:ibm:params:oauth:grant-type:apikey"
)

func startTokenServer(t *testing.T, life time.Duration) *tokenServer {
	t.Helper()
	ts := &tokenServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		id, secret, _ := r.BasicAuth()
		ok := r.PostForm.Get("grant_type") == tokenGrantIAM && r.PostForm.Get("apikey") == tokenKey ||
			r.PostForm.Get("grant_type") == "client_credentials" && id == tokenClient && secret == tokenSecret
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_client","error_description":"unknown credentials"}`))
			return
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "admin",
			"exp": time.Now().Add(life).Unix(), "_couchdb.roles": []string{"_admin"}}).SignedString([]byte(tokenHMACKey))
		require.NoError(t, err)
		ts.given.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(life.Seconds())})
	}))
	t.Cleanup(ts.Close)
	return ts
}

// jwtCouchDB is a CouchDB 3.5 that takes the JWTs of tokenServer.
func jwtCouchDB(t *testing.T) *couchtest.Server {
	t.Helper()
	srv := couchtest.StartCouchDB(t)
	require.Equal(t, 200, srv.Request(t, "PUT", "/_node/_local/_config/chttpd/authentication_handlers",
		[]byte(`"{chttpd_auth, cookie_authentication_handler}, {chttpd_auth, jwt_authentication_handler}, {chttpd_auth, default_authentication_handler}"`), nil))
	require.Equal(t, 200, srv.Request(t, "PUT", "/_node/_local/_config/jwt_keys/hmac:_default",
		[]byte(`"`+base64.StdEncoding.EncodeToString([]byte(tokenHMACKey))+`"`), nil))
	srv.Restart(t) // CouchDB reads its authentication handlers at start
	return srv
}

// tokenEndpoint is db of srv with the token credentials auth.
func tokenEndpoint(t *testing.T, srv *couchtest.Server, db string, auth map[string]any) couch.Endpoint {
	t.Helper()
	b, err := json.Marshal(map[string]any{"url": srv.DBURL(db), "auth": auth})
	require.NoError(t, err)
	ep, err := couch.ParseEndpoint(b)
	require.NoError(t, err)
	return ep
}

// TestTokenAuth: against a CouchDB 3.5 that takes JWTs, a replication
// whose source logs in with an IAM API key and whose target with OAuth
// 2.0 client credentials, both exchanged at the test's token endpoint,
// replicates; a continuous one renews its tokens as they expire and goes
// on; a key the token endpoint refuses fails the run as unauthorized,
// naming the token endpoint's answer and never the key.
func TestTokenAuth(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	srv := jwtCouchDB(t)
	srv.CreateDB(t, "src")
	srv.CreateDB(t, "tgt")
	for i := range 20 {
		srv.PutDoc(t, "src", map[string]any{"_id": fmt.Sprintf("d%02d", i)})
	}
	const life = 3 * time.Second
	ts := startTokenServer(t, life)
	rep := engine.Replication{
		Source: tokenEndpoint(t, srv, "src", map[string]any{"iam": map[string]any{"api_key": tokenKey, "url": ts.URL}}),
		Target: tokenEndpoint(t, srv, "tgt", map[string]any{"oauth2": map[string]any{
			"url": ts.URL, "client_id": tokenClient, "client_secret": tokenSecret, "scope": "couchdb"}}),
	}
	res := runOnce(t, rep, engine.Options{})
	require.True(t, res.Completed)
	require.EqualValues(t, 20, res.Stats.DocsWritten)
	require.EqualValues(t, 20, srv.DBInfo(t, "tgt")["doc_count"])
	require.EqualValues(t, 2, ts.given.Load(), "one token per side")

	// Continuous, past the tokens' life: renewed, the run goes on.
	cont := rep
	cont.Continuous, cont.CheckpointInterval = true, 200*time.Millisecond
	run := start(t, cont, engine.Options{})
	given := ts.given.Load()
	deadline := time.Now().Add(3 * life)
	for i := 0; time.Now().Before(deadline); i++ {
		srv.PutDoc(t, "src", map[string]any{"_id": fmt.Sprintf("late-%03d", i)})
		run.next()
	}
	srv.PutDoc(t, "src", map[string]any{"_id": "last"})
	for srv.GetDoc(t, "tgt", "last") == nil {
		run.next()
	}
	require.Greater(t, ts.given.Load(), given+2, "tokens renewed as they expired")
	require.NoError(t, run.Stop(run.ctx))

	// A key the token endpoint refuses.
	bad := rep
	bad.Source = tokenEndpoint(t, srv, "src", map[string]any{"iam": map[string]any{"api_key": "a-wrong-key", "url": ts.URL}})
	_, err := start(t, bad, engine.Options{}).Wait()
	require.ErrorIs(t, err, engine.ErrUnauthorized)
	require.Contains(t, err.Error(), "the token endpoint answered 400 invalid_client: unknown credentials")
	require.NotContains(t, err.Error(), "a-wrong-key")

	// A token endpoint that is down: the error names it, not the peer.
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	gone := rep
	gone.Source = tokenEndpoint(t, srv, "src", map[string]any{"iam": map[string]any{"api_key": tokenKey, "url": down.URL + "/token"}})
	gone.RetriesPerRequest = -1 // no retries
	_, err = start(t, gone, engine.Options{}).Wait()
	require.ErrorIs(t, err, engine.ErrHTTP)
	require.Contains(t, err.Error(), "the token endpoint "+down.URL+"/token of source")
	require.Contains(t, err.Error(), "refused the connection")
}
