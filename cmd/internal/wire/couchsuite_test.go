package wire_test

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// TestCouchDBReplicationSuite is CouchDB 3.5.0's own replication suite,
// test/elixir/test/replication_test.exs, ported assertion by assertion:
// one subtest per Elixir test, named as there. Its databases live on a
// real CouchDB 3.5 (the suite's "remote-to-remote" pair: source and
// target on the same CouchDB, reached with the user's credentials in the
// URL), its replications are started through fdbrep's POST /_replicate,
// and _active_tasks, _scheduler and _session are fdbrep's. The Elixir
// helpers' retries (retry_until, get_task's and wait_for_repl's polling)
// are testutil.Eventually. The subtests share the CouchDB and the node and
// run one after another: one changes CouchDB's attachment settings.
func TestCouchDBReplicationSuite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	kvtest.PlainStoreOnly(t, "CouchDB's replication suite")
	couch := couchtest.StartCouchDB(t) // before the service: its cleanup runs last
	s := &couchSuite{couch: couch, cc: &creds{Name: couchtest.CouchAdmin, Pass: couchtest.CouchPassword}}
	s.e = newServiceWith(t, func(c *scheduler.Config) {
		c.ProgressInterval = 50 * time.Millisecond // wait_for_repl reads _active_tasks' counters
	}, func(m map[string]map[string]string) {
		m["users"][joeName] = joePass
		m["user_roles"][joeName] = "erlanger"
	})
	// The suite's CouchDB runs with default_security = admin_local (its
	// Makefile's TEST_OPTS): new databases are open to every user.
	s.setConfig(t, "couchdb", "default_security", "admin_local")
	// The suite's @tag user: joe, a CouchDB user with the role erlanger,
	// and the same account on fdbrep, who logs in there.
	couch.EnsureDB(t, "_users")
	r := s.couchDo(t, "PUT", "/_users/org.couchdb.user:"+joeName,
		map[string]any{"name": joeName, "password": joePass, "roles": []string{"erlanger"}, "type": "user"})
	require.Equal(t, 201, r.Status, r.Raw)

	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"source database not found with host", s.sourceNotFound},
		{"replicating attachment without conflict - COUCHDB-885", s.attachmentWithoutConflict},
		{"replication cancellation", s.cancellation},
		{"unauthorized replication cancellation", s.unauthorizedCancellation},
		{"default headers returned for _scheduler/jobs", func(t *testing.T) { s.defaultHeaders(t, "/_scheduler/jobs") }},
		{"default headers returned for _scheduler/docs ", func(t *testing.T) { s.defaultHeaders(t, "/_scheduler/docs") }},
		{"simple remote-to-remote replication - remote-to-remote", s.simple},
		{"replicate with since_seq - remote-to-remote", s.sinceSeq},
		{"validate_doc_update failure replications - remote-to-remote", s.vdu},
		{"create_target filter option - remote-to-remote", s.createTarget},
		{"filtered replications - remote-to-remote", s.filtered},
		{"replication restarts after filter change - COUCHDB-892 - remote-to-remote", s.filterChanged},
		{"replication by doc ids - remote-to-remote", s.byDocIDs},
		{"continuous replication - remote-to-remote", s.continuous},
		{"compressed attachment replication - remote-to-remote", s.compressedAttachment},
		{"non-admin user on target - remote-to-remote", s.nonAdminTarget},
		{"non-admin or reader user on source - remote-to-remote", s.nonAdminOrReaderSource},
	} {
		t.Run(tc.name, tc.run)
	}
}

// The suite's user (@tag user: [name: "joe", password: "erly"]).
const joeName, joePass = "joe", "erly"

// couchSuite holds what the suite's subtests share: the CouchDB the
// databases live on (cc its admin) and the fdbrep node.
type couchSuite struct {
	couch *couchtest.Server
	cc    *creds
	e     *service
	dbs   int
}

type doc = map[string]any

// couchDo sends a request to CouchDB as its admin.
func (s *couchSuite) couchDo(t *testing.T, method, path string, body any, hdr ...string) resp {
	t.Helper()
	return testutil.Do(t, method, s.couch.URL()+path, s.cc, body, hdr...)
}

// dbPair is random_db_name's _src and _tgt databases, created on CouchDB
// (the target unless createTarget is false) and deleted when t ends
// (delete_on_exit).
func (s *couchSuite) dbPair(t *testing.T, createTarget bool) (src, tgt string) {
	t.Helper()
	s.dbs++
	base := fmt.Sprintf("random-test-db-%d-%d", time.Now().UnixNano(), s.dbs)
	src, tgt = base+"_src", base+"_tgt"
	for _, db := range []string{src, tgt} {
		t.Cleanup(func() { s.couchDo(t, "DELETE", "/"+db, nil) })
	}
	s.couch.CreateDB(t, src)
	if createTarget {
		s.couch.CreateDB(t, tgt)
	}
	return src, tgt
}

// url is a database's URL with the admin's credentials (the suite's
// replicate sets them as the URL's userinfo).
func (s *couchSuite) url(db string) string { return s.couch.AuthDBURL(db) }

// userURL is url with another user's credentials.
func (s *couchSuite) userURL(db, name, pass string) string {
	u, err := url.Parse(s.couch.DBURL(db))
	if err != nil {
		panic(err)
	}
	u.User = url.UserPassword(name, pass)
	return u.String()
}

// makeDocs is make_docs: {"_id": "i", "integer": i, "string": "i"} for i
// from first to last.
func makeDocs(first, last int) []doc {
	var docs []doc
	for i := first; i <= last; i++ {
		docs = append(docs, doc{"_id": strconv.Itoa(i), "integer": i, "string": strconv.Itoa(i)})
	}
	return docs
}

// saveDocs is save_docs: _bulk_docs?w=3, every write must succeed; it
// returns the documents with their new _rev.
func (s *couchSuite) saveDocs(t *testing.T, db string, docs ...doc) []doc {
	t.Helper()
	r := s.couchDo(t, "POST", "/"+db+"/_bulk_docs?w=3", map[string]any{"docs": docs})
	requireSuccess(t, r)
	require.Len(t, r.List, len(docs), r.Raw)
	out := make([]doc, len(docs))
	for i, d := range docs {
		res := r.List[i].(map[string]any)
		require.Equal(t, true, res["ok"], "Error saving doc: %v: %v", d["_id"], res)
		out[i] = clone(d)
		out[i]["_rev"] = res["rev"]
	}
	return out
}

// requireSuccess is HTTPotion.Response.success?: a 2xx status (w=3 on
// a single node is 202 accepted).
func requireSuccess(t *testing.T, r resp) {
	t.Helper()
	require.True(t, r.Status/100 == 2, "%d %s", r.Status, r.Raw)
}

// clone copies a document's top level.
func clone(d doc) doc {
	c := make(doc, len(d)+1)
	for k, v := range d {
		c[k] = v
	}
	return c
}

// get reads a document from CouchDB as JSON (query appended as is).
func (s *couchSuite) get(t *testing.T, db, id string, query ...string) resp {
	t.Helper()
	p := couchtest.DocPath(db, id)
	if len(query) > 0 {
		p += "?" + strings.Join(query, "&")
	}
	return s.couchDo(t, "GET", p, nil, "Accept", "application/json")
}

// getOK is get of a document that must exist.
func (s *couchSuite) getOK(t *testing.T, db, id string, query ...string) doc {
	t.Helper()
	r := s.get(t, db, id, query...)
	require.Equal(t, 200, r.Status, "%s/%s: %s", db, id, r.Raw)
	return r.Body
}

// requireMissing requires a document to be missing (or deleted).
func (s *couchSuite) requireMissing(t *testing.T, db, id string) {
	t.Helper()
	r := s.get(t, db, id)
	require.Equal(t, 404, r.Status, "%s/%s: %s", db, id, r.Raw)
}

// dbInfo is get_db_info.
func (s *couchSuite) dbInfo(t *testing.T, db string) map[string]any {
	t.Helper()
	r := s.couchDo(t, "GET", "/"+db, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	return r.Body
}

// changes is get_db_changes: the results of _changes with query.
func (s *couchSuite) changes(t *testing.T, db, query string) []any {
	t.Helper()
	r := s.couchDo(t, "GET", "/"+db+"/_changes?"+query, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	return r.Body["results"].([]any)
}

// sameDocCount waits, as the suite's retry_until, until the target has as
// many documents as the source (and as many deleted when del), and
// returns the source's info.
func (s *couchSuite) sameDocCount(t *testing.T, src, tgt string, del bool) map[string]any {
	t.Helper()
	var si, ti map[string]any
	testutil.Eventually(t, "the target's doc_count", func() bool {
		si, ti = s.dbInfo(t, src), s.dbInfo(t, tgt)
		return si["doc_count"] == ti["doc_count"] && (!del || si["doc_del_count"] == ti["doc_del_count"])
	})
	return si
}

// att is an attachment of addAttachment: readme.txt, "some text",
// text/plain unless set.
type att struct{ name, body, ctype string }

// addAttachment is add_attachment: a PUT of the attachment to the
// document's revision; it returns the document with its new _rev.
func (s *couchSuite) addAttachment(t *testing.T, db string, d doc, a att) doc {
	t.Helper()
	if a.name == "" {
		a = att{"readme.txt", "some text", "text/plain"}
	}
	p := couchtest.DocPath(db, d["_id"].(string)) + "/" + a.name + "?w=3"
	if rev, ok := d["_rev"].(string); ok {
		p += "&rev=" + url.QueryEscape(rev)
	}
	r := s.couchDo(t, "PUT", p, a.body, "Content-Type", a.ctype)
	requireSuccess(t, r)
	d = clone(d)
	d["_rev"] = r.Body["rev"]
	return d
}

// requireAttachment checks a replicated attachment's stub (revpos,
// content type) and its data.
func (s *couchSuite) requireAttachment(t *testing.T, db string, d doc, name string, revpos int, ctype, data string) {
	t.Helper()
	atts, ok := d["_attachments"].(map[string]any)
	require.True(t, ok, "no _attachments in %v", d)
	a, ok := atts[name].(map[string]any)
	require.True(t, ok, "no %s in %v", name, atts)
	require.EqualValues(t, revpos, a["revpos"], name)
	require.Contains(t, a["content_type"], ctype)
	require.Equal(t, true, a["stub"])
	r := s.couchDo(t, "GET", couchtest.DocPath(db, d["_id"].(string))+"/"+name, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, len(data), len(r.Raw))
	require.Equal(t, data, r.Raw)
}

// setConfig is set_config: a CouchDB setting, not persisted, restored
// when t ends.
func (s *couchSuite) setConfig(t *testing.T, section, key, value string) {
	t.Helper()
	prev := s.setConfigRaw(t, section, key, value)
	t.Cleanup(func() {
		path := "/_node/_local/_config/" + section + "/" + key
		if prev != "" {
			require.Equal(t, 200, s.couchDo(t, "PUT", path, prev, "X-Couch-Persist", "false").Status)
		} else {
			require.Equal(t, 200, s.couchDo(t, "DELETE", path, nil, "X-Couch-Persist", "false").Status)
		}
	})
}

// setConfigRaw is set_config_raw; it returns the previous value as JSON
// ("" when none).
func (s *couchSuite) setConfigRaw(t *testing.T, section, key, value string) string {
	t.Helper()
	r := s.couchDo(t, "PUT", "/_node/_local/_config/"+section+"/"+key, strconv.Quote(value), "X-Couch-Persist", "false")
	require.Equal(t, 200, r.Status, r.Raw)
	if prev := strings.TrimSpace(r.Raw); prev != `""` {
		return prev
	}
	return ""
}

// setSecurity is set_security.
func (s *couchSuite) setSecurity(t *testing.T, db string, sec map[string]any) {
	t.Helper()
	r := s.couchDo(t, "PUT", "/"+db+"/_security", sec)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["ok"])
}

// post sends a request to fdbrep as the server admin, or with a session
// cookie when cookie is set. (The suite's own requests with a cookie also
// carry the admin's Basic credentials, which its CouchDB ignores behind
// the cookie: they are sent as the cookie's user, joe, as here.)
func (s *couchSuite) post(t *testing.T, path string, body any, cookie string) resp {
	t.Helper()
	if cookie != "" {
		return s.e.do("POST", path, anon, body, "Cookie", cookie)
	}
	return s.e.do("POST", path, asAdmin, body)
}

// replicate is the suite's replicate: POST /_replicate of body with
// source and target set, which must succeed; it returns the reply.
func (s *couchSuite) replicate(t *testing.T, src, tgt string, body map[string]any, cookie string) map[string]any {
	t.Helper()
	r := s.tryReplicate(t, src, tgt, body, cookie)
	requireSuccess(t, r)
	return r.Body
}

// tryReplicate is replicate that may fail.
func (s *couchSuite) tryReplicate(t *testing.T, src, tgt string, body map[string]any, cookie string) resp {
	t.Helper()
	b := map[string]any{"source": src, "target": tgt}
	for k, v := range body {
		b[k] = v
	}
	return s.post(t, "/_replicate", b, cookie)
}

// cancelReplication is cancel_replication: a cancel that may find
// nothing to cancel.
func (s *couchSuite) cancelReplication(t *testing.T, src, tgt string) {
	t.Helper()
	s.tryReplicate(t, src, tgt, map[string]any{"cancel": true}, "")
}

// history is the reply's history, of n entries unless n is 0; it returns
// the newest.
func history(t *testing.T, result map[string]any, n int) map[string]any {
	t.Helper()
	h, ok := result["history"].([]any)
	require.True(t, ok, "no history: %v", result)
	if n > 0 {
		require.Len(t, h, n)
	}
	return h[0].(map[string]any)
}

// requireCounts checks counters of a history entry or a reply.
func requireCounts(t *testing.T, m map[string]any, want map[string]int) {
	t.Helper()
	for k, v := range want {
		require.EqualValues(t, v, m[k], "%s in %v", k, m)
	}
}

// counts is the suite's usual five counters.
func counts(checked, found, read, written, failures int) map[string]int {
	return map[string]int{"missing_checked": checked, "missing_found": found, "docs_read": read,
		"docs_written": written, "doc_write_failures": failures}
}

// tryGetTask is try_get_task: the _active_tasks row of a replication, nil
// when there is none.
func (s *couchSuite) tryGetTask(t *testing.T, replID string) map[string]any {
	t.Helper()
	r := s.e.do("GET", "/_active_tasks", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.NotNil(t, r.List, r.Raw)
	for _, task := range r.List {
		if m := task.(map[string]any); m["replication_id"] == replID {
			return m
		}
	}
	return nil
}

// getTask is get_task with a delay: the row, once there is one.
func (s *couchSuite) getTask(t *testing.T, replID string) map[string]any {
	t.Helper()
	var task map[string]any
	testutil.Eventually(t, "the task of "+replID, func() bool {
		task = s.tryGetTask(t, replID)
		return task != nil
	})
	return task
}

// waitForReplStop is wait_for_repl_stop.
func (s *couchSuite) waitForReplStop(t *testing.T, replID string) {
	t.Helper()
	testutil.Eventually(t, "the task of "+replID+" to stop", func() bool { return s.tryGetTask(t, replID) == nil })
}

// waitForRepl is wait_for_repl: until the task has checked expect
// revisions and the source has no change after its through_seq.
func (s *couchSuite) waitForRepl(t *testing.T, srcDB, replID string, expect int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%s to check %d revisions", replID, expect), func() bool {
		task := s.tryGetTask(t, replID)
		require.NotNil(t, task, "the task of %s is gone", replID)
		through, _ := task["through_seq"].(string)
		if through == "" {
			through = "0"
		}
		checked, _ := task["revisions_checked"].(float64)
		return len(s.changes(t, srcDB, "since="+url.QueryEscape(through))) == 0 && checked >= float64(expect)
	})
}

// login is Couch.login: POST /_session with {"username", "password"}; it
// returns the AuthSession cookie.
func (s *couchSuite) login(t *testing.T, name, pass string) string {
	t.Helper()
	r := s.e.do("POST", "/_session", anon, map[string]any{"username": name, "password": pass})
	require.Equal(t, true, r.Body["ok"], r.Raw)
	token, _, _ := strings.Cut(r.Header.Get("Set-Cookie"), ";")
	require.NotEmpty(t, token)
	r = s.e.do("GET", "/_session", anon, nil, "Cookie", token)
	require.Equal(t, true, r.Body["ok"], r.Raw)
	require.Equal(t, name, r.Body["userCtx"].(map[string]any)["name"])
	return token
}

// logout is Couch.Session.logout.
func (s *couchSuite) logout(t *testing.T, cookie string) {
	t.Helper()
	r := s.e.do("DELETE", "/_session", anon, nil, "Cookie", cookie, "X-CouchDB-WWW-Authenticate", "Cookie",
		"Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, true, r.Body["ok"], r.Raw)
}

// intField is a document's "integer" (ok false when it has none: the
// design documents, which Elixir's term order leaves out of the suite's
// numeric ranges).
func intField(d doc) (int, bool) {
	switch v := d["integer"].(type) {
	case int:
		return v, true
	case float64:
		return int(v), true
	}
	return 0, false
}

// in reports whether d's integer is in [lo, hi).
func in(d doc, lo, hi int) bool {
	n, ok := intField(d)
	return ok && n >= lo && n < hi
}

// cmpJSON is cmp_json: every field of lhs is in rhs, equal, recursively
// for objects.
func cmpJSON(t *testing.T, lhs, rhs any) bool {
	t.Helper()
	return cmpValues(normalize(t, lhs), normalize(t, rhs))
}

func cmpValues(lhs, rhs any) bool {
	l, lok := lhs.(map[string]any)
	r, rok := rhs.(map[string]any)
	if !lok || !rok {
		return reflect.DeepEqual(lhs, rhs)
	}
	for k, v := range l {
		if w, ok := r[k]; !ok || !cmpValues(v, w) {
			return false
		}
	}
	return true
}

// normalize is v through a JSON round trip (numbers as float64).
func normalize(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// requireCopy requires the target's copy of d to exist and carry d's
// fields.
func (s *couchSuite) requireCopy(t *testing.T, tgt string, d doc) doc {
	t.Helper()
	c := s.getOK(t, tgt, d["_id"].(string))
	require.True(t, cmpJSON(t, d, c), "%v != %v", d, c)
	return c
}

// The suite's attachments data/lorem.txt (42103 bytes of lorem ipsum) and
// data/lorem_b64.txt (its base64): the assertions compare them whole, so
// text of the same size and kind serves.
var (
	att1Data = lorem(42103)
	att2Data = base64.StdEncoding.EncodeToString([]byte(att1Data))
)

func lorem(n int) string {
	const p = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. Phasellus nunc sapien, porta id pellentesque at, " +
		"elementum et felis. Curabitur condimentum ante in metus iaculis quis congue diam commodo. Donec eleifend ante " +
		"sed nulla dapibus convallis. Ut cursus aliquam neque, vel porttitor tellus interdum ut.\n"
	return strings.Repeat(p, n/len(p)+1)[:n]
}

func (s *couchSuite) sourceNotFound(t *testing.T) {
	base := fmt.Sprintf("random-test-db-%d", time.Now().UnixNano())
	// check_not_found: the URLs carry no credentials.
	r := s.post(t, "/_replicate", map[string]any{
		"source": s.couch.DBURL(base + "_src"), "target": s.couch.DBURL(base + "_tgt"),
	}, "")
	require.Equal(t, "db_not_found", r.Body["error"], r.Raw)
}

func (s *couchSuite) attachmentWithoutConflict(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	d := s.saveDocs(t, src, doc{"_id": "doc1"})[0]
	result := s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 0), map[string]int{"docs_written": 1, "docs_read": 1, "doc_write_failures": 0})

	d["_attachments"] = map[string]any{
		"hello.txt": map[string]any{"content_type": "text/plain", "data": "aGVsbG8gd29ybGQ="},
		"foo.dat":   map[string]any{"content_type": "not/compressible", "data": "aSBhbSBub3QgZ3ppcGVk"},
	}
	d = s.saveDocs(t, src, d)[0]
	result = s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 2), map[string]int{"docs_written": 2, "docs_read": 2, "doc_write_failures": 0})

	r := s.get(t, tgt, d["_id"].(string), "conflicts=true", "deleted_conflicts=true", "attachments=true", "att_encoding_info=true")
	require.Equal(t, 200, r.Status, r.Raw)
	require.NotContains(t, r.Body, "_conflicts")
	require.NotContains(t, r.Body, "_deleted_conflicts")
	atts := r.Body["_attachments"].(map[string]any)
	hello, foo := atts["hello.txt"].(map[string]any), atts["foo.dat"].(map[string]any)
	require.Equal(t, "text/plain", hello["content_type"])
	require.Equal(t, "aGVsbG8gd29ybGQ=", hello["data"])
	require.Equal(t, "gzip", hello["encoding"])
	require.Equal(t, "not/compressible", foo["content_type"])
	require.Equal(t, "aSBhbSBub3QgZ3ppcGVk", foo["data"])
	require.NotContains(t, foo, "encoding")
}

func (s *couchSuite) cancellation(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	s.saveDocs(t, src, makeDocs(1, 6)...)
	result := s.replicate(t, s.url(src), s.url(tgt), map[string]any{"continuous": true, "create_target": true}, "")
	require.Equal(t, true, result["ok"])
	replID, ok := result["_local_id"].(string)
	require.True(t, ok, "no _local_id: %v", result)
	task := s.getTask(t, replID)
	require.Equal(t, replID, task["replication_id"])

	body := map[string]any{"replication_id": replID, "cancel": true}
	r := s.post(t, "/_replicate", body, "")
	require.Equal(t, 200, r.Status, r.Raw)
	s.waitForReplStop(t, replID)
	require.Nil(t, s.tryGetTask(t, replID))
	r = s.post(t, "/_replicate", body, "")
	require.Equal(t, 404, r.Status, r.Raw)
}

func (s *couchSuite) unauthorizedCancellation(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	s.saveDocs(t, src, makeDocs(1, 6)...)
	result := s.replicate(t, s.url(src), s.url(tgt), map[string]any{"continuous": true}, "")
	require.Equal(t, true, result["ok"])
	replID, ok := result["_local_id"].(string)
	require.True(t, ok, "no _local_id: %v", result)
	s.getTask(t, replID)

	sess := s.login(t, joeName, joePass)
	body := map[string]any{"replication_id": replID, "cancel": true}
	r := s.post(t, "/_replicate", body, sess)
	// CouchDB answers 401 unauthorized here, telling joe that the job
	// exists; fdbrep answers as for an id nothing holds (docs/COMPAT.md,
	// "the replication_id of a replication the caller does not own").
	require.Equal(t, 404, r.Status, r.Raw)
	require.Equal(t, "not_found", r.Body["error"])
	s.logout(t, sess)

	r = s.post(t, "/_replicate", body, "")
	require.Equal(t, 200, r.Status, r.Raw)
}

func (s *couchSuite) defaultHeaders(t *testing.T, path string) {
	r := s.e.do("GET", path, asAdmin, nil)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.NotEmpty(t, r.Header.Get("X-Couch-Request-ID"))
	require.NotEmpty(t, r.Header.Get("X-CouchDB-Body-Time"))
}

func (s *couchSuite) simple(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	ddoc := doc{"_id": "_design/foo", "language": "javascript", "value": "ddoc"}
	docs := s.saveDocs(t, src, append(makeDocs(1, 20), ddoc)...)
	for i, d := range docs {
		if in(d, 10, 15) {
			docs[i] = s.addAttachment(t, src, d, att{"readme.txt", att1Data, "text/plain"})
		}
	}
	result := s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	srcInfo := s.sameDocCount(t, src, tgt, false)
	n := int(srcInfo["doc_count"].(float64))
	require.IsType(t, "", result["session_id"])
	h := history(t, result, 1)
	require.IsType(t, "", h["start_time"])
	require.IsType(t, "", h["end_time"])
	require.EqualValues(t, 0, h["start_last_seq"])
	requireCounts(t, h, counts(n, n, n, n, 0))
	for _, d := range docs {
		c := s.requireCopy(t, tgt, d)
		if in(d, 10, 15) {
			s.requireAttachment(t, tgt, c, "readme.txt", 2, "text/plain", att1Data)
		}
	}

	// Add one more doc to source and more attachments to existing docs.
	newDoc := s.saveDocs(t, src, doc{"_id": "foo666", "value": "d"})[0]
	for i, d := range docs {
		if in(d, 10, 15) {
			docs[i] = s.addAttachment(t, src, d, att{"data.dat", att2Data, "application/binary"})
		}
	}
	result = s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	s.sameDocCount(t, src, tgt, false)
	require.IsType(t, "", result["session_id"])
	h = history(t, result, 2)
	require.Equal(t, result["session_id"], h["session_id"])
	require.IsType(t, "", h["start_time"])
	require.IsType(t, "", h["end_time"])
	requireCounts(t, h, counts(27, 27, 27, 27, 0))
	c := s.getOK(t, tgt, "foo666")
	require.Equal(t, newDoc["_id"], c["_id"])
	require.Equal(t, newDoc["value"], c["value"])
	for i := 10; i <= 14; i++ {
		c := s.requireCopy(t, tgt, docs[i-1])
		s.requireAttachment(t, tgt, c, "readme.txt", 2, "text/plain", att1Data)
		s.requireAttachment(t, tgt, c, "data.dat", 3, "application/binary", att2Data)
	}

	// Test deletion is replicated.
	delDoc := s.saveDocs(t, src, doc{"_id": "1", "_rev": docs[0]["_rev"], "_deleted": true})[0]
	result = s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	s.sameDocCount(t, src, tgt, true)
	require.EqualValues(t, 1, s.dbInfo(t, tgt)["doc_del_count"])
	requireCounts(t, history(t, result, 3), counts(28, 28, 28, 28, 0))
	s.requireMissing(t, tgt, "1")
	var deleted []any
	for _, ch := range s.changes(t, tgt, "") {
		if ch.(map[string]any)["id"] == delDoc["_id"] {
			deleted = append(deleted, ch)
		}
	}
	require.Len(t, deleted, 1)
	require.Equal(t, true, deleted[0].(map[string]any)["deleted"])

	// Test replicating a conflict.
	d := s.getOK(t, src, "2")
	d["value"] = "white"
	d = s.saveDocs(t, src, d)[0]
	c = s.getOK(t, tgt, "2")
	c["value"] = "black"
	s.saveDocs(t, tgt, c)
	s.replicateAgain(t, src, tgt, 4, 29, 29)
	c = s.getOK(t, tgt, "2", "conflicts=true")
	require.Regexp(t, `^2-`, c["_rev"])
	require.Len(t, c["_conflicts"], 1)
	require.Regexp(t, `^2-`, c["_conflicts"].([]any)[0])

	// Re-replicate updated conflict.
	d["value"] = "yellow"
	d = s.saveDocs(t, src, d)[0]
	s.replicateAgain(t, src, tgt, 5, 30, 30)
	c = s.getOK(t, tgt, "2", "conflicts=true")
	require.Regexp(t, `^3-`, c["_rev"])
	require.Len(t, c["_conflicts"], 1)
	conflict := c["_conflicts"].([]any)[0]
	require.Regexp(t, `^2-`, conflict)

	// Resolve the conflict and re-replicate new revision.
	s.saveDocs(t, tgt, doc{"_id": "2", "_rev": conflict, "_deleted": true})
	d["value"] = "rainbow"
	s.saveDocs(t, src, d)
	s.replicateAgain(t, src, tgt, 6, 31, 31)
	c = s.getOK(t, tgt, "2", "conflicts=true")
	require.Regexp(t, `^4-`, c["_rev"])
	require.NotContains(t, c, "_conflicts")

	// Test that existing revisions are not replicated.
	srcDocs := []doc{{"_id": "foo1", "value": 111}, {"_id": "foo2", "value": 222}, {"_id": "foo3", "value": 333}}
	s.saveDocs(t, src, srcDocs...)
	s.saveDocs(t, tgt, srcDocs[0], srcDocs[2])
	s.replicateAgain(t, src, tgt, 7, 34, 32)

	more := []doc{{"_id": "foo4", "value": 444}, {"_id": "foo5", "value": 555}}
	s.saveDocs(t, src, more...)
	s.saveDocs(t, tgt, more...)
	s.replicateAgain(t, src, tgt, 8, 36, 32)

	// Test nothing to replicate.
	result = s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	require.Equal(t, true, result["no_changes"], "%v", result)
}

// replicateAgain is a step of the simple replication: replicate, the
// same doc_count on both sides, and a history of n sessions whose newest
// checked checked revisions and found (read, wrote) found missing ones.
func (s *couchSuite) replicateAgain(t *testing.T, src, tgt string, n, checked, found int) {
	t.Helper()
	result := s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	require.Equal(t, s.dbInfo(t, src)["doc_count"], s.dbInfo(t, tgt)["doc_count"])
	requireCounts(t, history(t, result, n), counts(checked, found, found, found, 0))
}

func (s *couchSuite) sinceSeq(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	docs := s.saveDocs(t, src, makeDocs(1, 5)...)
	changes := s.changes(t, src, "")
	sinceSeq := changes[2].(map[string]any)["seq"]
	var expected []string
	for _, ch := range changes[3:] {
		expected = append(expected, ch.(map[string]any)["id"].(string))
	}
	require.Len(t, expected, 2)

	s.cancelReplication(t, s.url(src), s.url(tgt))
	result := s.replicate(t, s.url(src), s.url(tgt), map[string]any{"since_seq": sinceSeq}, "")
	s.cancelReplication(t, s.url(src), s.url(tgt))
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 0), counts(2, 2, 2, 2, 0))
	for _, d := range docs {
		if r := s.get(t, tgt, d["_id"].(string)); contains(expected, d["_id"].(string)) {
			require.Less(t, r.Status, 300, r.Raw)
			require.True(t, cmpJSON(t, d, r.Body))
		} else {
			require.Equal(t, 404, r.Status, r.Raw)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (s *couchSuite) vdu(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	docs := makeDocs(1, 7)
	docs[1]["_attachments"] = map[string]any{
		"hello.txt": map[string]any{"content_type": "text/plain", "data": "aGVsbG8gd29ybGQ="},
	}
	docs = s.saveDocs(t, src, docs...)
	s.saveDocs(t, tgt, doc{"_id": "_design/test", "language": "javascript", "validate_doc_update": `
		function(newDoc, oldDoc, userCtx, secObj) {
			if((newDoc.integer % 2) !== 0) {
				throw {forbidden: "I only like multiples of 2."};
			}
		}`})
	result := s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 0), counts(7, 7, 7, 3, 4))
	for _, d := range docs {
		r := s.get(t, tgt, d["_id"].(string))
		if n, _ := intField(d); n%2 == 0 {
			require.Less(t, r.Status, 300, r.Raw)
			require.EqualValues(t, n, r.Body["integer"])
		} else {
			require.Equal(t, 404, r.Status, r.Raw)
		}
	}
}

func (s *couchSuite) createTarget(t *testing.T) {
	src, tgt := s.dbPair(t, false) // the replication creates the target
	s.saveDocs(t, src, makeDocs(1, 2)...)
	s.replicate(t, s.url(src), s.url(tgt), map[string]any{"create_target": true}, "")
	testutil.Eventually(t, "the target's shards as the source's", func() bool {
		r := s.couchDo(t, "GET", "/"+tgt, nil)
		if r.Status != 200 {
			return false
		}
		si, ti := s.dbInfo(t, src), r.Body
		return si["doc_count"] == ti["doc_count"] &&
			reflect.DeepEqual(seqToShards(t, si["update_seq"]), seqToShards(t, ti["update_seq"]))
	})
}

func (s *couchSuite) filtered(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	ddoc := doc{"_id": "_design/mydesign", "language": "javascript", "filters": map[string]any{"myfilter": `
		function(doc, req) {
			var modulus = Number(req.query.modulus);
			var special = req.query.special;
			return (doc.integer % modulus === 0) || (doc.string === special);
		}`}}
	docs := s.saveDocs(t, src, append([]doc{ddoc}, makeDocs(1, 30)...)...)[1:]
	body := map[string]any{"filter": "mydesign/myfilter", "query_params": map[string]any{"modulus": "2", "special": "7"}}
	result := s.replicate(t, s.url(src), s.url(tgt), body, "")
	require.Equal(t, true, result["ok"])
	for _, d := range docs {
		if n, _ := intField(d); n%2 == 0 || d["string"] == "7" {
			s.requireCopy(t, tgt, d)
		} else {
			s.requireMissing(t, tgt, d["_id"].(string))
		}
	}
	// 16: 15 docs with even integer field + 1 doc with string field "7".
	requireCounts(t, history(t, result, 1), counts(16, 16, 16, 16, 0))

	newDocs := s.saveDocs(t, src, makeDocs(50, 55)...)
	result = s.replicate(t, s.url(src), s.url(tgt), body, "")
	require.Equal(t, true, result["ok"])
	for _, d := range newDocs {
		if n, _ := intField(d); n%2 == 0 {
			s.requireCopy(t, tgt, d)
		} else {
			s.requireMissing(t, tgt, d["_id"].(string))
		}
	}
	requireCounts(t, history(t, result, 2), counts(19, 19, 19, 19, 0))
}

func (s *couchSuite) filterChanged(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	ddoc := doc{"_id": "_design/mydesign", "language": "javascript", "filters": map[string]any{"myfilter": `
		function(doc, req) {
			if(doc.value < Number(req.query.maxvalue)) {
				return true;
			} else {
				return false;
			}
		}`}}
	docs := []doc{{"_id": "foo1", "value": 1}, {"_id": "foo2", "value": 2}, {"_id": "foo3", "value": 3}, {"_id": "foo4", "value": 4}}
	ddoc = s.saveDocs(t, src, append([]doc{ddoc}, docs...)...)[0]
	body := map[string]any{"filter": "mydesign/myfilter", "query_params": map[string]any{"maxvalue": "3"}}
	result := s.replicate(t, s.url(src), s.url(tgt), body, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 1), map[string]int{"docs_read": 2, "docs_written": 2, "doc_write_failures": 0})
	require.EqualValues(t, 1, s.getOK(t, tgt, "foo1")["value"])
	require.EqualValues(t, 2, s.getOK(t, tgt, "foo2")["value"])
	s.requireMissing(t, tgt, "foo3")
	s.requireMissing(t, tgt, "foo4")

	// Replication should start from scratch after the filter's code changed.
	ddoc["filters"] = map[string]any{"myfilter": "function(doc, req) { return true; }"}
	s.saveDocs(t, src, ddoc)
	result = s.replicate(t, s.url(src), s.url(tgt), body, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 1), map[string]int{"docs_read": 3, "docs_written": 3, "doc_write_failures": 0})
	for i := 1; i <= 4; i++ {
		require.EqualValues(t, i, s.getOK(t, tgt, fmt.Sprintf("foo%d", i))["value"])
	}
	s.getOK(t, tgt, "_design/mydesign")
}

func (s *couchSuite) byDocIDs(t *testing.T) {
	for _, tc := range []struct {
		initial, after []string
		conflictID     string
	}{
		{[]string{"1", "2", "10"}, []string{}, "2"},
		{[]string{"1", "2"}, []string{"7"}, "1"},
		{[]string{"1", "foo_666", "10"}, []string{"7"}, "10"},
		{[]string{"_design/foo", "8"}, []string{"foo_5"}, "8"},
		{[]string{"_design%2Ffoo", "8"}, []string{"foo_5"}, "8"},
		{[]string{}, []string{"foo_1000", "_design/foo", "1"}, "1"},
	} {
		t.Run(fmt.Sprintf("%q then %q", tc.initial, tc.after), func(t *testing.T) {
			s.byDocIDsCase(t, tc.initial, tc.after, tc.conflictID)
		})
	}
}

// replicated counts the ids of a doc_ids list that exist (the suite's
// missing ones start with foo_).
func replicated(ids []string) int {
	n := 0
	for _, id := range ids {
		if !strings.HasPrefix(id, "foo_") {
			n++
		}
	}
	return n
}

// requireDocIDsResult checks a doc_ids replication's reply: no_changes
// when it replicated nothing, else its top-level counters.
func requireDocIDsResult(t *testing.T, result map[string]any, n int) {
	t.Helper()
	require.Equal(t, true, result["ok"])
	if n == 0 {
		require.Equal(t, true, result["no_changes"], "%v", result)
		return
	}
	require.IsType(t, "", result["start_time"], "%v", result)
	require.IsType(t, "", result["end_time"], "%v", result)
	requireCounts(t, result, map[string]int{"docs_read": n, "docs_written": n, "doc_write_failures": 0})
}

func (s *couchSuite) byDocIDsCase(t *testing.T, docIDs, after []string, conflictID string) {
	src, tgt := s.dbPair(t, true)
	ddoc := doc{"_id": "_design/foo", "language": "javascript", "integer": 1}
	docs := s.saveDocs(t, src, append([]doc{ddoc}, makeDocs(1, 10)...)...)[1:]

	// requireCopies checks the listed documents: copied as they are, or
	// missing on both sides (foo_*).
	requireCopies := func(ids []string) {
		t.Helper()
		for _, id := range ids {
			if dec, err := url.PathUnescape(id); err == nil { // URI.decode
				id = dec
			}
			orig, c := s.get(t, src, id), s.get(t, tgt, id)
			if strings.HasPrefix(id, "foo_") {
				require.Equal(t, 404, orig.Status, orig.Raw)
				require.Equal(t, 404, c.Status, c.Raw)
			} else {
				require.Equal(t, 200, orig.Status, orig.Raw)
				require.Equal(t, 200, c.Status, "%s: %s", id, c.Raw)
				require.True(t, cmpJSON(t, orig.Body, c.Body), "%s != %s", orig.Raw, c.Raw)
			}
		}
	}
	// requireOnly checks that no other document was replicated.
	requireOnly := func(ids []string, total int) {
		t.Helper()
		for _, d := range docs {
			id := d["_id"].(string)
			if r := s.get(t, tgt, id); contains(ids, id) || contains(ids, url.QueryEscape(id)) {
				require.Equal(t, 200, r.Status, "%s: %s", id, r.Raw)
			} else {
				require.Equal(t, 404, r.Status, "%s: %s", id, r.Raw)
			}
		}
		testutil.Eventually(t, fmt.Sprintf("%d documents in the target", total), func() bool {
			return s.dbInfo(t, tgt)["doc_count"] == float64(total)
		})
	}

	result := s.replicate(t, s.url(src), s.url(tgt), map[string]any{"doc_ids": docIDs}, "")
	total := replicated(docIDs)
	requireDocIDsResult(t, result, total)
	requireCopies(docIDs)
	requireOnly(docIDs, total)

	result = s.replicate(t, s.url(src), s.url(tgt), map[string]any{"doc_ids": after}, "")
	totalAfter := replicated(after)
	requireDocIDsResult(t, result, totalAfter)
	requireCopies(after)
	requireOnly(append(append([]string{}, docIDs...), after...), total+totalAfter)

	// Update a source document and re-replicate (no conflict introduced).
	d := s.getOK(t, src, conflictID)
	d["integer"] = 666
	d = s.saveDocs(t, src, d)[0]
	d = s.addAttachment(t, src, d, att{"readme.txt", att1Data, "text/plain"})
	s.addAttachment(t, src, d, att{"data.dat", att2Data, "application/binary"})
	body := map[string]any{"doc_ids": []string{conflictID}}
	result = s.replicate(t, s.url(src), s.url(tgt), body, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, result, map[string]int{"docs_read": 1, "docs_written": 1, "doc_write_failures": 0})
	c := s.getOK(t, tgt, conflictID, "conflicts=true")
	require.EqualValues(t, 666, c["integer"])
	require.Regexp(t, `^4-`, c["_rev"])
	require.NotContains(t, c, "_conflicts")
	s.requireAttachment(t, tgt, c, "readme.txt", 3, "text/plain", att1Data)
	s.requireAttachment(t, tgt, c, "data.dat", 4, "application/binary", att2Data)

	// Generate a conflict using replication by doc ids.
	orig := s.getOK(t, src, conflictID)
	orig["integer"] = orig["integer"].(float64) + 100
	s.saveDocs(t, src, orig)
	c = s.getOK(t, tgt, conflictID)
	c["integer"] = c["integer"].(float64) + 1
	s.saveDocs(t, tgt, c)
	result = s.replicate(t, s.url(src), s.url(tgt), body, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, result, map[string]int{"docs_read": 2, "docs_written": 2, "doc_write_failures": 0})
	c = s.getOK(t, tgt, conflictID, "conflicts=true")
	require.Regexp(t, `^5-`, c["_rev"])
	require.Len(t, c["_conflicts"], 1)
	require.Regexp(t, `^5-`, c["_conflicts"].([]any)[0])
}

func (s *couchSuite) continuous(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	ddoc := doc{"_id": "_design/mydesign", "language": "javascript",
		"filters": map[string]any{"myfilter": "function(doc, req) { return true; }"}}
	docs := s.saveDocs(t, src, append(makeDocs(1, 25), ddoc)...)
	for i, d := range docs {
		if in(d, 10, 15) {
			docs[i] = s.addAttachment(t, src, d, att{})
		}
	}
	result := s.replicate(t, s.url(src), s.url(tgt), map[string]any{"continuous": true}, "")
	require.Equal(t, true, result["ok"])
	replID, ok := result["_local_id"].(string)
	require.True(t, ok, "no _local_id: %v", result)
	s.getTask(t, replID)
	s.waitForRepl(t, src, replID, 26)
	for _, d := range docs {
		c := s.requireCopy(t, tgt, d)
		if in(d, 10, 15) {
			s.requireAttachment(t, tgt, c, "readme.txt", 2, "text/plain", "some text")
		}
	}
	require.Equal(t, s.dbInfo(t, src)["doc_count"], s.dbInfo(t, tgt)["doc_count"])

	// Add attachments to more source docs.
	isDDoc := func(d doc) bool { return strings.HasPrefix(d["_id"].(string), "_design/") }
	for i, d := range docs {
		switch {
		case in(d, 10, 15):
			docs[i] = s.addAttachment(t, src, d, att{"data.dat", att1Data, "application/binary"})
		case isDDoc(d):
			docs[i] = s.addAttachment(t, src, d, att{})
		}
	}
	s.waitForRepl(t, src, replID, 32)
	for _, d := range docs {
		if in(d, 10, 15) || isDDoc(d) {
			c := s.getOK(t, tgt, d["_id"].(string))
			s.requireAttachment(t, tgt, c, "readme.txt", 2, "text/plain", "some text")
			if !isDDoc(d) {
				s.requireAttachment(t, tgt, c, "data.dat", 3, "application/binary", att1Data)
			}
		}
	}
	require.Equal(t, s.dbInfo(t, src)["doc_count"], s.dbInfo(t, tgt)["doc_count"])

	ddoc = docs[len(docs)-1]
	s.addAttachment(t, src, ddoc, att{"data.dat", att1Data, "application/binary"})
	s.waitForRepl(t, src, replID, 33)
	c := s.getOK(t, tgt, ddoc["_id"].(string))
	s.requireAttachment(t, tgt, c, "readme.txt", 2, "text/plain", "some text")
	s.requireAttachment(t, tgt, c, "data.dat", 3, "application/binary", att1Data)
	require.Equal(t, s.dbInfo(t, src)["doc_count"], s.dbInfo(t, tgt)["doc_count"])

	// Check creating new normal documents.
	newDocs := s.saveDocs(t, src, makeDocs(26, 35)...)
	s.waitForRepl(t, src, replID, 43)
	for _, d := range newDocs {
		s.requireCopy(t, tgt, d)
	}
	tgtInfo := s.dbInfo(t, tgt)
	require.Equal(t, s.dbInfo(t, src)["doc_count"], tgtInfo["doc_count"])

	// Delete docs from the source.
	for _, d := range []doc{newDocs[0], newDocs[6]} {
		r := s.couchDo(t, "DELETE", couchtest.DocPath(src, d["_id"].(string))+"?rev="+url.QueryEscape(d["_rev"].(string)), nil)
		require.Equal(t, 200, r.Status, r.Raw)
	}
	s.waitForRepl(t, src, replID, 45)
	s.requireMissing(t, tgt, newDocs[0]["_id"].(string))
	s.requireMissing(t, tgt, newDocs[6]["_id"].(string))
	var got []string
	for _, ch := range s.changes(t, tgt, "since="+url.QueryEscape(tgtInfo["update_seq"].(string))) {
		m := ch.(map[string]any)
		got = append(got, fmt.Sprintf("%v %v", m["id"], m["deleted"]))
	}
	require.ElementsMatch(t, []string{newDocs[0]["_id"].(string) + " true", newDocs[6]["_id"].(string) + " true"}, got)

	// Cancel the replication.
	result = s.replicate(t, s.url(src), s.url(tgt), map[string]any{"continuous": true, "cancel": true}, "")
	require.Equal(t, true, result["ok"])
	require.Equal(t, replID, result["_local_id"])
	s.saveDocs(t, src, doc{"_id": "foobar", "value": 666})
	s.waitForReplStop(t, replID)
	s.requireMissing(t, tgt, "foobar")
}

func (s *couchSuite) compressedAttachment(t *testing.T) {
	// @tag config: the attachments settings, restored when t ends.
	s.setConfig(t, "attachments", "compression_level", "8")
	s.setConfig(t, "attachments", "compressible_types", "text/*")
	src, tgt := s.dbPair(t, true)
	d := s.saveDocs(t, src, doc{"_id": "foobar"})[0]
	copies := 1 + int(math.Round(128*1024/float64(len(att1Data))))
	s.addAttachment(t, src, d, att{"readme.txt", strings.Repeat(att1Data, copies), "text/plain"})
	// Disable attachment compression.
	s.setConfigRaw(t, "attachments", "compression_level", "0")

	result := s.replicate(t, s.url(src), s.url(tgt), nil, "")
	require.Equal(t, true, result["ok"])
	requireCounts(t, history(t, result, 1), counts(1, 1, 1, 1, 0))
	r := s.get(t, tgt, "foobar", "att_encoding_info=true", "bypass_cache="+strconv.FormatInt(time.Now().UnixNano(), 10))
	require.Less(t, r.Status, 300, r.Raw)
	a := r.Body["_attachments"].(map[string]any)["readme.txt"].(map[string]any)
	require.Equal(t, "gzip", a["encoding"], "%v", a)
	require.IsType(t, float64(0), a["length"])
	require.IsType(t, float64(0), a["encoded_length"])
	require.Less(t, a["encoded_length"], a["length"])
}

func (s *couchSuite) nonAdminTarget(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	s.setSecurity(t, tgt, map[string]any{"admins": map[string]any{"names": []string{"superman"}, "roles": []string{"god"}}})
	docs := s.saveDocs(t, src, append([]doc{{"_id": "_design/foo", "language": "javascript"}}, makeDocs(1, 6)...)...)

	sess := s.login(t, joeName, joePass)
	result := s.replicate(t, s.userURL(src, joeName, joePass), s.userURL(tgt, joeName, joePass), nil, sess)
	s.logout(t, sess)
	require.Equal(t, true, result["ok"])
	// The design document's write failed.
	requireCounts(t, history(t, result, 0), map[string]int{"docs_read": len(docs), "docs_written": len(docs) - 1, "doc_write_failures": 1})
	for _, d := range docs {
		if strings.HasPrefix(d["_id"].(string), "_design/") {
			s.requireMissing(t, tgt, d["_id"].(string))
		} else {
			s.requireCopy(t, tgt, d)
		}
	}
}

func (s *couchSuite) nonAdminOrReaderSource(t *testing.T) {
	src, tgt := s.dbPair(t, true)
	s.setSecurity(t, tgt, map[string]any{
		"admins":  map[string]any{"names": []string{"superman"}, "roles": []string{"god"}},
		"readers": map[string]any{"names": []string{"john"}, "roles": []string{"secret"}},
	})
	docs := s.saveDocs(t, src, append([]doc{{"_id": "_design/foo", "language": "javascript"}}, makeDocs(1, 6)...)...)

	sess := s.login(t, joeName, joePass)
	r := s.tryReplicate(t, s.userURL(src, joeName, joePass), s.userURL(tgt, joeName, joePass), nil, sess)
	require.False(t, r.Status/100 == 2, "POST /_replicate: %d %s", r.Status, r.Raw)
	s.logout(t, sess)
	for _, d := range docs {
		s.requireMissing(t, tgt, d["_id"].(string))
	}
}

// seqToShards is the suite's seq_to_shards: the shard ranges of a
// clustered update_seq ("N-" and base64url term_to_binary of
// [{Node, [Begin, End], {Seq, Uuid, Epoch}}]) with each one's sequence
// number.
func seqToShards(t *testing.T, seq any) []string {
	t.Helper()
	s, ok := seq.(string)
	require.True(t, ok, "update_seq %v", seq)
	s = regexp.MustCompile(`^\d+-`).ReplaceAllString(s, "")
	b, err := base64.RawURLEncoding.DecodeString(s)
	require.NoError(t, err, s)
	term, err := binaryToTerm(b)
	require.NoError(t, err, s)
	var out []string
	for _, e := range term.([]any) {
		shard := e.([]any) // {Node, Range, {Seq, Uuid, Epoch}}
		pos := shard[2]
		if tup, ok := pos.([]any); ok {
			pos = tup[0]
		}
		out = append(out, fmt.Sprint(shard[1], pos))
	}
	return out
}

// binaryToTerm decodes the external term format as far as sequences
// need: integers, atoms (as strings), binaries, lists and tuples (both as
// []any), compressed or not.
func binaryToTerm(b []byte) (any, error) {
	if len(b) < 1 || b[0] != 131 {
		return nil, errors.New("etf: no version byte")
	}
	r := bytes.NewReader(b[1:])
	if len(b) > 6 && b[1] == 80 { // compressed: the size, then zlib
		zr, err := zlib.NewReader(bytes.NewReader(b[6:]))
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(raw)
	}
	return etfTerm(r)
}

func etfTerm(r *bytes.Reader) (any, error) {
	tag, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	n := func(width int) int {
		var buf [4]byte
		_, _ = io.ReadFull(r, buf[4-width:])
		return int(binary.BigEndian.Uint32(buf[:]))
	}
	bytesOf := func(k int) (string, error) {
		buf := make([]byte, k)
		_, err := io.ReadFull(r, buf)
		return string(buf), err
	}
	terms := func(k int) ([]any, error) {
		out := make([]any, 0, k)
		for range k {
			v, err := etfTerm(r)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	switch tag {
	case 97: // SMALL_INTEGER_EXT
		return int64(n(1)), nil
	case 98: // INTEGER_EXT
		return int64(int32(n(4))), nil
	case 110: // SMALL_BIG_EXT
		k, sign := n(1), n(1)
		digits, err := bytesOf(k)
		be := []byte(digits)
		for i, j := 0, len(be)-1; i < j; i, j = i+1, j-1 {
			be[i], be[j] = be[j], be[i]
		}
		v := new(big.Int).SetBytes(be)
		if sign != 0 {
			v.Neg(v)
		}
		return v.String(), err
	case 100, 118: // ATOM_EXT, ATOM_UTF8_EXT
		return bytesOf(n(2))
	case 115, 119: // SMALL_ATOM_EXT, SMALL_ATOM_UTF8_EXT
		return bytesOf(n(1))
	case 109: // BINARY_EXT
		return bytesOf(n(4))
	case 107: // STRING_EXT: a list of bytes
		s, err := bytesOf(n(2))
		out := make([]any, len(s))
		for i := range len(s) {
			out[i] = int64(s[i])
		}
		return out, err
	case 104: // SMALL_TUPLE_EXT
		return terms(n(1))
	case 105: // LARGE_TUPLE_EXT
		return terms(n(4))
	case 106: // NIL_EXT
		return []any{}, nil
	case 108: // LIST_EXT, then its tail (NIL_EXT for a proper list)
		out, err := terms(n(4))
		if err != nil {
			return nil, err
		}
		_, err = etfTerm(r)
		return out, err
	}
	return nil, fmt.Errorf("etf: tag %d", tag)
}
