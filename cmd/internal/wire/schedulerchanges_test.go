package wire_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// TestSchedulerChanges: GET /_scheduler/_changes gives the replications'
// state changes in order, with a seq to read on from (normal, longpoll,
// continuous and eventsource), filtered by database, document and state;
// a user sees their own replications' changes, an anonymous client none.
func TestSchedulerChanges(t *testing.T) {
	t.Parallel()
	e := newService(t)
	dead := map[string]any{"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b", "continuous": true,
		"retries_per_request": 0}
	require.Equal(t, 201, e.do("PUT", "/_replicator/c1", asAdmin, dead).Status)
	e.waitDocState("_replicator", "c1", "crashing")

	// rows reads the changes from since with query, until one of doc's
	// has state.
	type row struct {
		Seq, ID, Database, State, From string
		DocID                          string `json:"doc_id"`
		Time                           string
	}
	read := func(c *creds, query string) ([]row, string, int) {
		t.Helper()
		r := e.do("GET", "/_scheduler/_changes?"+query, c, nil)
		if r.Status != 200 {
			return nil, "", r.Status
		}
		b, err := json.Marshal(r.Body["results"])
		require.NoError(t, err)
		var rows []row
		require.NoError(t, json.Unmarshal(b, &rows))
		return rows, r.Body["last_seq"].(string), r.Status
	}
	var c1 []string
	testutil.Eventually(t, "c1's changes up to crashing", func() bool {
		rows, _, _ := read(asAdmin, "doc_id=c1")
		c1 = nil
		for _, r := range rows {
			require.Equal(t, "_replicator", r.Database)
			require.NotEmpty(t, r.Time)
			c1 = append(c1, r.State)
		}
		return len(c1) > 0 && c1[len(c1)-1] == "crashing"
	})
	require.Contains(t, c1, "running", "it ran before it crashed: %v", c1)

	// Read on from the last seq: nothing new but what comes; a longpoll
	// waits for it.
	_, last, _ := read(asAdmin, "since=now")
	got := make(chan []row, 1)
	go func() {
		rows, _, _ := read(asAdmin, "feed=longpoll&timeout=30000&doc_id=c2&since="+last)
		got <- rows
	}()
	require.Equal(t, 201, e.do("PUT", "/_replicator/c2", asAdmin, dead).Status)
	rows := testutil.Recv(t, got)
	require.NotEmpty(t, rows)
	require.Equal(t, "c2", rows[0].DocID)
	require.Empty(t, rows[0].From, "its first change: created")

	// Editing a document is a change of state, not a removal.
	_, beforeEdit, _ := read(asAdmin, "since=now")
	cur1 := e.do("GET", "/_replicator/c1", asAdmin, nil)
	edited := map[string]any{"_rev": cur1.Body["_rev"], "worker_processes": 2}
	for k, v := range dead {
		edited[k] = v
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/c1", asAdmin, edited).Status)
	testutil.Eventually(t, "c1's edit in the feed", func() bool {
		rows, _, _ := read(asAdmin, "doc_id=c1&since="+beforeEdit)
		for _, r := range rows {
			require.NotEqual(t, "removed", r.State, "an edit is no removal: %v", rows)
		}
		return len(rows) > 0
	})
	all, _, _ := read(asAdmin, "doc_id=c1&since=0")
	require.NotEmpty(t, all, "since=0 is the oldest kept")

	// Filters: by state.
	rows, _, _ = read(asAdmin, "states=crashing&limit=1")
	require.Len(t, rows, 1)
	require.Equal(t, "crashing", rows[0].State)

	// Deleting a document removes its job: a change to removed.
	testutil.Eventually(t, "c2 deleted (the node may write its state in between: 409, read again)", func() bool {
		cur := e.do("GET", "/_replicator/c2", asAdmin, nil)
		d := e.do("DELETE", "/_replicator/c2?rev="+cur.Body["_rev"].(string), asAdmin, nil)
		require.Contains(t, []int{200, 409}, d.Status, d.Raw)
		return d.Status == 200
	})
	testutil.Eventually(t, "c2 removed", func() bool {
		rows, _, _ := read(asAdmin, "doc_id=c2&states=removed")
		return len(rows) == 1
	})

	// A user's own changes only; an anonymous client none.
	require.Equal(t, 201, e.do("PUT", "/_replicator/alice_c", asAlice, dead).Status)
	testutil.Eventually(t, "alice sees her replication's changes", func() bool {
		rows, _, _ := read(asAlice, "")
		for _, r := range rows {
			require.Equal(t, "alice_c", r.DocID, "another user's replication")
		}
		return len(rows) > 0
	})
	_, _, status := read(nil, "")
	require.Equal(t, 401, status)
	_, _, status = read(asAdmin, "since=not-a-seq")
	require.Equal(t, 400, status)

	// Continuous and eventsource: rows as lines, then the last seq.
	for _, feed := range []string{"continuous", "eventsource"} {
		req, err := http.NewRequest("GET", e.url+"/_scheduler/_changes?feed="+feed+"&doc_id=c1&limit=2", nil)
		require.NoError(t, err)
		req.SetBasicAuth(adminName, adminPass)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		var lines []string
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				lines = append(lines, l)
			}
		}
		resp.Body.Close()
		if feed == "continuous" {
			require.Len(t, lines, 3, "two rows and the last seq: %v", lines)
			require.Contains(t, lines[2], "last_seq")
		} else {
			require.Len(t, lines, 4, "two events of data and id: %v", lines)
			require.True(t, strings.HasPrefix(lines[0], "data: "), lines[0])
			require.True(t, strings.HasPrefix(lines[1], "id: "), lines[1])
		}
	}
}

// TestSchedulerChangesStates: _scheduler/_changes takes the states
// _scheduler/docs takes, in any case, and removed; an unknown state is
// the same 400 as there, naming it, whatever the feed.
func TestSchedulerChangesStates(t *testing.T) {
	t.Parallel()
	e := newService(t)
	for _, tc := range []struct {
		query  string
		status int
		bad    string // the state the refusal names
	}{
		{"states=bogus", 400, "bogus"},
		{"states=crashing,bogus", 400, "bogus"},
		{"states=triggered&feed=longpoll&timeout=10", 400, "triggered"},
		{"states=bogus&feed=continuous&timeout=10", 400, "bogus"},
		{"states=bogus&feed=eventsource&timeout=10", 400, "bogus"},
		{"states=crashing", 200, ""},
		{"states=CRASHING,removed,parked", 200, ""},
		{"states=initializing,error", 200, ""}, // CouchDB 3.x's: select nothing
		{"states=", 200, ""},
	} {
		t.Run(tc.query, func(t *testing.T) {
			r := e.do("GET", "/_scheduler/_changes?"+tc.query, asAdmin, nil)
			if tc.status != 200 {
				requireError(t, r, tc.status, "query_parse_error")
				require.Contains(t, r.Body["reason"], "Unknown states ["+tc.bad+"]")
				// As _scheduler/docs answers it.
				docs := e.do("GET", "/_scheduler/docs?states="+tc.bad, asAdmin, nil)
				requireError(t, docs, tc.status, "query_parse_error")
				return
			}
			require.Equal(t, 200, r.Status, r.Raw)
			require.Contains(t, r.Body, "last_seq")
		})
	}
}
