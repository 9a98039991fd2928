package couch_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
)

// defaultRules are the rules of [replicator]'s defaults.
func defaultRules(t *testing.T) couch.AddressRules {
	t.Helper()
	denied, err := couch.ParseNetworks(strings.Split(couch.DeniedNetworksDefault, ","))
	require.NoError(t, err)
	return couch.AddressRules{Denied: denied}
}

func TestAddressPolicyCheck(t *testing.T) {
	nets := func(s ...string) []netip.Prefix {
		p, err := couch.ParseNetworks(s)
		require.NoError(t, err)
		return p
	}
	def := defaultRules(t)
	private := def
	private.DenyLoopback, private.DenyPrivate = true, true
	excepted := private
	excepted.Allowed = nets("10.1.2.0/24", "127.0.0.1")
	for _, tc := range []struct {
		name  string
		rules couch.AddressRules
		addr  string
		why   string // "" allowed
	}{
		{"metadata", def, "169.254.169.254:80", "denied_endpoint_networks (169.254.0.0/16)"},
		{"metadata mapped", def, "[::ffff:169.254.169.254]:80", "denied_endpoint_networks (169.254.0.0/16)"},
		{"link-local v6 zone", def, "[fe80::1%eth0]:5984", "denied_endpoint_networks (fe80::/10)"},
		{"this host", def, "0.0.0.0:5984", "denied_endpoint_networks (0.0.0.0/8)"},
		{"unspecified v6", def, "[::]:5984", "denied_endpoint_networks (::/128)"},
		{"multicast", def, "239.1.1.1:5984", "denied_endpoint_networks (224.0.0.0/4)"},
		{"aws v6 metadata", def, "[fd00:ec2::254]:80", "denied_endpoint_networks (fd00:ec2::254/128)"},
		{"loopback allowed", def, "127.0.0.1:5984", ""},
		{"private allowed", def, "10.0.0.5:5984", ""},
		{"public", def, "192.0.2.10:443", ""},
		{"loopback denied", private, "127.0.0.2:5984", "deny_loopback_endpoints"},
		{"loopback v6 denied", private, "[::1]:5984", "deny_loopback_endpoints"},
		{"private denied", private, "192.168.1.1:5984", "deny_private_endpoints"},
		{"ula denied", private, "[fd12::1]:5984", "deny_private_endpoints"},
		{"cgnat denied", private, "100.64.0.1:5984", "deny_private_endpoints"},
		{"public with private denied", private, "192.0.2.10:443", ""},
		{"exception", excepted, "10.1.2.3:5984", ""},
		{"exception address", excepted, "127.0.0.1:5984", ""},
		{"outside exception", excepted, "10.1.3.3:5984", "deny_private_endpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := couch.NewAddressPolicy(tc.rules).Check(netip.MustParseAddrPort(tc.addr))
			if tc.why == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, couch.ErrAddressDenied)
			require.ErrorContains(t, err, tc.why)
			require.ErrorContains(t, err, couch.AddressDeniedReason)
		})
	}
	var nilPolicy *couch.AddressPolicy
	require.NoError(t, nilPolicy.Check(netip.MustParseAddrPort("169.254.169.254:80")))
}

// The node's own listeners are denied on every local address, whatever
// the rules allow (an exception included), and only there.
func TestAddressPolicyOwnListeners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	rules := defaultRules(t)
	rules.Allowed, _ = couch.ParseNetworks([]string{"0.0.0.0/0", "::/0"})
	p := couch.NewAddressPolicy(rules)
	p.DenyOwn(ln.Addr())
	local := []string{"127.0.0.1", "127.0.0.53", "::1", "0.0.0.0", "::"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				local = append(local, n.IP.String())
			}
		}
	}
	for _, ip := range local {
		err := p.Check(netip.AddrPortFrom(netip.MustParseAddr(ip), port))
		require.ErrorIs(t, err, couch.ErrAddressDenied, ip)
		require.ErrorContains(t, err, "own listener", ip)
		require.NoError(t, p.Check(netip.AddrPortFrom(netip.MustParseAddr(ip), port+1)), ip)
	}
	require.NoError(t, p.Check(netip.AddrPortFrom(netip.MustParseAddr("192.0.2.10"), port)), "another host's port")
	err = p.CheckHost(context.Background(), "localhost", port, true)
	require.ErrorIs(t, err, couch.ErrAddressDenied, "a name of this host")
}

// A Strict policy denies loopback unless Allowed names it, follows its
// base's rules as they change, and keeps its own listeners.
func TestAddressPolicyStrict(t *testing.T) {
	base := couch.NewAddressPolicy(defaultRules(t))
	base.DenyOwn(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5986})
	strict := base.Strict()
	at := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	require.NoError(t, base.Check(at("127.0.0.1:8080")), "loopback allowed to endpoints by default")
	err := strict.Check(at("127.0.0.1:8080"))
	require.ErrorIs(t, err, couch.ErrAddressDenied)
	require.ErrorContains(t, err, "allowed_endpoint_networks")
	require.ErrorIs(t, strict.Check(at("[::1]:8080")), couch.ErrAddressDenied)
	require.ErrorIs(t, strict.Check(at("169.254.169.254:80")), couch.ErrAddressDenied)
	require.NoError(t, strict.Check(at("192.0.2.1:443")))

	rules := base.Rules()
	rules.Allowed, _ = couch.ParseNetworks([]string{"127.0.0.1/32"})
	base.SetRules(rules)
	require.NoError(t, strict.Check(at("127.0.0.1:8080")), "allowed, at once")
	require.ErrorContains(t, strict.Check(at("127.0.0.1:5986")), "own listener")
	require.ErrorIs(t, (*couch.AddressPolicy)(nil).Strict().Check(at("127.0.0.1:1")), couch.ErrAddressDenied)
}

func TestParseNetworks(t *testing.T) {
	got, err := couch.ParseNetworks([]string{"10.1.2.3/8", "192.0.2.7", "::ffff:10.0.0.0/104", "fd00::/8"})
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}, got)
	for _, bad := range []string{"10.0.0.0/33", "example.com", "fe80::1%eth0", ""} {
		_, err := couch.ParseNetworks([]string{bad})
		require.ErrorIs(t, err, couch.ErrInvalidOptions, bad)
	}
}

// countingListener is a loopback peer that counts the connections it
// accepts and answers every request as a CouchDB database would.
func countingListener(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	return testutil.CountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"db_name":"db","update_seq":"1","instance_start_time":"0"}`))
	}))
}

// A denied address is refused at connect, after DNS: a name that resolved
// to an allowed address when it was checked (the write) and resolves to a
// denied one when the DB connects (DNS rebinding) is refused, at the first
// attempt, and the listener behind it accepts no connection. Allowed
// again, the same DB connects.
func TestAddressPolicyAtConnect(t *testing.T) {
	srv, accepts := countingListener(t)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	rules := defaultRules(t)
	rules.DenyLoopback = true
	p := couch.NewAddressPolicy(rules)
	p.Lookup = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.10")}, nil // the first answer: allowed
	}
	u, err := url.Parse("http://localhost:" + strconv.Itoa(port) + "/db")
	require.NoError(t, err)
	require.NoError(t, p.CheckURL(context.Background(), u, true), "the write's resolution is allowed")

	var attempts []couch.Attempt
	db, err := couch.NewDB(couch.Endpoint{URL: u}, couch.Options{Addresses: p, Observe: func(a couch.Attempt) { attempts = append(attempts, a) }}, nil)
	require.NoError(t, err)
	defer db.Close()
	err = db.DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrAddressDenied)
	require.ErrorIs(t, err, couch.ErrRequestFailed)
	require.ErrorContains(t, err, "deny_loopback_endpoints")
	var aerr *couch.AddressError
	require.True(t, errors.As(err, &aerr))
	require.Len(t, attempts, 1, "not retried")
	require.True(t, attempts[0].Final)
	require.Zero(t, accepts.Load(), "no connection reached the listener")

	rules.DenyLoopback = false
	p.SetRules(rules)
	require.NoError(t, db.DoJSON(context.Background(), couch.Request{}, nil))
	require.EqualValues(t, 1, accepts.Load())
}

// Through a proxy, the proxy's address is checked when it is dialed, and
// an endpoint written as a denied literal address is refused before the
// proxy is asked for it.
func TestAddressPolicyProxy(t *testing.T) {
	proxy, accepts := countingListener(t)
	pu, err := url.Parse(proxy.URL)
	require.NoError(t, err)
	rules := defaultRules(t)
	rules.DenyLoopback = true
	p := couch.NewAddressPolicy(rules)
	open := func(endpoint string) *couch.DB {
		u, err := url.Parse(endpoint)
		require.NoError(t, err)
		db, err := couch.NewDB(couch.Endpoint{URL: u}, couch.Options{Addresses: p, Proxy: pu, RetriesPerRequest: couch.NoRetries}, nil)
		require.NoError(t, err)
		t.Cleanup(db.Close)
		return db
	}
	err = open("http://db.example/db").DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrAddressDenied, "a proxy on loopback")
	require.Zero(t, accepts.Load())

	rules.DenyLoopback = false
	p.SetRules(rules)
	err = open("http://169.254.169.254/latest/meta-data").DoJSON(context.Background(), couch.Request{}, nil)
	require.ErrorIs(t, err, couch.ErrAddressDenied, "a metadata address through the proxy")
	require.ErrorContains(t, err, "169.254.0.0/16")
	require.Zero(t, accepts.Load())

	require.NoError(t, open("http://db.example/db").DoJSON(context.Background(), couch.Request{}, nil))
	require.EqualValues(t, 1, accepts.Load())
}

func TestHideAddressDetail(t *testing.T) {
	detail := "http_request_failed: source http://host/db/: " + couch.AddressDeniedReason + ": 10.0.0.5:22 is a private address"
	require.Equal(t, couch.AddressDeniedReason, couch.HideAddressDetail(detail))
	require.Equal(t, "db_not_found: could not open", couch.HideAddressDetail("db_not_found: could not open"))
	info := []byte(`{"error":"forbidden_address","reason":"` + detail + `","stall":{"reason":"backing_off","detail":"` + detail + `"},"n":12345678901234567890}`)
	require.JSONEq(t, `{"error":"forbidden_address","reason":"`+couch.AddressDeniedReason+`","stall":{"reason":"backing_off","detail":"`+
		couch.AddressDeniedReason+`"},"n":12345678901234567890}`, string(couch.HideAddressDetailJSON(info)))
	plain := []byte(`{"error":"db_not_found"}`)
	require.Equal(t, string(plain), string(couch.HideAddressDetailJSON(plain)))
}

// A lookup that timed out (no DNS: an api_frontend host whose firewall
// lets out only FoundationDB) turns write-time resolution off for a
// while, so that writes do not each wait for it; literal addresses are
// still checked.
func TestAddressPolicyLookupTimeoutPauses(t *testing.T) {
	p := couch.NewAddressPolicy(defaultRules(t))
	lookups := 0
	p.Lookup = func(context.Context, string) ([]netip.Addr, error) {
		lookups++
		return nil, &net.DNSError{Err: "i/o timeout", Name: "db.example", IsTimeout: true}
	}
	ctx := context.Background()
	require.NoError(t, p.CheckHost(ctx, "db.example", 80, true), "a name that does not resolve passes")
	require.NoError(t, p.CheckHost(ctx, "other.example", 80, true))
	require.Equal(t, 1, lookups, "not looked up again")
	require.ErrorIs(t, p.CheckHost(ctx, "169.254.169.254", 80, true), couch.ErrAddressDenied)
}
