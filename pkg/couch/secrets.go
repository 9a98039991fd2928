package couch

import (
	"encoding/base64"
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Secret fields of a replication document, as WalkSecrets names them:
// an endpoint's password ("source.password", "target.password", wherever
// the document holds it: its URL's userinfo, its "url"'s, or
// "auth.basic.password"), its token secret ("source.api_key",
// "source.client_secret"), each header value ("source.header.<name>",
// the name in lower case), a proxy URL's password ("proxy", for "proxy",
// "source_proxy" and "target_proxy" alike), and an endpoint or proxy URL
// that does not parse but may hold a userinfo ("source.url",
// "target.url", "proxy.url": the whole string).
const (
	SecretPassword = "password"
	SecretHeader   = "header."
	SecretProxy    = "proxy"
	SecretURL      = "url"
	// SecretAPIKey and SecretClientSecret are an endpoint's token secrets
	// ("source.api_key" for "auth.iam.api_key", "source.client_secret"
	// for "auth.oauth2.client_secret"), sent to its token endpoint.
	SecretAPIKey       = "api_key"
	SecretClientSecret = "client_secret"
)

// Redacted is what messages and reads show in place of a password.
const Redacted = "*****"

// proxyFields are the members of a replication document naming a proxy.
var proxyFields = []string{"proxy", "source_proxy", "target_proxy"}

// WalkSecrets calls f with every credential of a replication document
// body (see the Secret constants for their names) and puts f's result in
// its place; the first error of f stops the walk and is returned. It
// replaces body's "source", "target" and proxy members with copies where
// a nested value changes, so nested objects shared with another body are
// never modified. Values of other shapes are left alone (the parser
// refuses them).
func WalkSecrets(body map[string]any, f func(field, v string) (string, error)) error {
	return WalkSecretsTo(body, func(field, _, v string) (string, error) { return f(field, v) })
}

// WalkSecretsTo is WalkSecrets with where each credential is sent, dest:
// Destination of its endpoint's URL and proxy for an endpoint's password
// and header values, of its token endpoint and proxy for a token secret,
// Origin of the proxy's URL for a proxy's password,
// "" for a URL that does not parse.
func WalkSecretsTo(body map[string]any, f func(field, dest, v string) (string, error)) error {
	dests := map[string]string{}
	for _, side := range []string{"source", "target"} {
		var u string
		switch ep := body[side].(type) {
		case string:
			u = ep
		case map[string]any:
			u, _ = ep["url"].(string)
		}
		proxy, _ := body["proxy"].(string)
		if proxy == "" {
			proxy, _ = body[side+"_proxy"].(string)
		}
		dests[side] = Destination(u, proxy)
	}
	for _, side := range []string{"source", "target"} {
		to := func(field, v string) (string, error) {
			if field == side+"."+SecretAPIKey || field == side+"."+SecretClientSecret {
				return f(field, tokenDestination(body, side), v)
			}
			return f(field, dests[side], v)
		}
		switch ep := body[side].(type) {
		case string:
			v, err := walkURL(ep, side+"."+SecretPassword, side+"."+SecretURL, to)
			if err != nil {
				return err
			}
			body[side] = v
		case map[string]any:
			c, err := walkEndpoint(ep, side, to)
			if err != nil {
				return err
			}
			body[side] = c
		}
	}
	for _, field := range proxyFields {
		if p, ok := body[field].(string); ok {
			to := func(field, v string) (string, error) { return f(field, Origin(p), v) }
			v, err := walkURL(p, SecretProxy, SecretProxy+"."+SecretURL, to)
			if err != nil {
				return err
			}
			body[field] = v
		}
	}
	return nil
}

// Origin is the origin of URL raw, where a request to it goes: its scheme
// and host in lower case and its port, explicit
// ("https://db.example.com:443"); "" when raw is not a URL with a host.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// tokenDestination is TokenDestination of the token secret of body's
// side: its token endpoint ("auth.iam.url", IAMTokenURLDefault by
// default, or "auth.oauth2.url"), the side's endpoint and proxy, and the
// scope asked.
func tokenDestination(body map[string]any, side string) string {
	ep, _ := body[side].(map[string]any)
	auth, _ := ep["auth"].(map[string]any)
	endpoint, _ := ep["url"].(string)
	u, scope := "", ""
	if iam, ok := auth["iam"].(map[string]any); ok {
		u = IAMTokenURLDefault
		if s, ok := iam["url"].(string); ok {
			u = s
		}
	} else if o, ok := auth["oauth2"].(map[string]any); ok {
		u, _ = o["url"].(string)
		scope, _ = o["scope"].(string)
	}
	proxy, _ := body["proxy"].(string)
	if proxy == "" {
		proxy, _ = body[side+"_proxy"].(string)
	}
	return TokenDestination(u, endpoint, proxy, scope)
}

// TokenDestination is where a token secret is used: it is sent to the
// token endpoint at tokenURL (through proxy), and the token it buys to
// the endpoint, with the scope asked. A secret kept while any of them
// changes would buy a token for another peer or another scope, so each
// is part of it.
func TokenDestination(tokenURL, endpoint, proxy, scope string) string {
	d := "token " + Destination(tokenURL, proxy) + " for " + Destination(endpoint, proxy)
	if scope != "" {
		d += " scope " + strconv.Quote(scope)
	}
	return d
}

// Destination is where the credentials of an endpoint at URL endpoint
// are sent: the endpoint's Origin, and its proxy's when it has one
// ("http://db.example.com:5984 via http://proxy:3128").
func Destination(endpoint, proxy string) string {
	if proxy == "" {
		return Origin(endpoint)
	}
	return Origin(endpoint) + " via " + Origin(proxy)
}

// walkEndpoint walks an endpoint object, returning a copy (or ep itself
// when nothing in it is a credential).
func walkEndpoint(ep map[string]any, side string, f func(field, v string) (string, error)) (map[string]any, error) {
	c := maps.Clone(ep)
	if u, ok := c["url"].(string); ok {
		v, err := walkURL(u, side+"."+SecretPassword, side+"."+SecretURL, f)
		if err != nil {
			return nil, err
		}
		c["url"] = v
	}
	if auth, ok := c["auth"].(map[string]any); ok {
		if basic, ok := auth["basic"].(map[string]any); ok {
			if p, ok := basic["password"].(string); ok {
				v, err := f(side+"."+SecretPassword, p)
				if err != nil {
					return nil, err
				}
				b := maps.Clone(basic)
				b["password"] = v
				a := maps.Clone(auth)
				a["basic"] = b
				c["auth"] = a
			}
		}
	}
	if auth, ok := c["auth"].(map[string]any); ok {
		for _, t := range []struct{ kind, field string }{{"iam", SecretAPIKey}, {"oauth2", SecretClientSecret}} {
			o, ok := auth[t.kind].(map[string]any)
			if !ok {
				continue
			}
			p, ok := o[t.field].(string)
			if !ok || p == "" { // "" is refused by the parser, not sealed
				continue
			}
			v, err := f(side+"."+t.field, p)
			if err != nil {
				return nil, err
			}
			oc := maps.Clone(o)
			oc[t.field] = v
			a := maps.Clone(c["auth"].(map[string]any))
			a[t.kind] = oc
			c["auth"] = a
		}
	}
	if h, ok := c["headers"].(map[string]any); ok {
		hc := maps.Clone(h)
		for name, v := range h {
			s, ok := v.(string)
			if !ok {
				continue
			}
			r, err := f(side+"."+SecretHeader+strings.ToLower(name), s)
			if err != nil {
				return nil, err
			}
			hc[name] = r
		}
		c["headers"] = hc
	}
	return c, nil
}

// walkURL passes the password of URL raw to f as field password and
// returns raw with f's result in its place (escaped), the rest of raw as
// it was written (a template's "{db}" stays so). A URL that does not
// parse but holds an '@' after its scheme, where a userinfo may hide, is
// passed whole as field whole.
func walkURL(raw, password, whole string, f func(field, v string) (string, error)) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || hidesUserinfo(raw, u) {
		if i := strings.Index(raw, "://"); i >= 0 && strings.Contains(raw[i:], "@") {
			return f(whole, raw)
		}
		return raw, nil
	}
	if u.User == nil {
		return raw, nil
	}
	p, ok := u.User.Password()
	if !ok {
		return raw, nil
	}
	v, err := f(password, p)
	if err != nil || v == p {
		return raw, err
	}
	u.User = url.UserPassword(u.User.Username(), v)
	out := u.String()
	if i := strings.Index(raw, "://"); i >= 0 {
		out = raw[:i+3] + u.User.String() + "@" + afterUserinfo(raw)
	}
	if v == Redacted {
		// As the views print it, unescaped.
		out = strings.Replace(out, ":"+strings.Repeat("%2A", len(Redacted))+"@", ":"+Redacted+"@", 1)
	}
	return out, nil
}

// BasicAuth decodes an Authorization header value of the Basic scheme;
// ok is false for another scheme. basic reports the Basic scheme, decoded
// or not (CouchDB drops an undecodable one).
func BasicAuth(v string) (user, pass string, basic, ok bool) {
	scheme, cred, found := strings.Cut(v, " ")
	if !found || !strings.EqualFold(scheme, "basic") {
		return "", "", false, false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", "", true, false
	}
	user, pass, ok = strings.Cut(string(dec), ":")
	return user, pass, true, ok
}
