package replicator

import (
	"context"
	"net/url"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// CheckAddresses checks the hosts of s's endpoints and proxies against p
// when s is written (a document, a POST /_replicate): a literal address p
// denies, or with resolve a name that resolves only to addresses p denies,
// is ErrForbidden with a reason naming the field. Resolution is best
// effort (a name that does not resolve now passes), and the name of an
// endpoint behind a proxy is not resolved (the proxy resolves it); the
// check at each connect (couch.Options.Addresses) is the one that holds.
// The reason of a name does not say what it resolved to. A nil p allows
// everything.
func (s *Spec) CheckAddresses(ctx context.Context, p *couch.AddressPolicy, resolve bool) error {
	if p == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		ep   EndpointSpec
	}{{"source", s.Source}, {"target", s.Target}} {
		if u, err := url.Parse(f.ep.URL); err == nil {
			if err := p.CheckURL(ctx, u, resolve && f.ep.Proxy == ""); err != nil {
				return newReason(ErrForbidden, "`%s`: %s", f.name, addressReason(err))
			}
		}
		if t := f.ep.Token; t != nil {
			if u, err := url.Parse(t.URL); err == nil {
				if err := p.CheckURL(ctx, u, resolve && f.ep.Proxy == ""); err != nil {
					return newReason(ErrForbidden, "the token endpoint of `%s`: %s", f.name, addressReason(err))
				}
			}
		}
		if f.ep.Proxy == "" {
			continue
		}
		if u, err := url.Parse(f.ep.Proxy); err == nil {
			if err := p.CheckURL(ctx, u, resolve); err != nil {
				return newReason(ErrForbidden, "the proxy of `%s`: %s", f.name, addressReason(err))
			}
		}
	}
	return nil
}

// addressReason is a refused address's error without pkg/couch's prefix.
func addressReason(err error) string {
	return strings.TrimPrefix(err.Error(), "couch: ")
}
