package replicator

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/seal"
)

// Credentials at rest (see doc.go, "Credentials at rest"): the control
// plane seals every credential of a replication (SealBody) before its
// document or job is stored, and the replication node that runs it opens
// them (Spec.Open) for the run alone. Each sealed value is bound to its
// place: the document (or the user of a POST /_replicate) and the field,
// so a value copied elsewhere does not open; and to where it is sent, its
// destination (couch.Destination: the origin of its endpoint and of the
// endpoint's proxy, or a proxy's own), so a value kept while the document
// now sends it elsewhere does not open either.

// Redacted is what reads show in place of a sealed credential; a write
// that gives it back keeps the credential its replaced revision held.
const Redacted = couch.Redacted

// DocScope is the sealing scope of a _replicator document's credentials.
func DocScope(db, docID string) string { return "doc\x00" + db + "\x00" + docID }

// UserScope is the sealing scope of the credentials of a replication that
// user posted to /_replicate.
func UserScope(user string) string { return "user\x00" + user }

// SealScope is the sealing scope of the job's credentials.
func (d *JobData) SealScope() string {
	if d.Transient() {
		return UserScope(d.RepUser)
	}
	return DocScope(d.DBName, d.DocID)
}

func sealContext(scope, field string) []byte { return []byte(scope + "\x00" + field) }

// sealBinding is the binding of a credential sent to dest.
func sealBinding(dest string) []byte { return []byte(dest) }

// SealBody seals, in place, the credentials of a replication body (a
// _replicator document or a POST /_replicate body) for scope and where
// each is sent: endpoint passwords (in a URL or auth.basic), header
// values and proxy passwords (couch.WalkSecretsTo). A Basic Authorization header becomes the
// endpoint's auth.basic, as the parser reads it, unless the endpoint has
// credentials of its own (then it is dropped, as the parser ignores it):
// the views keep showing the user name. Values already sealed are kept.
// Redacted, where no earlier revision supplied the credential, is an
// ErrBadRequest naming the field, returned once the others are sealed.
func SealBody(s *seal.Sealer, body map[string]any, scope string) error {
	for _, side := range []string{"source", "target"} {
		if ep, ok := body[side].(map[string]any); ok {
			body[side], _ = adoptBasicHeader(ep)
		}
	}
	var redacted error
	err := couch.WalkSecretsTo(body, func(field, dest, v string) (string, error) {
		switch {
		case seal.IsSealed(v):
			return v, nil
		case v == Redacted:
			if redacted == nil {
				redacted = newReason(ErrBadRequest, "`%s` is %s, what reads show for a sealed credential: "+
					"give the credential itself, or write the document over the revision that holds it", field, Redacted)
			}
			return v, nil // the others are sealed all the same
		}
		return s.Seal(v, sealContext(scope, field), sealBinding(dest))
	})
	return cmp.Or(err, redacted)
}

// adoptBasicHeader moves a Basic Authorization header of endpoint object
// ep into auth.basic where the endpoint has no other credentials, and
// drops it otherwise; it returns ep, or a changed copy and true.
func adoptBasicHeader(ep map[string]any) (map[string]any, bool) {
	h, ok := ep["headers"].(map[string]any)
	if !ok {
		return ep, false
	}
	if auth, ok := ep["auth"].(map[string]any); ok && (auth["iam"] != nil || auth["oauth2"] != nil) {
		return ep, false // token credentials and a header: the parser refuses both
	}
	for name, v := range h {
		s, ok := v.(string)
		if !ok || !strings.EqualFold(name, "authorization") {
			continue
		}
		user, pass, basic, decoded := couch.BasicAuth(s)
		if !basic {
			continue
		}
		c, hc := maps.Clone(ep), maps.Clone(h)
		delete(hc, name)
		c["headers"] = hc
		if decoded && user != "" && !hasCredentials(ep) {
			c["auth"] = map[string]any{"basic": map[string]any{"username": user, "password": pass}}
		}
		return c, true
	}
	return ep, false
}

// hasCredentials reports an endpoint object with auth.basic or a URL with
// a user name and password (what the parser prefers to a header).
func hasCredentials(ep map[string]any) bool {
	if auth, ok := ep["auth"].(map[string]any); ok && auth["basic"] != nil {
		return true
	}
	raw, _ := ep["url"].(string)
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	_, ok := u.User.Password()
	return ok && u.User.Username() != ""
}

// SealJSON is SealBody for a JSON object: it returns the body to store,
// also with SealBody's ErrBadRequest for a Redacted value (every other
// credential sealed).
func SealJSON(s *seal.Sealer, raw json.RawMessage, scope string) (json.RawMessage, error) {
	body, err := decodeBody(raw)
	if err != nil {
		return nil, err
	}
	serr := SealBody(s, body, scope)
	if serr != nil && !errors.Is(serr, ErrBadRequest) {
		return nil, serr // a value that could not be sealed: nothing is stored
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return b, serr
}

func decodeBody(raw json.RawMessage) (map[string]any, error) {
	var body map[string]any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(&body); err != nil || body == nil {
		return nil, newReason(ErrBadRequest, "the replication must be a JSON object")
	}
	return body, nil
}

// Sealed reports whether the specification holds a sealed credential.
func (s *Spec) Sealed() bool { return s.SealedKeyID() != "" }

// SealedKeyID is the key id of s's first sealed credential ("" for
// none).
func (s *Spec) SealedKeyID() string {
	id := ""
	s.eachSecret(func(_, _ string, v *string) { // changes nothing: v is left as it is
		if k, ok := seal.KeyID(*v); ok && id == "" {
			id = k
		}
	})
	return id
}

// Open returns s with its sealed credentials opened with o for scope (the
// job's SealScope) and where s sends each; s itself when none is sealed.
// Errors wrap seal.ErrNoKey (o is nil or lacks the key: the error names
// its id) or seal.ErrCorrupt (altered, sealed for another place, or for
// another destination: the credential is not sent); OpenReason words
// them for the job's error.
func (s *Spec) Open(o *seal.Opener, scope string) (*Spec, error) {
	if !s.Sealed() {
		return s, nil
	}
	open := func(field, dest, v string) (string, error) {
		if o == nil {
			id, _ := seal.KeyID(v)
			return "", fmt.Errorf("%w %s: this node holds no private key ([replicator] seal_private_key_files)", seal.ErrNoKey, id)
		}
		p, err := o.Open(v, sealContext(scope, field), sealBinding(dest))
		if err != nil && seal.Bound(v) && errors.Is(err, seal.ErrCorrupt) {
			err = fmt.Errorf("%w: `%s` was not sealed for %s", err, field, cmp.Or(dest, "this URL"))
		}
		return p, err
	}
	c := s.clone()
	var err error
	c.eachSecret(func(field, dest string, v *string) {
		if err == nil && seal.IsSealed(*v) {
			var p string
			if p, err = open(field, dest, *v); err == nil {
				*v = p
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// clone is a copy of s that eachSecret may change (its headers copied).
func (s *Spec) clone() *Spec {
	c := *s
	c.Source.Headers, c.Target.Headers = maps.Clone(s.Source.Headers), maps.Clone(s.Target.Headers)
	return &c
}

// OpenReason is the job's error for a failure of Spec.Open.
func OpenReason(err error) string {
	if errors.Is(err, seal.ErrNoKey) {
		return "this node cannot open the replication's sealed credentials: " + err.Error()
	}
	return "the replication's sealed credentials do not open (altered, copied from another document, " +
		"or kept while their endpoint or proxy changed): write them again; " + err.Error()
}

// eachSecret calls f with each credential of s, with where it is sent
// (as couch.WalkSecretsTo gives it for the document), and stores what f
// leaves in it: passwords, header values and proxy passwords (written
// back into their URL).
func (s *Spec) eachSecret(f func(field, dest string, v *string)) {
	for _, side := range []struct {
		name string
		ep   *EndpointSpec
	}{{"source", &s.Source}, {"target", &s.Target}} {
		ep := side.ep
		dest := couch.Destination(ep.URL, ep.Proxy)
		if ep.Password != "" {
			f(side.name+"."+couch.SecretPassword, dest, &ep.Password)
		}
		if t := ep.Token; t != nil {
			c := *t // ep.Token may be shared with another Spec
			tdest := couch.TokenDestination(t.URL, ep.URL, ep.Proxy, t.Scope)
			if c.APIKey != "" {
				f(side.name+"."+couch.SecretAPIKey, tdest, &c.APIKey)
			}
			if c.ClientSecret != "" {
				f(side.name+"."+couch.SecretClientSecret, tdest, &c.ClientSecret)
			}
			ep.Token = &c
		}
		for k, v := range ep.Headers {
			nv := v
			if f(side.name+"."+couch.SecretHeader+strings.ToLower(k), dest, &nv); nv != v {
				ep.Headers[k] = nv
			}
		}
		if ep.Proxy == "" {
			continue
		}
		u, err := url.Parse(ep.Proxy)
		if err != nil || u.User == nil {
			continue
		}
		pw, ok := u.User.Password()
		if !ok {
			continue
		}
		if f(couch.SecretProxy, couch.Origin(ep.Proxy), &pw); pw != proxyPassword(ep.Proxy) {
			u.User = url.UserPassword(u.User.Username(), pw)
			ep.Proxy = u.String()
		}
	}
}

// proxyPassword is the password of proxy URL p ("" for none).
func proxyPassword(p string) string {
	u, err := url.Parse(p)
	if err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

// SealWebhookSecret seals h's secret with s (nil: kept as written).
func SealWebhookSecret(s *seal.Sealer, h *Webhook) error {
	if s == nil || seal.IsSealed(h.Secret) {
		return nil
	}
	v, err := s.Seal(h.Secret, sealContext(webhookSealScope(h.Owner, h.ID), "secret"), sealBinding(webhookOrigin(h.URL)))
	if err != nil {
		return err
	}
	h.Secret = v
	return nil
}

// WebhookSecret returns h's secret in clear, opened with o when sealed.
func WebhookSecret(o *seal.Opener, h *Webhook) (string, error) {
	if !seal.IsSealed(h.Secret) {
		return h.Secret, nil
	}
	if o == nil {
		return "", errors.New("the webhook's secret is sealed and this node holds no key ([replicator] seal_private_key_files)")
	}
	return o.Open(h.Secret, sealContext(webhookSealScope(h.Owner, h.ID), "secret"), sealBinding(webhookOrigin(h.URL)))
}
