package wire_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestFauxtonUsers drives Fauxton as CouchDB's users use it: a server
// admin makes alice a member of _replicator on the Permissions page, and
// alice, who is not a server admin, sees the database's replications with
// their states in the activity list. (Fauxton opens Active Tasks for
// server admins only; what users get from _active_tasks is checked by
// TestUsersSeeTheirReplications.)
func TestFauxtonUsers(t *testing.T) {
	kvtest.PlainStoreOnly(t, "a browser's view of the API")
	svc, f := startFauxton(t)
	b := f.b
	peer := couchtest.StartPouchDB(t)
	peer.CreateDB(t, "fx-src")
	peer.PutDoc(t, "fx-src", map[string]any{"_id": "doc"})

	for _, rep := range []struct {
		c  *creds
		id string // the document's id and the target database
	}{{asAlice, "fx-alice"}, {asBob, "fx-bob"}} {
		r := svc.do("PUT", "/_replicator/"+rep.id, rep.c, map[string]any{
			"source": peer.DBURL("fx-src"), "target": peer.DBURL(rep.id), "create_target": true, "continuous": true,
		})
		require.Equal(t, 201, r.Status, r.Raw)
		svc.waitDocState("_replicator", rep.id, "running")
	}

	// The admin adds alice to the members on the Permissions page.
	b.Do("open /_utils", chromedp.Navigate(f.base))
	b.Do("login form", chromedp.WaitVisible(chromedp.CSS("#username")))
	f.login(adminName, adminPass)
	b.Do("database list", chromedp.WaitVisible(chromedp.CSS("table.databases")))
	f.open("#/database/_replicator/permissions")
	members := ".permissions__members .permissions-add-user"
	b.Do("members form", chromedp.WaitVisible(chromedp.CSS(members+" input")),
		chromedp.SendKeys(chromedp.CSS(members+" input"), aliceName))
	f.noted("Database permissions has been updated.", func() { f.click("add alice", members+" button") })
	require.Equal(t, map[string]any{"members": map[string]any{"names": []any{aliceName}}},
		svc.do("GET", "/_replicator/_security", asAdmin, nil).Body)
	f.logout()

	// alice: both documents of the database she is a member of.
	f.userLogin(aliceName, alicePass)
	f.open("#/replication")
	f.waitRow("fx-alice", "running", "Continuous")
	f.waitRow("fx-bob", "running", "Continuous")
	f.logout()

	// No request failed; some were refused: alice's database list
	// (_all_dbs is for server admins).
	for _, line := range b.Requests() {
		fs := strings.Fields(line)
		require.True(t, len(fs) >= 3 && fs[1] < "500", "request failed: %s\nall requests:\n%s", line, strings.Join(b.Requests(), "\n"))
	}
}

// userLogin logs in a user who is not a server admin and waits for the
// page Fauxton opens then: the database list, which stays empty (listing
// databases is for server admins).
func (f *fauxton) userLogin(name, pass string) {
	f.login(name, pass)
	f.b.WaitTrue("logged in as "+name, `!location.hash.includes("login") && !document.querySelector("#username") &&
		[...document.querySelectorAll(".faux-header__breadcrumbs, h1, .faux-header")].some(e => e.textContent.includes("Databases"))`)
}

// logout logs out and waits for the login form.
func (f *fauxton) logout() {
	f.click("log out", "a.faux-logout__link")
	f.b.Do("login form after logout", chromedp.WaitVisible(chromedp.CSS("#username")))
}
