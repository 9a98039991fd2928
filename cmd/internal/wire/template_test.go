package wire_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// Templates (issue 46 item 4), against CouchDB 3.5 with its _db_updates
// feed: one _replicator document whose source names the databases
// "tpl-user-*" of CouchDB makes one continuous replication per matching
// database into "tpl-backup-{db}", listed in _scheduler/docs under the
// template's id; a matching database created later gets its replication,
// one deleted loses it, a database that does not match gets none; the
// template's own row says how it follows the server; deleting the
// document removes its replications.
func TestTemplate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.EnsureDB(t, "_global_changes")
	for _, db := range []string{"tpl-user-a", "tpl-user-b", "tpl-other"} {
		couch.CreateDB(t, db)
		couch.AddDocs(t, db, 0, 3)
	}
	e := newService(t)
	server := strings.TrimSuffix(couch.AuthDBURL("x"), "x")
	doc := map[string]any{
		"source":        map[string]any{"url": server, "databases": "tpl-user-*"},
		"target":        server + "tpl-backup-{db}",
		"create_target": true, "continuous": true,
	}
	r := e.do("PUT", "/_replicator/users", asAdmin, doc)
	require.Equal(t, 201, r.Status, r.Raw)

	children := func() []string {
		v := e.do("GET", "/_scheduler/docs/_replicator", asAdmin, nil)
		require.Equal(t, 200, v.Status, v.Raw)
		var dbs []string
		rows, _ := v.Body["docs"].([]any)
		for _, row := range rows {
			m, _ := row.(map[string]any)
			if m["doc_id"] != "users" {
				continue
			}
			tv, _ := m["template"].(map[string]any)
			db, _ := tv["database"].(string)
			dbs = append(dbs, db)
		}
		sort.Strings(dbs)
		return dbs
	}
	testutil.Eventually(t, "a replication per matching database", func() bool {
		return strings.Join(children(), ",") == "tpl-user-a,tpl-user-b"
	})
	testutil.Eventually(t, "the matching databases replicated", func() bool {
		return docCount(couch.AuthDBURL("tpl-backup-tpl-user-a")) == 3 && docCount(couch.AuthDBURL("tpl-backup-tpl-user-b")) == 3
	})

	// The template's own row.
	v := e.do("GET", "/_scheduler/docs/_replicator/users", asAdmin, nil)
	require.Equal(t, 200, v.Status, v.Raw)
	tv, _ := v.Body["template"].(map[string]any)
	require.Equal(t, "tpl-user-*", tv["databases"], v.Raw)
	require.Equal(t, "source", tv["of"], v.Raw)
	testutil.Eventually(t, "the template follows _db_updates", func() bool {
		v := e.do("GET", "/_scheduler/docs/_replicator/users", asAdmin, nil)
		tv, _ := v.Body["template"].(map[string]any)
		return v.Body["state"] == "running" && tv["mode"] == "db_updates" && tv["replications"] == float64(2)
	})
	require.NotContains(t, v.Raw, "pass", "no password in the template's row")

	// A database created later gets its replication; one deleted loses it.
	couch.CreateDB(t, "tpl-user-c")
	couch.AddDocs(t, "tpl-user-c", 0, 2)
	couch.DeleteDB(t, "tpl-user-b")
	couch.CreateDB(t, "tpl-nomatch")
	testutil.Eventually(t, "the template follows the server", func() bool {
		return strings.Join(children(), ",") == "tpl-user-a,tpl-user-c"
	})
	testutil.Eventually(t, "the new database replicated", func() bool {
		return docCount(couch.AuthDBURL("tpl-backup-tpl-user-c")) == 2
	})

	// A child's row opens by its job id as any job.
	jobs := e.do("GET", "/_scheduler/jobs", asAdmin, nil)
	require.Contains(t, jobs.Raw, ":tpl-user-a|users")

	// Deleting the template removes its replications.
	cur := e.do("GET", "/_replicator/users", asAdmin, nil)
	require.Equal(t, 200, cur.Status)
	require.Equal(t, 200, e.do("DELETE", "/_replicator/users?rev="+cur.Body["_rev"].(string), asAdmin, nil).Status)
	testutil.Eventually(t, "the template's replications removed", func() bool { return len(children()) == 0 })
	testutil.Eventually(t, "the template ended", func() bool {
		return e.do("GET", "/_scheduler/docs/_replicator/users", asAdmin, nil).Status == 404
	})
}

// A template's bad input is refused at write time, the field named, and
// nothing is stored.
func TestTemplateBadInput(t *testing.T) {
	t.Parallel()
	e := newService(t)
	const server = "http://127.0.0.1:5984/"
	for _, c := range []struct {
		name string
		doc  map[string]any
		want string
	}{
		{"regex", map[string]any{"source": map[string]any{"url": server, "databases": map[string]any{"regex": "userdb-("}}, "target": server + "b-{db}"},
			"`source.databases.regex` is not a valid regular expression"},
		{"glob", map[string]any{"source": map[string]any{"url": server, "databases": "UserDB-*"}, "target": server + "b-{db}"},
			"`source.databases`"},
		{"type", map[string]any{"source": map[string]any{"url": server, "databases": 7}, "target": server + "b-{db}"},
			"`source.databases` must be a pattern"},
		{"both", map[string]any{"source": map[string]any{"url": server, "databases": "a*"}, "target": map[string]any{"url": server, "databases": "b*"}},
			"not both"},
		{"db without a template", map[string]any{"source": server + "a", "target": server + "b-{db}"},
			"`target` names {db}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("PUT", "/_replicator/bad-"+strings.ReplaceAll(c.name, " ", "-"), asAdmin, c.doc)
			require.Equal(t, 403, r.Status, r.Raw)
			require.Contains(t, r.Raw, c.want)
		})
	}
	r := e.do("GET", "/_replicator/_all_docs", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.NotContains(t, r.Raw, "bad-", "nothing stored")
	r = e.do("POST", "/_replicate", asAdmin, map[string]any{"source": map[string]any{"url": server, "databases": "a*"}, "target": server + "b-{db}"})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "for _replicator documents")
}
