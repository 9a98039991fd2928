package wire_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// TestUsersSeeTheirReplications: what _scheduler/jobs, _scheduler/jobs/{id},
// _active_tasks and _scheduler/docs show a server admin, the owner of
// replications, another user and an anonymous client, with the real
// control plane and node. Non-admins see their own jobs (CouchDB shows
// these views to server admins only), paged among themselves; a
// database's _scheduler/docs rows are its members', as in CouchDB 4.x;
// no row ever carries a password.
func TestUsersSeeTheirReplications(t *testing.T) {
	t.Parallel()
	e := newService(t)
	for _, db := range []string{"src", "a1", "a2", "b1"} {
		require.Equal(t, 201, e.do("PUT", "/"+url.PathEscape(db+"/_replicator"), asAdmin, nil).Status)
	}
	rep := func(target string) map[string]any {
		return map[string]any{"source": e.adminDBURL("src/_replicator"), "target": e.adminDBURL(target + "/_replicator"), "continuous": true}
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/alice_rep", asAlice, rep("a1")).Status)
	require.Equal(t, 201, e.do("PUT", "/_replicator/bob_rep", asBob, rep("b1")).Status)
	r := e.do("POST", "/_replicate", asAlice, rep("a2"))
	require.Equal(t, 202, r.Status, r.Raw)
	aliceTransient := r.Body["_local_id"].(string)
	e.waitDocState("_replicator", "alice_rep", "running")
	e.waitDocState("_replicator", "bob_rep", "running")
	testutil.Eventually(t, "three running tasks", func() bool {
		return len(e.do("GET", "/_active_tasks", asAdmin, nil).List) == 3
	})

	// targets lists the target databases of a view's rows.
	targets := func(rows []any) []string {
		var out []string
		for _, row := range rows {
			m := row.(map[string]any)
			tgt, _ := m["target"].(string)
			require.NotContains(t, tgt, adminPass, "a row shows a password")
			require.NotContains(t, m["source"], adminPass, "a row shows a password")
			u, err := url.Parse(tgt)
			require.NoError(t, err, tgt)
			out = append(out, strings.TrimSuffix(strings.Trim(u.Path, "/"), "/_replicator"))
		}
		return out
	}
	ids := func(rows []any) []string {
		var out []string
		for _, row := range rows {
			out = append(out, row.(map[string]any)["doc_id"].(string))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		c     *creds
		jobs  []string // targets of _scheduler/jobs and _active_tasks rows
		docs  []string // doc_id of _scheduler/docs rows
		jobOK bool     // may read alice's transient job by id
	}{
		{"admin", asAdmin, []string{"a1", "a2", "b1"}, []string{"alice_rep", "bob_rep"}, true},
		{"owner", asAlice, []string{"a1", "a2"}, []string{"alice_rep", "bob_rep"}, true},
		{"other user", asBob, []string{"b1"}, []string{"alice_rep", "bob_rep"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", "/_scheduler/jobs", tc.c, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			require.ElementsMatch(t, tc.jobs, targets(r.Body["jobs"].([]any)))
			require.EqualValues(t, len(tc.jobs), r.Body["total_rows"])

			r = e.do("GET", "/_active_tasks", tc.c, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			require.ElementsMatch(t, tc.jobs, targets(r.List))

			r = e.do("GET", "/_scheduler/jobs/"+url.PathEscape(aliceTransient), tc.c, nil)
			if tc.jobOK {
				require.Equal(t, 200, r.Status, r.Raw)
				require.Equal(t, aliceTransient, r.Body["id"])
			} else {
				requireError(t, r, 404, "not_found")
			}

			for _, p := range []string{"/_scheduler/docs", "/_scheduler/docs/_replicator"} {
				r = e.do("GET", p, tc.c, nil)
				require.Equal(t, 200, r.Status, r.Raw)
				require.Equal(t, tc.docs, ids(r.Body["docs"].([]any)))
				targets(r.Body["docs"].([]any))
			}
			r = e.do("GET", "/_scheduler/docs/_replicator/alice_rep", tc.c, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			require.Equal(t, "running", r.Body["state"])
		})
	}

	t.Run("anonymous", func(t *testing.T) {
		for _, p := range []string{"/_scheduler/jobs", "/_scheduler/jobs/" + url.PathEscape(aliceTransient), "/_active_tasks",
			"/_scheduler/docs", "/_scheduler/docs/_replicator", "/_scheduler/docs/_replicator/alice_rep"} {
			requireError(t, e.do("GET", p, anon, nil), 401, "unauthorized")
		}
	})

	t.Run("paging counts the user's own jobs", func(t *testing.T) {
		all := e.do("GET", "/_scheduler/jobs", asAlice, nil).Body["jobs"].([]any)
		for skip, want := range all {
			r := e.do("GET", "/_scheduler/jobs?limit=1&skip="+strconv.Itoa(skip), asAlice, nil)
			require.Equal(t, 200, r.Status, r.Raw)
			require.EqualValues(t, 2, r.Body["total_rows"])
			require.EqualValues(t, skip, r.Body["offset"])
			// The same job (its info may have moved on: it runs).
			page := r.Body["jobs"].([]any)
			require.Len(t, page, 1)
			require.Equal(t, want.(map[string]any)["id"], page[0].(map[string]any)["id"])
		}
		r := e.do("GET", "/_scheduler/jobs?skip=5", asAlice, nil)
		require.Empty(t, r.Body["jobs"])
		require.EqualValues(t, 2, r.Body["total_rows"])
		// start_key starts at the second of alice's jobs, whatever bob's.
		second := all[1].(map[string]any)
		key, err := json.Marshal([]any{second["id"], second["job_id"]})
		require.NoError(t, err)
		r = e.do("GET", "/_scheduler/jobs?start_key="+url.QueryEscape(string(key)), asAlice, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		page := r.Body["jobs"].([]any)
		require.Len(t, page, 1)
		// The same job; its info may have moved on since, as above.
		require.Equal(t, second["id"], page[0].(map[string]any)["id"])
		require.Equal(t, second["job_id"], page[0].(map[string]any)["job_id"])
		require.EqualValues(t, 2, r.Body["total_rows"])
	})

	t.Run("members of the database", func(t *testing.T) {
		require.Equal(t, 200, e.do("PUT", "/_replicator/_security", asAdmin, map[string]any{"members": map[string]any{"names": []any{aliceName}}}).Status)
		t.Cleanup(func() { require.Equal(t, 200, e.do("PUT", "/_replicator/_security", asAdmin, map[string]any{}).Status) })
		for _, p := range []string{"/_scheduler/docs", "/_scheduler/docs/_replicator", "/_scheduler/docs/_replicator/bob_rep"} {
			r := e.do("GET", p, asBob, nil)
			requireError(t, r, 403, "forbidden")
			require.Equal(t, 200, e.do("GET", p, asAlice, nil).Status)
		}
		// Bob still sees his own jobs, whatever their database.
		require.Equal(t, []string{"b1"}, targets(e.do("GET", "/_scheduler/jobs", asBob, nil).Body["jobs"].([]any)))
	})

	t.Run("a deleted document's job leaves its owner's views", func(t *testing.T) {
		r := e.do("GET", "/_replicator/alice_rep", asAlice, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		r = e.do("DELETE", "/_replicator/alice_rep?rev="+url.QueryEscape(r.Body["_rev"].(string)), asAlice, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		// The job and its index entries go in the deletion's transaction.
		r = e.do("GET", "/_scheduler/jobs", asAlice, nil)
		require.Equal(t, []string{"a2"}, targets(r.Body["jobs"].([]any)))
		require.EqualValues(t, 1, r.Body["total_rows"])
		require.Equal(t, []string{"a2"}, targets(e.do("GET", "/_active_tasks", asAlice, nil).List))
		r = e.do("GET", "/_scheduler/jobs", asBob, nil)
		require.Equal(t, []string{"b1"}, targets(r.Body["jobs"].([]any)))
		require.EqualValues(t, 1, r.Body["total_rows"])
		require.ElementsMatch(t, []string{"a2", "b1"}, targets(e.do("GET", "/_active_tasks", asAdmin, nil).List))
	})
}

// TestMembersSeeOthersSchedulerRowsAsDocuments: another member of a
// replicator database reads a user's _scheduler/docs rows as he reads the
// user's documents, against a real CouchDB 3.5: no remote user name in
// the endpoints (the owner and admins see it, password hidden), none of
// the target's refusals (failed_docs, the stall's detail) that quote the
// documents it refused, and error reasons without URL userinfo.
func TestMembersSeeOthersSchedulerRowsAsDocuments(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	// A crash backs off a minute: alice_denied stays crashing while the
	// views are read, rather than running again between its retries.
	e := newServiceWith(t, func(c *scheduler.Config) { c.MinBackoff, c.MaxBackoff = time.Minute, time.Minute })
	const remote, remotePass, personal = "alice_remote", "alice-remote-pw", "Jane Roe, jane.roe@example.com"
	couch.AddUser(t, remote, remotePass)
	couch.CreateDB(t, "few")
	couch.AddDocs(t, "few", 0, 5)
	couch.CreateDB(t, "guarded")
	couch.PutDoc(t, "guarded", map[string]any{"_id": "_design/guard", "validate_doc_update": `function(doc) {
		if (doc._id.indexOf("doc-") === 0) { throw({forbidden: "no documents for ` + personal + `"}); }
	}`})
	for _, db := range []string{"few", "guarded"} {
		require.Equal(t, 200, couch.Request(t, "PUT", "/"+db+"/_security",
			map[string]any{"members": map[string]any{"names": []any{remote}}}, nil))
	}
	withUser := func(db, pass string) string {
		u, err := url.Parse(couch.DBURL(db))
		require.NoError(t, err)
		u.User = url.UserPassword(remote, pass)
		return u.String()
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/alice_refused", asAlice, map[string]any{
		"source": withUser("few", remotePass), "continuous": true,
		"target": map[string]any{"url": couch.DBURL("guarded"), "auth": map[string]any{"basic": map[string]any{"username": remote, "password": remotePass}}},
	}).Status)
	require.Equal(t, 201, e.do("PUT", "/_replicator/alice_denied", asAlice, map[string]any{
		"source": withUser("few", "wrong"), "target": withUser("elsewhere", remotePass), "continuous": true,
	}).Status)
	testutil.Eventually(t, "the refused documents listed", func() bool {
		i, _ := e.waitDocState("_replicator", "alice_refused", "running")["info"].(map[string]any)
		failed, _ := i["failed_docs"].([]any)
		return len(failed) == 5 && i["stall"] != nil
	})
	t.Logf("denied: %v", e.waitDocState("_replicator", "alice_denied", "crashing"))

	views := []string{"/_scheduler/docs", "/_scheduler/docs/_replicator",
		"/_scheduler/docs/_replicator/alice_refused", "/_scheduler/docs/_replicator/alice_denied"}
	// rowsOf returns the rows of a view by document id.
	rowsOf := func(c *creds, path string) (string, map[string]map[string]any) {
		r := e.do("GET", path, c, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		rows := map[string]map[string]any{}
		if list, ok := r.Body["docs"].([]any); ok {
			for _, row := range list {
				rows[row.(map[string]any)["doc_id"].(string)] = row.(map[string]any)
			}
		} else {
			rows[r.Body["doc_id"].(string)] = r.Body
		}
		return r.Raw, rows
	}
	for _, path := range views {
		raw, rows := rowsOf(asBob, path)
		for _, leak := range []string{remote, remotePass, "Jane Roe", "jane.roe", "failed_docs", "*****"} {
			require.NotContains(t, raw, leak, path)
		}
		for id, row := range rows {
			require.True(t, strings.HasPrefix(row["source"].(string), couch.URL()+"/few"), "%s %s: %v", path, id, row["source"])
			require.True(t, strings.HasPrefix(row["target"].(string), couch.URL()+"/"), "%s %s: %v", path, id, row["target"])
			info := row["info"].(map[string]any)
			switch id {
			case "alice_refused":
				require.Equal(t, "running", row["state"])
				require.Equal(t, float64(5), info["doc_write_failures"])
				stall := info["stall"].(map[string]any)
				require.Equal(t, "target_refusing_writes", stall["reason"])
				require.NotContains(t, stall, "detail")
			case "alice_denied":
				require.Equal(t, "crashing", row["state"])
				require.Equal(t, "unauthorized", info["error"], raw)
			}
		}
		// Bob's own read of the documents shows no more.
		doc := e.do("GET", "/_replicator/alice_refused", asBob, nil)
		require.Equal(t, 200, doc.Status, doc.Raw)
		require.NotContains(t, doc.Raw, remote)
	}

	// The owner, a server admin and an admin of the database see the
	// rows whole: the remote user (password hidden), the refusals.
	require.Equal(t, 200, e.do("PUT", "/_replicator/_security", asAdmin,
		map[string]any{"admins": map[string]any{"names": []any{bobName}}}).Status)
	t.Cleanup(func() { require.Equal(t, 200, e.do("PUT", "/_replicator/_security", asAdmin, map[string]any{}).Status) })
	for _, c := range []*creds{asAlice, asAdmin, asBob} {
		raw, rows := rowsOf(c, "/_scheduler/docs/_replicator/alice_refused")
		require.Contains(t, raw, "no documents for "+personal, c.Name)
		require.Contains(t, rows["alice_refused"]["source"], remote+":*****@", c.Name)
		require.Contains(t, rows["alice_refused"]["target"], remote+":*****@", c.Name)
		require.NotContains(t, raw, remotePass, c.Name)
	}
}

// Two users post the same continuous replication (same endpoints and
// credentials: the same replication id): the second is answered at once,
// running as CouchDB answers a replication posted again, while its own job
// waits (crashing, duplicate_job, without naming the other user) and takes
// over once the first is cancelled. Before, the second POST waited for a
// run that could not start as long as the first ran.
func TestSameReplicationPostedByTwoUsers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.CreateDB(t, "two-src")
	e := newService(t)
	post := map[string]any{"source": couch.AuthDBURL("two-src"), "target": couch.AuthDBURL("two-tgt"),
		"create_target": true, "continuous": true}
	a := e.do("POST", "/_replicate", asAlice, post)
	require.Equal(t, 202, a.Status, a.Raw)
	b := e.do("POST", "/_replicate", asBob, post)
	require.Equal(t, 202, b.Status, b.Raw)
	require.Equal(t, a.Body["_local_id"], b.Body["_local_id"], "the same replication")
	jobs := e.do("GET", "/_scheduler/jobs", asBob, nil)
	require.Equal(t, 200, jobs.Status, jobs.Raw)
	require.Contains(t, jobs.Raw, "duplicate_job")
	require.NotContains(t, jobs.Raw, "alice", "the other user is not named")

	cancel := map[string]any{"replication_id": a.Body["_local_id"], "cancel": true}
	require.Equal(t, 200, e.do("POST", "/_replicate", asAlice, cancel).Status)
	couch.PutDoc(t, "two-src", map[string]any{"_id": "after"})
	testutil.Eventually(t, "bob's replication took over", func() bool { return couch.GetDoc(t, "two-tgt", "after") != nil })
}
