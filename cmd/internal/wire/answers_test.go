package wire_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// TestAnswersAsCouchDBs records, for the same scenarios, the answers of a
// real CouchDB 3.5's replicator (replicating between its own databases)
// and of fdbrep (replicating between databases of that CouchDB), and
// compares them field by field: the same keys, recursively, each with the
// same JSON type, and the same values but for those that legitimately
// differ between two servers (ids holding server uuids, timestamps, pids,
// node names, sequences: see looseValue). The differences fdbrep makes on
// purpose are in answersAllowed, each pointing at its docs/COMPAT.md row;
// any other fails the test after a table of all of them.
func TestAnswersAsCouchDBs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	kvtest.PlainStoreOnly(t, "response shapes beside CouchDB's")
	couch := couchtest.StartCouchDB(t) // before the service: its cleanup runs last
	couch.NoReplicatorJitter(t)
	a := &answers{couch: couch, cc: &creds{Name: couchtest.CouchAdmin, Pass: couchtest.CouchPassword},
		e: newServiceWith(t, func(c *scheduler.Config) {
			// Counters shown at once; a crashing job waits, as CouchDB's
			// does (30 s), so both have crashed once when compared.
			c.ProgressInterval = 50 * time.Millisecond
			c.MinBackoff, c.MaxBackoff = time.Minute, 2*time.Minute
		})}
	couch.CreateDB(t, "src")
	couch.AddDocs(t, "src", 0, 3)
	couch.EnsureDB(t, "_replicator") // CouchDB creates it a moment after its start
	couch.AddUser(t, "wrongpw", "right")

	// The documents of scenarios (a) to (c) go in at once on both sides;
	// each scenario then waits for its own.
	docs := map[string]map[string]any{
		"cont":  {"source": couch.AuthDBURL("src"), "create_target": true, "continuous": true},
		"once":  {"source": couch.AuthDBURL("src"), "create_target": true},
		"nosrc": {"source": couch.AuthDBURL("nosuch"), "create_target": true},
	}
	for _, id := range slices.Sorted(maps.Keys(docs)) {
		c, f := a.both(t, "PUT", "/_replicator/"+id, func(side string) any {
			d := maps.Clone(docs[id])
			d["target"] = couch.AuthDBURL(id + "-tgt-" + side)
			return d
		})
		require.Equal(t, 201, c.Status, c.Raw)
		require.Equal(t, 201, f.Status, f.Raw)
		a.compare(t, "PUT /_replicator/"+id, c, f)
	}

	t.Run("continuous", func(t *testing.T) {
		// Running, with the source's 3 documents written.
		caughtUp := func(r resp) bool {
			info, _ := r.Body["info"].(map[string]any)
			return r.Body["state"] == "running" && info["docs_written"] == 3.0
		}
		c, f := a.wait(t, "GET", "/_scheduler/docs/_replicator/cont", caughtUp)
		a.compare(t, "GET /_scheduler/docs/_replicator/cont", c, f)
		c, f = a.both(t, "GET", "/_scheduler/jobs", nil)
		a.compareRow(t, "GET /_scheduler/jobs: jobs[doc_id=cont]", c.Body["jobs"], f.Body["jobs"], "cont")
		c, f = a.both(t, "GET", "/_active_tasks", nil)
		a.compareRow(t, "GET /_active_tasks: [doc_id=cont]", c.List, f.List, "cont")
	})
	t.Run("one-shot", func(t *testing.T) {
		completed := func(r resp) bool { return r.Body["state"] == "completed" }
		c, f := a.wait(t, "GET", "/_scheduler/docs/_replicator/once", completed)
		a.compare(t, "GET /_scheduler/docs/_replicator/once", c, f)
		c, f = a.both(t, "GET", "/_replicator/once", nil)
		a.compare(t, "GET /_replicator/once", c, f)
	})
	t.Run("crashing", func(t *testing.T) {
		crashing := func(r resp) bool { return r.Body["state"] == "crashing" }
		c, f := a.wait(t, "GET", "/_scheduler/docs/_replicator/nosrc", crashing)
		a.compare(t, "GET /_scheduler/docs/_replicator/nosrc", c, f)
		id := func(r resp) string {
			s, _ := r.Body["id"].(string)
			require.NotEmpty(t, s, r.Raw)
			return url.PathEscape(s)
		}
		c, f = a.get(t, "/_scheduler/jobs/"+id(c), "/_scheduler/jobs/"+id(f))
		a.compare(t, "GET /_scheduler/jobs/{id of nosrc}", c, f)
	})
	t.Run("invalid", func(t *testing.T) {
		for _, x := range []struct {
			id  string
			doc map[string]any
		}{
			{"notgt", map[string]any{"source": couch.AuthDBURL("src")}},
			{"badurl", map[string]any{"source": "http://admin:pass@[::1/x", "target": couch.AuthDBURL("badurl-tgt")}},
			{"ftp", map[string]any{"source": "ftp://127.0.0.1/src", "target": couch.AuthDBURL("ftp-tgt")}},
		} {
			id := x.id
			c, f := a.both(t, "PUT", "/_replicator/"+id, func(string) any { return x.doc })
			require.Equal(t, 403, c.Status, "CouchDB refuses it: %s", c.Raw)
			a.compare(t, "PUT /_replicator/"+id, c, f)
			c, f = a.both(t, "GET", "/_scheduler/docs/_replicator/"+id, nil)
			a.compare(t, "GET /_scheduler/docs/_replicator/"+id, c, f)
		}
	})
	t.Run("_replicate", func(t *testing.T) {
		body := func(src string, extra ...any) func(string) any {
			return func(side string) any {
				d := map[string]any{"source": couch.AuthDBURL(src), "target": couch.AuthDBURL("rep-tgt-" + side), "create_target": true}
				for i := 0; i+1 < len(extra); i += 2 {
					d[extra[i].(string)] = extra[i+1]
				}
				return d
			}
		}
		for _, x := range []struct {
			what   string
			body   func(string) any
			status int // CouchDB's
		}{
			{"one-shot", body("src"), 200},
			{"missing source", body("nosuch"), 500},
			{"cancel, not running", body("src", "continuous", true, "cancel", true), 404},
			{"cancel by id, not running", func(string) any { return map[string]any{"replication_id": "nope", "cancel": true} }, 404},
			// An endpoint refusing the login: CouchDB's 500, not a 401 its
			// client takes for its own login failing (a user of its own:
			// failed logins lock an account out).
			{"wrong endpoint password", func(side string) any {
				return map[string]any{"source": strings.Replace(couch.AuthDBURL("src"), couchtest.CouchAdmin+":"+couchtest.CouchPassword, "wrongpw:nope", 1),
					"target": couch.AuthDBURL("rep-tgt-" + side)}
			}, 500},
		} {
			c, f := a.both(t, "POST", "/_replicate", x.body)
			require.Equal(t, x.status, c.Status, "CouchDB's answer to %s: %s", x.what, c.Raw)
			a.compare(t, "POST /_replicate ("+x.what+")", c, f)
		}
	})
	t.Run("states", func(t *testing.T) {
		// CouchDB 3.x's states of documents without a job, which monitoring
		// scripts ask for, and names in any case.
		for _, path := range []string{
			"/_scheduler/docs?states=error",
			"/_scheduler/docs?states=initializing",
			"/_scheduler/docs/_replicator?states=error,initializing",
			"/_scheduler/docs/_replicator?states=Error",
		} {
			c, f := a.both(t, "GET", path, nil)
			require.Equal(t, 200, c.Status, "CouchDB's answer to %s: %s", path, c.Raw)
			a.compare(t, "GET "+path, c, f)
		}
		// _scheduler/jobs takes no states: both ignore it.
		c, f := a.both(t, "GET", "/_scheduler/jobs?states=error", nil)
		require.Equal(t, 200, c.Status, c.Raw)
		require.Equal(t, 200, f.Status, f.Raw)
		require.Equal(t, c.Body["total_rows"], f.Body["total_rows"])
	})
	t.Run("HEAD", func(t *testing.T) {
		for _, path := range []string{"/_scheduler/jobs", "/_scheduler/docs", "/_scheduler/docs/_replicator/once", "/_active_tasks", "/_membership"} {
			c, f := a.both(t, "HEAD", path, nil)
			require.Equal(t, 200, c.Status, "CouchDB's answer to HEAD %s", path)
			require.Equal(t, c.Status, f.Status, "HEAD %s", path)
		}
	})
	t.Run("arrived completed", func(t *testing.T) {
		// A document replicated in from another server, marked completed:
		// CouchDB shows it from its fields, and so does fdbrep.
		c, f := a.both(t, "PUT", "/_replicator/imported", func(side string) any {
			return map[string]any{"source": couch.AuthDBURL("src"), "target": couch.AuthDBURL("imported-tgt-" + side),
				"_replication_state": "completed", "_replication_state_time": "2024-05-01T10:00:00Z",
				"_replication_stats": map[string]any{"revisions_checked": 12, "missing_revisions_found": 12, "docs_read": 12,
					"docs_written": 12, "doc_write_failures": 0, "checkpointed_source_seq": "12-g1AAAA"}}
		})
		require.Equal(t, 201, c.Status, c.Raw)
		require.Equal(t, 201, f.Status, f.Raw)
		completed := func(r resp) bool { return r.Body["state"] == "completed" }
		c, f = a.wait(t, "GET", "/_scheduler/docs/_replicator/imported", completed)
		a.compare(t, "GET /_scheduler/docs/_replicator/imported", c, f)
	})
	t.Run("errors", func(t *testing.T) {
		for _, path := range []string{
			"/_scheduler/jobs/nope",
			"/_scheduler/docs/_replicator/nope",
			"/_scheduler/docs?states=bogus",
			"/_scheduler/docs/_replicator?states=bogus",
			"/_scheduler/docs?limit=x",
			"/_scheduler/docs/_replicator?limit=x",
			"/_scheduler/jobs?limit=x",
			"/_scheduler/jobs?skip=x",
		} {
			c, f := a.both(t, "GET", path, nil)
			require.Contains(t, []int{400, 404}, c.Status, "CouchDB's answer to %s: %s", path, c.Raw)
			a.compare(t, "GET "+path, c, f)
		}
	})
	a.report(t)
}

// answers sends the same requests to CouchDB and fdbrep and collects how
// their answers differ.
type answers struct {
	couch *couchtest.Server
	cc    *creds // CouchDB's admin
	e     *service
	diffs []difference
}

// difference is one way an fdbrep answer differs from CouchDB's.
type difference struct {
	what, path string
	kind       string // missing (in fdbrep), extra (in fdbrep), type, value, length
	couch      string
	fdbrep     string
	allowed    string // the docs/COMPAT.md row that allows it
}

// allowed is a difference fdbrep makes on purpose: in the answers to
// requests starting with what, a field (the path, or its last elements
// after a dot) differing in kind; compat names its docs/COMPAT.md row.
type allowed struct{ what, field, kind, compat string }

// answersAllowed are the differences docs/COMPAT.md lists, each naming
// its row (section › first column); nothing else may differ.
var answersAllowed = []allowed{
	{"", "source", "value", endpointsRow}, // the user name stays, the password is *****
	{"", "target", "value", endpointsRow},
	// First revisions read from the feed (include_docs) need no _bulk_get.
	{"", "bulk_get_docs", "value", bulkGetRow},
	{"", "bulk_get_attempts", "value", bulkGetRow},
	// CouchDB 3.x's is null for the first 30 s of a run.
	{"", "changes_pending", "type", "Replication › changes_pending"},
	// null in _scheduler/docs (as 4.x; 3.x's rows have none) and in
	// _scheduler/jobs.
	{"GET /_scheduler/docs/", "pid", "extra", "Replication › pid"},
	{"GET /_scheduler/jobs", "pid", "type", "Replication › pid"},
	{"GET /_scheduler/jobs", "job_id", "extra", jobsRow},
	{"GET /_scheduler/jobs", "state", "extra", jobsRow},
	// The database's name: there are no shards.
	{"GET /_active_tasks", "database", "value", "Replication › database of an _active_tasks entry"},
	// Every field of a row, as 4.x.
	{"GET /_scheduler/docs/_replicator/once", "id", "type", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/once", "node", "extra", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/once", "pid", "extra", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/once", "source_proxy", "extra", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/once", "target_proxy", "extra", completedRowsRow},
	// source_seq and through_seq too, as 4.x.
	{"GET /_scheduler/docs/_replicator/once", "info.source_seq", "extra", completedCountersRow},
	{"GET /_scheduler/docs/_replicator/once", "info.through_seq", "extra", completedCountersRow},
	{"GET /_replicator/once", "_replication_stats.source_seq", "extra", completedCountersRow},
	{"GET /_replicator/once", "_replication_stats.through_seq", "extra", completedCountersRow},
	// {"error": tag, "reason": …} in both views, where 3.x has
	// {"error": "tag: reason"} in _scheduler/docs and null in
	// _scheduler/jobs.
	{"GET /_scheduler/docs/_replicator/nosrc", "info.error", "value", infoRow},
	{"GET /_scheduler/docs/_replicator/nosrc", "info.reason", "extra", infoRow},
	{"GET /_scheduler/jobs/{id of nosrc}", "info", "type", infoRow},
	// A document that arrived completed: the same fields as a completed
	// one's row, and a start time.
	{"GET /_scheduler/docs/_replicator/imported", "node", "extra", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/imported", "source_proxy", "extra", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/imported", "target_proxy", "extra", completedRowsRow},
	{"GET /_scheduler/docs/_replicator/imported", "start_time", "type", endedElsewhereRow},
	// CouchDB 3.5 counts every document whatever states selects.
	{"GET /_scheduler/docs", "total_rows", "value", "Scheduler views › total_rows, offset"},
	// null, as 4.x.
	{"GET /_scheduler/docs/_replicator/nosrc", "node", "type", nodeRow},
	{"GET /_scheduler/jobs/{id of nosrc}", "node", "type", nodeRow},
	// fdbrep's additions to every info and _active_tasks entry.
	{"", "caught_up", "extra", syncRow},
	{"", "caught_up_since", "extra", syncRow},
	{"", "last_progress", "extra", syncRow},
	{"", "throughput", "extra", syncRow},
	{"", "eta_sec", "extra", syncRow},
	{"", "stall", "extra", syncRow},
	{"", "failed_docs", "extra", "Scheduler views › failed_docs"},
	// Where the run started: from a checkpoint, or from the beginning.
	{"", "info.checkpoint", "extra", "Replication › Where a run started"},
	// Back in the queue after the crash, as 4.x.
	{"GET /_scheduler/jobs/{id of nosrc}", "history[type=pending]", "extra", "Replication › Events in _scheduler/jobs' history"},
}

// The docs/COMPAT.md rows answersAllowed names more than once.
const (
	endpointsRow         = "Replication › Endpoints (source, target) in _scheduler/jobs, _scheduler/docs and _active_tasks"
	bulkGetRow           = "Replication › bulk_get_docs, bulk_get_attempts"
	jobsRow              = "Replication › _scheduler/jobs entries"
	completedRowsRow     = "Replication › _scheduler/docs rows of completed documents"
	completedCountersRow = "Replication › Counters of a completed replication"
	infoRow              = "Replication › info of a crashing or failed job"
	nodeRow              = "Replication › node of a job that is not running"
	endedElsewhereRow    = "Replicating replicator databases › A document marked completed or failed that has no job here"
	syncRow              = "Scheduler views › Is it in sync? (caught_up, caught_up_since, last_progress, throughput, eta_sec, stall)"
)

// both sends method path to CouchDB and fdbrep as their admins, with body
// (nil: none) made for each side ("couch", "fdbrep").
func (a *answers) both(t *testing.T, method, path string, body func(side string) any) (c, f resp) {
	t.Helper()
	var cb, fb any
	if body != nil {
		cb, fb = body("couch"), body("fdbrep")
	}
	c = testutil.Do(t, method, a.couch.URL()+path, a.cc, cb)
	f = a.e.do(method, path, asAdmin, fb)
	return c, f
}

// get reads a path on each side.
func (a *answers) get(t *testing.T, couchPath, fdbrepPath string) (c, f resp) {
	t.Helper()
	return testutil.Do(t, "GET", a.couch.URL()+couchPath, a.cc, nil), a.e.do("GET", fdbrepPath, asAdmin, nil)
}

// wait reads path on each side until cond holds of both answers.
func (a *answers) wait(t *testing.T, method, path string, cond func(resp) bool) (c, f resp) {
	t.Helper()
	testutil.Eventually(t, "CouchDB's "+path, func() bool {
		c = testutil.Do(t, method, a.couch.URL()+path, a.cc, nil)
		return cond(c)
	})
	testutil.Eventually(t, "fdbrep's "+path, func() bool {
		f = a.e.do(method, path, asAdmin, nil)
		return cond(f)
	})
	return c, f
}

// compareRow compares the rows of two lists whose doc_id is docID.
func (a *answers) compareRow(t *testing.T, what string, c, f any, docID string) {
	t.Helper()
	row := func(list any) any {
		l, _ := list.([]any)
		for _, r := range l {
			if m, ok := r.(map[string]any); ok && m["doc_id"] == docID {
				return m
			}
		}
		return nil
	}
	cr, fr := row(c), row(f)
	require.NotNil(t, cr, "%s: CouchDB lists %s: %v", what, docID, c)
	require.NotNil(t, fr, "%s: fdbrep lists %s: %v", what, docID, f)
	a.walk(what, "", cr, fr)
}

// compare compares two answers: statuses and bodies.
func (a *answers) compare(t *testing.T, what string, c, f resp) {
	t.Helper()
	if c.Status != f.Status {
		a.diffs = append(a.diffs, difference{what: what, path: "(status)", kind: "value",
			couch: fmt.Sprint(c.Status), fdbrep: fmt.Sprint(f.Status)})
	}
	var cb, fb any
	require.NoError(t, json.Unmarshal([]byte(c.Raw), &cb), "CouchDB's %s: %s", what, c.Raw)
	require.NoError(t, json.Unmarshal([]byte(f.Raw), &fb), "fdbrep's %s: %s", what, f.Raw)
	a.walk(what, "", cb, fb)
}

// looseValue are the keys whose values legitimately differ between two
// servers: only their presence and JSON type are compared.
var looseValue = map[string]bool{
	// ids holding a server's uuid, revisions of different documents
	"id": true, "replication_id": true, "_replication_id": true, "session_id": true, "_local_id": true,
	"_rev": true, "rev": true,
	// timestamps
	"start_time": true, "end_time": true, "last_updated": true, "timestamp": true,
	"_replication_state_time": true, "started_on": true, "updated_on": true,
	// processes and nodes
	"pid": true, "node": true, "process_status": true,
	// sequences, opaque and server-specific
	"source_seq": true, "through_seq": true, "checkpointed_source_seq": true, "source_last_seq": true,
	"start_last_seq": true, "end_last_seq": true, "recorded_seq": true,
	// prose: fdbrep's reasons name the field at fault and show endpoints
	// as the views do; error names (error) are compared
	"reason": true,
}

// sameValue says whether two values of key count as equal: fdbrep's
// targets name its own databases.
func sameValue(key string, c, f any) bool {
	if s, ok := f.(string); ok && key == "target" {
		f = strings.ReplaceAll(s, "-tgt-fdbrep", "-tgt-couch")
	}
	return c == f
}

// walkMembers compares the members of c and f by name: one only in c is
// missing, one only in f extra, and the others are walked; at names
// their paths.
func (a *answers) walkMembers(what string, c, f map[string]any, at func(string) string) {
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if _, ok := f[k]; !ok {
			a.diffs = append(a.diffs, difference{what: what, path: at(k), kind: "missing", couch: short(c[k]), fdbrep: "-"})
			continue
		}
		a.walk(what, at(k), c[k], f[k])
	}
	for _, k := range slices.Sorted(maps.Keys(f)) {
		if _, ok := c[k]; !ok {
			a.diffs = append(a.diffs, difference{what: what, path: at(k), kind: "extra", couch: "-", fdbrep: short(f[k])})
		}
	}
}

// walk compares c and f at path, recursively.
func (a *answers) walk(what, path string, c, f any) {
	add := func(path, kind string, c, f string) {
		a.diffs = append(a.diffs, difference{what: what, path: path, kind: kind, couch: c, fdbrep: f})
	}
	if jsonType(c) != jsonType(f) {
		add(path, "type", short(c), short(f))
		return
	}
	switch cv := c.(type) {
	case map[string]any:
		a.walkMembers(what, cv, f.(map[string]any), func(k string) string { return strings.TrimPrefix(path+"."+k, ".") })
	case []any:
		fv := f.([]any)
		if ce, fe, ok := eventsByType(cv, fv); ok {
			// A job's history: how many events it holds depends on how
			// often each server retried; compare the newest of each type.
			a.walkMembers(what, ce, fe, func(typ string) string { return fmt.Sprintf("%s[type=%s]", path, typ) })
			return
		}
		if len(cv) != len(fv) {
			add(path, "length", fmt.Sprint(len(cv)), fmt.Sprint(len(fv)))
		}
		for i := range min(len(cv), len(fv)) {
			a.walk(what, fmt.Sprintf("%s[%d]", path, i), cv[i], fv[i])
		}
	default:
		key := path[strings.LastIndex(path, ".")+1:]
		if !looseValue[key] && !sameValue(key, c, f) {
			add(path, "value", short(c), short(f))
		}
	}
}

// eventsByType maps two lists of history events (objects with a "type",
// newest first) to the newest event of each type; ok is false unless
// both lists are such.
func eventsByType(c, f []any) (ce, fe map[string]any, ok bool) {
	byType := func(l []any) map[string]any {
		m := map[string]any{}
		for _, x := range l {
			e, isObj := x.(map[string]any)
			typ, isStr := e["type"].(string)
			if !isObj || !isStr {
				return nil
			}
			if _, seen := m[typ]; !seen {
				m[typ] = e
			}
		}
		return m
	}
	ce, fe = byType(c), byType(f)
	return ce, fe, len(ce) > 0 && len(fe) > 0
}

// report logs every difference as a table, saying which COMPAT row allows
// it, and fails on those none does.
func (a *answers) report(t *testing.T) {
	t.Helper()
	var bad int
	for i := range a.diffs {
		d := &a.diffs[i]
		for _, al := range answersAllowed {
			if strings.HasPrefix(d.what, al.what) && d.kind == al.kind &&
				(d.path == al.field || strings.HasSuffix(d.path, "."+al.field)) {
				d.allowed = al.compat
			}
		}
		if d.allowed == "" {
			bad++
		}
	}
	if len(a.diffs) == 0 {
		t.Log("fdbrep answered as CouchDB 3.5 in every scenario")
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d differences from CouchDB 3.5, %d not in docs/COMPAT.md:\n", len(a.diffs), bad)
	row := "%-44s %-36s %-7s %-44s %-44s %s\n"
	fmt.Fprintf(&b, row, "request", "field", "kind", "CouchDB 3.5", "fdbrep", "COMPAT row")
	for _, d := range a.diffs {
		allowed := d.allowed
		if allowed == "" {
			allowed = "NONE"
		}
		fmt.Fprintf(&b, row, d.what, d.path, d.kind, d.couch, d.fdbrep, allowed)
	}
	t.Log(b.String())
	require.Zero(t, bad, "fdbrep's answers differ from CouchDB's where docs/COMPAT.md does not say so (rows marked NONE)")
}

// jsonType names v's JSON type.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// short is v as JSON, cut to fit the table.
func short(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	if s := strings.TrimSuffix(b.String(), "\n"); len(s) <= 44 {
		return s
	}
	return b.String()[:41] + "..."
}
