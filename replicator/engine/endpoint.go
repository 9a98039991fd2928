package engine

import (
	"fmt"
	"net/url"
	"strings"
)

// Endpoint is a normalized replication endpoint: a database URL with a
// trailing slash and no userinfo, Basic credentials and extra headers.
// (Placeholder until pkg/couch's Endpoint lands.)
type Endpoint struct {
	URL      *url.URL
	Username string
	Password string
	Headers  map[string]string
}

// ParseEndpoint normalizes a database URL (credentials moved out of it, a
// trailing slash added).
func ParseEndpoint(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Endpoint{}, fmt.Errorf("%w: endpoint has an invalid url", ErrInvalidSpec)
	}
	ep := Endpoint{}
	if u.User != nil {
		ep.Username = u.User.Username()
		ep.Password, _ = u.User.Password()
		u.User = nil
	}
	if u.RawQuery == "" && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	ep.URL = u
	return ep, nil
}

func (ep Endpoint) validate() error {
	if ep.URL == nil {
		return fmt.Errorf("missing endpoint")
	}
	return nil
}

func (ep Endpoint) id() endpointID { return newEndpointID(ep.URL, ep.Username, ep.Headers) }

// Redacted is the URL for messages (never with a password).
func (ep Endpoint) Redacted() string {
	if ep.URL == nil {
		return ""
	}
	return ep.URL.String()
}
