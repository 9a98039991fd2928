package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of the cluster client.
const (
	// ClusterURLDefault is the cluster jobs and docs ask when neither
	// -cluster nor $FDBREP_CLUSTER names one: fdbrep serve's default
	// address.
	ClusterURLDefault = "http://127.0.0.1:5984"
	// RequestTimeoutDefault bounds each request to the cluster except a
	// one-shot POST /_replicate, which lasts as long as the replication.
	RequestTimeoutDefault = 30 * time.Second
	// maxReplyBytes bounds a reply read from the cluster.
	maxReplyBytes = 64 << 20
)

// client talks to a running cluster's HTTP API (CouchDB's shapes) with a
// plain net/http client: the base URL carries no credentials, they go in
// an Authorization header.
type client struct {
	base  *url.URL // scheme://host[:port][/prefix], no userinfo
	creds Creds
	http  *http.Client
}

// apiError is a reply of the cluster other than 2xx, with CouchDB's
// {"error", "reason"} body.
type apiError struct {
	Method, Path string
	Status       int
	Tag, Reason  string
}

func (e *apiError) Error() string {
	if e.Tag == "" {
		return fmt.Sprintf("%s %s: HTTP %d", e.Method, e.Path, e.Status)
	}
	return fmt.Sprintf("%s: %s", e.Tag, e.Reason)
}

// newClient parses the cluster URL and resolves its credentials.
func newClient(rawURL string, creds *credSource) (*client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cluster URL %q: want http://host:port or https://host:port", redactedURL(rawURL))
	}
	c := &client{creds: creds.cluster(u), http: &http.Client{}}
	if creds.tls != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = creds.tls
		c.http.Transport = tr
	}
	base := *u
	base.User, base.RawQuery, base.Fragment = nil, "", ""
	base.Path = strings.TrimSuffix(base.Path, "/")
	c.base = &base
	return c, nil
}

// String is the cluster's URL as shown to the user (no credentials).
func (c *client) String() string { return c.base.String() }

// do sends a request with a JSON body (nil: none) and decodes a 2xx reply
// into out (nil: discarded). Other statuses are *apiError; a cluster that
// cannot be reached is an error naming it. timeout 0 means none.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any, timeout time.Duration) (int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.creds.User != "" || c.creds.Password != "" {
		req.SetBasicAuth(c.creds.User, c.creds.Password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("cannot reach the cluster at %s: %w", c, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("reading the cluster's reply to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &apiError{Method: method, Path: path, Status: resp.StatusCode}
		var e struct {
			Error  string `json:"error"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(raw, &e) == nil {
			ae.Tag, ae.Reason = e.Error, e.Reason
		}
		return resp.StatusCode, ae
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("the cluster's reply to %s %s is not the JSON expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// explain names the cluster in a refusal of it (a transport error names
// it already).
func (c *client) explain(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return fmt.Errorf("the cluster at %s: %w", c, err)
	}
	return err
}

// notFound reports whether err is the cluster's 404.
func notFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// get is do for a GET with the default timeout.
func (c *client) get(ctx context.Context, path string, query url.Values, out any) error {
	_, err := c.do(ctx, http.MethodGet, path, query, nil, out, RequestTimeoutDefault)
	return err
}

// session returns the user the cluster knows us as ("" for anonymous),
// checking the credentials before anything else is asked.
func (c *client) session(ctx context.Context) (string, error) {
	var s struct {
		UserCtx struct {
			Name *string `json:"name"`
		} `json:"userCtx"`
	}
	if err := c.get(ctx, "/_session", nil, &s); err != nil {
		return "", err
	}
	if s.UserCtx.Name == nil {
		return "", nil
	}
	return *s.UserCtx.Name, nil
}

// serverUUID returns the installation's server UUID that GET / reports
// (as CouchDB does), or "" when the cluster does not report one.
func (c *client) serverUUID(ctx context.Context) string {
	var welcome struct {
		UUID string `json:"uuid"`
	}
	if c.get(ctx, "/", nil, &welcome) != nil {
		return ""
	}
	return welcome.UUID
}
