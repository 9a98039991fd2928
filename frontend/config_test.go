package frontend

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// configEnv is a frontend with a cluster.Node whose configuration changes
// replace the server's accounts, as cmd/internal/node wires them.
type configEnv struct {
	*testEnv
	node *cluster.Node
}

const nodeName = "fdbrep@test"

func newConfigEnv(t *testing.T, roles string) *configEnv {
	t.Helper()
	return newConfigEnvOn(t, roles, kvtest.NewDB(t))
}

// newConfigEnvOn is newConfigEnv on db.
func newConfigEnvOn(t *testing.T, roles string, db kv.Database) *configEnv {
	t.Helper()
	base, err := config.FromMap(map[string]map[string]string{
		"node":        {"name": nodeName, "roles": roles},
		"admins":      {adminName: adminPass},
		"users":       {aliceName: alicePass},
		"chttpd_auth": {"iterations": "10", "secret": "cookie-secret-abc"},
		"replicator":  {"max_churn": "20"},
	})
	require.NoError(t, err)
	base, plain, err := HashConfigPasswords(base)
	require.NoError(t, err)
	require.Equal(t, []string{adminName, aliceName}, plain)
	var srv *Server
	node, err := cluster.New(db, cluster.Options{Base: base, Version: "test", Apply: func(c *config.Config) {
		a, _, err := AccountsFromConfig(c)
		require.NoError(t, err)
		srv.SetAccounts(a)
	}})
	require.NoError(t, err)
	require.NoError(t, node.Load(context.Background()))
	accounts, _, err := AccountsFromConfig(node.Config())
	require.NoError(t, err)
	e := newEnv(t, func(o *Options) {
		o.DB, o.Cluster, o.NodeName, o.Accounts, o.UUID = db, node, nodeName, accounts, "0123456789abcdef0123456789abcdef"
	})
	e.db = db
	srv = e.srv
	require.NoError(t, node.Start(context.Background()))
	t.Cleanup(node.Stop)
	return &configEnv{testEnv: e, node: node}
}

func TestConfigGet(t *testing.T) {
	e := newConfigEnv(t, "api_frontend,replication")
	r := e.do("GET", "/_node/_local/_config", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "20", r.Body["replicator"].(map[string]any)["max_churn"])
	require.Equal(t, "500", r.Body["replicator"].(map[string]any)["max_jobs"], "defaults are shown")
	require.Equal(t, map[string]any{adminName: cluster.Redacted}, r.Body["admins"])
	require.Equal(t, cluster.Redacted, r.Body["chttpd_auth"].(map[string]any)["secret"])
	require.NotContains(t, r.Raw, "cookie-secret-abc")
	require.NotContains(t, r.Raw, "-pbkdf2")

	for _, path := range []string{"/_node/" + nodeName + "/_config/replicator", "/_node/_local/_config/replicator"} {
		r = e.do("GET", path, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, "20", r.Body["max_churn"])
	}
	r = e.do("GET", "/_node/_local/_config/replicator/max_churn", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "\"20\"\n", r.Raw)
	r = e.do("GET", "/_node/_local/_config/nosuch", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Body)
	// The server UUID in effect, as CouchDB shows it, when no [couchdb]
	// uuid is configured.
	welcome := e.do("GET", "/", nil, nil)
	require.NotEmpty(t, welcome.Body["uuid"])
	r = e.do("GET", "/_node/_local/_config/couchdb/uuid", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, strconv.Quote(welcome.Body["uuid"].(string))+"\n", r.Raw)

	for _, tc := range []struct {
		method, path string
		c            *creds
		status       int
		err, reason  string
	}{
		{"GET", "/_node/_local/_config/replicator/nosuch", asAdmin, 404, "not_found", "unknown_config_value"},
		{"GET", "/_node/elsewhere/_config", asAdmin, 404, "not_found", "no such node: elsewhere"},
		{"GET", "/_node/_local/_config", asAlice, 401, "unauthorized", "You are not a server admin."},
		{"GET", "/_node/_local/_config", anon, 401, "unauthorized", "You are not a server admin."},
		{"POST", "/_node/_local/_config", asAdmin, 405, "method_not_allowed", "Only GET allowed"},
		{"PUT", "/_node/_local/_config/replicator", asAdmin, 405, "method_not_allowed", "Only GET allowed"},
		{"GET", "/_node/_local/_config/replicator/max_jobs/more", asAdmin, 404, "not_found", "missing"},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.c, nil)
			requireError(t, r, tc.status, tc.err)
			require.Equal(t, tc.reason, r.Body["reason"])
		})
	}
}

func TestConfigPutAndDelete(t *testing.T) {
	e := newConfigEnv(t, "api_frontend,replication")
	const path = "/_node/_local/_config/replicator/max_jobs"

	r := e.do("PUT", path, asAdmin, `"7"`)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "\"500\"\n", r.Raw, "the value in effect before")
	require.Equal(t, int64(7), e.node.Config().Int("replicator", "max_jobs"), "in effect on the answering node at once")
	require.Equal(t, "_config (fdbrep@test)", e.node.Config().Source("replicator", "max_jobs"))
	require.Equal(t, "\"7\"\n", e.do("GET", path, asAdmin, nil).Raw)
	require.Equal(t, "\"7\"\n", e.do("PUT", path, asAdmin, `" 8 "`).Raw)
	require.Equal(t, "\"8\"\n", e.do("GET", path, asAdmin, nil).Raw, "values are trimmed, as CouchDB does")

	// The cluster layer is below the node's own.
	r = e.do("PUT", "/_node/_cluster/_config/replicator/max_jobs", asAdmin, `"9"`)
	require.Equal(t, "\"\"\n", r.Raw, "nothing was set cluster-wide before")
	r = e.do("GET", "/_node/_cluster/_config", asAdmin, nil)
	require.Equal(t, map[string]any{"replicator": map[string]any{"max_jobs": "9"}}, r.Body)
	require.Equal(t, "\"8\"\n", e.do("GET", path, asAdmin, nil).Raw)
	require.Equal(t, "\"8\"\n", e.do("DELETE", path, asAdmin, nil).Raw)
	require.Equal(t, "\"9\"\n", e.do("GET", path, asAdmin, nil).Raw, "the cluster's value shows through")
	require.Equal(t, int64(9), e.node.Config().Int("replicator", "max_jobs"))

	// DELETE of what no PUT set here.
	requireError(t, e.do("DELETE", path, asAdmin, nil), 403, "forbidden")
	require.Contains(t, e.do("DELETE", path, asAdmin, nil).Body["reason"], "set by _config (_cluster)")
	requireError(t, e.do("DELETE", "/_node/_local/_config/replicator/max_churn", asAdmin, nil), 403, "forbidden")
	requireError(t, e.do("DELETE", "/_node/_local/_config/replicator/max_history", asAdmin, nil), 404, "not_found")
	require.Equal(t, "\"9\"\n", e.do("DELETE", "/_node/_cluster/_config/replicator/max_jobs", asAdmin, nil).Raw)
	require.Equal(t, "\"500\"\n", e.do("GET", path, asAdmin, nil).Raw)

	// interval and interval_sec are one setting: one hides the other.
	require.Equal(t, "\"15\"\n", e.do("PUT", "/_node/_local/_config/replicator/interval_sec", asAdmin, `"5"`).Raw)
	require.Equal(t, "\"\"\n", e.do("PUT", "/_node/_local/_config/replicator/interval", asAdmin, `"2000"`).Raw)
	require.Equal(t, 404, e.do("GET", "/_node/_local/_config/replicator/interval_sec", asAdmin, nil).Status)
	require.Equal(t, "2s", e.node.Config().Duration("replicator", "interval_sec").String())

	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		err        string
		reason     string
	}{
		{"not a string", path, `7`, 400, "bad_request", "a JSON string expected"},
		{"not JSON", path, `seven`, 400, "bad_request", "a JSON string expected"},
		{"bad value", path, `"lots"`, 400, "bad_request", `[replicator] max_jobs = "lots" (_config (fdbrep@test)): want an integer`},
		{"out of range", "/_node/_local/_config/replicator/usage_coeff", `"2"`, 400, "bad_request", "want a number from"},
		{"typo", "/_node/_local/_config/replicator/max_jbos", `"1"`, 400, "bad_request", "did you mean [replicator] max_jobs?"},
		{"unknown section", "/_node/_local/_config/replicatr/max_jobs", `"1"`, 400, "bad_request", "did you mean [replicator]?"},
		{"start-up only", "/_node/_local/_config/chttpd/port", `"1"`, 403, "forbidden", "cannot change while the node runs"},
		{"secret, start-up only", "/_node/_local/_config/chttpd_auth/secret", `"x"`, 403, "forbidden", "cannot change while the node runs"},
		{"CouchDB's", "/_node/_local/_config/couchdb/max_dbs_open", `"1"`, 403, "forbidden", "CouchDB setting fdbrep does not use"},
		{"JWT key, start-up only", "/_node/_local/_config/jwt_keys/hmac:_default", `"aGVsbG8="`, 403, "forbidden", "[jwt_keys] hmac:_default cannot change while the node runs"},
		{"handlers, start-up only", "/_node/_local/_config/chttpd/authentication_handlers", `"{chttpd_auth, jwt_authentication_handler}"`, 403, "forbidden", "cannot change while the node runs"},
		{"crossed backoffs", "/_node/_local/_config/replicator/min_backoff_penalty_sec", `"999999"`, 400, "bad_request", "under min_backoff_penalty_sec"},
		{"bad share", "/_node/_cluster/_config/replicator.shares/foo", `"5"`, 400, "bad_request", "not a replicator database"},
		{"placeholder", "/_node/_local/_config/admins/x", `"*****"`, 400, "bad_request", "in place of a secret"},
		{"bad hash", "/_node/_local/_config/admins/x", `"-pbkdf2-zz"`, 400, "bad_request", "malformed password hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("PUT", tc.path, asAdmin, tc.body)
			requireError(t, r, tc.status, tc.err)
			require.Contains(t, r.Body["reason"], tc.reason)
		})
	}
	// A bad value is refused in a layer another layer hides too.
	require.Equal(t, 200, e.do("PUT", "/_node/_local/_config/replicator/max_jobs_per_host", asAdmin, `"0"`).Status)
	r = e.do("PUT", "/_node/_cluster/_config/replicator/max_jobs_per_host", asAdmin, `"-1"`)
	requireError(t, r, 400, "bad_request")
	require.Contains(t, r.Body["reason"], `[replicator] max_jobs_per_host = "-1" (_config (_cluster)): want an integer from 0`)
	require.Equal(t, 200, e.do("DELETE", "/_node/_local/_config/replicator/max_jobs_per_host", asAdmin, nil).Status)
	require.Equal(t, "\"\"\n", e.do("PUT", "/_node/_cluster/_config/replicator.shares/another%2F_replicator", asAdmin, `"1"`).Raw)
	require.Equal(t, "\"1\"\n", e.do("GET", "/_node/_cluster/_config/replicator.shares/another%2F_replicator", asAdmin, nil).Raw)
}

// Admins and users changed at run time can log in at once; only hashes
// are stored and nothing shows them.
func TestConfigAccounts(t *testing.T) {
	e := newConfigEnv(t, "api_frontend")
	const pass = "n3w-admin-pass"
	carol := &creds{Name: "carol", Pass: pass}
	requireError(t, e.do("GET", "/_node/_local/_config", carol, nil), 401, "unauthorized")
	require.Equal(t, "\"\"\n", e.do("PUT", "/_node/_cluster/_config/admins/carol", asAdmin, `"`+pass+`"`).Raw)
	r := e.do("GET", "/_node/_local/_config/admins", carol, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, map[string]any{adminName: cluster.Redacted, "carol": cluster.Redacted}, r.Body)
	require.Equal(t, "\"*****\"\n", e.do("PUT", "/_node/_cluster/_config/admins/carol", carol, `"`+pass+`2"`).Raw, "the old hash is not shown")
	requireError(t, e.do("GET", "/_node/_local/_config", carol, nil), 401, "unauthorized")

	// A user's roles, and the user removed.
	require.Equal(t, 200, e.do("PUT", "/_node/_local/_config/users/dave", asAdmin, `"dave-pw"`).Status)
	require.Equal(t, 200, e.do("PUT", "/_node/_local/_config/user_roles/dave", asAdmin, `"ops"`).Status)
	r = e.do("GET", "/_session", &creds{Name: "dave", Pass: "dave-pw"}, nil)
	require.Equal(t, []any{"ops"}, r.Body["userCtx"].(map[string]any)["roles"])
	require.Equal(t, "\"*****\"\n", e.do("DELETE", "/_node/_local/_config/users/dave", asAdmin, nil).Raw)
	requireError(t, e.do("GET", "/_session", &creds{Name: "dave", Pass: "dave-pw"}, nil), 401, "unauthorized")

	// Replication keys are for replication nodes; _cluster takes them.
	r = e.do("PUT", "/_node/_local/_config/replicator/max_jobs", asAdmin, `"3"`)
	requireError(t, r, 400, "bad_request")
	require.Contains(t, r.Body["reason"], "applies to replication nodes and fdbrep@test runs api_frontend")
	require.Equal(t, 200, e.do("PUT", "/_node/_cluster/_config/replicator/max_jobs", asAdmin, `"3"`).Status)

	// No password or hash in the store's values, responses or logs.
	raw, err := kv.ReadTransact(context.Background(), e.db, func(tr kv.ReadTransaction) (string, error) {
		rows, err := tr.GetRange(cluster.SubspaceDefault, kv.RangeOptions{}).GetSliceWithError()
		var b strings.Builder
		for _, row := range rows {
			b.Write(row.Value)
		}
		return b.String(), err
	})
	require.NoError(t, err)
	require.Contains(t, raw, "-pbkdf2:sha256-", "hashes are stored")
	for _, secret := range []string{pass, "dave-pw", adminPass} {
		require.NotContains(t, raw, secret)
		require.NotContains(t, e.logs.String(), secret)
	}
}

func TestMembershipAndNode(t *testing.T) {
	e := newConfigEnv(t, "api_frontend,replication")
	r := e.do("GET", "/_membership", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, []any{nodeName}, r.Body["all_nodes"])
	require.Equal(t, []any{nodeName}, r.Body["cluster_nodes"])
	node := r.Body["nodes"].(map[string]any)[nodeName].(map[string]any)
	require.Equal(t, []any{"api_frontend", "replication"}, node["roles"])
	require.Equal(t, "test", node["version"])
	requireError(t, e.do("GET", "/_membership", asAlice, nil), 401, "unauthorized")

	r = e.do("GET", "/_node/_local", asAdmin, nil)
	require.Equal(t, map[string]any{"name": nodeName}, r.Body)
	requireError(t, e.do("GET", "/_node/other", asAdmin, nil), 404, "not_found")
	for _, path := range []string{"/_node/_local/_system", "/_node/_local/_versions"} {
		r := e.do("GET", path, asAdmin, nil)
		requireError(t, r, 404, "not_found")
		require.Equal(t, "missing", r.Body["reason"], path)
	}
}

func TestStatsPaths(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/_up", nil, nil)
	for _, tc := range []struct {
		path string
		want func(t *testing.T, r resp)
	}{
		{"/_node/_local/_stats/couchdb/httpd", func(t *testing.T, r resp) {
			require.Equal(t, "counter", r.Body["requests"].(map[string]any)["type"])
		}},
		{"/_node/_local/_stats/couchdb/httpd/requests/value", func(t *testing.T, r resp) {
			require.Regexp(t, `^\d+\n$`, r.Raw)
		}},
		{"/_node/_local/_stats/couchdb/nosuch", func(t *testing.T, r resp) { require.Equal(t, "null\n", r.Raw) }},
		{"/_node/_local/_stats/couchdb/httpd/requests/value/deeper", func(t *testing.T, r resp) { require.Equal(t, "null\n", r.Raw) }},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := e.do("GET", tc.path, asAdmin, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			tc.want(t, r)
		})
	}
	requireError(t, e.do("GET", "/_node/_local/_stats/couchdb", asAlice, nil), 401, "unauthorized")
	// Without a cluster.Node there is no runtime configuration.
	requireError(t, e.do("GET", "/_node/_local/_config", asAdmin, nil), 503, "service_unavailable")
}

// A _config change whose commit reports commit_unknown_result runs again
// and finds its own change: it still answers the value in effect before
// (and a delete that happened is no 404).
func TestConfigChangesAnswerOnceUnderUnknownCommits(t *testing.T) {
	db := faultkv.Wrap(kvtest.NewDB(t), faultkv.Options{Seed: testutil.Seed(t), CommitUnknownResult: 0.5})
	e := newConfigEnvOn(t, "api_frontend,replication", db)
	const path = "/_node/_local/_config/replicator/max_churn"
	prev := `"20"`
	for i := range 20 {
		v := fmt.Sprintf(`"%d"`, 30+i)
		require.Equal(t, prev+"\n", e.do("PUT", path, asAdmin, v).Raw, "PUT %d", i)
		prev = v
	}
	require.Equal(t, prev+"\n", e.do("DELETE", path, asAdmin, nil).Raw)
	require.Equal(t, `"20"`+"\n", e.do("GET", path, asAdmin, nil).Raw, "the start-up value is back")
	require.Positive(t, db.Stats().CommitUnknownResult, "faults were injected")
}
