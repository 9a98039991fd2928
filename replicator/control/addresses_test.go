package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
)

// The write-time checks of the endpoints' addresses: ParseDoc refuses
// literal addresses the policy denies, without I/O; CheckEndpoints and
// POST /_replicate resolve names (best effort) and refuse one that
// resolves only to denied addresses, without saying which.
func TestWrittenEndpointAddresses(t *testing.T) {
	denied, err := couch.ParseNetworks(strings.Split(couch.DeniedNetworksDefault, ","))
	require.NoError(t, err)
	policy := couch.NewAddressPolicy(couch.AddressRules{Denied: denied, DenyPrivate: true})
	answers := map[string][]string{
		"metadata.internal": {"169.254.169.254"},
		"internal.example":  {"10.0.0.7", "fd00::7"},
		"mixed.example":     {"10.0.0.7", "192.0.2.10"},
	}
	policy.Lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		list, ok := answers[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		var out []netip.Addr
		for _, a := range list {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	db := kvtest.NewDB(t)
	p, err := control.New(replicator.NewStore(db, replicatortest.JobsClient(t, db), nil), replicator.Config{Addresses: policy})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, doc string
		parse     string // ParseDoc's reason, "" = accepted
		resolved  string // CheckEndpoints' reason once ParseDoc accepted, "" = accepted
	}{
		{"public", `{"source":"http://192.0.2.10/a","target":"https://db.example/b"}`, "", ""},
		{"metadata address", `{"source":"http://169.254.169.254/a","target":"http://h/b"}`,
			"`source`: " + couch.AddressDeniedReason + ": 169.254.169.254:80 is in [replicator] denied_endpoint_networks (169.254.0.0/16)", ""},
		{"private target", `{"source":"http://h/a","target":{"url":"https://10.1.2.3:6984/b"}}`,
			"`target`: " + couch.AddressDeniedReason + ": 10.1.2.3:6984 is a private address ([replicator] deny_private_endpoints)", ""},
		{"proxy", `{"source":"http://h/a","target":"http://h/b","target_proxy":"socks5://192.168.0.1"}`,
			"the proxy of `target`: " + couch.AddressDeniedReason + ": 192.168.0.1:1080 is a private address ([replicator] deny_private_endpoints)", ""},
		{"metadata name", `{"source":"http://metadata.internal/a","target":"http://h/b"}`,
			"", "`source`: " + couch.AddressDeniedReason + ": metadata.internal resolves only to addresses replications may not reach"},
		{"private name", `{"source":"http://h/a","target":"http://internal.example:5984/b"}`,
			"", "`target`: " + couch.AddressDeniedReason + ": internal.example resolves only to addresses replications may not reach"},
		{"a name with an allowed address", `{"source":"http://mixed.example/a","target":"http://h/b"}`, "", ""},
		{"a name that does not resolve", `{"source":"http://nowhere.example/a","target":"http://h/b"}`, "", ""},
		{"a name behind a proxy: the proxy's to resolve", `{"source":"http://metadata.internal/a","target":"http://h/b","proxy":"http://192.0.2.10:3128"}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.ParseDoc("_replicator", "d", json.RawMessage(tc.doc), api.Admin())
			if tc.parse != "" {
				require.ErrorIs(t, err, replicator.ErrForbidden)
				require.Equal(t, tc.parse, replicator.Reason(err))
				require.Nil(t, d.(*control.Doc).Spec, "stored as a failed job by writers who may")
				_, err = p.Replicate(context.Background(), json.RawMessage(tc.doc), api.User{Name: "alice"})
				require.ErrorIs(t, err, replicator.ErrForbidden)
				require.Equal(t, tc.parse, replicator.Reason(err))
				return
			}
			require.NoError(t, err)
			err = p.CheckEndpoints(context.Background(), d)
			if tc.resolved == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, replicator.ErrForbidden)
			require.Equal(t, tc.resolved, replicator.Reason(err))
			_, err = p.Replicate(context.Background(), json.RawMessage(tc.doc), api.User{Name: "alice"})
			require.ErrorIs(t, err, replicator.ErrForbidden)
			require.Equal(t, tc.resolved, replicator.Reason(err))
		})
	}
}

// DNS rebinding, through the real engine: a name that resolves to an
// allowed address when POST /_replicate checks it and to a denied one when
// the node connects fails the replication forbidden_address, with no
// connection made; the user who posted it reads that the address is
// refused, a server admin which address and which rule.
func TestReplicateRebindingRefusedAtConnect(t *testing.T) {
	peer, accepts := testutil.CountingServer(t, http.NotFoundHandler())
	_, port, err := net.SplitHostPort(peer.Listener.Addr().String())
	require.NoError(t, err)

	policy := couch.NewAddressPolicy(couch.AddressRules{DenyLoopback: true})
	policy.Lookup = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.10")}, nil // the name's first answer
	}
	cfg := replicatortest.Config()
	cfg.Config.Addresses = policy
	c := replicatortest.NewCluster(t, 1, replicator.EngineDefault{Client: engine.ClientSettings{Addresses: policy}}, cfg)
	body := func(db string) json.RawMessage {
		return replicateBody(t, map[string]any{"source": "http://localhost:" + port + "/" + db, "target": "http://192.0.2.10/b"})
	}
	ctx := context.Background()
	res, err := c.Plane.Replicate(ctx, body("a"), api.User{Name: "alice"})
	require.NoError(t, err)
	require.Equal(t, api.Failed, res.Outcome)
	require.Equal(t, "forbidden_address", res.Tag)
	require.Equal(t, couch.AddressDeniedReason, res.Reason, "alice reads no address, no rule")
	require.Zero(t, accepts.Load(), "no connection reached the peer")

	res, err = c.Plane.Replicate(ctx, body("b"), api.User{Name: "admin", Roles: []string{"_admin"}})
	require.NoError(t, err)
	require.Equal(t, "forbidden_address", res.Tag)
	require.Contains(t, res.Reason, "source http://localhost:"+port+"/b/: "+couch.AddressDeniedReason+": ")
	require.Contains(t, res.Reason, "is a loopback address ([replicator] deny_loopback_endpoints)")
	require.Zero(t, accepts.Load())
}
