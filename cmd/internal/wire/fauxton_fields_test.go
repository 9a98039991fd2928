package wire_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestFauxtonOwnFields drives Fauxton over documents with fdbrep's own
// fields (issue 46: a paused replication, a template, a scheduled one),
// against CouchDB 3.5: the activity list shows each with its state; the
// document editor opens each and saves it with every field kept, and the
// replication keeps what the field says; the replication form, which
// builds a new document from what it shows, refuses a template's server
// URL itself, and drops "paused" from a document it saves (docs/COMPAT.md,
// "Fauxton at /_utils").
func TestFauxtonOwnFields(t *testing.T) {
	kvtest.PlainStoreOnly(t, "a browser's view of the API")
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	svc, f := startFauxton(t)
	b := f.b
	couch := couchtest.StartCouchDB(t)
	couch.EnsureDB(t, "_global_changes")
	for _, db := range []string{"fxf-user-a", "fxf-user-b"} {
		couch.CreateDB(t, db)
		couch.AddDocs(t, db, 0, 3)
	}
	server := strings.TrimSuffix(couch.AuthDBURL("x"), "x")
	docs := map[string]map[string]any{
		"fxf-paused": {"source": couch.AuthDBURL("fxf-user-a"), "target": couch.AuthDBURL("fxf-p"),
			"create_target": true, "continuous": true, "paused": true},
		"fxf-template": {"source": map[string]any{"url": server, "databases": "fxf-user-*"},
			"target": server + "fxf-copy-{db}", "create_target": true, "continuous": true},
		"fxf-scheduled": {"source": couch.AuthDBURL("fxf-user-a"), "target": couch.AuthDBURL("fxf-s"),
			"create_target": true, "schedule": map[string]any{"cron": "0 3 * * *", "tz": "UTC"}},
	}
	for id, d := range docs {
		r := svc.do("PUT", "/_replicator/"+id, asAdmin, d)
		require.Equal(t, 201, r.Status, r.Raw)
	}
	svc.waitDocState("_replicator", "fxf-paused", "paused")
	svc.waitDocState("_replicator", "fxf-scheduled", "completed") // its first run, when written
	replications := func() any {
		tv, _ := svc.do("GET", "/_scheduler/docs/_replicator/fxf-template", asAdmin, nil).Body["template"].(map[string]any)
		return tv["replications"]
	}
	testutil.Eventually(t, "the template's two replications", func() bool { return replications() == float64(2) })

	b.Do("open /_utils", chromedp.Navigate(f.base))
	b.Do("login form", chromedp.WaitVisible(chromedp.CSS("#username")))
	f.login(adminName, adminPass)
	b.Do("database list", chromedp.WaitVisible(chromedp.CSS("table.databases")))

	// The activity list: each with its state (a paused one as "paused",
	// fdbrep's own state, which Fauxton shows as it is).
	f.open("#/replication")
	f.waitRow("fxf-paused", "paused", "Continuous")
	f.waitRow("fxf-template", "running", "Continuous")
	f.waitRow("fxf-scheduled", "completed", "One time")

	// The document editor opens each and saves it as it is: a new
	// revision with every field, and the replication as the field says.
	for id, d := range docs {
		f.open("#/database/_replicator/" + id)
		b.WaitTrue(id+" in the editor", fmt.Sprintf(`(document.querySelector(".ace_content")?.textContent || "").includes('"_id": "%s"')`, id))
		before := svc.do("GET", "/_replicator/"+id, asAdmin, nil).Body
		f.click("save "+id, "button.save-doc")
		var after map[string]any
		testutil.Eventually(t, id+" saved", func() bool {
			after = svc.do("GET", "/_replicator/"+id, asAdmin, nil).Body
			return after["_rev"] != before["_rev"]
		})
		b.WaitTrue("back to the documents", `location.hash.includes("_all_docs")`) // where Fauxton goes after a save
		for field := range d {
			require.Equal(t, before[field], after[field], "%s: %s kept", id, field)
		}
	}
	require.Equal(t, "paused", svc.waitDocState("_replicator", "fxf-paused", "paused")["state"])
	require.Equal(t, float64(2), replications())
	sched, _ := svc.do("GET", "/_scheduler/docs/_replicator/fxf-scheduled", asAdmin, nil).Body["schedule"].(map[string]any)
	require.Equal(t, "0 3 * * *", sched["cron"], "the schedule kept")

	// The form: a template's source is a server's URL, which Fauxton
	// refuses itself; the document stays as it is.
	f.open("#/replication")
	f.click("edit fxf-template", `a[href="#replication/id/fxf-template"]`)
	b.WaitTrue("fxf-template in the form", `document.querySelectorAll(".replication__remote-connection-url").length === 2`)
	before := svc.do("GET", "/_replicator/fxf-template", asAdmin, nil).Body["_rev"]
	f.noted("Database name is missing.", f.start)
	require.Equal(t, before, svc.do("GET", "/_replicator/fxf-template", asAdmin, nil).Body["_rev"])

	// A paused replication saved through the form loses "paused", which
	// the form does not show: it runs.
	f.open("#/replication")
	f.click("edit fxf-paused", `a[href="#replication/id/fxf-paused"]`)
	b.WaitTrue("fxf-paused in the form", `document.querySelectorAll(".replication__remote-connection-url").length === 2`)
	f.start()
	f.noted("has been scheduled", func() { f.click("overwrite the document", ".replication__error-continue") })
	require.NotContains(t, svc.do("GET", "/_replicator/fxf-paused", asAdmin, nil).Body, "paused")
	svc.waitDocState("_replicator", "fxf-paused", "running", "crashing")
}
