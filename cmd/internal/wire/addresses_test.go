package wire_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
)

// Requests to internal addresses ([replicator] denied_endpoint_networks
// and the rest): refused when written, with 403 naming the field; a name
// that resolves to a denied address only when the node connects makes
// the job crash forbidden_address before any connection; and only server
// admins read which address and which rule.

// withHealth gives the service's node a health listener.
func withHealth(m map[string]map[string]string) { m["node"]["health_address"] = "127.0.0.1:0" }

// Not parallel: "localhost" names [::1] too, where another test's
// listener may hold the health port's number.
func TestDeniedAddressesRefusedWhenWritten(t *testing.T) {
	s := newService(t, withHealth)
	health := s.parts.HealthAddr
	require.NotEmpty(t, health)
	_, healthPort, err := net.SplitHostPort(health)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		doc    map[string]any
		reason []string // parts of the 403's reason
	}{
		{"metadata service", repDoc("source", "http://169.254.169.254/latest/meta-data"),
			[]string{"`source`", couch.AddressDeniedReason, "169.254.169.254:80", "denied_endpoint_networks (169.254.0.0/16)"}},
		{"mapped address, object endpoint", repDoc("target", map[string]any{"url": "https://[::ffff:a9fe:a9fe]/db"}),
			[]string{"`target`", "169.254.0.0/16"}},
		{"this host", repDoc("source", "http://0.0.0.0:5984/db"), []string{"`source`", "0.0.0.0/8"}},
		{"proxy", repDoc("proxy", "http://169.254.169.254:3128"), []string{"the proxy of `source`", "169.254.169.254:3128"}},
		{"the node's health port", repDoc("source", "http://127.0.0.1:"+healthPort+"/db"), []string{"`source`", "own listener"}},
		{"a name of the node's health port", repDoc("target", "http://localhost:"+healthPort+"/db"),
			[]string{"`target`", "localhost resolves only to addresses replications may not reach"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "_")
			r := s.do("PUT", "/_replicator/"+id, asAlice, tc.doc)
			requireError(t, r, 403, "forbidden")
			for _, part := range tc.reason {
				require.Contains(t, r.Body["reason"], part)
			}
			require.Equal(t, 404, s.do("GET", "/_replicator/"+id, asAlice, nil).Status, "nothing stored")
			r = s.do("POST", "/_replicate", asAlice, tc.doc)
			requireError(t, r, 403, "forbidden")
			require.Contains(t, r.Body["reason"], tc.reason[0])
		})
	}
	// A name that does not resolve passes: the connect decides.
	require.Equal(t, 201, s.do("PUT", "/_replicator/unresolved", asAlice, repDoc()).Status)
}

// Not parallel: "localhost" names [::1] too, where another test's
// listener may hold the port's number.
func TestDeniedAddressAtConnect(t *testing.T) {
	s := newService(t, func(m map[string]map[string]string) {
		m["replicator"]["deny_loopback_endpoints"] = "true"
		m["user_roles"][bobName] = "_replicator" // stored without the write's checks
	})
	peer, accepts := testutil.CountingServer(t, http.NotFoundHandler())
	_, port, err := net.SplitHostPort(peer.Listener.Addr().String())
	require.NoError(t, err)
	url := "http://localhost:" + port + "/db"

	// A writer without the _replicator role is refused at once: localhost
	// resolves to loopback now.
	r := s.do("PUT", "/_replicator/local", asAlice, repDoc("source", url))
	requireError(t, r, 403, "forbidden")
	require.Contains(t, r.Body["reason"], "`source`: "+couch.AddressDeniedReason)

	// Stored all the same (a replicator's write, a restore), its job meets
	// the check at connect, after DNS.
	r = s.do("PUT", "/_replicator/local", asBob, repDoc("source", url, "target", url+"2", "owner", bobName))
	require.Equal(t, 201, r.Status, r.Raw)
	row := s.waitDocState("_replicator", "local", "crashing")
	info := row["info"].(map[string]any)
	require.Equal(t, "forbidden_address", info["error"], "%v", row)
	reason := info["reason"].(string)
	require.True(t, strings.HasPrefix(reason, "source http://localhost:"+port+"/db/: "+couch.AddressDeniedReason+": "), reason)
	require.Contains(t, reason, "deny_loopback_endpoints", "the admin reads the rule")
	require.Contains(t, reason, ":"+port+" is a loopback address", "and the address")
	require.Zero(t, accepts.Load(), "no connection reached the peer")

	// Everyone else reads that the address is refused, not which or why:
	// the owner, another member, in every view.
	for _, who := range []*creds{asBob, asAlice} {
		r := s.do("GET", "/_scheduler/docs/_replicator/local", who, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		requireHidden(t, r.Raw, port)
		require.Equal(t, couch.AddressDeniedReason, r.Body["info"].(map[string]any)["reason"], "%s", who.Name)
	}
	jobs := s.do("GET", "/_scheduler/jobs", asBob, nil)
	require.Equal(t, 200, jobs.Status, jobs.Raw)
	require.Len(t, jobs.Body["jobs"], 1)
	requireHidden(t, jobs.Raw, port)
	job := jobs.Body["jobs"].([]any)[0].(map[string]any)
	one := s.do("GET", "/_scheduler/jobs/"+job["job_id"].(string), asBob, nil)
	require.Equal(t, 200, one.Status, one.Raw)
	requireHidden(t, one.Raw, port)
	var crashed int
	for _, h := range one.Body["history"].([]any) {
		if h := h.(map[string]any); h["type"] == "crashed" {
			require.Equal(t, couch.AddressDeniedReason, h["reason"])
			crashed++
		}
	}
	require.NotZero(t, crashed)
	admin := s.do("GET", "/_scheduler/jobs/"+job["job_id"].(string), asAdmin, nil)
	require.Contains(t, admin.Raw, "deny_loopback_endpoints")

	// Allowed at run time (every node applies it), the job reaches its
	// peer at its next start. The retry ends its backoff; a job that
	// started again on its own meanwhile (it crashes at each start, and
	// starts again after its backoff) is not crashing at that moment, and
	// its retry answers 409.
	r = s.do("PUT", "/_node/_cluster/_config/replicator/deny_loopback_endpoints", asAdmin, `"false"`)
	require.Equal(t, 200, r.Status, r.Raw)
	r = s.do("POST", "/_scheduler/jobs/"+job["job_id"].(string)+"/_retry", asAdmin, nil)
	require.Contains(t, []int{200, 409}, r.Status, r.Raw)
	testutil.Eventually(t, "a connection to the peer", func() bool { return accepts.Load() > 0 })
}

// requireHidden checks that a view's answer names neither the refused
// address's port nor the rule.
func requireHidden(t *testing.T, raw, port string) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(raw), &v))
	require.Contains(t, raw, couch.AddressDeniedReason)
	for _, leak := range []string{"deny_loopback_endpoints", "loopback address", fmt.Sprintf("127.0.0.1:%s", port), "[::1]:" + port} {
		require.NotContains(t, raw, leak)
	}
}
