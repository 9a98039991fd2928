package wire_test

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// silentPeer is a TCP listener that accepts connections and never
// answers (nor closes them until the test ends): a replication endpoint
// whose requests wait out their connection_timeout. It returns the
// listener's base URL.
func silentPeer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// Issue 42 item 5, "One user starves all others": with max_jobs 3, three
// of bob's one-shot replications from a source that never answers kept
// alice's replication, in another replicator database, waiting for as
// long as their requests took (connection_timeout, which a user could
// set to an hour). Now bob runs at most a quarter of max_jobs (one) at
// once, his others wait with the stall user_limit, and alice's runs at
// once; a user's connection_timeout is at most two minutes.
func TestOneUserDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	s := newService(t, func(m map[string]map[string]string) { m["replicator"]["max_jobs"] = "3" })
	peer := silentPeer(t)
	require.Equal(t, 201, s.do("PUT", "/"+url.PathEscape("alice/_replicator"), asAdmin, nil).Status)
	bobs := func(i string) map[string]any {
		return map[string]any{"source": peer + "/never" + i, "target": peer + "/t" + i, "connection_timeout": 120000}
	}

	// A user's document may not ask a connection_timeout over two minutes.
	big := bobs("0")
	big["connection_timeout"] = 3600000
	r := s.do("PUT", "/_replicator/big", asBob, big)
	requireError(t, r, 403, "forbidden")
	require.Contains(t, r.Body["reason"], "max_user_connection_timeout")

	for _, i := range []string{"1", "2", "3"} {
		r := s.do("PUT", "/_replicator/bob"+i, asBob, bobs(i))
		require.Equal(t, 201, r.Status, r.Raw)
	}
	r = s.do("PUT", "/"+url.PathEscape("alice/_replicator")+"/mine", asAlice, map[string]any{
		"source": s.adminDBURL("alice/_replicator"), "target": s.adminDBURL("_replicator"), "continuous": true})
	require.Equal(t, 201, r.Status, r.Raw)
	s.waitDocState("alice/_replicator", "mine", "running")

	// One of bob's runs; the others wait, saying why (once a node has
	// looked at them: a job just added is pending with no stall yet).
	testutil.Eventually(t, "one of bob's replications running, two waiting for user_limit", func() bool {
		states := map[string]int{}
		for _, i := range []string{"1", "2", "3"} {
			r := s.do("GET", "/_scheduler/docs/_replicator/bob"+i, asAdmin, nil)
			st, _ := r.Body["state"].(string)
			if st == "pending" {
				info, _ := r.Body["info"].(map[string]any)
				stall, _ := info["stall"].(map[string]any)
				if stall["reason"] != "user_limit" {
					return false
				}
			}
			states[st]++
		}
		return states["running"] == 1 && states["pending"] == 2
	})
}

// A one-shot replication from a source that never answers gives its slot
// to a waiting one after one_shot_stall_preempt_sec, and waits behind it:
// server admins' replications, which the per-user limit leaves alone,
// with a connection_timeout of an hour.
func TestStalledOneShotGivesWay(t *testing.T) {
	t.Parallel()
	s := newService(t, func(m map[string]map[string]string) {
		m["replicator"]["max_jobs"] = "2"
		m["replicator"]["one_shot_stall_preempt_sec"] = "1"
	})
	peer := silentPeer(t)
	for _, i := range []string{"1", "2"} {
		r := s.do("PUT", "/_replicator/stuck"+i, asAdmin, map[string]any{
			"source": peer + "/never" + i, "target": peer + "/t" + i, "connection_timeout": 3600000})
		require.Equal(t, 201, r.Status, r.Raw)
		s.waitDocState("_replicator", "stuck"+i, "running")
	}
	require.Equal(t, 201, s.do("PUT", "/"+url.PathEscape("other/_replicator"), asAdmin, nil).Status)
	r := s.do("PUT", "/"+url.PathEscape("other/_replicator")+"/next", asAdmin, map[string]any{
		"source": s.adminDBURL("other/_replicator"), "target": s.adminDBURL("_replicator"), "continuous": true})
	require.Equal(t, 201, r.Status, r.Raw)
	s.waitDocState("other/_replicator", "next", "running")
}
