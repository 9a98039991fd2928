package couchtest_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func TestPouchDBDocRoundTrip(t *testing.T) {
	start := time.Now()
	s := couchtest.StartPouchDB(t)
	t.Logf("pouchdb-server started in %v at %s", time.Since(start), s.URL())

	s.CreateDB(t, "alpha")
	info := s.DBInfo(t, "alpha")
	require.Equal(t, "alpha", info["db_name"])
	require.NotEmpty(t, info["instance_start_time"])

	rev := s.PutDoc(t, "alpha", map[string]any{"_id": "a/b c", "v": 1.0})
	require.True(t, strings.HasPrefix(rev, "1-"), rev)
	doc := s.GetDoc(t, "alpha", "a/b c")
	require.Equal(t, 1.0, doc["v"])
	require.Equal(t, rev, doc["_rev"])

	rev2 := s.PutDoc(t, "alpha", map[string]any{"_id": "a/b c", "_rev": rev, "v": 2.0})
	require.True(t, strings.HasPrefix(rev2, "2-"), rev2)
	require.Nil(t, s.GetDoc(t, "alpha", "missing"))

	ids := s.AddDocs(t, "alpha", 0, 25)
	require.Len(t, ids, 25)
	rows := s.AllDocs(t, "alpha", true)
	require.Len(t, rows, 26)
	require.Equal(t, "a/b c", rows[0].ID)
	require.Equal(t, "doc-00000003", rows[4].ID)
	require.Equal(t, 3.0, rows[4].Doc["n"])

	changes, last := s.Changes(t, "alpha", "0")
	require.Len(t, changes, 26)
	require.Equal(t, "27", string(last)) // 1 + 1 update + 25, integer seqs

	local := s.PutDoc(t, "alpha", map[string]any{"_id": "_local/ckpt", "x": true})
	require.Equal(t, "0-1", local)

	res := s.BulkDocs(t, "alpha", []map[string]any{{
		"_id": "repl", "_rev": "3-ccc",
		"_revisions": map[string]any{"start": 3, "ids": []string{"ccc", "bbb", "aaa"}},
	}}, false)
	require.Empty(t, res)
	require.Equal(t, "3-ccc", s.GetDoc(t, "alpha", "repl")["_rev"])

	s.DeleteDB(t, "alpha")
	require.Equal(t, http.StatusNotFound, s.Request(t, http.MethodGet, "/alpha", nil, nil))

	s.Stop()
	require.True(t, s.Exited())
	s.Stop() // idempotent
}

func TestPouchDBAdmin(t *testing.T) {
	s := couchtest.StartPouchDB(t, couchtest.WithAdmin("admin", "s3cret"))
	s.CreateDB(t, "db") // helpers authenticate as the admin
	name, pw := s.Admin()
	require.Equal(t, "admin", name)
	require.Equal(t, "s3cret", pw)
	require.Equal(t, s.URL()[:7]+"admin:s3cret@"+s.URL()[7:]+"/db", s.AuthDBURL("db"))

	get := func(user, pass, path string) int {
		req, err := http.NewRequest(http.MethodGet, s.URL()+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	defer http.DefaultClient.CloseIdleConnections()
	require.Equal(t, http.StatusUnauthorized, get("", "", "/_config"))
	require.Equal(t, http.StatusUnauthorized, get("admin", "wrong", "/db"))
	require.Equal(t, http.StatusOK, get("admin", "s3cret", "/_config"))

	s.SetSecurity(t, "db", map[string]any{"members": map[string]any{"names": []string{"alice"}}})
	require.Equal(t, http.StatusUnauthorized, get("", "", "/db"))
	require.Equal(t, http.StatusOK, get("admin", "s3cret", "/db"))
}

func sharedPeer(t *testing.T) *couchtest.Server {
	t.Helper()
	// A peer per test keeps tests independent; a start costs about a second.
	return couchtest.StartPouchDB(t)
}

func TestFaultProxyScript(t *testing.T) {
	s := sharedPeer(t)
	s.CreateDB(t, "db")
	p := couchtest.NewFaultProxy(t, s.URL(), couchtest.FaultConfig{Stall: 50 * time.Millisecond})
	p.Script(couchtest.Fault500, couchtest.Fault429, couchtest.FaultReset, couchtest.FaultDrop, couchtest.FaultStall, couchtest.FaultNone)

	// No keep-alive: net/http silently retries a GET whose reused connection
	// was reset, which would consume the next scripted fault.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	get := func() (int, []byte, error) {
		resp, err := client.Get(p.URL() + "/db/_all_docs")
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}

	code, body, err := get()
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, code)
	require.Contains(t, string(body), "unknown_error")

	code, _, err = get()
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, code)

	_, _, err = get()
	require.Error(t, err, "reset")

	code, _, err = get()
	require.Equal(t, http.StatusOK, code, "drop relays the status")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "drop cuts the body")

	for range 2 { // stall, then none
		code, body, err = get()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, string(body), `"rows"`)
	}

	c := p.Counts()
	require.EqualValues(t, 6, c.Requests)
	require.EqualValues(t, 3, c.Forwarded)
	require.EqualValues(t, 4, c.Total()-c.Injected[couchtest.FaultStall])
	require.Equal(t, map[couchtest.Fault]int64{
		couchtest.Fault500: 1, couchtest.Fault429: 1, couchtest.FaultReset: 1,
		couchtest.FaultDrop: 1, couchtest.FaultStall: 1,
	}, c.Injected)
}

func TestFaultProxyRatesAreSeeded(t *testing.T) {
	s := sharedPeer(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	run := func() []int {
		p := couchtest.NewFaultProxy(t, s.URL(), couchtest.FaultConfig{Seed: seed, Rate500: 0.3, Rate429: 0.2})
		defer p.Close()
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
		defer client.CloseIdleConnections()
		var codes []int
		for range 40 {
			resp, err := client.Get(p.URL() + "/")
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
		c := p.Counts()
		require.EqualValues(t, 40, c.Requests)
		require.Equal(t, c.Requests, c.Forwarded+c.Injected[couchtest.Fault500]+c.Injected[couchtest.Fault429])
		return codes
	}
	require.Equal(t, run(), run(), "same seed, same faults")
}

func TestFaultProxyMatchAndClose(t *testing.T) {
	s := sharedPeer(t)
	s.CreateDB(t, "db")
	p := couchtest.NewFaultProxy(t, s.URL(), couchtest.FaultConfig{
		Rate500: 1,
		Match:   func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/_changes") },
	})
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(p.URL() + "/db")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = client.Get(p.URL() + "/db/_changes")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)

	// A continuous feed in flight through the proxy ends when it closes.
	require.Error(t, p.SetConfig(couchtest.FaultConfig{Rate500: 2}))
	require.NoError(t, p.SetConfig(couchtest.FaultConfig{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/db/_changes?feed=continuous&heartbeat=100", nil)
	require.NoError(t, err)
	resp, err = client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	buf := make([]byte, 1)
	_, err = resp.Body.Read(buf) // first heartbeat newline
	require.NoError(t, err)
	p.Close()
	_, err = io.Copy(io.Discard, resp.Body) // returns: the proxy cut the stream
	require.Error(t, err)
	p.Close() // idempotent
}

func TestFaultConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  couchtest.FaultConfig
		ok   bool
	}{
		{"zero", couchtest.FaultConfig{}, true},
		{"sum one", couchtest.FaultConfig{Rate500: 0.5, RateDrop: 0.5}, true},
		{"negative", couchtest.FaultConfig{Rate429: -0.1}, false},
		{"above one", couchtest.FaultConfig{RateStall: 1.5}, false},
		{"sum above one", couchtest.FaultConfig{Rate500: 0.6, RateReset: 0.6}, false},
		{"negative stall", couchtest.FaultConfig{Stall: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
	_, err := couchtest.StartFaultProxy("not a url", couchtest.FaultConfig{})
	require.Error(t, err)
}

func TestLaunchAndPouchReplicate(t *testing.T) {
	src, err := couchtest.LaunchPouchDB(couchtest.WithAdmin("admin", "pw"))
	require.NoError(t, err)
	defer src.Stop()
	dir := src.Dir()
	tgt := couchtest.StartPouchDB(t)

	src.CreateDB(t, "src")
	src.AddDocs(t, "src", 0, 120)
	tgt.CreateDB(t, "tgt")
	res, err := couchtest.PouchReplicate(context.Background(), src.AuthDBURL("src"), tgt.DBURL("tgt"), 50, 2)
	require.NoError(t, err)
	require.True(t, res.OK)
	require.EqualValues(t, 120, res.DocsWritten)
	require.Positive(t, res.Elapsed())
	require.Len(t, tgt.AllDocs(t, "tgt", false), 120)

	_, err = couchtest.PouchReplicate(context.Background(), src.AuthDBURL("src"), "http://admin:pw@127.0.0.1:1/x", 0, 0)
	require.Error(t, err)
	require.NotContains(t, err.Error(), ":pw@")

	src.Stop()
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "working directory removed")
}

// A real CouchDB 3.5 starts, serves the helpers as pouchdb-server does,
// and stops.
func TestStartCouchDB(t *testing.T) {
	s := couchtest.StartCouchDB(t)
	var root map[string]any
	require.Equal(t, 200, s.Request(t, "GET", "/", nil, &root))
	require.Equal(t, "3.5.0", root["version"])
	s.CreateDB(t, "a")
	s.AddDocs(t, "a", 0, 10)
	require.Len(t, s.AllDocs(t, "a", false), 10)
	s.Stop()
	require.True(t, s.Exited())
}
