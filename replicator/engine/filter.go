package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
)

// FetchFilterCode reads the source text of a "ddoc/name" filter function
// from the replication's source (GET {source}/_design/ddoc, member
// filters.name), trimmed as CouchDB trims it (trimFilterCode). It is an input of
// ReplicationID, so editing the function changes the id. Failures wrap
// ErrFilterFetch.
func FetchFilterCode(ctx context.Context, rep Replication, opts Options) (code string, err error) {
	err = withPeers(rep, opts, func(rep Replication, src, _ *peer) error {
		code, err = fetchFilterCode(ctx, src, rep.Filter)
		return err
	})
	return code, err
}

// withPeers calls f with rep (its defaults filled in) and peers of its
// endpoints, for a few requests outside a run; they are not logged.
func withPeers(rep Replication, opts Options, f func(rep Replication, src, tgt *peer) error) error {
	rep = rep.WithDefaults()
	var nolog zerolog.Logger
	src, tgt, err := newPeers(rep, opts, &nolog, nil)
	if err != nil {
		return err
	}
	defer src.t.close()
	defer tgt.t.close()
	return f(rep, src, tgt)
}

func fetchFilterCode(ctx context.Context, src *peer, filter string) (string, error) {
	ddoc, name, ok := strings.Cut(filter, "/")
	if !ok || ddoc == "" || name == "" {
		return "", fmt.Errorf("%w: Invalid filter. Must match `ddocname/filtername`.", ErrInvalidSpec)
	}
	var d struct {
		Filters map[string]json.RawMessage `json:"filters"`
	}
	req := httpRequest{method: http.MethodGet, path: escapeDocID("_design/" + ddoc), maxBody: DocMax, limit: "DocMax"}
	err := src.doRequest(ctx, req, &d)
	if err != nil {
		if errors.Is(err, ErrMaxBackoff) {
			return "", err
		}
		return "", fmt.Errorf("%w: couldn't open document `_design/%s` from source database %s: %w", ErrFilterFetch, ddoc, src.url(), err)
	}
	var code string
	if json.Unmarshal(d.Filters[name], &code) != nil {
		return "", fmt.Errorf("%w: filter function `%s` not found in design document `_design/%s`", ErrFilterFetch, name, ddoc)
	}
	return trimFilterCode(code), nil
}
