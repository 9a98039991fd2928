package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// writeNetrc writes a netrc file and returns its path.
func writeNetrc(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "netrc")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// clearEnv unsets the client's variables for the test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{EnvCluster, EnvUser, EnvPassword, EnvNetrc} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	t.Setenv("HOME", t.TempDir())
}

// parseCluster parses the cluster flags of args.
func parseCluster(t *testing.T, args ...string) *clusterFlags {
	t.Helper()
	c := &clusterFlags{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	require.NoError(t, fs.Parse(args))
	c.visited(fs)
	return c
}

func TestClusterCredentials(t *testing.T) {
	netrcFile := "machine db.example login nu password np\ndefault login du password dp\n"
	for _, tc := range []struct {
		name  string
		url   string
		args  []string
		env   map[string]string
		netrc bool
		want  Creds
	}{
		{name: "none", url: "http://h:5984", want: Creds{}},
		{name: "url", url: "http://u:p@h:5984", want: Creds{"u", "p"}},
		{name: "flags beat the url", url: "http://u:p@h:5984", args: []string{"-user", "f", "-password", "fp"}, want: Creds{"f", "fp"}},
		{name: "env", url: "http://h:5984", env: map[string]string{EnvUser: "e", EnvPassword: "ep"}, want: Creds{"e", "ep"}},
		{name: "url beats env", url: "http://u:p@h:5984", env: map[string]string{EnvUser: "e", EnvPassword: "ep"}, want: Creds{"u", "p"}},
		{name: "flag user, env password", url: "http://h:5984", args: []string{"-user", "f"}, env: map[string]string{EnvPassword: "ep"}, want: Creds{"f", "ep"}},
		{name: "netrc machine", url: "http://db.example:5984", netrc: true, want: Creds{"nu", "np"}},
		{name: "netrc default", url: "http://other:5984", netrc: true, want: Creds{"du", "dp"}},
		{name: "netrc for the named user", url: "http://db.example:5984", args: []string{"-user", "nu"}, netrc: true, want: Creds{"nu", "np"}},
		{name: "netrc of another user is not taken", url: "http://db.example:5984", args: []string{"-user", "x"}, netrc: true, want: Creds{User: "x"}},
		{name: "a password given beats netrc", url: "http://db.example:5984", env: map[string]string{EnvPassword: "ep"}, netrc: true, want: Creds{Password: "ep"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := tc.args
			if tc.netrc {
				args = append(args, "-netrc", writeNetrc(t, netrcFile))
			}
			cs, err := parseCluster(t, args...).credentials()
			require.NoError(t, err)
			u, err := url.Parse(tc.url)
			require.NoError(t, err)
			require.Equal(t, tc.want, cs.cluster(u))
		})
	}
}

func TestNetrcFiles(t *testing.T) {
	clearEnv(t)
	// A missing default file is no error; a named one is.
	_, err := parseCluster(t).credentials()
	require.NoError(t, err)
	_, err = parseCluster(t, "-netrc", filepath.Join(t.TempDir(), "nope")).credentials()
	require.ErrorContains(t, err, "netrc file")
	t.Setenv(EnvNetrc, filepath.Join(t.TempDir(), "nope"))
	_, err = parseCluster(t).credentials()
	require.ErrorContains(t, err, "netrc file")

	// ~/.netrc is read by default.
	clearEnv(t)
	home := os.Getenv("HOME")
	require.NoError(t, os.WriteFile(filepath.Join(home, NetrcDefault), []byte("machine h login a password b\n"), 0o600))
	cs, err := parseCluster(t).credentials()
	require.NoError(t, err)
	require.Equal(t, Creds{"a", "b"}, cs.cluster(&url.URL{Host: "h:1"}))

	// A malformed file is refused without quoting it (a word of it may be
	// a password).
	_, err = parseCluster(t, "-netrc", writeNetrc(t, "machine h login a password two words-secret\n")).credentials()
	require.ErrorContains(t, err, "line 1: not in netrc format")
	require.NotContains(t, err.Error(), "words-secret")
}

func TestEndpointsTakeNetrcCredentials(t *testing.T) {
	clearEnv(t)
	cs, err := parseCluster(t, "-netrc", writeNetrc(t, "machine peer login pu password pp\n")).credentials()
	require.NoError(t, err)
	require.Equal(t, map[string]any{"url": "http://peer:5984/db", "auth": map[string]any{"basic": map[string]string{"username": "pu", "password": "pp"}}},
		cs.endpoint("http://peer:5984/db"))
	require.Equal(t, "http://u:p@peer:5984/db", cs.endpoint("http://u:p@peer:5984/db"), "credentials given win")
	require.Equal(t, "http://unknown/db", cs.endpoint("http://unknown/db"))
	require.Contains(t, cs.secrets(), "pp")
}

func TestRedactor(t *testing.T) {
	r := newRedactor("s3cret", "")
	for in, want := range map[string]string{
		"http://u:pw@h:1/db and https://x:y%40z@h/": "http://u:*****@h:1/db and https://x:*****@h/",
		"http://u@h/ has no password":               "http://u@h/ has no password",
		"the password s3cret said aloud":            "the password ***** said aloud",
		"db_not_found: could not open http://h/db/": "db_not_found: could not open http://h/db/",
	} {
		require.Equal(t, want, r.String(in))
	}
	var b bytes.Buffer
	redactWriter{&b, r}.Write([]byte("x s3cret\n"))
	require.Equal(t, "x *****\n", b.String())
}

// newTestReplicate parses a replicate command line with no cluster.
func newTestReplicate(t *testing.T, args ...string) (*replicateCmd, error) {
	t.Helper()
	clearEnv(t)
	return newReplicateCmd(args, Env{Stdout: io.Discard, Stderr: io.Discard})
}

func TestReplicateBody(t *testing.T) {
	const src, tgt = "http://h:1/a", "http://h:1/b"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"plain", []string{src, tgt}, `{"source":"http://h:1/a","target":"http://h:1/b"}`},
		{"flags after the arguments", []string{src, tgt, "-continuous", "-create-target"},
			`{"source":"http://h:1/a","target":"http://h:1/b","continuous":true,"create_target":true}`},
		{"filters", []string{"-filter", "app/even", "-query-param", "max=10", "-query-param", "x=a=b", src, tgt},
			`{"source":"http://h:1/a","target":"http://h:1/b","filter":"app/even","query_params":{"max":"10","x":"a=b"}}`},
		{"doc ids", []string{"-doc-ids", "a,b", "-doc-ids", `["c,d"]`, src, tgt},
			`{"source":"http://h:1/a","target":"http://h:1/b","doc_ids":["a","b","c,d"]}`},
		{"selector", []string{"-selector", `{"type":"x"}`, src, tgt},
			`{"source":"http://h:1/a","target":"http://h:1/b","selector":{"type":"x"}}`},
		{"options", []string{"-opt", "worker_processes=2", "-opt", "since_seq=now", "-opt", "continuous=false", "-continuous", src, tgt},
			`{"source":"http://h:1/a","target":"http://h:1/b","worker_processes":2,"since_seq":"now","continuous":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newTestReplicate(t, tc.args...)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(mustJSON(c.body)))
			require.True(t, c.local, "no cluster: in process")
		})
	}
}

func TestReplicateUsageErrors(t *testing.T) {
	const src, tgt = "http://h:1/a", "http://h:1/b"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{src}, "want SOURCE and TARGET"},
		{[]string{"-opt", "source=x", src, tgt}, "give it as an argument"},
		{[]string{"-opt", "novalue", src, tgt}, "want key=value"},
		{[]string{"-query-param", "=x", src, tgt}, "want key=value"},
		{[]string{"-doc-ids", "[1]", src, tgt}, "not a JSON array of strings"},
		{[]string{"-progress", "fancy", src, tgt}, "-progress"},
		{[]string{"-interval", "1ms", src, tgt}, "-interval"},
		{[]string{"-local", "-cluster", "http://c", src, tgt}, "exclude each other"},
		{[]string{"-cancel", src, tgt}, "-cancel needs a cluster"},
		{[]string{"-cluster", "http://c", "-detach", src, tgt}, "-detach is for -continuous"},
		{[]string{"http://u:pw-secret@h:1/a", "ftp://h/b"}, "target"},
	} {
		_, err := newTestReplicate(t, tc.args...)
		var ee *ExitError
		require.ErrorAs(t, err, &ee, "%q", tc.args)
		require.Equal(t, ExitUsage, ee.Code)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "pw-secret")
	}
	_, err := newTestReplicate(t, "-h")
	require.ErrorIs(t, err, flag.ErrHelp)
}

func TestReplicateClusterChoice(t *testing.T) {
	clearEnv(t)
	t.Setenv(EnvCluster, "http://c:5984")
	c, err := newReplicateCmd([]string{"http://h/a", "http://h/b"}, Env{Stdout: io.Discard, Stderr: io.Discard})
	require.NoError(t, err)
	require.False(t, c.local)
	require.Equal(t, "http://c:5984", c.cluster)
	c, err = newReplicateCmd([]string{"-local", "http://h/a", "http://h/b"}, Env{Stdout: io.Discard, Stderr: io.Discard})
	require.NoError(t, err)
	require.True(t, c.local)
	c, err = newReplicateCmd([]string{"-cancel", "abc+continuous"}, Env{Stdout: io.Discard, Stderr: io.Discard})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"replication_id": "abc+continuous", "cancel": true}, c.body)
}

// TestPlainProgressLines: one line per change, rate and ETA once the
// replication has run between two samples, none for the jump of seeded
// counters.
func TestPlainProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := &plainDisplay{out: &b, r: newRedactor(), start: time.Now()}
	pending := func(n int64) *int64 { return &n }
	p.update(sample{state: "pending"})
	p.update(sample{state: "pending"})                                                                            // unchanged: no line
	p.update(sample{state: "running", stats: engine.Stats{RevisionsChecked: 5000, ChangesPending: pending(100)}}) // seeded
	p.rate.lastT = p.rate.lastT.Add(-10 * time.Second)                                                            // as if sampled 10 s ago
	p.update(sample{state: "running", stats: engine.Stats{RevisionsChecked: 5050, DocsWritten: 50, ChangesPending: pending(50)}})
	p.update(sample{state: "running", stats: engine.Stats{RevisionsChecked: 5050, DocsWritten: 50, ChangesPending: pending(50)},
		stall: "target_unreachable: GET http://h/b/: connection refused (attempt 2 of 11)"})
	lines := bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n"))
	require.Len(t, lines, 4, b.String())
	require.Regexp(t, `; stalled: target_unreachable: GET http://h/b/: connection refused \(attempt 2 of 11\)$`, string(lines[3]))
	require.Regexp(t, `^\[0s\] pending: 0/\? changes, 0 docs written, 0 failures$`, string(lines[0]))
	require.Regexp(t, `running: 5000/5100 changes, 0 docs written, 0 failures$`, string(lines[1]), "no rate from the seeded jump")
	require.Regexp(t, `running: 5050/5100 changes, 50 docs written, 0 failures, 5 changes/s, ETA 10s$`, string(lines[2]))
}

func TestRenderTables(t *testing.T) {
	jobs := `{"total_rows":3,"offset":0,"jobs":[
		{"id":"r1+continuous","database":"_replicator","doc_id":"d1","source":"http://u:*****@h/a/","target":"http://h/b/","state":"running",
		 "info":{"docs_written":7,"changes_pending":3,"caught_up":false,"eta_sec":90,"stall":null},"user":null,"history":[{"timestamp":"t","type":"started"}],"start_time":"2026-01-01T00:00:00Z","node":"n1","pid":null,"job_id":"j1"},
		{"id":null,"database":null,"doc_id":null,"source":"http://h/a/","target":"http://h/c/","state":"crashing",
		 "info":{"error":"db_not_found","reason":"could not open http://h/c/","caught_up":false,"eta_sec":null,
		 "stall":{"reason":"backing_off","detail":"could not open http://h/c/","since":"2026-01-01T00:00:09Z","until":"2026-01-01T00:00:19Z"}},"user":"joe","history":[],"start_time":"2026-01-01T00:00:00Z","node":null,"pid":null,"job_id":"j2"}]}`
	out, err := renderJobs(json.RawMessage(jobs), view{wide: true})
	require.NoError(t, err)
	for _, w := range []string{"ID", "LAST EVENT", "r1+continuous", "_replicator/d1", "running", "n1", "7", "started",
		"(job j2)", "crashing", "joe", "db_not_found: could not open http://h/c/", "jobs 1-2 of 3 (-limit, -skip)",
		"IN SYNC", "in 1m30s", "STALL", "backing_off since 2026-01-01T00:00:09Z until 2026-01-01T00:00:19Z"} {
		require.Contains(t, out, w)
	}
	// One job: its refused documents under the table.
	oneJob := `{"id":"r1","database":null,"doc_id":null,"source":"http://h/a/","target":"http://h/b/","state":"running","job_id":"j1",
		"info":{"docs_written":1,"doc_write_failures":1,"caught_up":true,"stall":{"reason":"target_refusing_writes","detail":"d","since":"2026-01-01T00:00:09Z"},
		"failed_docs":[{"id":"doc-7","rev":"1-abc","status":403,"error":"forbidden","reason":"no sevens","time":"2026-01-01T00:00:08Z"}]},"history":[]}`
	out, err = renderJobs(json.RawMessage(oneJob), view{wide: true})
	require.NoError(t, err)
	for _, w := range []string{"yes", "target_refusing_writes since 2026-01-01T00:00:09Z", "Refused by the target (the last 1):",
		"doc-7", "1-abc", "403", "forbidden: no sevens"} {
		require.Contains(t, out, w)
	}
	docs := `{"total_rows":1,"offset":0,"docs":[{"id":null,"database":"_replicator","doc_id":"d2","source":"http://h/a/","target":"http://h/b/",
		"state":"failed","info":{"error":"bad_rep_doc","reason":"Missing source"},"error_count":3,"last_updated":"2026-01-01T00:00:00Z","start_time":"","node":null,"pid":null}]}`
	out, err = renderDocs(json.RawMessage(docs), view{wide: true})
	require.NoError(t, err)
	for _, w := range []string{"DATABASE", "d2", "failed", "3", "bad_rep_doc: Missing source", "\n1 document\n"} {
		require.Contains(t, out, w)
	}
	one := `{"id":null,"database":"_replicator","doc_id":"d3","state":"completed","info":{"docs_written":4,"changes_pending":0},"error_count":0}`
	out, err = renderDocs(json.RawMessage(one), view{wide: true})
	require.NoError(t, err)
	require.Contains(t, out, "d3")
	// A parked replication: the views say running, with info.parked.
	parked := `{"id":null,"database":"_replicator","doc_id":"d4","state":"running","node":null,"error_count":0,
		"info":{"docs_written":4,"caught_up":true,"eta_sec":0,"stall":null,"parked":{"since":"2026-01-01T00:00:00Z","sweep_at":"2026-01-02T00:00:00Z","through":"9"}}}`
	out, err = renderDocs(json.RawMessage(parked), view{wide: true})
	require.NoError(t, err)
	require.Regexp(t, `d4 +parked `, out)
	require.Contains(t, out, "yes", "in sync")
	// Without -wide: no USER or STARTED, endpoints as user@host/db, long
	// cells cut; a typical row fits 170 columns, in a pipe too.
	long := strings.Replace(jobs, `"could not open http://h/c/"`, `"`+strings.Repeat("x", 200)+`"`, 1)
	out, err = renderJobs(json.RawMessage(long), view{now: time.Date(2026, 1, 1, 0, 0, 12, 0, time.UTC)})
	require.NoError(t, err)
	require.NotContains(t, out, "STARTED")
	require.NotContains(t, out, "http://")
	require.Contains(t, out, "u@h/a")
	require.Contains(t, out, strings.Repeat("x", 10)+"…")
	require.Contains(t, out, "backing_off for 3s, retry in 7s")
	for l := range strings.Lines(out) {
		require.LessOrEqual(t, cells(l), 171, "%q", l)
	}
	_, err = renderJobs(json.RawMessage(`[]`), view{})
	require.Error(t, err)
	require.Equal(t, "none of the 5 jobs past -skip 5\n", footer(0, 5, 5, "job", "jobs"))
	require.Equal(t, "none of the 1 job past -skip 1\n", footer(0, 1, 1, "job", "jobs"))
	require.Equal(t, "1 job\n", footer(1, 0, 1, "job", "jobs"))
	require.Equal(t, "0 jobs\n", footer(0, 0, 0, "job", "jobs"))
	require.Equal(t, "jobs 2-2 of 2 (-limit, -skip)\n", footer(1, 1, 2, "job", "jobs"))
}

// The rate is known from the second counted step (within two samples,
// not after a moving average's ten), over the last rateWindow.
func TestProgressRate(t *testing.T) {
	var r rate
	t0 := time.Unix(1000, 0)
	run := func(n int64) sample { return sample{state: "running", stats: engine.Stats{RevisionsChecked: n}} }
	r.add(run(0), t0)
	r.add(run(6000), t0.Add(time.Second)) // the first step from 0: maybe seeded counters, not counted
	require.Zero(t, r.perSecond())
	r.add(run(12000), t0.Add(2*time.Second))
	require.Equal(t, 6000.0, r.perSecond(), "known at the second step")
	for i := int64(3); i <= 30; i++ {
		r.add(run(12000+(i-2)*1000), t0.Add(time.Duration(i)*time.Second))
	}
	require.Equal(t, 1000.0, r.perSecond(), "over the last window only")
	eta, ok := r.eta(40000, 50000)
	require.True(t, ok)
	require.Equal(t, 10*time.Second, eta)
}
