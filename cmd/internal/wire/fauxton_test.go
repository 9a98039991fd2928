package wire_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/browsertest"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// TestFauxton drives Fauxton, CouchDB's dashboard, served by the node at
// /_utils/, in headless Chromium through every replication screen: login
// and logout, the database list, the new-replication form with and without
// credentials, the replicator-db activity list with its states, editing,
// deleting one and several documents, the _replicate activity list and
// the Active Tasks page. Each step checks what the page shows, and the
// server's state where the page acted on it.
//
// The browser opens the node as "localhost" while the peers are addressed
// as 127.0.0.1 (both loopback): Fauxton takes any endpoint whose URL holds
// the page's host name for a database of its own server.
func TestFauxton(t *testing.T) {
	kvtest.PlainStoreOnly(t, "a browser's view of the API")
	svc, f := startFauxton(t)
	b := f.b
	src := couchtest.StartPouchDB(t)
	tgt := couchtest.StartPouchDB(t, couchtest.WithAdmin("tgtadmin", "tgt-secret"))
	src.CreateDB(t, "fx-src")
	for i := range 3 {
		src.PutDoc(t, "fx-src", map[string]any{"_id": fmt.Sprintf("doc%d", i), "n": i})
	}
	tgt.CreateDB(t, "fx-tgt")

	// Login: /_utils redirects to /_utils/, which asks anonymous users to
	// log in; a wrong password is refused with Fauxton's message.
	b.Do("open /_utils", chromedp.Navigate(f.base))
	b.Do("login form", chromedp.WaitVisible(chromedp.CSS("#username")))
	f.noted("Name or password is incorrect.", func() { f.login(adminName, "wrong password") })
	b.Do("reload the login form", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#username")))
	f.login(adminName, adminPass)

	// The database list: the replicator database with its document count;
	// creating another database is refused with the server's reason.
	b.Do("database list", chromedp.WaitVisible(chromedp.CSS("table.databases")))
	b.WaitTrue("_replicator listed with 0 documents", `(() => {
		const row = [...document.querySelectorAll("table.databases tbody tr")].find(r => r.querySelector("a")?.textContent === "_replicator");
		return !!row && row.querySelectorAll("td")[2]?.textContent.trim() === "0";
	})()`)
	b.Do("create database tray", chromedp.Click(chromedp.CSS(".add-new-database-btn")),
		chromedp.WaitVisible(chromedp.CSS("#js-new-database-name")),
		chromedp.SendKeys(chromedp.CSS("#js-new-database-name"), "notes"))
	f.noted("Create database failed: ", func() { b.Do("create notes", chromedp.Click(chromedp.CSS("#js-create-database"))) })
	b.WaitTrue("the reason names _replicator", `document.querySelector(".notification-list li p")?.textContent.includes("_replicator")`)

	// A one-time replication into a peer that requires a password, through
	// the form with the target's authentication fields.
	f.newReplication(form{
		source: src.DBURL("fx-src"), target: tgt.DBURL("fx-tgt"),
		targetUser: "tgtadmin", targetPass: "tgt-secret", docID: "fx-auth",
	})
	svc.waitDocState("_replicator", "fx-auth", "completed")
	require.EqualValues(t, 3, tgt.DBInfo(t, "fx-tgt")["doc_count"])
	stored := svc.do("GET", "/_replicator/fx-auth", asAdmin, nil).Body
	require.Equal(t, map[string]any{"Authorization": basic("tgtadmin", "tgt-secret")},
		stored["target"].(map[string]any)["headers"], "the form's credentials are the target's headers")

	// A continuous replication without credentials into a new database.
	f.newReplication(form{
		source: src.DBURL("fx-src"), target: src.DBURL("fx-copy"), newTarget: true, continuous: true, docID: "fx-cont",
	})
	svc.waitDocState("_replicator", "fx-cont", "running")
	// One that cannot run: its source does not exist.
	require.Equal(t, 201, svc.do("PUT", "/_replicator/fx-missing", asAdmin,
		map[string]any{"source": src.DBURL("no-such-db"), "target": src.DBURL("fx-other")}).Status)
	svc.waitDocState("_replicator", "fx-missing", "crashing", "failed")

	// The replicator-db activity list shows each document with its state
	// (Fauxton calls crashing "retrying") and its type.
	f.refresh()
	f.waitRow("fx-auth", "completed", "One time")
	f.waitRow("fx-cont", "running", "Continuous")
	f.waitRow("fx-missing", "retrying", "One time")

	// Active Tasks lists the running replication with its endpoints.
	f.open("#/activetasks")
	b.WaitTrue("the continuous replication among the active tasks", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll("table.active-tasks tbody tr")].map(r => r.textContent);
		return rows.some(t => t.includes("replication") && t.includes(%q) && t.includes(%q));
	})()`, "From: "+src.DBURL("fx-src"), "To: "+src.DBURL("fx-copy")))

	// Editing shows the stored document in the form, the target's
	// credentials included, and saving it replaces the document.
	f.open("#/replication")
	f.waitRow("fx-auth", "completed", "One time")
	f.click("edit fx-auth", `a[href="#replication/id/fx-auth"]`)
	b.WaitTrue("fx-auth in the form", fmt.Sprintf(`(() => {
		const urls = [...document.querySelectorAll(".replication__remote-connection-url")].map(e => e.value);
		const user = document.querySelector("#replication-target-auth-username");
		const pass = document.querySelector("#replication-target-auth-password");
		return urls.length === 2 && urls[0] === %q && urls[1] === %q && user?.value === "tgtadmin" && pass?.value === "tgt-secret";
	})()`, src.DBURL("fx-src"), tgt.DBURL("fx-tgt")))
	// The document link opens it in the document editor.
	f.open("#/replication")
	f.waitRow("fx-auth", "completed", "One time")
	f.click("open fx-auth's document", `a[title="Edit replication document"][href="#/database/_replicator/fx-auth"]`)
	b.WaitTrue("fx-auth in the editor", `(() => {
		const text = document.querySelector(".ace_content")?.textContent || "";
		return text.includes('"_id": "fx-auth"') && text.includes('"_replication_state": "completed"');
	})()`)
	f.open("#/replication")
	f.waitRow("fx-cont", "running", "Continuous")
	f.click("edit fx-cont", `a[href="#replication/id/fx-cont"]`)
	b.WaitTrue("fx-cont in the form", fmt.Sprintf(`(() => {
		const urls = [...document.querySelectorAll(".replication__remote-connection-url")].map(e => e.value);
		return urls.length === 2 && urls[0] === %q && urls[1] === %q;
	})()`, src.DBURL("fx-src"), src.DBURL("fx-copy")))
	f.selectOption("REPLICATION_TYPE_ONE_TIME")
	f.start()
	f.noted("has been scheduled", func() {
		f.click("overwrite the document", ".replication__error-continue")
	})
	svc.waitDocState("_replicator", "fx-cont", "completed")
	f.refresh()
	f.waitRow("fx-cont", "completed", "One time")

	// Deleting one document, then the two left at once.
	f.click("delete fx-missing", `[title="Delete document fx-missing"]`)
	f.confirmDelete("Delete Document")
	b.WaitTrue("fx-missing gone", `!document.querySelector('[title="Delete document fx-missing"]')`)
	require.Equal(t, 404, svc.do("GET", "/_replicator/fx-missing", asAdmin, nil).Status)
	f.selectRow("fx-auth")
	f.selectRow("fx-cont")
	f.click("delete the selected documents", ".bulk-select-trash")
	f.confirmDelete("Delete Documents")
	b.WaitTrue("no documents left", `document.querySelector(".replication__empty-row")?.textContent.includes("no replicator-db activity")`)
	for _, id := range []string{"fx-auth", "fx-cont"} {
		require.Equal(t, 404, svc.do("GET", "/_replicator/"+id, asAdmin, nil).Status, id)
	}

	// The _replicate activity list shows a continuous POST /_replicate job,
	// and deleting it there cancels it.
	r := svc.do("POST", "/_replicate", asAdmin, map[string]any{
		"source": src.DBURL("fx-src"), "target": src.DBURL("fx-copy2"), "create_target": true, "continuous": true,
	})
	require.Equal(t, 202, r.Status, "%v", r.Body)
	repID, _ := r.Body["_local_id"].(string)
	require.NotEmpty(t, repID)
	f.open("#/replication/_replicate")
	f.refresh() // the lists were loaded before the job existed
	deleteJob := fmt.Sprintf(`[title="Delete job %s"]`, repID)
	b.WaitTrue("the _replicate job listed", fmt.Sprintf(`(() => {
		const a = document.querySelector(%q);
		const row = a && a.closest("tr");
		return !!row && row.textContent.includes(%q) && row.textContent.includes(%q) && row.textContent.includes("Continuous");
	})()`, deleteJob, src.DBURL("fx-src"), src.DBURL("fx-copy2")))
	f.click("delete the _replicate job", deleteJob)
	f.noted("has been deleted", func() { f.confirmDelete("Delete Replication Job") })
	b.WaitTrue("the job gone", fmt.Sprintf(`!document.querySelector(%q)`, deleteJob))
	require.Equal(t, 200, svc.do("GET", "/_scheduler/jobs", asAdmin, nil).Status)
	require.Empty(t, svc.do("GET", "/_scheduler/jobs", asAdmin, nil).Body["jobs"])

	// Logout: back to the login form, and the session is gone.
	f.click("log out", "a.faux-logout__link")
	b.Do("login form after logout", chromedp.WaitVisible(chromedp.CSS("#username")))
	closed := browsertest.Run(b, "the session after logout", chromedp.Evaluate[bool](
		`fetch("../_session").then(r => r.json()).then(s => s.userCtx.name === null)`, chromedp.EvalAwaitPromise))
	require.True(t, closed, "GET /_session names no user after logout")

	// Every request the pages made was answered, and refused only where
	// the test asked for it.
	var refused []string
	for _, line := range b.Requests() {
		if f := strings.Fields(line); len(f) < 2 || f[1] < "200" || f[1] >= "400" { // "failed" too
			refused = append(refused, line)
		}
	}
	require.ElementsMatch(t, []string{
		"POST 401 /_session", "PUT 400 /notes", // the wrong password, a database that is not a replicator database
		"GET 404 /_replicator/fx-auth", "GET 404 /_replicator/fx-cont", // the form checks that a new document id is free
	}, refused, "all requests:\n%s", strings.Join(b.Requests(), "\n"))
}

// startFauxton starts a browser and a service that serves Fauxton, and
// returns the service and the dashboard's driver (the browser opens the
// node as "localhost").
func startFauxton(t *testing.T) (*service, *fauxton) {
	t.Helper()
	b := browsertest.Start(t) // skips when there is no browser
	dir, err := couchtest.FauxtonDir()
	require.NoError(t, err)
	svc := newService(t, func(m map[string]map[string]string) { m["chttpd"]["utils_dir"] = dir })
	return svc, &fauxton{b: b, base: strings.Replace(svc.url, "127.0.0.1", "localhost", 1) + "/_utils"}
}

// fauxton drives the dashboard's pages.
type fauxton struct {
	b    *browsertest.Browser
	base string // the node's /_utils URL
}

// open opens a route of the dashboard (a URL fragment such as
// "#/replication") without reloading the page.
func (f *fauxton) open(fragment string) {
	f.b.Do("go to "+fragment, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.hash = %q", fragment)))
}

func (f *fauxton) login(name, pass string) {
	f.b.Do("log in as "+name,
		chromedp.SendKeys(chromedp.CSS("#username"), name),
		chromedp.SendKeys(chromedp.CSS("#password"), pass),
		chromedp.Click(chromedp.CSS("#submit")))
}

// noted runs act and waits for a new notification holding text (in the
// notification center, which keeps them after their pop-ups are gone).
func (f *fauxton) noted(text string, act func()) {
	count := fmt.Sprintf(`[...document.querySelectorAll(".notification-list li p")].filter(p => p.textContent.includes(%q)).length`, text)
	before := browsertest.Run(f.b, "count notifications", chromedp.Evaluate[int](count))
	act()
	f.b.WaitTrue("notification "+text, fmt.Sprintf("%s > %d", count, before))
	// Close the pop-ups (headless, the page has no focus, so they stay),
	// which would otherwise cover the buttons below them.
	f.b.WaitTrue("pop-ups closed", `(() => {
		document.querySelectorAll(".Toastify__toast").forEach(t => t.click());
		return document.querySelectorAll(".Toastify__toast").length === 0;
	})()`)
}

// form is what newReplication fills in.
type form struct {
	source, target         string
	newTarget, continuous  bool
	targetUser, targetPass string
	docID                  string
}

// newReplication fills in and submits the new-replication form, and waits
// until Fauxton says the replication is scheduled and shows the list.
func (f *fauxton) newReplication(fm form) {
	f.open("#/replication/_create")
	f.b.Do("new replication form", chromedp.WaitVisible(chromedp.CSS("#replication-source")))
	f.selectOption("REPLICATION_SOURCE_REMOTE")
	f.b.Do("source URL", chromedp.SendKeys(chromedp.CSS(".replication__remote-connection-url"), fm.source))
	if fm.newTarget {
		f.selectOption("REPLICATION_TARGET_NEW_REMOTE_DATABASE")
	} else {
		f.selectOption("REPLICATION_TARGET_EXISTING_REMOTE_DATABASE")
	}
	f.b.Do("target URL", chromedp.SendKeys(
		chromedp.JSPath(`document.querySelectorAll(".replication__remote-connection-url")[1]`), fm.target))
	if fm.targetUser != "" {
		f.setSelect("#select-replication-target-auth", "BASIC_AUTH")
		f.b.Do("target credentials",
			chromedp.SendKeys(chromedp.CSS("#replication-target-auth-username"), fm.targetUser),
			chromedp.SendKeys(chromedp.CSS("#replication-target-auth-password"), fm.targetPass))
	}
	if fm.continuous {
		f.selectOption("REPLICATION_TYPE_CONTINUOUS")
	}
	if fm.docID != "" {
		f.b.Do("document id", chromedp.SendKeys(chromedp.CSS(".replication__doc-name-input"), fm.docID))
	}
	f.noted("has been scheduled", f.start)
	f.b.WaitTrue("back to the list", `location.hash === "#/replication"`)
}

// selectOption chooses value in the form's select that offers it (some of
// the form's selects share an id, so they are found by their options).
func (f *fauxton) selectOption(value string) {
	f.choose(value, `[...document.querySelectorAll("select")].find(s => [...s.options].some(o => o.value === v))`)
}

// setSelect chooses value in the select sel.
func (f *fauxton) setSelect(sel, value string) {
	f.choose(value, fmt.Sprintf("document.querySelector(%q)", sel))
}

// choose sets the value of the select that the expression find (which can
// use v, the value) returns, as a user's choice does: with a change event.
func (f *fauxton) choose(value, find string) {
	f.b.WaitTrue("choose "+value, fmt.Sprintf(`((v) => {
		const sel = %s;
		if (!sel || ![...sel.options].some(o => o.value === v)) return false;
		sel.value = v;
		sel.dispatchEvent(new Event("change", {bubbles: true}));
		return true;
	})(%q)`, find, value))
}

// click clicks the element sel finds once it is shown and enabled. The
// click is the element's own (not a mouse event at its coordinates), so
// the pop-ups and modal fade-ins of the page cannot take it.
func (f *fauxton) click(what, sel string) {
	f.clickExpr(what, fmt.Sprintf("document.querySelector(%q)", sel))
}

// clickExpr is click for the element a JavaScript expression returns.
func (f *fauxton) clickExpr(what, expr string) {
	f.b.WaitTrue(what, fmt.Sprintf(`(() => {
		const e = %s;
		if (!e || e.offsetParent === null || e.disabled) return false;
		e.click();
		return true;
	})()`, expr))
}

// start clicks "Start Replication" once it is enabled.
func (f *fauxton) start() { f.click("start replication", "#replicate") }

// refresh reloads the activity list.
func (f *fauxton) refresh() { f.click("refresh the list", ".faux__refresh-link") }

// waitRow waits until the replicator-db activity list shows document id
// with state and type.
func (f *fauxton) waitRow(id, state, typ string) {
	f.b.WaitTrue(fmt.Sprintf("row %s %s %s", id, state, typ), fmt.Sprintf(`(() => {
		const a = document.querySelector('[title="Delete document %s"]');
		const row = a && a.closest("tr");
		if (!row) return false;
		const cells = [...row.querySelectorAll("td")].map(c => c.textContent.trim());
		return cells.includes(%q) && row.querySelector(".replication__row-status")?.textContent.trim() === %q;
	})()`, id, typ, state))
}

// selectRow ticks the checkbox of a document's row.
func (f *fauxton) selectRow(id string) {
	f.clickExpr("select "+id, fmt.Sprintf(
		`document.querySelector('[title="Delete document %s"]')?.closest("tr").querySelector("input[type=checkbox]")`, id))
}

// confirmDelete clicks the delete modal's button.
func (f *fauxton) confirmDelete(button string) {
	f.clickExpr("confirm "+button, fmt.Sprintf(
		`[...document.querySelectorAll(".modal-footer button")].find(b => b.textContent.includes(%q))`, button))
}

// basic is a Basic Authorization header value.
func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}
