package wire_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// Many replications, few active (one slot), against a real CouchDB 3.5:
// continuous replications from user databases into one shared database
// park once caught up and idle (shown running, caught up, parked, not in
// _active_tasks), and a document written to a user database reaches the
// shared one: with _global_changes created, through the server's
// _db_updates feed (the admin's replications); for a user who is not a
// server admin, through the poll that replaces it, which the job's view
// explains. Bob's replication, whose source gives no feed, parks only to
// give its slot to replications that wait for it (scheduler's doc.go,
// "When a replication parks"): it is started first, and gives way when
// the others are created.
func TestParkedReplicationsWakeOnChange(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	e := newServiceWith(t, func(c *scheduler.Config) {
		c.ParkAfter, c.WatchPollInterval = 300*time.Millisecond, 200*time.Millisecond
		// One slot; rotation keeps a stopped job out of it at least a poll
		// cycle, so a source polled may park while the others wait.
		c.MaxJobs, c.MinRunTime = 1, c.WatchPollInterval
	})
	couch.EnsureDB(t, "_global_changes")
	couch.CreateDB(t, "shared")
	couch.AddUser(t, "bob", "bobpass")
	for i, db := range []string{"u1", "u2", "bob"} { // documents 0-1, 10-11, 20-21
		couch.CreateDB(t, db)
		couch.AddDocs(t, db, 10*i, 2)
	}
	couch.SetSecurity(t, "bob", map[string]any{"members": map[string]any{"names": []string{"bob"}}})
	bobSource := func() string {
		u, err := url.Parse(couch.DBURL("bob"))
		require.NoError(t, err)
		u.User = url.UserPassword("bob", "bobpass")
		return u.String()
	}()
	create := func(doc, src string) {
		r := e.do("PUT", "/_replicator/"+doc, asAdmin, map[string]any{"source": src, "target": couch.AuthDBURL("shared"), "continuous": true})
		require.Equal(t, 201, r.Status, r.Raw)
	}
	state := func(doc string) (string, map[string]any) {
		r := e.do("GET", "/_scheduler/docs/_replicator/"+doc, asAdmin, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		info, _ := r.Body["info"].(map[string]any)
		s, _ := r.Body["state"].(string)
		return s, info
	}
	create("rb", bobSource)
	testutil.Eventually(t, "rb running and caught up", func() bool {
		s, info := state("rb")
		return s == "running" && info != nil && info["caught_up"] == true
	})
	create("r1", couch.AuthDBURL("u1"))
	create("r2", couch.AuthDBURL("u2"))
	parked := func(doc string) map[string]any {
		s, info := state(doc)
		if s != "running" || info == nil || info["parked"] == nil {
			return nil
		}
		return info
	}
	for _, doc := range []string{"r1", "r2", "rb"} {
		testutil.Eventually(t, doc+" parked", func() bool { return parked(doc) != nil })
	}
	testutil.Eventually(t, "6 documents in the shared database", func() bool { return docCount(couch.AuthDBURL("shared")) == 6 })
	info := parked("r1")
	require.Equal(t, true, info["caught_up"])
	require.Nil(t, info["stall"])
	r := e.do("GET", "/_active_tasks", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.List, "a parked replication runs no task")

	// The admin's replications: _db_updates wakes r1 alone.
	testutil.Eventually(t, "r1's source followed by _db_updates", func() bool {
		i := parked("r1")
		w, _ := i["parked"].(map[string]any)["watch"].(map[string]any)
		return w != nil && w["mode"] == "db_updates"
	})
	written := time.Now()
	couch.AddDocs(t, "u1", 2, 1)
	testutil.Eventually(t, "u1's new document in the shared database", func() bool { return docCount(couch.AuthDBURL("shared")) == 7 })
	t.Logf("a write to a parked replication's source reached its target in %v (_db_updates)", time.Since(written).Round(time.Millisecond))
	r = e.do("GET", "/_scheduler/docs/_replicator/r1", asAdmin, nil)
	woken, _ := r.Body["info"].(map[string]any)["last_woken"].(map[string]any)
	require.NotNil(t, woken, r.Raw)
	require.Contains(t, woken["cause"], "_db_updates")
	r = e.do("GET", "/_scheduler/docs/_replicator/r2", asAdmin, nil)
	require.Nil(t, r.Body["info"].(map[string]any)["last_woken"], "u2 did not change: %s", r.Raw)

	// Bob's replication: _db_updates is for server admins, so its source
	// is polled, and its view says why.
	testutil.Eventually(t, "rb's source polled", func() bool {
		i := parked("rb")
		w, _ := i["parked"].(map[string]any)["watch"].(map[string]any)
		return w != nil && w["mode"] == "poll" && strings.Contains(w["reason"].(string), "401")
	})
	// A probe of /_up may meet an injected fault (FDBREP_KV_FAULTS) and
	// answer 503 storage_unavailable, as it should; the next one answers.
	testutil.Eventually(t, "/_up answers 200", func() bool {
		r = e.do("GET", "/_up", nil, nil)
		return r.Status == 200
	})
	require.Equal(t, map[string]any{"db_updates": float64(1), "polled_refused": float64(1), "polled_missing": float64(0), "starting": float64(0)},
		r.Body["watches"], "how the node's watches watch, without naming the servers: /_up answers anyone")
	written = time.Now()
	couch.AddDocs(t, "bob", 22, 1)
	testutil.Eventually(t, "bob's new document in the shared database", func() bool { return docCount(couch.AuthDBURL("shared")) == 8 })
	t.Logf("a write to a parked replication's source reached its target in %v (poll, every 200 ms here)", time.Since(written).Round(time.Millisecond))
	require.NotContains(t, e.logs.String(), "bobpass")
}
