package frontend

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnerRules(t *testing.T) {
	e := newEnv(t)
	// A user's doc gets the user as owner.
	r := e.do("PUT", "/_replicator/alice_rep", asAlice, repDoc())
	require.Equal(t, 201, r.Status, r.Raw)
	aliceRev := r.Body["rev"].(string)
	require.Equal(t, aliceName, e.do("GET", "/_replicator/alice_rep", asAlice, nil).Body["owner"])
	require.Equal(t, aliceName, e.rep.job(t, e.db, "_replicator", "alice_rep")["owner"])

	// Users cannot write docs owned by others, nor claim another owner.
	for _, tc := range []struct {
		name string
		c    *creds
		path string
		body map[string]any
	}{
		{"other owner on create", asBob, "/_replicator/x", repDoc("owner", aliceName)},
		{"null owner by non-admin", asBob, "/_replicator/x", repDoc("owner", nil)},
		{"update alice's doc", asBob, "/_replicator/alice_rep", repDoc("_rev", aliceRev)},
		{"update alice's doc claiming it", asBob, "/_replicator/alice_rep", repDoc("_rev", aliceRev, "owner", bobName)},
		{"user_ctx of another", asBob, "/_replicator/y", repDoc("user_ctx", map[string]any{"name": aliceName})},
		{"user_ctx role not held", asAlice, "/_replicator/y", repDoc("user_ctx", map[string]any{"name": aliceName, "roles": []any{"_admin"}})},
	} {
		r := e.do("PUT", tc.path, tc.c, tc.body)
		requireError(t, r, 403, "forbidden")
	}
	requireError(t, e.do("DELETE", "/_replicator/alice_rep?rev="+aliceRev, asBob, nil), 403, "forbidden")
	require.Equal(t, "Can't update replication documents from other users.",
		e.do("PUT", "/_replicator/x", asBob, repDoc("owner", aliceName)).Body["reason"])
	// Nothing was stored by the refused writes.
	requireError(t, e.do("GET", "/_replicator/x", asAdmin, nil), 404, "not_found")
	require.Equal(t, aliceRev, e.do("GET", "/_replicator/alice_rep", asAdmin, nil).Body["_rev"])

	// user_ctx with the user's own name and roles is fine.
	r = e.do("PUT", "/_replicator/ctx_ok", asAlice, repDoc("user_ctx", map[string]any{"name": aliceName, "roles": []any{"dev"}}))
	require.Equal(t, 201, r.Status, r.Raw)

	// The owner updates and deletes; admins may touch anything and set any owner.
	r = e.do("PUT", "/_replicator/alice_rep", asAlice, repDoc("_rev", aliceRev, "continuous", true))
	require.Equal(t, 201, r.Status, r.Raw)
	aliceRev = r.Body["rev"].(string)
	r = e.do("PUT", "/_replicator/alice_rep", asAdmin, repDoc("_rev", aliceRev, "owner", aliceName))
	require.Equal(t, 201, r.Status, r.Raw)
	aliceRev = r.Body["rev"].(string)
	r = e.do("PUT", "/_replicator/for_bob", asAdmin, repDoc("owner", bobName))
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, bobName, e.do("GET", "/_replicator/for_bob", asBob, nil).Body["owner"])
	r = e.do("PUT", "/_replicator/null_owner", asAdmin, repDoc("owner", nil))
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, adminName, e.do("GET", "/_replicator/null_owner", asAdmin, nil).Body["owner"])
	r = e.do("DELETE", "/_replicator/alice_rep?rev="+aliceRev, asAlice, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "alice_rep"))
}

func TestValidationAtWriteTime(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		body   map[string]any
		reason string
	}{
		{map[string]any{"target": "http://a/b"}, "Missing replicator database"},
		{repDoc("source", "ftp://x/y"), "endpoint has an invalid url"},
		{repDoc("continuous", "yes"), "parameter `continuous` must be a boolean"},
	} {
		r := e.do("PUT", "/_replicator/bad", asAlice, tc.body)
		requireError(t, r, 403, "forbidden")
		require.Equal(t, tc.reason, r.Body["reason"])
	}
	requireError(t, e.do("GET", "/_replicator/bad", asAdmin, nil), 404, "not_found")
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "bad"))

	// M2: documents carrying the replicator's fields are checked like any
	// other (a document marked failed used to skip validation).
	r := e.do("PUT", "/_replicator/failed", asAdmin, map[string]any{"_replication_state": "failed"})
	requireError(t, r, 403, "forbidden")

	// A job-layer failure aborts the document write too.
	e.rep.mu.Lock()
	e.rep.failWritten = true
	e.rep.mu.Unlock()
	r = e.do("PUT", "/_replicator/atomic", asAdmin, repDoc())
	require.Equal(t, 500, r.Status, r.Raw)
	require.NotContains(t, r.Raw, "job layer refused")
	requireError(t, e.do("GET", "/_replicator/atomic", asAdmin, nil), 404, "not_found")
	require.EqualValues(t, 0, e.do("GET", "/_replicator", asAdmin, nil).Body["doc_count"])
}

func TestCredentialStripping(t *testing.T) {
	e := newEnv(t)
	doc := map[string]any{
		"source": "http://srcuser:srcpass@src.example/db",
		"target": map[string]any{
			"url":     "https://tuser:tpass@tgt.example/db",
			"auth":    map[string]any{"basic": map[string]any{"username": "u", "password": "authpass"}},
			"headers": map[string]any{"Authorization": "Basic aGVhZGVycGFzcw=="},
		},
		"proxy": "http://puser:ppass@proxy:3128",
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/secret", asAlice, doc).Status)
	secrets := []string{"srcpass", "tpass", "authpass", "aGVhZGVycGFzcw==", "ppass", "srcuser"}

	// The owner and admins see everything.
	for _, c := range []*creds{asAlice, asAdmin} {
		r := e.do("GET", "/_replicator/secret", c, nil)
		require.Contains(t, r.Raw, "authpass")
	}
	// Others get stripped endpoints in every read path.
	for _, path := range []string{"/_replicator/secret", "/_replicator/_all_docs?include_docs=true", "/_replicator/_changes?include_docs=true"} {
		r := e.do("GET", path, asBob, nil)
		require.Equal(t, 200, r.Status)
		for _, s := range secrets {
			require.NotContains(t, r.Raw, s, path)
		}
		require.Contains(t, r.Raw, "src.example/db")
	}
	r := e.do("GET", "/_replicator/secret", asBob, nil)
	require.Equal(t, "http://src.example/db", r.Body["source"])
	require.Equal(t, map[string]any{"url": "https://tgt.example/db"}, r.Body["target"])
	require.Equal(t, "http://proxy:3128", r.Body["proxy"])

	// No secret in any captured log line.
	logs := e.logs.String()
	require.Contains(t, logs, `"path":"/_replicator/secret"`)
	for _, s := range append(secrets, alicePass, bobPass, adminPass) {
		require.NotContains(t, logs, s)
	}
}

func TestStripURLUserinfo(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:p@h/db":      "http://h/db",
		"https://u@h:5984/db/": "https://h:5984/db/",
		"http://h/db":          "http://h/db",
		"http://u:p@h/%zz":     "http://h/%zz",
		"not a url":            "not a url",
		// M2: passwords with unescaped '/', '?' or '#' (url.Parse reads a
		// path or a query where the userinfo is), IPv6 hosts, reasons that
		// quote a URL.
		"http://padm:Alice/LeakPw14@127.0.0.1:25986/secsrc":          "http://127.0.0.1:25986/secsrc",
		"http://u:pa?ss@h/db":                                        "http://h/db",
		"http://u:pa#ss@h/db":                                        "http://h/db",
		"http://u:p@[::1]:5984/db":                                   "http://[::1]:5984/db",
		"`source`: endpoint has an invalid url \"http://u:a/b@h/x\"": "`source`: endpoint has an invalid url \"http://h/x\"",
	} {
		require.Equal(t, want, StripURLUserinfo(in), in)
	}
}

func TestBadInputStoresNothing(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.MaxRequestSize = 4096
		o.MaxDocumentSize = 1024
		o.MaxJSONDepth = 8
	})
	deep := strings.Repeat(`{"a":`, 9) + "1" + strings.Repeat("}", 9)
	for _, tc := range []struct {
		name   string
		method string
		body   any
		hdr    []string
		status int
		err    string
	}{
		{"malformed", "PUT", `{"source":`, nil, 400, "bad_request"},
		{"not an object", "PUT", `[1,2]`, nil, 400, "bad_request"},
		{"trailing data", "PUT", `{"source":"http://a/b","target":"http://c/d"} {}`, nil, 400, "bad_request"},
		{"empty", "PUT", ``, nil, 400, "bad_request"},
		{"invalid utf8", "PUT", []byte("{\"source\":\"\xff\"}"), nil, 400, "bad_request"},
		{"too deep", "PUT", deep, nil, 400, "bad_request"},
		{"too large body", "PUT", `{"x":"` + strings.Repeat("a", 5000) + `"}`, nil, 413, "too_large"},
		{"too large doc", "PUT", repDoc("pad", strings.Repeat("a", 2000)), nil, 413, "document_too_large"},
		{"multipart", "PUT", `{}`, []string{"Content-Type", "multipart/related; boundary=x"}, 415, "bad_content_type"},
		{"post text", "POST", `{}`, []string{"Content-Type", "text/plain"}, 415, "bad_content_type"},
		{"post malformed", "POST", `{"a"`, nil, 400, "bad_request"},
		{"post empty id", "POST", map[string]any{"_id": ""}, nil, 400, "illegal_docid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/_replicator/victim"
			if tc.method == "POST" {
				path = "/_replicator"
			}
			r := e.do(tc.method, path, asAdmin, tc.body, tc.hdr...)
			requireError(t, r, tc.status, tc.err)
		})
	}
	info := e.do("GET", "/_replicator", asAdmin, nil).Body
	require.EqualValues(t, 0, info["doc_count"])
	require.Equal(t, "0", info["update_seq"])
	require.Nil(t, e.rep.job(t, e.db, "_replicator", "victim"))
	// The server still works.
	require.Equal(t, 201, e.do("PUT", "/_replicator/victim", asAdmin, repDoc()).Status)
}

// L3: users keep to their own _local documents: another user can neither
// read nor overwrite nor delete them; admins can.
func TestLocalDocsBelongToTheirWriter(t *testing.T) {
	e := newEnv(t)
	r := e.do("PUT", "/_replicator/_local/alice_secret", asAlice, map[string]any{"pw": "alice's"})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "alice's", e.do("GET", "/_replicator/_local/alice_secret", asAlice, nil).Body["pw"])

	requireError(t, e.do("GET", "/_replicator/_local/alice_secret", asBob, nil), 404, "not_found")
	requireError(t, e.do("PUT", "/_replicator/_local/alice_secret", asBob, map[string]any{"_rev": "0-1", "pw": "pwned"}), 403, "forbidden")
	requireError(t, e.do("DELETE", "/_replicator/_local/alice_secret?rev=0-1", asBob, nil), 403, "forbidden")
	require.Equal(t, "alice's", e.do("GET", "/_replicator/_local/alice_secret", asAlice, nil).Body["pw"])

	// Admins read and write every _local document; alice keeps hers.
	require.Equal(t, "alice's", e.do("GET", "/_replicator/_local/alice_secret", asAdmin, nil).Body["pw"])
	r = e.do("PUT", "/_replicator/_local/alice_secret", asAdmin, map[string]any{"_rev": "0-1", "pw": "reset"})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "reset", e.do("GET", "/_replicator/_local/alice_secret", asAlice, nil).Body["pw"])
}
