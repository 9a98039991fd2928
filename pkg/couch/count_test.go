package couch_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// startBobsCouchDB starts a real CouchDB 3.5 with the database db, of
// which the user bob (password secret) is a member.
func startBobsCouchDB(t *testing.T) *couchtest.Server {
	t.Helper()
	srv := couchtest.StartCouchDB(t)
	srv.AddUser(t, "bob", secret)
	srv.CreateDB(t, "db")
	srv.SetSecurity(t, "db", map[string]any{"members": map[string]any{"names": []string{"bob"}}})
	return srv
}

// counts records what Options.Count is told, per host: since the last
// take, and in all.
type counts struct {
	mu       sync.Mutex
	m, total map[string]map[couch.Count]int
}

func newCounts() *counts {
	return &counts{m: map[string]map[couch.Count]int{}, total: map[string]map[couch.Count]int{}}
}

func (c *counts) count(host string, n couch.Count) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[string]map[couch.Count]int{c.m, c.total} {
		if m[host] == nil {
			m[host] = map[couch.Count]int{}
		}
		m[host][n]++
	}
}

// take returns the counts of host since the last take.
func (c *counts) take(host string) map[couch.Count]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.m[host]
	delete(c.m, host)
	return m
}

// all returns the count of n for host in all.
func (c *counts) all(host string, n couch.Count) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total[host][n]
}

// Each attempt, answer and connection of a DB is counted as CouchDB's
// couch_replicator stats count it, against a real CouchDB 3.5 behind a
// proxy that injects the faults: a 5xx answer and a 429 are answers of
// their own, a 4xx counts as a success, a streamed request's answers count
// apart, a connection the peer resets breaks under its request (worker
// crash), one whose request runs out of connection_timeout is the
// request's own end (owner crash), and every connection made is closed.
func TestCounts(t *testing.T) {
	t.Parallel()
	srv := startBobsCouchDB(t)
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{Stall: 10 * time.Second})
	u, err := url.Parse(proxy.URL())
	require.NoError(t, err)
	host := u.Host
	c := newCounts()
	db, logs := newDB(t, proxy.URL()+"/db", couch.Options{Count: c.count, ConnectionTimeout: time.Second}, nil)
	ctx := context.Background()
	requireCounts := func(what string, want map[couch.Count]int) {
		t.Helper()
		got := c.take(host)
		for _, n := range []couch.Count{couch.CountConnAcquire, couch.CountConnRelease, couch.CountConnClose} {
			if _, ok := want[n]; !ok {
				// How often the pool is reused is the transport's
				// business, and it closes a broken connection on its
				// own goroutine: closes are checked at the end.
				delete(got, n)
			}
		}
		require.Equal(t, want, got, "%s\n%s", what, logs.String())
	}

	require.NoError(t, db.DoJSON(ctx, couch.Request{}, nil))
	requireCounts("a first request", map[couch.Count]int{couch.CountRequest: 1, couch.CountResponseSuccess: 1,
		couch.CountConnCreate: 1, couch.CountConnRelease: 1})
	require.NoError(t, db.DoJSON(ctx, couch.Request{}, nil))
	requireCounts("a request on the pooled connection", map[couch.Count]int{couch.CountRequest: 1,
		couch.CountResponseSuccess: 1, couch.CountConnAcquire: 1, couch.CountConnRelease: 1})

	proxy.Script(couchtest.Fault500, couchtest.Fault429)
	require.NoError(t, db.DoJSON(ctx, couch.Request{}, nil))
	requireCounts("500, 429, then 200", map[couch.Count]int{couch.CountRequest: 3, couch.CountResponseFailure: 1,
		couch.CountResponseSuccess: 1})

	var herr *couch.HTTPError
	require.ErrorAs(t, db.DoJSON(ctx, couch.Request{Path: "missing"}, nil), &herr)
	require.Equal(t, http.StatusNotFound, herr.Status)
	requireCounts("a 404", map[couch.Count]int{couch.CountRequest: 1, couch.CountResponseSuccess: 1})

	// A POST, which net/http does not replay by itself on a reused
	// connection.
	proxy.Script(couchtest.FaultReset)
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_revs_diff", Body: []byte(`{}`)}, nil))
	requireCounts("a reset, then 200", map[couch.Count]int{couch.CountRequest: 2, couch.CountResponseSuccess: 1,
		couch.CountConnWorkerCrash: 1, couch.CountConnCreate: 1})

	res, err := db.Do(ctx, couch.Request{Path: "_changes", Query: url.Values{"feed": {"normal"}}, Stream: true})
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	requireCounts("a stream", map[couch.Count]int{couch.CountRequest: 1, couch.CountStreamSuccess: 1})

	proxy.Script(couchtest.Fault500)
	_, err = db.Do(ctx, couch.Request{Path: "_changes", Stream: true, NoRetry: true})
	require.ErrorAs(t, err, &herr)
	requireCounts("a stream's 500", map[couch.Count]int{couch.CountRequest: 1, couch.CountStreamFailure: 1})

	// A stall the proxy holds past connection_timeout: the request gives
	// up its connection, which is closed.
	proxy.Script(couchtest.FaultStall, couchtest.FaultStall)
	err = db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_revs_diff", Body: []byte(`{}`)}, nil)
	require.ErrorIs(t, err, couch.ErrTimeout)
	got := c.take(host)
	require.Equal(t, got[couch.CountRequest], got[couch.CountConnOwnerCrash], "each stalled attempt: %v", got)
	require.Positive(t, got[couch.CountConnOwnerCrash], "%v", got)
	require.Zero(t, got[couch.CountResponseSuccess]+got[couch.CountResponseFailure], "%v", got)

	// Every connection made is closed once the DB lets its pool go.
	db.Close()
	testutil.Eventually(t, "every connection closed", func() bool {
		return c.all(host, couch.CountConnClose) == c.all(host, couch.CountConnCreate)
	})
	require.GreaterOrEqual(t, c.all(host, couch.CountConnCreate), 3, "the first, the one after the reset, the stalled one")
	requireNoSecret(t, logs.String())
}
