package wire_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator"
)

// TestScheduledReplication: a one-shot replication document with a
// schedule between two CouchDB 3.5 databases runs when written and again
// at each period, from its checkpoint, never twice at once;
// _scheduler/docs shows its schedule with the next and last runs; a
// schedule that cannot run, or would run more often than once a minute,
// is refused with the field named; deleting the document removes its
// schedule.
func TestScheduledReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.CreateDB(t, "sched-src")
	for i := range 3 {
		couch.PutDoc(t, "sched-src", map[string]any{"_id": fmt.Sprintf("d%d", i)})
	}
	e := newService(t)
	doc := map[string]any{"source": couch.AuthDBURL("sched-src"), "target": couch.AuthDBURL("sched-tgt"),
		"create_target": true, "schedule": map[string]any{"every": replicator.ScheduleEveryMin}}

	// Refused: a continuous one, a cron that does not parse, a zone that
	// does not exist, both periods, neither, an every that is no number or
	// under a minute.
	for _, bad := range []struct {
		schedule any
		reason   string
		extra    map[string]any
	}{
		{map[string]any{"every": 60}, "continuous", map[string]any{"continuous": true}},
		{map[string]any{"cron": "61 * * * *"}, "cron", nil},
		{map[string]any{"cron": "@daily", "tz": "Mars/Olympus"}, "tz", nil},
		{map[string]any{"cron": "@daily", "every": 60}, "both", nil},
		{map[string]any{}, "neither", nil},
		{map[string]any{"every": "soon"}, "schedule.every", nil},
		{map[string]any{"every": "3600"}, "schedule.every", nil}, // a JSON number, not a string
		{map[string]any{"every": 1}, "`schedule.every` must be at least 60", nil},
		{map[string]any{"every": 59}, "`schedule.every` must be at least 60", nil},
		{"daily", "schedule", nil},
	} {
		d := map[string]any{"source": doc["source"], "target": doc["target"], "schedule": bad.schedule}
		for k, v := range bad.extra {
			d[k] = v
		}
		r := e.do("PUT", "/_replicator/bad", asAdmin, d)
		require.Equal(t, 403, r.Status, r.Raw)
		require.Contains(t, r.Raw, "schedule", r.Raw)
		require.Contains(t, r.Raw, bad.reason, r.Raw)
	}

	r := e.do("PUT", "/_replicator/sched", asAdmin, doc)
	require.Equal(t, 201, r.Status, r.Raw)
	e.waitDocState("_replicator", "sched", "completed")
	require.EqualValues(t, 3, couch.DBInfo(t, "sched-tgt")["doc_count"])
	view := e.do("GET", "/_scheduler/docs/_replicator/sched", asAdmin, nil)
	require.Equal(t, 200, view.Status, view.Raw)
	sched := view.Body["schedule"].(map[string]any)
	require.EqualValues(t, 60, sched["every"])
	require.NotNil(t, sched["next"], view.Raw)

	// Its periods a second apart in the job layer, which a document may
	// not ask, so that the test need not wait a minute for the next run.
	ch := e.do("GET", "/_scheduler/_changes?doc_id=sched&limit=1", asAdmin, nil)
	require.Equal(t, 200, ch.Status, ch.Raw)
	jobID := ch.Body["results"].([]any)[0].(map[string]any)["id"].(string)
	_, err := e.parts.Jobs.PutSchedule(context.Background(), nil, fdbjobs.Schedule{Name: replicator.ScheduleName(jobID),
		Args: replicator.Trigger{JobID: jobID}, Every: time.Second, Overlap: fdbjobs.OverlapSkip, CatchUp: fdbjobs.CatchUpOne})
	require.NoError(t, err)

	// A new document at the source: the next period's run brings it, from
	// the checkpoint (the run found it; its counters go on from it).
	couch.PutDoc(t, "sched-src", map[string]any{"_id": "later"})
	testutil.Eventually(t, "the later document replicated by a scheduled run", func() bool {
		return couch.GetDoc(t, "sched-tgt", "later") != nil
	})
	testutil.Eventually(t, "the run completed, its last period shown", func() bool {
		v := e.do("GET", "/_scheduler/docs/_replicator/sched", asAdmin, nil)
		s, _ := v.Body["schedule"].(map[string]any)
		info, _ := v.Body["info"].(map[string]any)
		if v.Body["state"] != "completed" || s == nil || s["last"] == nil || info == nil {
			return false
		}
		cp, _ := info["checkpoint"].(map[string]any)
		require.Equal(t, true, cp["found"], "a run from the checkpoint: %s", v.Raw)
		require.EqualValues(t, 4, info["docs_written"], "each document written once over the runs: %s", v.Raw)
		return true
	})

	// Deleting the document removes its schedule.
	cur := e.do("GET", "/_replicator/sched", asAdmin, nil)
	require.Equal(t, 200, e.do("DELETE", "/_replicator/sched?rev="+cur.Body["_rev"].(string), asAdmin, nil).Status)
	_, err = e.parts.Jobs.GetSchedule(context.Background(), nil, replicator.ScheduleName(jobID))
	require.ErrorIs(t, err, fdbjobs.ErrNotFound)
}
