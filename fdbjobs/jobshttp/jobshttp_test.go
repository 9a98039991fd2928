package jobshttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/fdbjobs/jobshttp"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

type feedPage struct {
	Results []fdbjobs.FeedEvent `json:"results"`
	LastSeq string              `json:"last_seq"`
	Error   string              `json:"error"`
	Reason  string              `json:"reason"`
}

func get(t *testing.T, url string) (int, feedPage) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var p feedPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return resp.StatusCode, p
}

func TestFeedOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "mail", time.Minute))
	srv := httptest.NewServer(jobshttp.New(c, jobshttp.Options{}))
	defer srv.Close()
	feed := srv.URL + "/mail/_feed"

	st, p := get(t, feed)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, "not_found", p.Error)
	require.NoError(t, c.SetFeed(ctx, nil, "mail", time.Hour))
	add := func(id string) { require.NoError(t, c.Add(ctx, nil, "mail", id, nil, 0)) }
	add("a")
	add("b")

	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	var kinds map[string][]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&kinds))
	resp.Body.Close()
	require.Equal(t, []string{"mail"}, kinds["kinds"])
	resp, err = http.Get(srv.URL + "/mail")
	require.NoError(t, err)
	var kind map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&kind))
	resp.Body.Close()
	require.Equal(t, float64(2), kind["counts"].(map[string]any)["pending"])
	require.Equal(t, float64(3600), kind["feed"].(map[string]any)["keep_seconds"])

	st, p = get(t, feed)
	require.Equal(t, http.StatusOK, st)
	require.Len(t, p.Results, 2)
	require.Equal(t, "a", p.Results[0].JobID)
	require.Equal(t, fdbjobs.FeedInserted, p.Results[0].Event)
	require.Equal(t, p.Results[1].Seq, p.LastSeq)
	first := p.Results[0].Seq

	st, p = get(t, feed+"?limit=1&since="+first)
	require.Equal(t, http.StatusOK, st)
	require.Len(t, p.Results, 1)
	require.Equal(t, "b", p.Results[0].JobID)
	last := p.LastSeq

	// Longpoll: nothing until the timeout, then what comes.
	st, p = get(t, feed+"?feed=longpoll&timeout=50&since="+last)
	require.Equal(t, http.StatusOK, st)
	require.Empty(t, p.Results)
	require.Equal(t, last, p.LastSeq)
	type answer struct {
		st int
		p  feedPage
	}
	got := make(chan answer, 1)
	go func() {
		st, p := get(t, feed+"?feed=longpoll&timeout=30000&since="+last)
		got <- answer{st, p}
	}()
	add("c")
	a := testutil.Recv(t, got)
	require.Equal(t, http.StatusOK, a.st)
	require.Len(t, a.p.Results, 1)
	require.Equal(t, "c", a.p.Results[0].JobID)

	// since=now: only what comes after.
	st, p = get(t, feed+"?since=now")
	require.Equal(t, http.StatusOK, st)
	require.Empty(t, p.Results)
	require.Equal(t, a.p.LastSeq, p.LastSeq)

	// Continuous: an event per line, heartbeats, then last_seq.
	resp, err = http.Get(feed + "?feed=continuous&heartbeat=100&timeout=2000&since=" + first)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	var lines, blanks int
	var end map[string]any
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blanks++
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		if _, ok := m["last_seq"]; ok {
			end = m
			break
		}
		lines++
		if lines == 2 {
			add("d")
		}
	}
	require.Equal(t, 3, lines, "b, c and d")
	require.Positive(t, blanks, "heartbeats while idle")
	require.NotEmpty(t, end["last_seq"])

	// Pruned: a since before the pruned events is told so.
	_, err = c.PruneFeed(ctx, "mail", time.Now().Add(2*time.Hour))
	require.NoError(t, err)
	st, p = get(t, feed+"?since="+first)
	require.Equal(t, http.StatusGone, st)
	require.Equal(t, "feed_pruned", p.Error)
}

// TestKinds: GET /{kind} answers the counts of a kind GET / lists, and
// 404 naming any other, rather than its zero counts.
func TestKinds(t *testing.T) {
	ctx := context.Background()
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "mail", time.Minute))
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "gone", time.Minute))
	require.NoError(t, c.ClearTypeTimeout(ctx, nil, "gone"))
	require.NoError(t, c.SetFeed(ctx, nil, "feedonly", time.Hour))
	srv := httptest.NewServer(jobshttp.New(c, jobshttp.Options{}))
	defer srv.Close()
	for _, tc := range []struct {
		kind   string
		status int
	}{
		{"mail", http.StatusOK},
		{"nomail", http.StatusNotFound},
		{"gone", http.StatusNotFound},     // unregistered
		{"feedonly", http.StatusNotFound}, // a feed, but no kind
		{"Mail", http.StatusNotFound},
		{"%20mail", http.StatusNotFound},
		{strings.Repeat("k", fdbjobs.MaxNameSize+1), http.StatusNotFound}, // none can have its name
	} {
		t.Run(fmt.Sprintf("%.20s", tc.kind), func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/" + tc.kind)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var body map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			if tc.status == http.StatusOK {
				require.Equal(t, tc.kind, body["kind"])
				require.Contains(t, body, "counts")
				return
			}
			require.Equal(t, "not_found", body["error"])
			require.Contains(t, body["reason"], "no kind ")
			require.NotContains(t, body, "counts")
		})
	}
}

func TestBadRequests(t *testing.T) {
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	require.NoError(t, c.SetFeed(context.Background(), nil, "mail", time.Hour))
	srv := httptest.NewServer(jobshttp.New(c, jobshttp.Options{}))
	defer srv.Close()
	for _, q := range []string{
		"feed=sideways", "limit=0", fmt.Sprintf("limit=%d", fdbjobs.FeedPageMax+1), "limit=x",
		"timeout=-1", "timeout=99999999999", "heartbeat=1", "since=zz", "since=00ff",
	} {
		t.Run(q, func(t *testing.T) {
			st, p := get(t, srv.URL+"/mail/_feed?"+q)
			require.Equal(t, http.StatusBadRequest, st)
			require.Equal(t, "bad_request", p.Error)
			require.NotEmpty(t, p.Reason)
		})
	}
	st, p := get(t, srv.URL+"/"+strings.Repeat("k", fdbjobs.MaxNameSize+1)+"/_feed")
	require.Equal(t, http.StatusBadRequest, st, p.Reason)
	st, _ = get(t, srv.URL+"/mail/_feed/more")
	require.Equal(t, http.StatusNotFound, st)
}

// TestCrossSiteRefused: an action of the web page sent from another
// site's page (as the browser tells) is refused with a JSON error, and
// does nothing; the page's own is done. TestWebPage checks the same
// from a browser.
func TestCrossSiteRefused(t *testing.T) {
	ctx := context.Background()
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "mail", time.Minute))
	srv := httptest.NewServer(jobshttp.New(c, jobshttp.Options{}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		refused bool
	}{
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, true},
		{"same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, true},
		{"another origin", map[string]string{"Origin": "https://evil.example"}, true},
		{"same-origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, false},
		{"no browser", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, c.Resume(ctx, nil, "mail"))
			req, err := http.NewRequest("POST", srv.URL+"/_ui/k/mail/pause", nil)
			require.NoError(t, err)
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			paused, err := c.Paused(ctx, nil, "mail")
			require.NoError(t, err)
			if !tc.refused {
				require.Equal(t, http.StatusSeeOther, resp.StatusCode)
				require.True(t, paused)
				return
			}
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var body map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			require.Equal(t, map[string]any{"error": "forbidden", "reason": "cross-origin request refused"}, body)
			require.False(t, paused, "refused: not done")
		})
	}
}
