package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// couchTransport sends the engine's requests through pkg/couch, which does
// the retries (408, 5xx, transport errors, 250 ms doubling), the 429
// back-off and the inactivity timeouts.
type couchTransport struct{ db *couch.DB }

// newPeers builds the source and target clients. The source gets at least
// two connections: a streamed changes feed holds one for as long as it runs.
func (r *Run) newPeers() (*peer, *peer, error) {
	opts := couch.Options{
		HTTPConnections:   r.rep.HTTPConnections,
		ConnectionTimeout: r.rep.ConnectionTimeout,
		RetriesPerRequest: r.rep.RetriesPerRequest,
		Logger:            &r.log,
	}
	if opts.RetriesPerRequest == 0 {
		opts.RetriesPerRequest = couch.NoRetries
	}
	srcOpts, tgtOpts := opts, opts
	srcOpts.HTTPConnections = max(2, opts.HTTPConnections)
	srcOpts.Proxy, tgtOpts.Proxy = r.rep.SourceProxy, r.rep.TargetProxy
	src, err := couch.NewDB(r.rep.Source, srcOpts, r.opts.Limiter)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: source: %w", ErrInvalidSpec, err)
	}
	tgt, err := couch.NewDB(r.rep.Target, tgtOpts, r.opts.Limiter)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: target: %w", ErrInvalidSpec, err)
	}
	return &peer{t: couchTransport{src}}, &peer{t: couchTransport{tgt}}, nil
}

func (t couchTransport) redacted() string { return t.db.Redacted() }

// close releases idle connections.
func (t couchTransport) close() { t.db.Close() }

// call maps pkg/couch's results onto httpResult: every HTTP answer becomes a
// status (2xx bodies read whole unless streamed), and only requests without
// an answer are errors, wrapped in ErrMaxBackoff or ErrHTTP.
func (t couchTransport) call(ctx context.Context, r httpRequest) (*httpResult, error) {
	req := couch.Request{Method: r.method, Path: r.path, Query: r.query, Header: r.header, Body: r.body,
		NoRetry: r.noRetry, Stream: r.stream}
	if r.stream {
		resp, err := t.db.Do(ctx, req)
		if err != nil {
			return t.failure(ctx, r, err)
		}
		return &httpResult{status: resp.StatusCode, header: resp.Header, stream: resp.Body}, nil
	}
	body, err := t.db.DoBytes(ctx, req)
	if err != nil {
		return t.failure(ctx, r, err)
	}
	return &httpResult{status: http.StatusOK, body: body}, nil
}

func (t couchTransport) failure(ctx context.Context, r httpRequest, err error) (*httpResult, error) {
	var he *couch.HTTPError
	switch {
	case errors.As(err, &he):
		res := &httpResult{status: he.Status, header: he.Header, body: he.Body}
		if r.stream {
			res.stream = io.NopCloser(strings.NewReader(""))
		}
		return res, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, couch.ErrMaxBackoff):
		return nil, fmt.Errorf("%w: %w", ErrMaxBackoff, err)
	}
	return nil, fmt.Errorf("%w: %w", ErrHTTP, err)
}
