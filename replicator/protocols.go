package replicator

import (
	"net/url"
	"slices"
	"strings"
)

// Protocols are the URL schemes a replication's endpoints and proxies may
// use (CouchDB 3.3's [replicator] valid_endpoint_protocols and
// valid_proxy_protocols), with which operators forbid plaintext
// endpoints, and whether the replications with an http:// endpoint are
// logged and counted (3.4's valid_endpoint_protocols_log).
type Protocols struct {
	// Endpoint and Proxy are the schemes allowed (nil: their defaults).
	Endpoint, Proxy []string
	// LogInsecure logs and counts each replication added with an http://
	// endpoint (MetricJobsInsecure).
	LogInsecure bool
}

// Check returns CouchDB's error for a replication whose endpoint or proxy
// uses a scheme not allowed, wrapping kind: "endpoint has an invalid url"
// or "proxy has an invalid url" (the source's endpoint, then its proxy,
// then the target's, as CouchDB checks them). The control plane refuses
// such a document (403 forbidden) or POST /_replicate (400
// invalid_replication), and a node fails such a job when it starts it.
func (p Protocols) Check(s *Spec, kind error) error {
	endpoint, proxy := p.Endpoints(), p.Proxy

	if proxy == nil {
		proxy = ProxyProtocolsDefault
	}
	for _, ep := range []EndpointSpec{s.Source, s.Target} {
		if !slices.Contains(endpoint, scheme(ep.URL)) {
			return NewReason(kind, "endpoint has an invalid url")
		}
		if ep.Proxy != "" && !slices.Contains(proxy, scheme(ep.Proxy)) {
			return NewReason(kind, "proxy has an invalid url")
		}
		if ep.Token != nil && !slices.Contains(endpoint, scheme(ep.Token.URL)) {
			return NewReason(kind, "the token endpoint has an invalid url")
		}
	}
	return nil
}

// Insecure names the endpoints of s that are http:// ("source",
// "target").
func Insecure(s *Spec) []string {
	var out []string
	if scheme(s.Source.URL) == "http" {
		out = append(out, "source")
	}
	if scheme(s.Target.URL) == "http" {
		out = append(out, "target")
	}
	return out
}

// scheme is raw's URL scheme, in lower case; "" when raw does not parse.
func scheme(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme)
}

// Endpoints are the schemes endpoints may use: Endpoint, or
// EndpointProtocolsDefault when nil (webhook URLs follow them too).
func (p Protocols) Endpoints() []string {
	if p.Endpoint == nil {
		return EndpointProtocolsDefault
	}
	return p.Endpoint
}
