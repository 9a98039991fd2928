package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// DBUpdate is one row of a server's _db_updates feed: a database that was
// created, updated or deleted, and the feed's sequence after it.
type DBUpdate struct {
	DB   string `json:"db_name"`
	Type string `json:"type"`
	Seq  string `json:"-"`
}

// ErrNoDBUpdates reports a server that has no _db_updates feed to give:
// CouchDB 3.x answers 404 until its _global_changes database exists
// (wrapped with ErrDBNotFound), and servers that do not have it at all
// (PouchDB, Cloudant) answer 404, 400 or 405.
var ErrNoDBUpdates = errors.New("no _db_updates feed")

// DBUpdates follows the _db_updates feed of the server of rep's source
// (its URL without the database; the source's credentials, headers and
// proxy) from since ("now": from the feed's end; "" from its start): it
// calls emit with each row, in order, until the feed closes after timeout
// without a row (CouchDB's timeout parameter), ctx ends, or emit fails,
// and returns the last sequence the feed gave (since when none). The feed
// is for server admins: a refusal wraps ErrUnauthorized (401) or
// ErrForbidden (403); a server without the feed wraps ErrNoDBUpdates.
// CouchDB coalesces a database's updates and may lose the last ones when
// a node dies: it says that a database changed, not each change.
func DBUpdates(ctx context.Context, rep Replication, opts Options, since string, timeout time.Duration, emit func(DBUpdate) error) (string, error) {
	db, err := serverResource(rep, opts, "_db_updates", timeout)
	if err != nil {
		return since, err
	}
	defer db.Close()
	q := url.Values{"feed": {"continuous"}, "timeout": {strconv.FormatInt(max(1, timeout.Milliseconds()), 10)}}
	if since != "" {
		q.Set("since", since)
	}
	res, err := db.Do(ctx, couch.Request{Method: http.MethodGet, Query: q, Stream: true, NoRetry: true})
	var he *couch.HTTPError
	switch {
	case err == nil:
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return since, fmt.Errorf("%w: %s answered %d", ErrHTTP, db.Redacted(), res.StatusCode)
		}
		return readDBUpdates(res.Body, since, emit)
	case !errors.As(err, &he):
		return since, err
	case he.Status == http.StatusUnauthorized:
		return since, fmt.Errorf("%w: %s answered 401: the credentials are refused, or are not a server admin's", ErrUnauthorized, db.Redacted())
	case he.Status == http.StatusForbidden:
		return since, fmt.Errorf("%w: %s answered 403: the credentials are not a server admin's", ErrForbidden, db.Redacted())
	case he.Status == http.StatusNotFound:
		return since, fmt.Errorf("%w: %w: %s answered 404 (CouchDB serves it once its _global_changes database exists)",
			ErrNoDBUpdates, ErrDBNotFound, db.Redacted())
	case he.Status == http.StatusBadRequest, he.Status == http.StatusMethodNotAllowed, he.Status == http.StatusNotImplemented:
		return since, fmt.Errorf("%w: %s answered %d", ErrNoDBUpdates, db.Redacted(), he.Status)
	default:
		return since, fmt.Errorf("%w: %w", ErrHTTP, err)
	}
}

// serverResource is a client of path on the server of rep's source (its
// URL without the database; the source's credentials, headers and
// proxy), one connection, no retries, its requests bounded by the
// connection timeout plus wait.
func serverResource(rep Replication, opts Options, path string, wait time.Duration) (*couch.DB, error) {
	ep := rep.Source
	base, ok := serverURL(ep.URL)
	if !ok {
		return nil, fmt.Errorf("%w: source %s names no database on a server", ErrInvalidSpec, ep.Redacted())
	}
	u := *base
	u.Path += path
	u.RawPath = ""
	ep.URL = &u
	var nolog zerolog.Logger
	db, err := couch.NewDB(ep, couch.Options{
		HTTPConnections: 1, ConnectionTimeout: rep.WithDefaults().ConnectionTimeout + wait,
		RetriesPerRequest: couch.NoRetries, Logger: &nolog, Clock: opts.Clock, TLS: opts.Client.TLS,
		Auth: opts.Client.Auth, SessionRefreshInterval: opts.Client.SessionRefreshInterval,
		IdleConnTimeout: opts.Client.IdleConnTimeout, Addresses: opts.Client.Addresses, Logins: opts.Logins, Proxy: rep.SourceProxy, Pools: opts.Pools,
		Count: opts.Client.Count,
	}, opts.Limiter)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return db, nil
}

// AllDBsPageMax bounds the names one AllDBs call asks for.
const AllDBsPageMax = 1000

// AllDBs returns up to limit (at most AllDBsPageMax) database names of
// the server of rep's source from from on ("" from the first; from
// itself included when it exists), in the server's order: GET /_all_dbs
// with start_key and limit, with the
// source's credentials, headers and proxy. CouchDB 3.x serves it to
// server admins alone by default ([chttpd] admin_only_all_dbs): a refusal
// wraps ErrUnauthorized (401) or ErrForbidden (403).
func AllDBs(ctx context.Context, rep Replication, opts Options, from string, limit int) ([]string, error) {
	limit = min(max(limit, 1), AllDBsPageMax)
	db, err := serverResource(rep, opts, "_all_dbs", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if from != "" {
		k, _ := json.Marshal(from)
		q.Set("start_key", string(k))
	}
	res, err := db.Do(ctx, couch.Request{Method: http.MethodGet, Query: q, Stream: true, NoRetry: true})
	var he *couch.HTTPError
	switch {
	case err == nil:
	case !errors.As(err, &he):
		return nil, err
	case he.Status == http.StatusUnauthorized:
		return nil, fmt.Errorf("%w: %s answered 401: the credentials are refused, or are not a server admin's", ErrUnauthorized, db.Redacted())
	case he.Status == http.StatusForbidden:
		return nil, fmt.Errorf("%w: %s answered 403: the credentials are not a server admin's", ErrForbidden, db.Redacted())
	case he.Status == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s answered 404: is the URL the server's, not a database's?", ErrHTTP, db.Redacted())
	default:
		return nil, fmt.Errorf("%w: %w", ErrHTTP, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %d", ErrHTTP, db.Redacted(), res.StatusCode)
	}
	var names []string
	if err := json.NewDecoder(io.LimitReader(res.Body, allDBsBodyMax)).Decode(&names); err != nil {
		return nil, fmt.Errorf("%w: %s: not a list of names: %v", ErrHTTP, db.Redacted(), err)
	}
	return names[:min(len(names), limit)], nil
}

// allDBsBodyMax bounds an _all_dbs answer (a page of names of at most 256
// bytes each, with room to spare).
const allDBsBodyMax = 4 << 20

// readDBUpdates parses a continuous _db_updates feed: one JSON object a
// line (blank lines are heartbeats), rows then {"last_seq"}.
func readDBUpdates(r io.Reader, since string, emit func(DBUpdate) error) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	last := since
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var row struct {
			DB      string          `json:"db_name"`
			Type    string          `json:"type"`
			Seq     json.RawMessage `json:"seq"`
			LastSeq json.RawMessage `json:"last_seq"`
		}
		if err := json.Unmarshal(line, &row); err != nil {
			return last, fmt.Errorf("%w: _db_updates: %v", errBadFeed, err)
		}
		if row.DB == "" {
			if len(row.LastSeq) > 0 {
				last = seqString(row.LastSeq)
			}
			return last, nil
		}
		last = seqString(row.Seq)
		if err := emit(DBUpdate{DB: row.DB, Type: row.Type, Seq: last}); err != nil {
			return last, err
		}
	}
	if err := sc.Err(); err != nil {
		return last, fmt.Errorf("%w: _db_updates: %w", ErrChangesFeed, err)
	}
	return last, nil
}

// serverURL is the URL of the server of a database URL: its path without
// the last segment, ending in "/".
func serverURL(u *url.URL) (*url.URL, bool) {
	if u == nil || u.Host == "" {
		return nil, false
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 || i == len(p)-1 {
		return nil, false
	}
	s := url.URL{Scheme: u.Scheme, Host: u.Host}
	if dec, err := url.PathUnescape(p[:i+1]); err == nil {
		s.Path, s.RawPath = dec, p[:i+1]
	}
	return &s, true
}
