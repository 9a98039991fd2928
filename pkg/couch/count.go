package couch

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Count is an event of a DB's requests or connections, as CouchDB's
// couch_replicator stats count them: Options.Count is told of each, with
// the endpoint's host. Name gives CouchDB's name of the stat.
type Count int

// The events Options.Count is told of.
const (
	// CountRequest is an attempt sent (requests): a retry, a 429 waited
	// out and a login count each.
	CountRequest Count = iota
	// CountResponseSuccess is an answer other than 408, 429 and 5xx to a
	// request whose body is read whole (responses.success): a 4xx counts,
	// as in CouchDB.
	CountResponseSuccess
	// CountResponseFailure is a 408 or 5xx answer to such a request
	// (responses.failure).
	CountResponseFailure
	// CountStreamSuccess and CountStreamFailure are the same for a
	// request whose body is streamed (Do: changes feeds, open_revs,
	// _db_updates); a stream that got no answer counts as a failure too
	// (stream_responses.success, stream_responses.failure).
	CountStreamSuccess
	CountStreamFailure
	// CountConnCreate is a connection made (connection.creates), and
	// CountConnClose one closed, for whatever reason (connection.closes).
	CountConnCreate
	CountConnClose
	// CountConnAcquire is a pooled connection taken for a request
	// (connection.acquires), and CountConnRelease one put back in the pool
	// after it (connection.releases).
	CountConnAcquire
	CountConnRelease
	// CountConnOwnerCrash is a request given up while it held a
	// connection, which the pool then closes: its caller cancelled it, or
	// it ran out of connection_timeout or request_timeout
	// (connection.owner_crashes).
	CountConnOwnerCrash
	// CountConnWorkerCrash is a connection that broke under a request:
	// reset, or closed by the peer (connection.worker_crashes).
	CountConnWorkerCrash

	// CountMax bounds the Counts.
	CountMax
)

var countNames = [CountMax]string{"requests", "responses.success", "responses.failure", "stream_responses.success",
	"stream_responses.failure", "connection.creates", "connection.closes", "connection.acquires", "connection.releases",
	"connection.owner_crashes", "connection.worker_crashes"}

// Name is CouchDB's name of c's stat under couch_replicator
// ("responses.success").
func (c Count) Name() string { return countNames[c] }

func (c Count) String() string { return c.Name() }

// hostPort is u's host and port, the port filled in from the scheme, in
// lower case: what Options.Count names an endpoint by.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// count tells Options.Count of c.
func (db *DB) count(c Count) {
	if db.opts.Count != nil {
		db.opts.Count(db.host, c)
	}
}

// countAnswer counts the outcome of an attempt of a request read whole
// or streamed: its answer (a 429 is a wait, not an answer: CouchDB counts
// none), or for a stream no answer (CouchDB counts its async error). An
// attempt its caller ended counts nothing.
func (db *DB) countAnswer(ctx context.Context, resp *http.Response, err error, stream bool) {
	if err != nil {
		if stream && ctx.Err() == nil {
			db.count(CountStreamFailure)
		}
		return
	}
	status := resp.StatusCode
	failed := status == 408 || status >= 500
	switch {
	case status == 429:
	case stream && failed:
		db.count(CountStreamFailure)
	case stream:
		db.count(CountStreamSuccess)
	case failed:
		db.count(CountResponseFailure)
	default:
		db.count(CountResponseSuccess)
	}
}

// countBroken counts a connection lost under an attempt whose context is
// ctx: the attempt's own end (cancelled, timed out) or the connection's.
func (db *DB) countBroken(ctx context.Context) {
	if context.Cause(ctx) != nil {
		db.count(CountConnOwnerCrash)
		return
	}
	db.count(CountConnWorkerCrash)
}

// countedDial wraps dial so that each connection it makes, and each one
// closed, is counted.
func countedDial(dial func(ctx context.Context, network, addr string) (net.Conn, error), count func(Count)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		count(CountConnCreate)
		return &countedConn{Conn: c, count: count}, nil
	}
}

// countedConn counts its first Close.
type countedConn struct {
	net.Conn
	count func(Count)
	once  sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.count(CountConnClose) })
	return c.Conn.Close()
}
