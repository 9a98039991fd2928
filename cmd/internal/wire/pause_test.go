package wire_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// TestPauseResume: between two CouchDB 3.5 databases, a continuous
// replication document set "paused": true stops (with a final checkpoint:
// what it had replicated is recorded), shows paused in _scheduler/docs,
// and replicates nothing while paused; "paused": false resumes it from
// its checkpoint. A POST /_replicate replication is paused and resumed
// by POST /_scheduler/jobs/{id}/_pause and _resume, by its owner or an
// admin only; bad input is refused with the field named.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.CreateDB(t, "p-src")
	for i := range 5 {
		couch.PutDoc(t, "p-src", map[string]any{"_id": fmt.Sprintf("d%d", i)})
	}
	e := newService(t)
	doc := map[string]any{"source": couch.AuthDBURL("p-src"), "target": couch.AuthDBURL("p-tgt"),
		"create_target": true, "continuous": true}

	r := e.do("PUT", "/_replicator/p", asAdmin, doc)
	require.Equal(t, 201, r.Status, r.Raw)
	testutil.Eventually(t, "the first documents replicated", func() bool { return docCount(couch.AuthDBURL("p-tgt")) == 5 })

	// Paused by its document.
	doc["_rev"], doc["paused"] = r.Body["rev"], true
	r = e.do("PUT", "/_replicator/p", asAdmin, doc)
	require.Equal(t, 201, r.Status, r.Raw)
	view := e.waitDocState("_replicator", "p", "paused")
	info, _ := view["info"].(map[string]any)
	require.NotNil(t, info["paused_since"], "%v", view)
	testutil.Eventually(t, "the run stopped", func() bool {
		a := e.do("GET", "/_active_tasks", asAdmin, nil)
		return a.Status == 200 && len(a.List) == 0
	})
	testutil.Eventually(t, "its run's stop logged as a pause", func() bool {
		return strings.Contains(e.logs.String(), "paused, by its document")
	})
	couch.PutDoc(t, "p-src", map[string]any{"_id": "while-paused"})
	require.Nil(t, couch.GetDoc(t, "p-tgt", "while-paused"), "nothing replicated while paused")
	listed := e.do("GET", "/_scheduler/docs?states=paused", asAdmin, nil)
	require.Equal(t, 200, listed.Status, listed.Raw)
	require.EqualValues(t, 1, listed.Body["total_rows"], listed.Raw)

	// Resumed: from its checkpoint.
	doc["_rev"], doc["paused"] = r.Body["rev"], false
	r = e.do("PUT", "/_replicator/p", asAdmin, doc)
	require.Equal(t, 201, r.Status, r.Raw)
	testutil.Eventually(t, "the document written while paused replicated", func() bool {
		return couch.GetDoc(t, "p-tgt", "while-paused") != nil
	})
	testutil.Eventually(t, "its run's start shown", func() bool {
		v := e.do("GET", "/_scheduler/docs/_replicator/p", asAdmin, nil)
		info, _ := v.Body["info"].(map[string]any)
		cp, _ := info["checkpoint"].(map[string]any)
		if cp == nil {
			return false
		}
		require.Equal(t, true, cp["found"], "resumed from its checkpoint: %s", v.Raw)
		return true
	})

	// Refused: paused of the wrong type; paused in a POST /_replicate.
	bad := map[string]any{"source": doc["source"], "target": doc["target"], "paused": "yes"}
	r = e.do("PUT", "/_replicator/bad", asAdmin, bad)
	require.Equal(t, 403, r.Status, r.Raw)
	require.Contains(t, r.Raw, "`paused` must be a boolean")
	r = e.do("POST", "/_replicate", asAdmin, map[string]any{"source": doc["source"], "target": doc["target"], "paused": true})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "_pause")

	// A POST /_replicate replication, by its owner.
	couch.CreateDB(t, "p-tgt2")
	post := map[string]any{"source": couch.AuthDBURL("p-src"), "target": couch.AuthDBURL("p-tgt2"), "continuous": true}
	r = e.do("POST", "/_replicate", asAlice, post)
	require.Equal(t, 202, r.Status, r.Raw)
	id := r.Body["_local_id"].(string)
	path := "/_scheduler/jobs/" + url.PathEscape(id)
	require.Equal(t, 404, e.do("POST", path+"/_pause", asBob, nil).Status, "another user's job is missing to them")
	r = e.do("POST", path+"/_pause", asAlice, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "paused", r.Body["state"])
	r = e.do("POST", path+"/_pause", asAlice, nil)
	require.Equal(t, 200, r.Status, "pausing a paused one changes nothing: %s", r.Raw)
	testutil.Eventually(t, "its job shown paused", func() bool {
		j := e.do("GET", path, asAdmin, nil)
		return j.Status == 200 && j.Body["state"] == "paused"
	})
	couch.PutDoc(t, "p-src", map[string]any{"_id": "while-paused-2"})
	r = e.do("POST", path+"/_resume", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "pending", r.Body["state"])
	testutil.Eventually(t, "resumed: it replicates again", func() bool {
		return couch.GetDoc(t, "p-tgt2", "while-paused-2") != nil
	})

	// A document's replication is paused by its document.
	ch := e.do("GET", "/_scheduler/docs/_replicator/p", asAdmin, nil)
	require.Equal(t, 200, ch.Status, ch.Raw)
	r = e.do("POST", "/_scheduler/jobs/"+url.PathEscape(ch.Body["id"].(string))+"/_pause", asAdmin, nil)
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, `set \"paused\": true`)
	require.Equal(t, 404, e.do("POST", "/_scheduler/jobs/no-such-job/_resume", asAdmin, nil).Status)
}
