package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator/engine"
)

// docsJSON is a _scheduler/docs reply with the given document ids, each
// running with a stall since 2026-01-01T00:00:00Z.
func docsJSON(ids ...string) json.RawMessage {
	var docs []string
	for _, id := range ids {
		docs = append(docs, fmt.Sprintf(`{"id":"%s+continuous","database":"_replicator","doc_id":%q,"source":"http://u:*****@h/a/","target":"http://h/b/",
			"state":"running","info":{"docs_written":12345,"changes_pending":0,"caught_up":false,
			"stall":{"reason":"target_unreachable","detail":"d","since":"2026-01-01T00:00:00Z"}},"error_count":0,"node":"node1"}`,
			strings.Repeat("ab", 16), id))
	}
	return json.RawMessage(fmt.Sprintf(`{"total_rows":%d,"offset":0,"docs":[%s]}`, len(ids), strings.Join(docs, ",")))
}

// cellsBefore is the width in cells of line up to the first sub, which it
// must hold.
func cellsBefore(t *testing.T, line, sub string) int {
	t.Helper()
	i := strings.Index(line, sub)
	require.GreaterOrEqual(t, i, 0, "%q in %q", sub, line)
	return cells(line[:i])
}

// CJK and emoji take two cells each, a combining mark none: the columns
// after them start at the same cell on every line (text/tabwriter counted
// runes, and shifted them).
func TestTableCountsCells(t *testing.T) {
	out, err := renderDocs(docsJSON("plain-doc", "日本語の文書", "🚀-launch", "cafe\u0301", "한국어"), view{now: time.Unix(0, 0)})
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 7, out) // header, five rows, footer
	state := cellsBefore(t, lines[0], "STATE")
	for _, l := range lines[1:6] {
		require.Equal(t, state, cellsBefore(t, l, "running"), "STATE column of %q:\n%s", l, out)
	}
	require.Equal(t, "5 documents", lines[6])
}

// On a terminal of 80 columns every line fits, the widest columns cut
// first: the ids and endpoints, not the counters.
func TestTableFitsTheWidth(t *testing.T) {
	jobs := `{"total_rows":2,"offset":0,"jobs":[` +
		`{"id":"0123456789abcdef0123456789abcdef+continuous+create_target","database":"_replicator","doc_id":"a-rather-long-document-id",` +
		`"source":"http://user:*****@source.example.com:5984/source-db/","target":"http://target.example.com:5984/target-db/","state":"running",` +
		`"info":{"docs_written":1234567,"changes_pending":0,"caught_up":true},"history":[{"type":"started"}],"node":"replication-node-1@host","job_id":"j1"},` +
		`{"id":"fedcba9876543210fedcba9876543210","database":null,"doc_id":null,"source":"http://h/a/","target":"http://h/b/","state":"pending",` +
		`"info":null,"history":[],"node":null,"job_id":"j2"}]}`
	for _, tc := range []struct {
		width   int
		leftOut string
	}{
		{80, "(NODE, SOURCE, TARGET left out at this width; -wide shows every column)"},
		{100, "(NODE left out at this width; -wide shows every column)"},
		{160, ""},
	} {
		out, err := renderJobs(json.RawMessage(jobs), view{width: tc.width, now: time.Unix(0, 0)})
		require.NoError(t, err)
		for l := range strings.Lines(out) {
			require.LessOrEqual(t, cells(strings.TrimSuffix(l, "\n")), tc.width, "%q\n%s", l, out)
		}
		require.Contains(t, out, "1234567", "counters are not cut")
		require.Contains(t, out, "running", "nor states")
		require.Contains(t, out, "0123456", "an id cut keeps its beginning, a prefix fdbrep jobs takes")
		require.Contains(t, out, "…")
		if tc.leftOut != "" {
			require.Contains(t, out, tc.leftOut)
		} else {
			require.NotContains(t, out, "left out")
		}
	}
	// No limit (a pipe, -wide): nothing cut but the narrow cells.
	out, err := renderJobs(json.RawMessage(jobs), view{now: time.Unix(0, 0)})
	require.NoError(t, err)
	require.Contains(t, out, "0123456789abcdef0123456789abcdef+continuous+create_target")
}

func TestFitWidths(t *testing.T) {
	all := func(n int) []bool { return []bool{true, true, true, true}[:n] }
	for _, tc := range []struct {
		widths []int
		cut    []bool
		width  int
		want   []int
		ok     bool
	}{
		{[]int{10, 20, 5}, all(3), 0, []int{10, 20, 5}, true},
		{[]int{10, 20, 5}, all(3), 100, []int{10, 20, 5}, true},
		{[]int{10, 20, 5}, all(3), 29, []int{10, 10, 5}, true},                       // the widest only
		{[]int{30, 20, 5}, all(3), 40, []int{16, 15, 5}, true},                       // both wide ones to 15, the spare cell to the first
		{[]int{3, 3, 40}, all(3), 30, []int{3, 3, 20}, true},                         // one wide column takes the cut
		{[]int{30, 20, 5}, []bool{false, true, true}, 50, []int{30, 11, 5}, true},    // a column kept whole
		{[]int{30, 30, 30, 30}, all(4), 20, []int{columnMin, 8, 8, 8}, false},        // never below columnMin
		{[]int{columnMin + 1, 3}, all(2), columnMin + 4, []int{columnMin, 3}, false}, // 8+2+3 = 13 > 12
	} {
		got, ok := fitWidths(tc.widths, tc.cut, tc.width)
		require.Equal(t, tc.want, got, "%v in %d", tc.widths, tc.width)
		require.Equal(t, tc.ok, ok, "%v in %d", tc.widths, tc.width)
	}
}

func TestCutCells(t *testing.T) {
	for _, tc := range []struct {
		in   string
		w    int
		want string
	}{
		{"short", 10, "short"},
		{"target_unreachable for 2m10s, retry in 30s", 32, "target_unreachable for 2m10s…"},
		{"0123456789abcdef", 8, "0123456…"},
		{"日本語の文書", 7, "日本語…"}, // three wide characters and the ellipsis: 7 cells
		{"日本語の文書", 8, "日本語…"}, // a wide character does not fit in the last cell
		{"a b", 1, "a"},
	} {
		got := cutCells(tc.in, tc.w)
		require.Equal(t, tc.want, got, "%q in %d", tc.in, tc.w)
		require.LessOrEqual(t, cells(got), tc.w)
	}
}

// The STALL column says how long a job has been stalled, and when a job
// backing off is retried, instead of two timestamps that a narrow cell
// cut in the middle; -wide keeps the view's times.
func TestStallColumn(t *testing.T) {
	raw := json.RawMessage(`{"total_rows":1,"offset":0,"docs":[{"id":null,"database":"_replicator","doc_id":"d","state":"crashing",
		"info":{"error":"db_not_found","reason":"could not open http://h/c/","caught_up":false,
		"stall":{"reason":"backing_off","detail":"x","since":"2026-11-23T23:00:38Z","until":"2026-11-23T23:03:18Z"}},"error_count":2}]}`)
	now := time.Date(2026, 11, 23, 23, 2, 48, 0, time.UTC)
	out, err := renderDocs(raw, view{now: now})
	require.NoError(t, err)
	require.Contains(t, out, "backing_off for 2m10s, retry in 30s")
	require.NotContains(t, out, "2026-1", "no timestamp cut in the middle")
	out, err = renderDocs(raw, view{wide: true, now: now})
	require.NoError(t, err)
	require.Contains(t, out, "backing_off since 2026-11-23T23:00:38Z until 2026-11-23T23:03:18Z")

	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 45 * time.Second: "45s", 130 * time.Second: "2m10s", time.Hour: "1h0m",
		3*time.Hour + 12*time.Minute + 5*time.Second: "3h12m", 51 * time.Hour: "2d3h",
	} {
		require.Equal(t, want, span(d), "%v", d)
	}
}

// Counts in the client's output agree with their number.
func TestPlurals(t *testing.T) {
	var b bytes.Buffer
	p := &plainDisplay{out: &b, r: newRedactor(), start: time.Now()}
	p.update(sample{state: "running", stats: engine.Stats{RevisionsChecked: 1, DocsWritten: 1, DocWriteFailures: 1}})
	require.Contains(t, b.String(), "1/? changes, 1 doc written, 1 failure\n")
	out, err := renderDocs(docsJSON("d"), view{})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(out, "\n1 document\n"), out)
	_, err = newTestReplicate(t, "http://h/a")
	require.ErrorContains(t, err, "(got 1 argument)")
}

// A template's replications name their database beside the template's
// id, and the template's own row its pattern.
func TestTemplateRows(t *testing.T) {
	raw := json.RawMessage(`{"total_rows":2,"offset":0,"docs":[
		{"database":"_replicator","doc_id":"users","source":"http://h/","target":"http://b/copy-{db}/","state":"running","info":null,"error_count":0,"template":{"databases":"userdb-*","of":"source","replications":1}},
		{"database":"_replicator","doc_id":"users","source":"http://h/userdb-1/","target":"http://b/copy-userdb-1/","state":"running","info":null,"error_count":0,"template":{"database":"userdb-1"}}]}`)
	out, err := renderDocs(raw, view{now: time.Unix(0, 0)})
	require.NoError(t, err)
	require.Contains(t, out, "users [template userdb-*]")
	require.Contains(t, out, "users [userdb-1]")
}
