package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// TransportFunc builds the transport for one endpoint of a replication.
type TransportFunc func(ep Endpoint, rep Replication) (Transport, error)

// Transport is how the engine reaches a peer. See the transport interface.
type Transport = transport

func (r *Run) newPeers() (*peer, *peer, error) {
	mk := r.opts.Transport
	if mk == nil {
		mk = newStdTransport
	}
	st, err := mk(r.rep.Source, r.rep)
	if err != nil {
		return nil, nil, err
	}
	tt, err := mk(r.rep.Target, r.rep)
	if err != nil {
		return nil, nil, err
	}
	return &peer{t: st}, &peer{t: tt}, nil
}

// stdTransport is a plain net/http transport with CouchDB's retry rules
// (408/5xx/transport errors retried with 250 ms doubling waits).
type stdTransport struct {
	ep      Endpoint
	client  *http.Client
	retries int
}

func newStdTransport(ep Endpoint, rep Replication) (Transport, error) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: rep.ConnectionTimeout}).DialContext,
		MaxIdleConnsPerHost: rep.HTTPConnections,
		MaxConnsPerHost:     rep.HTTPConnections,
		IdleConnTimeout:     90 * time.Second,
	}
	return &stdTransport{ep: ep, client: &http.Client{Transport: tr}, retries: rep.RetriesPerRequest}, nil
}

func (t *stdTransport) redacted() string { return t.ep.Redacted() }

func (t *stdTransport) call(ctx context.Context, r httpRequest) (*httpResult, error) {
	wait := retryWaitDefault
	for attempt := 0; ; attempt++ {
		res, err := t.once(ctx, r)
		retry := err != nil || res.status == 408 || res.status == 429 || res.status >= 500
		if !retry || r.noRetry || attempt >= t.retries || ctx.Err() != nil {
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("%w: %s %s: %v", ErrHTTP, r.method, t.redacted()+r.path, err)
			}
			return res, nil
		}
		if res != nil && res.stream != nil {
			res.stream.Close()
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(2*wait, retryWaitMax)
	}
}

func (t *stdTransport) once(ctx context.Context, r httpRequest) (*httpResult, error) {
	u := *t.ep.URL
	u.Path += r.path
	u.RawPath = ""
	if t.ep.URL.RawPath != "" || r.path != "" {
		u.RawPath = t.ep.URL.EscapedPath() + r.path
	}
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	for k, v := range t.ep.Headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	if t.ep.Username != "" {
		req.SetBasicAuth(t.ep.Username, t.ep.Password)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	res := &httpResult{status: resp.StatusCode, header: resp.Header}
	if r.stream {
		res.stream = resp.Body
		return res, nil
	}
	defer resp.Body.Close()
	res.body, err = io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return res, nil
}

var _ = errors.New
