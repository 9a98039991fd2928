package couch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The addresses replication endpoints may not reach. Whoever may write a
// _replicator document (or POST /_replicate) chooses the host a
// replication node connects to; without rules, a document could point the
// node at a cloud's metadata service, at the node's own health port or at
// any internal service, and read in its job's error whether something
// answered there. An AddressPolicy refuses such addresses at each connect,
// after DNS resolution (so a name that resolves elsewhere the second time
// does not pass), and answers the control plane's checks at write time.

// AddressDeniedReason starts the detail of every refused address's error
// (ErrAddressDenied), and is all that readers who are not server admins
// are shown of such an error (HideAddressDetail): which address a name
// resolved to, and which rule refused it, are for the operator.
const AddressDeniedReason = "address not allowed for replication"

// DeniedNetworksDefault is [replicator] denied_endpoint_networks: networks
// no endpoint and no proxy may be at, whatever else is allowed.
//   - 169.254.0.0/16 and fe80::/10, link-local: where most clouds serve
//     instance metadata and credentials (169.254.169.254), never a
//     replication peer.
//   - 0.0.0.0/8 and ::/128, "this host" and unspecified: a connection to
//     them reaches the local host, whatever loopback rule applies.
//   - 224.0.0.0/4 and ff00::/8, multicast: never a TCP peer.
//   - fd00:ec2::254/128 and 100.100.100.200/32: the metadata services of
//     AWS over IPv6 and of Alibaba Cloud, outside link-local.
const DeniedNetworksDefault = "169.254.0.0/16,fe80::/10,0.0.0.0/8,::/128,224.0.0.0/4,ff00::/8,fd00:ec2::254/128,100.100.100.200/32"

// DenyLoopbackDefault is [replicator] deny_loopback_endpoints and
// DenyPrivateDefault deny_private_endpoints: loopback and private ranges
// are allowed unless denied, since laptops and tests replicate between
// 127.0.0.1 peers and many deployments replicate inside private networks.
// Deny them where replication nodes sit next to internal services.
const (
	DenyLoopbackDefault = false
	DenyPrivateDefault  = false
)

// AddressLookupTimeoutDefault bounds the resolution of an endpoint's name
// at write time (AddressPolicy.CheckHost): a name that does not resolve
// in time passes, and is checked at each connect.
const AddressLookupTimeoutDefault = time.Second

// AddressLookupPauseDefault is how long a policy resolves no name at
// write time after a lookup timed out: a node without DNS (an api_frontend
// host whose firewall lets out only FoundationDB, docs/DEPLOY.md) pays the
// timeout once in that time, not at every write.
const AddressLookupPauseDefault = 5 * time.Minute

// AddressRules are the configurable part of an AddressPolicy. Loopback
// and private ranges are allowed unless denied: laptops and tests
// replicate between 127.0.0.1 peers, and many deployments replicate inside
// private networks.
type AddressRules struct {
	// Denied are networks no endpoint or proxy may be at
	// (denied_endpoint_networks).
	Denied []netip.Prefix
	// DenyLoopback denies 127.0.0.0/8 and ::1 (deny_loopback_endpoints).
	DenyLoopback bool
	// DenyPrivate denies the private ranges 10.0.0.0/8, 172.16.0.0/12,
	// 192.168.0.0/16, 100.64.0.0/10 (shared address space, carrier-grade
	// NAT) and fc00::/7 (deny_private_endpoints).
	DenyPrivate bool
	// Allowed are exceptions to the three rules above
	// (allowed_endpoint_networks): a peer's address in a denied range.
	// They never allow the node's own listeners.
	Allowed []netip.Prefix
}

// ParseNetworks parses a list of networks in CIDR notation ("10.0.0.0/8",
// "fd00::/8"); a bare address is the network of that address alone.
// Errors wrap ErrInvalidOptions.
func ParseNetworks(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return nil, invalidOptions("%q is not a network such as 10.0.0.0/8 or fd00::/8, nor an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// sharedAddressSpace is 100.64.0.0/10 (RFC 6598), which
// netip.Addr.IsPrivate does not count.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// AddressPolicy decides which addresses a replication may reach: those of
// its AddressRules (which may change at run time, SetRules) and never the
// node's own listeners (DenyOwn) on any address of the local host. The
// nil policy allows every address; the zero value has no rules. Safe for
// concurrent use.
type AddressPolicy struct {
	rules atomic.Pointer[AddressRules]
	own   atomic.Pointer[map[uint16]bool] // ports of the node's own listeners
	// lookupOff is when write-time resolution may start again after a
	// lookup timed out (Unix ns; AddressLookupPauseDefault).
	lookupOff atomic.Int64

	// Lookup resolves a name at write time (CheckHost); nil is
	// net.DefaultResolver's LookupNetIP. Tests substitute one; set it
	// before the policy is used.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

	// base, for a policy made by Strict, is the policy whose rules (as
	// they change) and own listeners it applies, loopback denied unless
	// allowed.
	base *AddressPolicy
}

// Strict returns a policy that applies p's rules as they stand at each
// check and p's own listeners, with loopback addresses denied whatever
// deny_loopback_endpoints says, unless the rules' Allowed names them: for
// addresses a user names that are not replication peers (webhooks). The
// nil policy's is one with no rules but that.
func (p *AddressPolicy) Strict() *AddressPolicy {
	if p == nil {
		p = &AddressPolicy{}
	}
	return &AddressPolicy{base: p, Lookup: p.Lookup}
}

// NewAddressPolicy returns a policy with rules.
func NewAddressPolicy(rules AddressRules) *AddressPolicy {
	p := &AddressPolicy{}
	p.SetRules(rules)
	return p
}

// SetRules replaces the rules, for the connections and checks that start
// from now on (pooled connections stay open until they idle out).
func (p *AddressPolicy) SetRules(rules AddressRules) { p.rules.Store(&rules) }

// Rules returns the rules in force.
func (p *AddressPolicy) Rules() AddressRules {
	if r := p.rules.Load(); r != nil {
		return *r
	}
	return AddressRules{}
}

// DenyOwn adds the node's own listeners: their ports are denied on every
// address of the local host (loopback, unspecified, and each interface's),
// whatever the rules allow, since a listener bound to one address answers
// there and one bound to all of them answers on each.
func (p *AddressPolicy) DenyOwn(addrs ...net.Addr) {
	own := map[uint16]bool{}
	if m := p.own.Load(); m != nil {
		for port := range *m {
			own[port] = true
		}
	}
	for _, a := range addrs {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil && ap.Port() != 0 {
			own[ap.Port()] = true
		}
	}
	p.own.Store(&own)
}

// AddressError is an address a policy refused. It wraps ErrAddressDenied.
type AddressError struct {
	// Addr is the address refused ("169.254.169.254:80"), or the name
	// whose addresses were all refused.
	Addr string
	// Why names the rule and its setting.
	Why string
}

func (e *AddressError) Error() string {
	return ErrAddressDenied.Error() + ": " + e.Addr + " " + e.Why
}

// Unwrap returns ErrAddressDenied.
func (e *AddressError) Unwrap() error { return ErrAddressDenied }

// Check reports whether a may be reached: nil, or an *AddressError naming
// the rule that refuses it.
func (p *AddressPolicy) Check(a netip.AddrPort) error {
	if p == nil {
		return nil
	}
	src := p
	if p.base != nil {
		src = p.base
	}
	ip := a.Addr().Unmap().WithZone("")
	if own := src.own.Load(); own != nil && (*own)[a.Port()] && isLocal(ip) {
		return &AddressError{Addr: a.String(), Why: "is this node's own listener"}
	}
	r := src.rules.Load()
	if r == nil {
		r = &AddressRules{}
	}
	for _, n := range r.Allowed {
		if n.Contains(ip) {
			return nil
		}
	}
	for _, n := range r.Denied {
		if n.Contains(ip) {
			return &AddressError{Addr: a.String(), Why: fmt.Sprintf("is in [replicator] denied_endpoint_networks (%s)", n)}
		}
	}
	switch {
	case p.base != nil && !r.DenyLoopback && ip.IsLoopback():
		return &AddressError{Addr: a.String(), Why: "is a loopback address (reached only where [replicator] allowed_endpoint_networks names it)"}
	case r.DenyLoopback && ip.IsLoopback():
		return &AddressError{Addr: a.String(), Why: "is a loopback address ([replicator] deny_loopback_endpoints)"}
	case r.DenyPrivate && (ip.IsPrivate() || sharedAddressSpace.Contains(ip)):
		return &AddressError{Addr: a.String(), Why: "is a private address ([replicator] deny_private_endpoints)"}
	}
	return nil
}

// isLocal reports an address of this host: loopback, unspecified, or an
// interface's (an error listing them counts every address as local: the
// check fails closed).
func isLocal(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if la, ok := netip.AddrFromSlice(n.IP); ok && la.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// CheckHost checks the host of a URL and its port: a literal address as
// Check does; a name, with resolve, by the addresses it resolves to now
// (Lookup, within AddressLookupTimeoutDefault), refused when every one of
// them is (a connection would reach none of the others). A name that does
// not resolve passes, and after a lookup that timed out no name is
// resolved for AddressLookupPauseDefault: the check at each connect
// remains, and is the one that counts. The error of a name does not say
// what it resolved to.
func (p *AddressPolicy) CheckHost(ctx context.Context, host string, port uint16, resolve bool) error {
	if p == nil {
		return nil
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.Check(netip.AddrPortFrom(ip, port))
	}
	if !resolve || time.Now().UnixNano() < p.lookupOff.Load() {
		return nil
	}
	lookup := p.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, AddressLookupTimeoutDefault)
	defer cancel()
	ips, err := lookup(ctx, host)
	var dnsErr *net.DNSError
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &dnsErr) && dnsErr.IsTimeout {
		p.lookupOff.Store(time.Now().Add(AddressLookupPauseDefault).UnixNano())
	}
	if err != nil || len(ips) == 0 {
		return nil
	}
	for _, ip := range ips {
		if p.Check(netip.AddrPortFrom(ip, port)) == nil {
			return nil
		}
	}
	return &AddressError{Addr: host, Why: "resolves only to addresses replications may not reach"}
}

// CheckURL is CheckHost of a URL's host and port (the scheme's when it
// names none: 80 for http, 443 for https, 1080 for socks5).
func (p *AddressPolicy) CheckURL(ctx context.Context, u *url.URL, resolve bool) error {
	if p == nil || u == nil {
		return nil
	}
	return p.CheckHost(ctx, u.Hostname(), urlPort(u), resolve)
}

// urlPort is u's port, or its scheme's.
func urlPort(u *url.URL) uint16 {
	if n, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		return uint16(n)
	}
	switch u.Scheme {
	case "https":
		return 443
	case "socks5":
		return 1080
	}
	return 80
}

// control is the net.Dialer Control of a policy: it refuses a socket
// about to connect to a denied address (address is the resolved
// "ip:port"), before any packet is sent. An address it cannot read is
// refused.
func (p *AddressPolicy) control(_, address string, _ syscall.RawConn) error {
	a, err := netip.ParseAddrPort(address)
	if err != nil {
		return &AddressError{Addr: address, Why: "is not an IP address and port"}
	}
	return p.Check(a)
}

// Control returns the net.Dialer Control function that applies p to every
// connection the dialer makes (nil for the nil policy), for dialers
// outside this package (engine.Probe).
func (p *AddressPolicy) Control() func(network, address string, c syscall.RawConn) error {
	if p == nil {
		return nil
	}
	return p.control
}

// proxyFunc is the http.Transport Proxy of a DB whose requests go through
// proxy: through a proxy the endpoint's address is the proxy's to
// resolve, but an endpoint written as a literal address p denies is
// refused (the proxy's own address is checked when it is dialed).
func (p *AddressPolicy) proxyFunc(proxy *url.URL) func(*http.Request) (*url.URL, error) {
	if p == nil {
		return http.ProxyURL(proxy)
	}
	return func(req *http.Request) (*url.URL, error) {
		if err := p.CheckURL(req.Context(), req.URL, false); err != nil {
			return nil, err
		}
		return proxy, nil
	}
}

// HideAddressDetail returns s, or AddressDeniedReason alone when s is the
// text of a refused address's error: what readers who are not server
// admins see of it, so that a job's error is no oracle of which addresses
// names resolve to, or of the rules.
func HideAddressDetail(s string) string {
	if strings.Contains(s, AddressDeniedReason) {
		return AddressDeniedReason
	}
	return s
}

// HideAddressDetailJSON applies HideAddressDetail to every string of a
// JSON value (a job's info); raw is returned as it is when it holds none.
func HideAddressDetailJSON(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte(AddressDeniedReason)) {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return json.RawMessage("null")
	}
	b, err := json.Marshal(MapStrings(v, HideAddressDetail))
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// MapStrings replaces every string s of a decoded JSON value by f(s), in
// place, and returns the value.
func MapStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		for k, e := range x {
			x[k] = MapStrings(e, f)
		}
	case []any:
		for i, e := range x {
			x[i] = MapStrings(e, f)
		}
	}
	return v
}
