package couch_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// The DBs of one server share a pool: twenty databases, each asking in
// turn, use one connection between them (twenty without Pools), whatever
// their credentials; another proxy is another pool; a pool goes with the
// last DB using it.
func TestPoolsShareConnections(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	ctx := context.Background()
	open := func(pools *couch.Pools, i int, user string) *couch.DB {
		u, err := url.Parse(srv.URL + "/db" + string(rune('a'+i)))
		require.NoError(t, err)
		db, err := couch.NewDB(couch.Endpoint{URL: u, Username: user, Password: "secret"}, couch.Options{Auth: couch.AuthBasic, Pools: pools}, nil)
		require.NoError(t, err)
		return db
	}
	use := func(pools *couch.Pools) (opened []*couch.DB) {
		conns.Store(0)
		for i := range 20 {
			db := open(pools, i, []string{"alice", "bob"}[i%2])
			require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodGet}, nil))
			opened = append(opened, db)
		}
		return opened
	}
	pools := couch.NewPools()
	dbs := use(pools)
	require.EqualValues(t, 1, conns.Load(), "one pool for the server")
	require.Equal(t, 1, pools.Len())
	for _, db := range dbs {
		db.Close()
	}
	require.Zero(t, pools.Len(), "the pool goes with its last DB")
	for _, db := range use(nil) {
		db.Close()
	}
	require.EqualValues(t, 20, conns.Load(), "a pool per DB without Pools")

	proxy, err := url.Parse("http://127.0.0.1:1")
	require.NoError(t, err)
	u, err := url.Parse(srv.URL + "/x")
	require.NoError(t, err)
	a := open(pools, 0, "alice")
	b, err := couch.NewDB(couch.Endpoint{URL: u}, couch.Options{Pools: pools, Proxy: proxy}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, pools.Len(), "through a proxy: another pool")
	a.Close()
	a.Close() // once
	b.Close()
	require.Zero(t, pools.Len())
}
