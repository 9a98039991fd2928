package couch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// TokenAuth is an endpoint's token credentials: a secret the DB exchanges
// at a token endpoint for a short-lived access token, which it sends as
// "Authorization: Bearer" (OAuth 2.0, RFC 6749 §4.4, through
// golang.org/x/oauth2). It renews the token before it expires, and once
// at once when the peer refuses it (401). Exactly one of APIKey and
// ClientID is set.
type TokenAuth struct {
	// URL is the token endpoint (an http or https URL; for IAM,
	// IAMTokenURLDefault when the document names none).
	URL string
	// APIKey is an IBM Cloud IAM API key (Cloudant's "auth": {"iam":
	// {"api_key": …}}): the grant urn:ibm:params:oauth:grant-type:apikey.
	APIKey string
	// ClientID and ClientSecret are OAuth 2.0 client credentials
	// ("auth": {"oauth2": {…}}), sent as HTTP Basic (RFC 6749 §2.3.1);
	// Scope, space-separated, is asked for when not empty.
	ClientID, ClientSecret, Scope string
}

// IAMTokenURLDefault is IBM Cloud IAM's token endpoint, where an
// "iam" endpoint that names none exchanges its API key.
const IAMTokenURLDefault = "https://iam.cloud.ibm.com/identity/token"

// iamGrant is IAM's grant type for an API key.
const iamGrant = "urn:ibm:params:oauth:grant-type:apikey"

// Token renewal: a token is renewed tokenRenewShare of its lifetime
// before it expires, at most tokenRenewMax; a token without an expiry is
// kept until the peer refuses it.
const (
	tokenRenewShare = 0.2
	tokenRenewMax   = time.Minute
)

// tokenSource holds one DB's access token.
type tokenSource struct {
	db     *DB
	cfg    clientcredentials.Config
	client *http.Client  // the DB's dialer, address policy, TLS and proxy
	sem    chan struct{} // one fetch at a time; held, it guards the fields below
	tok    string
	renew  time.Time // zero: no expiry known
}

func newTokenSource(db *DB, t *TokenAuth, tr *http.Transport) *tokenSource {
	cfg := clientcredentials.Config{TokenURL: t.URL}
	if t.APIKey != "" {
		cfg.AuthStyle = oauth2.AuthStyleInParams
		cfg.EndpointParams = url.Values{"grant_type": {iamGrant}, "apikey": {t.APIKey}}
	} else {
		cfg.ClientID, cfg.ClientSecret, cfg.AuthStyle = t.ClientID, t.ClientSecret, oauth2.AuthStyleInHeader
		if t.Scope != "" {
			cfg.Scopes = strings.Fields(t.Scope)
		}
	}
	return &tokenSource{db: db, cfg: cfg, sem: make(chan struct{}, 1),
		client: &http.Client{Transport: tr, Timeout: db.opts.ConnectionTimeout,
			// A redirect would send the secret's form to another URL:
			// the redirect is the answer (and an error).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get returns the current token, fetching a new one when there is none or
// it is due for renewal.
func (s *tokenSource) get(ctx context.Context) (string, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-s.sem }()
	now := s.db.opts.Clock.Now()
	if s.tok != "" && (s.renew.IsZero() || now.Before(s.renew)) {
		return s.tok, nil
	}
	t, err := s.cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, s.client))
	if err != nil {
		return "", s.refused(err)
	}
	s.tok, s.renew = t.AccessToken, time.Time{}
	if !t.Expiry.IsZero() {
		// x/oauth2 computes Expiry from expires_in on the real clock.
		life := time.Until(t.Expiry)
		s.renew = now.Add(life - min(tokenRenewMax, time.Duration(float64(life)*tokenRenewShare)))
	}
	s.db.log().Debug().Str("token_url", s.where()).Time("renew_at", s.renew).Msg("couch: access token fetched")
	return s.tok, nil
}

// rejected drops tok after the peer refused it with 401, so that the
// next attempt fetches a new one (the caller bounds such retries); it
// reports false when ctx ended.
func (s *tokenSource) rejected(ctx context.Context, tok string) bool {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-s.sem }()
	if s.tok == tok {
		s.tok = ""
	}
	return true
}

// where is the token endpoint's URL, without its query.
func (s *tokenSource) where() string {
	u, err := url.Parse(s.cfg.TokenURL)
	if err != nil {
		return ""
	}
	u.RawQuery, u.User = "", nil
	return u.String()
}

// refused is the error of a token fetch that failed: the token endpoint's
// answer as an *HTTPError with Login set (the request that needed the
// token was not sent), or the failure to reach it.
func (s *tokenSource) refused(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		status := re.Response.StatusCode
		reason := fmt.Sprintf("the token endpoint answered %d", status)
		if re.ErrorCode != "" {
			reason += " " + re.ErrorCode
		}
		desc := re.ErrorDescription
		if desc == "" {
			// IBM Cloud IAM's own shape.
			var iam struct {
				Code    string `json:"errorCode"`
				Message string `json:"errorMessage"`
			}
			if json.Unmarshal(re.Body, &iam) == nil && iam.Message != "" {
				desc = strings.TrimSpace(iam.Code + " " + iam.Message)
			}
		}
		if desc != "" {
			reason += ": " + desc
		}
		if status >= 400 && status < 500 {
			// It refused the credentials (RFC 6749 §5.2 answers 400
			// invalid_client, IAM 400 for an unknown key): to the
			// caller, as a login refused.
			status = http.StatusUnauthorized
		}
		// Body is CouchDB's shape of the same, for readers of bodies.
		body, _ := json.Marshal(map[string]string{"error": "token_refused", "reason": reason})
		return &HTTPError{Status: status, Method: http.MethodPost, URL: s.where(), Login: true,
			Error_: "token_refused", Reason: reason, Body: body}
	}
	return &RequestError{Method: http.MethodPost, URL: s.where(), Attempts: 1, Err: fmt.Errorf("token endpoint: %w", err)}
}

// parseTokenAuth parses an endpoint's "auth.iam" ({"api_key", "url"}) or
// "auth.oauth2" ({"url", "client_id", "client_secret", "scope"}); nil
// when neither is given.
func parseTokenAuth(iam, oauth json.RawMessage) (*TokenAuth, error) {
	given := func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
	}
	// Only the members it knows: a misspelt one would keep a secret the
	// sealing does not know of, in the clear.
	only := func(name string, raw json.RawMessage, known ...string) error {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil // the decoding below says what is wrong
		}
		for k := range m {
			if !slices.Contains(known, k) {
				return fmt.Errorf("%w: endpoint \"auth.%s\" has %q: it takes %s", ErrInvalidEndpoint, name, k, strings.Join(known, ", "))
			}
		}
		return nil
	}
	var t TokenAuth
	switch {
	case given(iam) && given(oauth):
		return nil, fmt.Errorf("%w: endpoint \"auth\" has both \"iam\" and \"oauth2\": give one", ErrInvalidEndpoint)
	case given(iam):
		var v struct {
			APIKey *string `json:"api_key"`
			URL    *string `json:"url"`
		}
		if err := only("iam", iam, "api_key", "url"); err != nil {
			return nil, err
		}
		if json.Unmarshal(iam, &v) != nil || v.APIKey == nil || strings.TrimSpace(*v.APIKey) == "" {
			return nil, fmt.Errorf("%w: endpoint \"auth.iam\" needs a non-empty string \"api_key\" (and may name its token endpoint, a string \"url\")", ErrInvalidEndpoint)
		}
		t.APIKey, t.URL = *v.APIKey, IAMTokenURLDefault
		if v.URL != nil {
			t.URL = *v.URL
		}
	case given(oauth):
		var v struct {
			URL          *string `json:"url"`
			ClientID     *string `json:"client_id"`
			ClientSecret *string `json:"client_secret"`
			Scope        *string `json:"scope"`
		}
		if err := only("oauth2", oauth, "url", "client_id", "client_secret", "scope"); err != nil {
			return nil, err
		}
		if json.Unmarshal(oauth, &v) != nil || v.URL == nil || v.ClientID == nil || strings.TrimSpace(*v.ClientID) == "" || v.ClientSecret == nil {
			return nil, fmt.Errorf("%w: endpoint \"auth.oauth2\" needs strings \"url\" (its token endpoint), \"client_id\" (not empty) and \"client_secret\", and may ask a \"scope\"", ErrInvalidEndpoint)
		}
		t.URL, t.ClientID, t.ClientSecret = *v.URL, *v.ClientID, *v.ClientSecret
		if v.Scope != nil {
			t.Scope = *v.Scope
		}
	default:
		return nil, nil
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%w: the token endpoint %q is not an http(s) URL without credentials", ErrInvalidEndpoint, redactRaw(t.URL))
	}
	return &t, nil
}
