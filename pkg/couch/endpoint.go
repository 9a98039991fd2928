package couch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Endpoint is one remote database as a replication names it, normalized as
// CouchDB does: URL without userinfo and with a trailing slash (unless it has
// a query string), credentials taken out into Username/Password, the other
// headers in Headers (canonical keys).
type Endpoint struct {
	URL      *url.URL
	Headers  http.Header
	Username string
	Password string
	// Token is the endpoint's token credentials ("auth": {"iam": …} or
	// {"oauth2": …}), nil for none; an endpoint has them or a user name
	// and password, not both.
	Token *TokenAuth
}

// ParseEndpoint parses a replication endpoint: a JSON string URL, or an
// object {"url": ..., "headers": {name: value}, "auth": {"basic":
// {"username", "password"}}}.
//
// Credentials are taken, in order of precedence, from auth.basic, the URL's
// userinfo and an "Authorization: Basic" header; the winner is kept and all
// of them are removed from the URL and headers. As in CouchDB, a userinfo
// without a password or an undecodable Basic header yields no credentials
// (and is still removed); a non-Basic Authorization header (e.g. Bearer) is
// kept as a header. Errors wrap ErrInvalidEndpoint and never contain the
// password.
func ParseEndpoint(raw json.RawMessage) (Endpoint, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return Endpoint{}, fmt.Errorf("%w: missing endpoint", ErrInvalidEndpoint)
	}
	var obj struct {
		URL     *string         `json:"url"`
		Headers json.RawMessage `json:"headers"`
		Auth    json.RawMessage `json:"auth"`
	}
	var rawURL string
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &rawURL); err != nil {
			return Endpoint{}, fmt.Errorf("%w: endpoint is not a valid JSON string", ErrInvalidEndpoint)
		}
	case '{':
		if err := json.Unmarshal(raw, &obj); err != nil {
			return Endpoint{}, fmt.Errorf("%w: endpoint object is not valid JSON", ErrInvalidEndpoint)
		}
		if obj.URL == nil {
			return Endpoint{}, fmt.Errorf("%w: endpoint object has no string \"url\"", ErrInvalidEndpoint)
		}
		rawURL = *obj.URL
	default:
		return Endpoint{}, fmt.Errorf("%w: endpoint must be a URL string or an object with a \"url\"", ErrInvalidEndpoint)
	}

	ep, urlUser, urlPass, err := parseURL(rawURL)
	if err != nil {
		return Endpoint{}, err
	}
	ep.Headers = http.Header{}
	if h := bytes.TrimSpace(obj.Headers); len(h) > 0 && !bytes.Equal(h, []byte("null")) {
		var hm map[string]string
		if err := json.Unmarshal(h, &hm); err != nil {
			return Endpoint{}, fmt.Errorf("%w: endpoint \"headers\" must be an object of strings", ErrInvalidEndpoint)
		}
		keys := make([]string, 0, len(hm))
		for k := range hm {
			keys = append(keys, k)
		}
		sort.Strings(keys) // deterministic when two keys differ only in case
		for _, k := range keys {
			if k == "" || strings.ContainsAny(k, " \t\r\n:") || strings.ContainsAny(hm[k], "\r\n") {
				return Endpoint{}, fmt.Errorf("%w: endpoint header %q is not a valid HTTP header", ErrInvalidEndpoint, k)
			}
			ep.Headers.Set(k, hm[k])
		}
	}
	hdrUser, hdrPass, hdrOK := "", "", false
	if v := ep.Headers.Get("Authorization"); v != "" {
		var basic bool
		if hdrUser, hdrPass, basic, hdrOK = BasicAuth(v); basic {
			ep.Headers.Del("Authorization")
		}
	}
	authUser, authPass, authOK := "", "", false
	if a := bytes.TrimSpace(obj.Auth); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		// Other members are other plugins' (CouchDB ignores them), but a
		// near miss of a known one would keep its secret unsealed.
		var members map[string]json.RawMessage
		if json.Unmarshal(a, &members) == nil {
			for k := range members {
				switch strings.ToLower(k) {
				case "basic", "iam", "oauth2", "oauth":
					if k != "basic" && k != "iam" && k != "oauth2" {
						return Endpoint{}, fmt.Errorf("%w: endpoint \"auth\" has %q: did you mean \"basic\", \"iam\" or \"oauth2\"?", ErrInvalidEndpoint, k)
					}
				}
			}
		}
		var auth struct {
			Basic *struct {
				Username *string `json:"username"`
				Password *string `json:"password"`
			} `json:"basic"`
			IAM    json.RawMessage `json:"iam"`
			OAuth2 json.RawMessage `json:"oauth2"`
		}
		if err := json.Unmarshal(a, &auth); err != nil {
			return Endpoint{}, fmt.Errorf("%w: endpoint \"auth\" must be an object; \"auth.basic\" an object with string \"username\" and \"password\"", ErrInvalidEndpoint)
		}
		t, err := parseTokenAuth(auth.IAM, auth.OAuth2)
		if err != nil {
			return Endpoint{}, err
		}
		if t != nil {
			if auth.Basic != nil || urlUser != "" || hdrOK || ep.Headers.Get("Authorization") != "" {
				return Endpoint{}, fmt.Errorf("%w: endpoint has token credentials (\"auth.iam\" or \"auth.oauth2\") and other credentials: give one kind", ErrInvalidEndpoint)
			}
			ep.Token = t
			return ep, nil
		}
		if b := auth.Basic; b != nil {
			if b.Username == nil || *b.Username == "" || b.Password == nil {
				return Endpoint{}, fmt.Errorf("%w: endpoint \"auth.basic\" needs a non-empty string \"username\" and a string \"password\"", ErrInvalidEndpoint)
			}
			authUser, authPass, authOK = *b.Username, *b.Password, true
		}
	}
	switch {
	case authOK:
		ep.Username, ep.Password = authUser, authPass
	case urlUser != "":
		ep.Username, ep.Password = urlUser, urlPass
	case hdrOK:
		ep.Username, ep.Password = hdrUser, hdrPass
	}
	return ep, nil
}

// parseURL validates and normalizes an endpoint URL and returns the
// credentials found in its userinfo (only when it has a password).
func parseURL(raw string) (ep Endpoint, user, pass string, err error) {
	lower := strings.ToLower(raw)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		if !strings.Contains(raw, "://") {
			return Endpoint{}, "", "", fmt.Errorf("%w: %q is not an http:// or https:// URL (local database names are not supported)",
				ErrInvalidEndpoint, redactRaw(raw))
		}
		return Endpoint{}, "", "", fmt.Errorf("%w: endpoint has an invalid url: only http and https are supported", ErrInvalidEndpoint)
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.Host == "" || u.Opaque != "" {
		return Endpoint{}, "", "", fmt.Errorf("%w: endpoint has an invalid url %q", ErrInvalidEndpoint, redactRaw(raw))
	}
	if u.Port() != "" {
		if n, perr := strconv.Atoi(u.Port()); perr != nil || n < 1 || n > 65535 {
			return Endpoint{}, "", "", fmt.Errorf("%w: endpoint has an invalid port in %q", ErrInvalidEndpoint, redactRaw(raw))
		}
	}
	if hidesUserinfo(raw, u) {
		// Another '@' after the userinfo, or one after a host that has
		// none: most likely a password with an unescaped '@', '/', '?' or
		// '#', which would leave part of it in the path or the query
		// ("http://bob:2024/pw@host/db" names host bob, port 2024).
		return Endpoint{}, "", "", fmt.Errorf("%w: endpoint has an invalid url %q: escape '@', '/', '?' and '#' in the user name and password (%%40, %%2F, %%3F, %%23)",
			ErrInvalidEndpoint, redactRaw(raw))
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.User != nil {
		if p, ok := u.User.Password(); ok && u.User.Username() != "" {
			user, pass = u.User.Username(), p
		}
		u.User = nil
	}
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery == "" && !u.ForceQuery && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	return Endpoint{URL: u}, user, pass, nil
}

// HidesUserinfo reports whether URL raw holds an '@' past its userinfo (or
// past "://" when it has none), where a password with an unescaped '@',
// '/', '?' or '#' would leave part of itself in the path or the query: such
// a URL is refused, and sealed or redacted whole.
func HidesUserinfo(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && hidesUserinfo(raw, u)
}

// hidesUserinfo reports whether raw, parsed as u, holds an '@' past its
// userinfo (or past "://" when it has none): a userinfo whose password
// holds an unescaped '@', '/', '?' or '#', which url.Parse would split
// into the host and the path or query.
func hidesUserinfo(raw string, u *url.URL) bool {
	i := strings.Index(raw, "://")
	if i < 0 {
		return false
	}
	if u.User == nil {
		return strings.Contains(raw[i+3:], "@")
	}
	return strings.Contains(afterUserinfo(raw), "@")
}

// afterUserinfo is what follows the userinfo of an http(s) URL, as
// url.Parse splits it: the authority ends at the first '/', '?' or '#',
// and the userinfo at the authority's last '@'.
func afterUserinfo(raw string) string {
	after := raw[strings.Index(raw, "://")+3:]
	authority := after
	if j := strings.IndexAny(after, "/?#"); j >= 0 {
		authority = after[:j]
	}
	return after[strings.LastIndex(authority, "@")+1:]
}

// redactRaw hides a password in a string that did not parse as an
// endpoint URL: the text between the first ':' after "://" and the last '@'
// (a password may hold '/', '?' or '#' unescaped, so any '@' may end the
// userinfo) is replaced by *****; the user name is kept.
func redactRaw(s string) string {
	rest, prefix := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	userinfo := rest[:at]
	if c := strings.Index(userinfo, ":"); c >= 0 {
		userinfo = userinfo[:c] + ":*****"
	} else if strings.ContainsAny(userinfo, "/?#") {
		userinfo = "*****" // no user name to keep: the whole part may be secret
	}
	return prefix + userinfo + rest[at:]
}

// Redacted is the endpoint URL for messages and logs: the user name kept and
// the password shown as *****, e.g. "http://bob:*****@host:5984/db/".
func (e Endpoint) Redacted() string {
	if e.URL == nil {
		return ""
	}
	return RedactURL(e.URL, e.Username)
}

// String is Redacted, so formatting an Endpoint never prints the password.
func (e Endpoint) String() string { return e.Redacted() }

// GoString is Redacted too (for %#v).
func (e Endpoint) GoString() string { return "couch.Endpoint(" + e.Redacted() + ")" }

// RedactURL prints u for messages and logs: the user info it has replaced
// by user (none when user is empty) with the password Redacted.
func RedactURL(u *url.URL, user string) string {
	c := *u
	c.User = nil
	s := c.String()
	if user == "" {
		return s
	}
	scheme, rest, _ := strings.Cut(s, "://")
	return scheme + "://" + url.User(user).String() + ":" + Redacted + "@" + rest
}
