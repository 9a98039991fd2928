package engine

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// Unreachable reports an error of a connection that could not be made:
// refused, no route, timed out while dialing, name not resolved. An
// address the node's policy refused is not (couch.ErrAddressDenied): no
// answer of the host would change it.
func Unreachable(err error) bool {
	if errors.Is(err, couch.ErrAddressDenied) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// UnreachableHost returns the base URL (scheme://host[:port]/) of the
// host a request failed to connect to, when err is such a failure
// (Unreachable, of a couch.RequestError), else "".
func UnreachableHost(err error) string {
	var rerr *couch.RequestError
	if !Unreachable(err) || !errors.As(err, &rerr) {
		return ""
	}
	u, perr := url.Parse(rerr.URL)
	if perr != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/"
}

// Probe asks base (scheme://host[:port]/) for its root, without
// credentials, and reports whether the host answers: nil for any answer,
// whatever its status, and for an error after a connection was made (a
// refused certificate: the host is there); the error when no connection
// could be made (Unreachable) or ctx ended first. Proxies are not used.
// The node's address policy (client.Addresses) applies: a host at an
// address it denies is not asked, and its error wraps
// couch.ErrAddressDenied.
func Probe(ctx context.Context, base string, client ClientSettings) error {
	tr := &http.Transport{TLSClientConfig: client.TLS, DisableKeepAlives: true,
		DialContext: (&net.Dialer{Control: client.Addresses.Control()}).DialContext}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if Unreachable(err) || errors.Is(err, couch.ErrAddressDenied) {
		return err
	}
	return nil
}
