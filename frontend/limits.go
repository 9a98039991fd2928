package frontend

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of Limits.
const (
	// MaxConnectionsDefault caps open connections; the process's file limit
	// (RLIMIT_NOFILE) lowers it, keeping FileReserve descriptors for the
	// store, outbound connections and logs.
	MaxConnectionsDefault = 10_000
	// FileReserve is how many file descriptors the connection cap leaves
	// to the rest of the process.
	FileReserve = 256
	// HeaderTimeoutDefault bounds the reading of a request line and headers.
	HeaderTimeoutDefault = 10 * time.Second
	// BodyTimeoutDefault bounds the reading of a request body, from the end
	// of the headers.
	BodyTimeoutDefault = 30 * time.Second
	// IdleTimeoutDefault closes keep-alive connections idle this long.
	IdleTimeoutDefault = 2 * time.Minute
	// MaxClientRequestsDefault caps the requests one client (a user, or an
	// anonymous client's address) has in flight; server admins and GET
	// /_up are not counted.
	MaxClientRequestsDefault = 100
	// MaxHeaderBytesDefault caps a request's headers.
	MaxHeaderBytesDefault = 64 << 10
	// LingerDefault is how long a connection closed before its request's
	// body was read waits, write side shut, reading and discarding what
	// the client still sends, before it closes. Closing at once, with
	// unread bytes, makes the kernel reset the connection, and a client
	// may drop the reply it had not read yet (RFC 9112 §9.6; net/http
	// waits the same 500 ms). The connection stays counted, and
	// evictable, meanwhile.
	LingerDefault = 500 * time.Millisecond
)

// Limits protect a node's listeners from slow and greedy clients.
type Limits struct {
	// MaxConnections caps open connections (0: MaxConnectionsDefault). At
	// the cap a new connection closes the one that has been idle, or still
	// sending its request, or waiting in a longpoll, the longest; when
	// every connection is busy in a handler the new one is closed at once.
	// The process's file limit lowers the cap (see FileReserve).
	MaxConnections int
	// HeaderTimeout, BodyTimeout and IdleTimeout: see the defaults.
	HeaderTimeout time.Duration
	BodyTimeout   time.Duration
	IdleTimeout   time.Duration
	// MaxClientRequests: see MaxClientRequestsDefault; negative disables
	// the cap.
	MaxClientRequests int
	// MaxHeaderBytes: see MaxHeaderBytesDefault.
	MaxHeaderBytes int
}

func (l Limits) withDefaults() Limits {
	l.MaxConnections = cmp.Or(l.MaxConnections, MaxConnectionsDefault)
	l.HeaderTimeout = cmp.Or(l.HeaderTimeout, HeaderTimeoutDefault)
	l.BodyTimeout = cmp.Or(l.BodyTimeout, BodyTimeoutDefault)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, IdleTimeoutDefault)
	l.MaxClientRequests = cmp.Or(l.MaxClientRequests, MaxClientRequestsDefault)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, MaxHeaderBytesDefault)
	return l
}

func (l Limits) validate() error {
	switch {
	case l.MaxConnections < 1:
		return fmt.Errorf("%w: MaxConnections %d is under 1", ErrInvalidOptions, l.MaxConnections)
	case l.HeaderTimeout < time.Millisecond, l.BodyTimeout < time.Millisecond, l.IdleTimeout < time.Millisecond:
		return fmt.Errorf("%w: limit timeouts must be at least a millisecond", ErrInvalidOptions)
	case l.MaxHeaderBytes < 4096:
		return fmt.Errorf("%w: MaxHeaderBytes %d is under 4096", ErrInvalidOptions, l.MaxHeaderBytes)
	}
	return nil
}

// connCap is MaxConnections lowered to what the file limit allows.
func (l Limits) connCap() int {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur > FileReserve*2 {
		return min(l.MaxConnections, int(rl.Cur)-FileReserve)
	}
	return l.MaxConnections
}

// HTTPServer runs handlers under Limits: Serve wraps a listener so that
// connections stay under the cap, and the http.Server enforces the header
// and idle timeouts. Request-level limits (body deadline, requests per
// client) are applied by the handler (Server does; others may use
// BodyDeadline).
type HTTPServer struct {
	*http.Server
	limits Limits
	conns  *connSet
}

// NewHTTPServer returns a server for h with limits (zero fields: the
// defaults).
func NewHTTPServer(h http.Handler, limits Limits) (*HTTPServer, error) {
	limits = limits.withDefaults()
	if err := limits.validate(); err != nil {
		return nil, err
	}
	cs := &connSet{max: limits.connCap(), all: map[*trackedConn]struct{}{}, maxHeaderBytes: limits.MaxHeaderBytes}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: limits.HeaderTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := tracked(c); ok {
				return context.WithValue(ctx, connKey{}, tc)
			}
			return ctx
		},
		ConnState: cs.stateChanged,
	}
	return &HTTPServer{Server: srv, limits: limits, conns: cs}, nil
}

// Serve accepts connections on ln under the connection cap until Shutdown
// or Close.
func (s *HTTPServer) Serve(ln net.Listener) error {
	return s.Server.Serve(&cappedListener{Listener: ln, set: s.conns})
}

// ServeTLS is Serve over TLS with cfg (HTTP/1.1, as CouchDB serves): the
// cap counts TCP connections, handshakes included.
func (s *HTTPServer) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	return s.Server.Serve(tls.NewListener(&cappedListener{Listener: ln, set: s.conns}, cfg))
}

// tracked returns the trackedConn c is, or carries under TLS.
func tracked(c net.Conn) (*trackedConn, bool) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, ok := c.(*trackedConn)
	return tc, ok
}

// Connections reports the open connections and the cap.
func (s *HTTPServer) Connections() (open, capacity int) {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return len(s.conns.all), s.conns.max
}

type connKey struct{}

// connSet tracks a listener's open connections and which may be closed
// to make room.
type connSet struct {
	max int
	mu  sync.Mutex
	all map[*trackedConn]struct{}
	// maxHeaderBytes is Limits.MaxHeaderBytes, for the reason of a 431.
	maxHeaderBytes int
}

// trackedConn is a connection of a connSet. evictable is set while the
// connection waits for a request (new or idle), reads a request body or
// waits in a longpoll; since is when that began.
type trackedConn struct {
	net.Conn
	set       *connSet
	evictable bool // guarded by set.mu
	since     time.Time
	closeOnce sync.Once
	// linger is set when the connection is to close with a request body
	// unread (limitedBody.end): Close lingers (LingerDefault).
	linger atomic.Bool
}

func (c *trackedConn) Close() error {
	if c.linger.CompareAndSwap(true, false) {
		c.lingerClose()
	}
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.set.mu.Lock()
		delete(c.set.all, c)
		c.set.mu.Unlock()
	})
	return err
}

// Write writes p, unless p is one of the plain-text answers net/http
// gives before any handler runs (see jsonParseError): that is written as a
// CouchDB JSON error instead.
func (c *trackedConn) Write(p []byte) (int, error) {
	if j := c.set.jsonParseError(p); j != nil {
		if _, err := c.Conn.Write(j); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// goErrorHeaders are the headers of the plain-text answers net/http writes
// itself, in one write, to a request it will not hand to a handler: its
// headers are over MaxHeaderBytes (431), it does not parse (400: no Host,
// a bad Content-Length, ...), its transfer coding is unknown (501), its
// HTTP version too (505). The write is "HTTP/1.1 <status line>" +
// goErrorHeaders + "<status>[: <detail>]" (Go's net/http server.go,
// conn.serve). A handler's answer never starts so: net/http sorts its
// headers and adds Date.
const goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// jsonParseError returns, for one of net/http's plain-text answers
// (goErrorHeaders), the same status with a CouchDB JSON error, the
// connection closing; nil for any other write. Over HTTPS the answer
// passes through TLS first and stays as net/http writes it.
func (cs *connSet) jsonParseError(p []byte) []byte {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return nil
	}
	end := bytes.IndexByte(p, '\r')
	if end < 0 || !bytes.HasPrefix(p[end:], []byte(goErrorHeaders)) {
		return nil
	}
	line := string(p[len(proto):end]) // "431 Request Header Fields Too Large", "400 Bad Request: missing required Host header"
	status, err := strconv.Atoi(line[:min(3, len(line))])
	if err != nil || http.StatusText(status) == "" {
		return nil
	}
	text := http.StatusText(status)
	tag := strings.ReplaceAll(strings.ToLower(text), " ", "_") // bad_request, request_header_fields_too_large, ...
	reason := strings.TrimPrefix(strings.TrimPrefix(string(p[end+len(goErrorHeaders):]), line[:3]+" "+text), ": ")
	switch {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		reason = fmt.Sprintf("the request line and headers are over %d bytes ([chttpd] max_header_bytes)", cs.maxHeaderBytes)
	case reason == "" && status == http.StatusBadRequest:
		reason = "the request could not be parsed"
	case reason == "":
		reason = text
	}
	body, _ := json.Marshal(map[string]string{"error": tag, "reason": reason})
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: must-revalidate\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s\n", status, text, len(body)+1, body)
}

// lingerClose shuts the write side, so that the client reads the reply
// and then EOF, and discards what the client still sends for at most
// LingerDefault (the client's close ends it sooner). It runs on the
// connection's own goroutine, as net/http's does.
func (c *trackedConn) lingerClose() {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.setEvictable(true)
	_ = c.Conn.SetReadDeadline(time.Now().Add(LingerDefault))
	_, _ = io.Copy(io.Discard, c.Conn)
}

// setEvictable marks the connection as one a new connection may close.
func (c *trackedConn) setEvictable(on bool) {
	c.set.mu.Lock()
	defer c.set.mu.Unlock()
	if c.evictable != on {
		c.evictable, c.since = on, time.Now()
	}
}

func (cs *connSet) stateChanged(c net.Conn, st http.ConnState) {
	tc, ok := tracked(c)
	if !ok {
		return
	}
	switch st {
	case http.StateNew, http.StateIdle:
		tc.setEvictable(true)
	case http.StateActive:
		// net/http reports a connection active once a request's headers
		// were read (a request whose headers never end stays new).
		tc.setEvictable(false)
	case http.StateClosed, http.StateHijacked:
		tc.closeOnce.Do(func() {
			cs.mu.Lock()
			delete(cs.all, tc)
			cs.mu.Unlock()
		})
	}
}

// evictable counts the connections a new one may close.
func (cs *connSet) evictable() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for c := range cs.all {
		if c.evictable {
			n++
		}
	}
	return n
}

// admit adds c, closing the longest evictable connection when the set is
// full; it reports false (c is to be closed) when none can be.
func (cs *connSet) admit(c *trackedConn) bool {
	cs.mu.Lock()
	var victim *trackedConn
	if len(cs.all) >= cs.max {
		for o := range cs.all {
			if o.evictable && (victim == nil || o.since.Before(victim.since)) {
				victim = o
			}
		}
		if victim == nil {
			cs.mu.Unlock()
			return false
		}
		delete(cs.all, victim)
	}
	c.evictable, c.since = true, time.Now()
	cs.all[c] = struct{}{}
	cs.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
	}
	return true
}

// cappedListener admits accepted connections into a connSet.
type cappedListener struct {
	net.Listener
	set *connSet
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: l.set}
		if l.set.admit(tc) {
			return tc, nil
		}
		_ = c.Close() // every connection is busy: refuse this one
	}
}

// evictableDuring marks the request's connection as one that may be
// closed to make room while f runs (a longpoll wait).
func evictableDuring(r *http.Request, f func()) {
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	if tc != nil {
		tc.setEvictable(true)
		defer tc.setEvictable(false)
	}
	f()
}

// errBodyTimeout is a body read past Limits.BodyTimeout.
var errBodyTimeout = errors.New("frontend: the request body did not arrive in time")

// limitedBody is a request body read under a deadline: the connection is
// evictable while it is read, and the body's end is remembered so that an
// early error reply can close the connection instead of draining it.
type limitedBody struct {
	body     io.ReadCloser
	rc       *http.ResponseController
	conn     *trackedConn
	started  bool
	deadline time.Duration
	size     int64 // the request's Content-Length, -1 if unknown (chunked)
	done     bool  // the deadline and evictability ended
	read     int64 // bytes read
	eof      bool  // the body was read to its end
	// began and ended bound the reads: from the start of the first to
	// the end of the last (X-CouchDB-Body-Time).
	began, ended time.Time
	mu           sync.Mutex
}

func (b *limitedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if !b.started {
		b.started, b.began = true, time.Now()
		_ = b.rc.SetReadDeadline(time.Now().Add(b.deadline))
		if b.conn != nil {
			b.conn.setEvictable(true)
		}
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	b.mu.Lock()
	b.ended = time.Now()
	b.read += int64(n)
	b.eof = b.eof || err == io.EOF || (b.size >= 0 && b.read >= b.size)
	b.mu.Unlock()
	if err != nil {
		b.finish()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = errBodyTimeout
		}
	}
	return n, err
}

// end is called when the handler returned: a body not read to its end
// is not read any more. net/http would drain up to 256 kB of it before
// the connection closes or serves its next request, unbounded in time
// and with the connection busy (not evictable): a client that sends its
// headers and a byte of a body it never finishes would hold the
// connection for ever. A read deadline in the past ends that drain at
// once; the reply said Connection: close (statusWriter).
func (b *limitedBody) end() {
	b.finish()
	if !b.drained() {
		_ = b.rc.SetReadDeadline(time.Now())
		if b.conn != nil {
			b.conn.linger.Store(true)
		}
	}
}

// finish ends the body deadline (the response may take longer: a
// continuous feed) and the connection's evictability.
func (b *limitedBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if b.started {
		_ = b.rc.SetReadDeadline(time.Time{})
		if b.conn != nil {
			b.conn.setEvictable(false)
		}
	}
}

func (b *limitedBody) Close() error { return b.body.Close() }

// readTime is the time spent reading the body: from the start of its
// first read to the end of its last (0 when it was not read).
func (b *limitedBody) readTime() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended.Sub(b.began)
}

// drained reports whether the body was read to its end (its last byte:
// a JSON decoder stops there without asking for EOF).
func (b *limitedBody) drained() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// clientRequests counts the requests each client has in flight.
type clientRequests struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// acquire counts a request of client; false when the client is at the
// cap.
func (c *clientRequests) acquire(client string) bool {
	if c.max < 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[client] >= c.max {
		return false
	}
	c.n[client]++
	return true
}

func (c *clientRequests) release(client string) {
	if c.max < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[client]--; c.n[client] <= 0 {
		delete(c.n, client)
	}
}

// clientKey names the client of a request for the per-client cap: the
// user, or the client's address (clientAddr) for anonymous requests.
func clientKey(addr string, u *User) string {
	if !u.Anonymous() {
		return "user:" + u.Name
	}
	return "addr:" + addr
}
