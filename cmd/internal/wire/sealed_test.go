package wire_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/repdb"
)

// With sealing keys configured, no endpoint credential reaches the store
// in the clear, whichever way a replication gives it (URL, auth, an
// Authorization header, another header; a document or POST /_replicate):
// a scan of the whole key space, and of the embedded store's files, finds
// none, while the replications log in with them and run. Reads show
// *****, to the owner too, and a document written back as read keeps its
// credentials.
func TestCredentialsSealedAtRest(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a CouchDB peer")
	}
	peer := couchtest.StartCouchDB(t)
	secret := func(prefix string) string {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
	user, pw, token := "sealadmin", secret("pw-"), secret("tok-")
	require.Equal(t, 200, peer.Request(t, "PUT", "/_node/_local/_config/admins/"+user, pw, nil))
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
	withCreds := func(db string) string {
		u, err := url.Parse(peer.DBURL(db))
		require.NoError(t, err)
		u.User = url.UserPassword(user, pw)
		return u.String()
	}
	for _, db := range []string{"src", "cont-src"} {
		peer.CreateDB(t, db)
		peer.AddDocs(t, db, 0, 3)
	}

	pub, priv := testutil.SealKeys(t)
	dir := t.TempDir()
	db := kvtest.OpenDiskDB(t, dir)
	logs := &testutil.Logs{}
	m := settings("node1@127.0.0.1", config.RoleAPIFrontend+","+config.RoleReplication)
	m["replicator"]["seal_public_key_file"] = pub
	m["replicator"]["seal_private_key_files"] = priv
	p := startNode(t, db, logs, m, tuneDefault)
	s := &service{t: t, url: "http://" + p.Addr, node: p.Scheduler, logs: logs, db: db, tune: tuneDefault}

	// A one-shot document: the source's password in its URL, the target's
	// in auth.basic.
	r := s.do("PUT", "/_replicator/url", asAlice, map[string]any{
		"source":        withCreds("src"),
		"target":        map[string]any{"url": peer.DBURL("tgt"), "auth": map[string]any{"basic": map[string]any{"username": user, "password": pw}}},
		"create_target": true,
	})
	require.Equal(t, 201, r.Status, r.Raw)
	s.waitDocState("_replicator", "url", "completed")
	require.Len(t, peer.AllDocs(t, "tgt", false), 3)

	// A continuous one: an Authorization header and another header.
	r = s.do("PUT", "/_replicator/cont", asAlice, map[string]any{
		"source": map[string]any{"url": peer.DBURL("cont-src"), "headers": map[string]any{"Authorization": "Basic " + basic, "X-Secret-Token": token}},
		"target": withCreds("cont-tgt"), "create_target": true, "continuous": true,
	})
	require.Equal(t, 201, r.Status, r.Raw)
	s.waitDocState("_replicator", "cont", "running")
	testutil.Eventually(t, "the continuous replication copied the source", func() bool { return docCount(peer.AuthDBURL("cont-tgt")) == 3 })

	// POST /_replicate.
	r = s.do("POST", "/_replicate", asAlice, map[string]any{"source": withCreds("src"), "target": withCreds("tgt2"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)

	// Reads show *****, to the owner and to admins.
	for _, c := range []*creds{asAlice, asAdmin} {
		d := s.do("GET", "/_replicator/url", c, nil)
		require.Equal(t, 200, d.Status, d.Raw)
		require.Contains(t, d.Body["source"], user+":*****@")
		require.Equal(t, "*****", d.Body["target"].(map[string]any)["auth"].(map[string]any)["basic"].(map[string]any)["password"])
		d = s.do("GET", "/_replicator/cont", c, nil)
		src := d.Body["source"].(map[string]any)
		require.Equal(t, map[string]any{"basic": map[string]any{"username": user, "password": "*****"}}, src["auth"],
			"a Basic Authorization header is kept as auth.basic")
		require.Equal(t, map[string]any{"X-Secret-Token": "*****"}, src["headers"])
	}

	// The continuous document written back as read (an edit in Fauxton)
	// keeps its credentials: its job goes on.
	before := s.waitDocState("_replicator", "cont", "running")
	d := s.do("GET", "/_replicator/cont", asAlice, nil)
	d.Body["note"] = "edited"
	r = s.do("PUT", "/_replicator/cont", asAlice, d.Body)
	require.Equal(t, 201, r.Status, r.Raw)
	peer.PutDoc(t, "cont-src", map[string]any{"_id": "after-edit"})
	testutil.Eventually(t, "a change after the edit replicated", func() bool { return docCount(peer.AuthDBURL("cont-tgt")) == 4 })
	after := s.waitDocState("_replicator", "cont", "running")
	require.Equal(t, before["start_time"], after["start_time"], "the edit left the job alone")

	// Two proxies with passwords of their own, shown alike: written back,
	// each keeps its own (the job is not replaced).
	r = s.do("PUT", "/_replicator/proxies", asAlice, map[string]any{
		"source": peer.DBURL("src"), "target": peer.DBURL("p-tgt"), "continuous": true,
		"source_proxy": "http://pu:" + secret("sp-") + "@127.0.0.1:9", "target_proxy": "http://pu:" + secret("tp-") + "@127.0.0.1:9",
	})
	require.Equal(t, 201, r.Status, r.Raw)
	stored := func() (string, string) {
		d, err := repdb.New(db, repdb.Options{}).ReadDoc(context.Background(), "_replicator", "proxies")
		require.NoError(t, err)
		return d.Body["source_proxy"].(string), d.Body["target_proxy"].(string)
	}
	sp, tp := stored()
	require.NotEqual(t, sp, tp)
	pd := s.do("GET", "/_replicator/proxies", asAlice, nil)
	require.Equal(t, "http://pu:*****@127.0.0.1:9", pd.Body["source_proxy"])
	pd.Body["note"] = "edited"
	r = s.do("PUT", "/_replicator/proxies", asAlice, pd.Body)
	require.Equal(t, 201, r.Status, r.Raw)
	sp2, tp2 := stored()
	require.Equal(t, sp, sp2, "the source proxy kept its own sealed password")
	require.Equal(t, tp, tp2, "the target proxy kept its own sealed password")

	// Copied to a new document, ***** has nothing to stand for.
	delete(d.Body, "_rev")
	delete(d.Body, "_id")
	r = s.do("PUT", "/_replicator/copy", asAlice, d.Body)
	requireError(t, r, 403, "forbidden")
	require.Contains(t, r.Body["reason"], "`source.password` is *****")

	// Nothing in the store, nor in its files, holds a credential.
	secrets := [][]byte{[]byte(pw), []byte(token), []byte(basic)}
	keys, files := kvtest.RequireNotStored(t, db, dir, secrets...)
	require.Positive(t, keys)
	if !kvtest.OnFoundationDB(t) {
		require.Positive(t, files, "the embedded store's files")
	}
	// Nor do the logs.
	all := logs.String()
	for _, sec := range secrets {
		require.NotContains(t, all, string(sec), "a credential in the log")
	}
	t.Logf("scanned %d keys and %d files: no credential in the clear", keys, files)
}

// A sealed credential stays with where it was given for: an admin writes
// alice a replication with a service account's password; alice reads
// *****, and may edit the document (another database on the same server
// keeps the credential), but not send the credential to another host or
// port, nor as another user: written back with ***** and another origin
// or user name, the document is refused (403, naming the field). A listener on that other port gets
// alice's own credential, when she gives it, never the service account's.
func TestSealedCredentialStaysWithItsOrigin(t *testing.T) {
	t.Parallel()
	pub, priv := testutil.SealKeys(t)
	s := newService(t, func(m map[string]map[string]string) {
		m["replicator"]["seal_public_key_file"] = pub
		m["replicator"]["seal_private_key_files"] = priv
	})
	const svcPass = "S3rvicePW"
	var mu sync.Mutex
	var heard strings.Builder
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dump, _ := httputil.DumpRequest(r, true)
		mu.Lock()
		heard.Write(dump)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"unauthorized","reason":"Name or password is incorrect."}`))
	}))
	t.Cleanup(listener.Close)
	listened := func() string {
		mu.Lock()
		defer mu.Unlock()
		return heard.String()
	}

	// The service the admin means: a port nothing listens on will do.
	r := s.do("PUT", "/_replicator/svc", asAdmin, map[string]any{
		"owner": aliceName, "source": "http://svcacct:" + svcPass + "@127.0.0.1:1/svc", "target": "http://127.0.0.1:1/tgt",
		"continuous": true,
	})
	require.Equal(t, 201, r.Status, r.Raw)
	d := s.do("GET", "/_replicator/svc", asAlice, nil)
	require.Equal(t, 200, d.Status, d.Raw)
	require.Equal(t, "http://svcacct:*****@127.0.0.1:1/svc", d.Body["source"])

	// To another origin: refused, whatever part of it changes.
	for _, elsewhere := range []string{
		"http://svcacct:*****@" + strings.TrimPrefix(listener.URL, "http://") + "/svc",
		"https://svcacct:*****@127.0.0.1:1/svc",
	} {
		edit := maps.Clone(d.Body)
		edit["source"] = elsewhere
		r = s.do("PUT", "/_replicator/svc", asAlice, edit)
		requireError(t, r, 403, "forbidden")
		require.Contains(t, r.Body["reason"], "`source.password` is *****")
		require.Contains(t, r.Body["reason"], "http://127.0.0.1:1")
	}
	// As another user of the same server: refused too (the password would
	// be tried for that user: an oracle of shared passwords).
	for _, other := range []any{
		"http://eve:*****@127.0.0.1:1/svc",
		map[string]any{"url": "http://127.0.0.1:1/svc", "auth": map[string]any{"basic": map[string]any{"username": "eve", "password": "*****"}}},
	} {
		edit := maps.Clone(d.Body)
		edit["source"] = other
		r = s.do("PUT", "/_replicator/svc", asAlice, edit)
		requireError(t, r, 403, "forbidden")
		require.Contains(t, r.Body["reason"], `as user "svcacct"`)
		require.Contains(t, r.Body["reason"], `as user "eve"`)
	}
	// Another database of the same server: kept.
	edit := maps.Clone(d.Body)
	edit["source"] = "http://svcacct:*****@127.0.0.1:1/svc2"
	r = s.do("PUT", "/_replicator/svc", asAlice, edit)
	require.Equal(t, 201, r.Status, r.Raw)

	// Alice's own credential reaches the listener; the service account's
	// never does.
	r = s.do("PUT", "/_replicator/mine", asAlice, map[string]any{
		"source": strings.Replace(listener.URL, "http://", "http://alice:alice-own@", 1) + "/db", "target": listener.URL + "/tgt",
	})
	require.Equal(t, 201, r.Status, r.Raw)
	testutil.Eventually(t, "the listener heard alice's replication", func() bool { return strings.Contains(listened(), "alice-own") })
	for _, secret := range []string{svcPass, base64.StdEncoding.EncodeToString([]byte("svcacct:" + svcPass))} {
		require.NotContains(t, listened(), secret)
	}
}

// A document written back as read, credentials shown *****, over a
// revision that is not the current one answers 409 conflict, as the same
// edit with the credentials themselves does (and CouchDB, which shows
// them): the revision is checked before the ***** are. Over the current
// revision the refusals of ***** stand.
func TestSealedCredentialStaleRevision(t *testing.T) {
	t.Parallel()
	pub, priv := testutil.SealKeys(t)
	s := newService(t, func(m map[string]map[string]string) {
		m["replicator"]["seal_public_key_file"] = pub
		m["replicator"]["seal_private_key_files"] = priv
	})
	r := s.do("PUT", "/_replicator/stale", asAlice, map[string]any{
		"source": "http://bob:B0bPW@127.0.0.1:1/a", "target": "http://127.0.0.1:1/b", "continuous": true,
	})
	require.Equal(t, 201, r.Status, r.Raw)
	first := s.do("GET", "/_replicator/stale", asAlice, nil)
	require.Equal(t, 200, first.Status, first.Raw)
	require.Equal(t, "http://bob:*****@127.0.0.1:1/a", first.Body["source"])
	// Edited once: the revision read is stale.
	edit := maps.Clone(first.Body)
	edit["note"] = "edited"
	r = s.do("PUT", "/_replicator/stale", asAlice, edit)
	require.Equal(t, 201, r.Status, r.Raw)
	current := s.do("GET", "/_replicator/stale", asAlice, nil)
	require.Equal(t, 200, current.Status, current.Raw)

	elsewhere := "http://bob:*****@127.0.0.1:2/a"
	for _, tc := range []struct {
		name   string
		rev    any // nil: none
		source string
		status int
		reason string
	}{
		{"stale", first.Body["_rev"], "", 409, "Document update conflict."},
		{"stale, elsewhere", first.Body["_rev"], elsewhere, 409, "Document update conflict."},
		{"unknown", "1-00000000000000000000000000000000", "", 409, "Document update conflict."},
		{"none", nil, "", 409, "Document update conflict."},
		{"current, elsewhere", current.Body["_rev"], elsewhere, 403, "`source.password` is *****"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := maps.Clone(first.Body)
			delete(body, "_rev")
			if tc.rev != nil {
				body["_rev"] = tc.rev
			}
			if tc.source != "" {
				body["source"] = tc.source
			}
			r := s.do("PUT", "/_replicator/stale", asAlice, body)
			if tc.status == 409 {
				requireError(t, r, 409, "conflict")
				require.Equal(t, tc.reason, r.Body["reason"])
			} else {
				requireError(t, r, tc.status, "forbidden")
				require.Contains(t, r.Body["reason"], tc.reason)
			}
			now := s.do("GET", "/_replicator/stale", asAlice, nil)
			require.Equal(t, current.Body["_rev"], now.Body["_rev"], "nothing written")
		})
	}
	// A new document has no credential to keep: *****'s refusal.
	body := maps.Clone(first.Body)
	delete(body, "_rev")
	delete(body, "_id")
	r = s.do("PUT", "/_replicator/fresh", asAlice, body)
	requireError(t, r, 403, "forbidden")
	require.Contains(t, r.Body["reason"], "`source.password` is *****")
}

// A token secret stays with its token endpoint, its peer and its scope:
// written back with ***** and the peer moved to another host, or another
// scope asked, the document is refused (403, naming the field), so an
// editor cannot have a token bought with the key sent elsewhere; another
// database of the same peer keeps it.
func TestSealedTokenStaysWithItsPeer(t *testing.T) {
	t.Parallel()
	pub, priv := testutil.SealKeys(t)
	s := newService(t, func(m map[string]map[string]string) {
		m["replicator"]["seal_public_key_file"] = pub
		m["replicator"]["seal_private_key_files"] = priv
	})
	r := s.do("PUT", "/_replicator/tok", asAdmin, map[string]any{
		"owner": aliceName, "target": "http://127.0.0.1:1/tgt", "continuous": true,
		"source": map[string]any{"url": "http://127.0.0.1:1/svc", "auth": map[string]any{"oauth2": map[string]any{
			"url": "http://127.0.0.1:2/token", "client_id": "svc", "client_secret": "Cl1entSecret", "scope": "read"}}},
	})
	require.Equal(t, 201, r.Status, r.Raw)
	d := s.do("GET", "/_replicator/tok", asAlice, nil)
	require.Equal(t, 200, d.Status, d.Raw)
	require.NotContains(t, d.Raw, "Cl1entSecret")
	edit := func(url, scope string) resp {
		e := maps.Clone(d.Body)
		src := maps.Clone(e["source"].(map[string]any))
		auth := maps.Clone(src["auth"].(map[string]any))
		o := maps.Clone(auth["oauth2"].(map[string]any))
		src["url"], o["scope"] = url, scope
		auth["oauth2"], src["auth"] = o, auth
		e["source"] = src
		return s.do("PUT", "/_replicator/tok", asAlice, e)
	}
	for _, tc := range []struct{ url, scope string }{
		{"http://127.0.0.1:3/svc", "read"},  // another peer
		{"http://127.0.0.1:1/svc", "admin"}, // another scope
	} {
		r = edit(tc.url, tc.scope)
		requireError(t, r, 403, "forbidden")
		require.Contains(t, r.Body["reason"], "`source.client_secret` is *****")
	}
	r = edit("http://127.0.0.1:1/svc2", "read")
	require.Equal(t, 201, r.Status, r.Raw)
}
