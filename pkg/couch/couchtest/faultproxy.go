package couchtest

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// quiet discards the proxy's own error logging.
var quiet = log.New(io.Discard, "", 0)

// Fault is one kind of injected failure.
type Fault int

// The faults a FaultProxy injects.
const (
	// FaultNone forwards the request untouched.
	FaultNone Fault = iota
	// Fault500 answers 500 {"error":"unknown_error",...} without forwarding.
	Fault500
	// Fault429 answers 429 {"error":"too_many_requests",...} without forwarding.
	Fault429
	// FaultDrop forwards the request, then sends the peer's status, headers
	// and about half of its body and closes the connection. The peer has
	// processed the request: a write happened although the client saw an error.
	FaultDrop
	// FaultReset closes the connection before any response, without
	// forwarding.
	FaultReset
	// FaultStall waits FaultConfig.Stall (or until the client gives up)
	// before forwarding the request.
	FaultStall
	// Fault401 answers 401 {"error":"unauthorized",...} with
	// WWW-Authenticate: Basic (as CouchDB with require_valid_user) without
	// forwarding: an expired session, or a peer that wants Basic.
	Fault401
	// Fault404 answers 404 {"error":"not_found",...} without forwarding: a
	// peer without the resource (such as _session).
	Fault404
	numFaults
)

// StallDefault is how long a FaultStall waits when FaultConfig.Stall is 0.
const StallDefault = 2 * time.Second

func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case Fault500:
		return "500"
	case Fault429:
		return "429"
	case FaultDrop:
		return "drop"
	case FaultReset:
		return "reset"
	case FaultStall:
		return "stall"
	case Fault401:
		return "401"
	case Fault404:
		return "404"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// FaultConfig sets the random fault rates of a FaultProxy. Each rate is the
// probability, in [0, 1], that a request gets that fault; their sum must not
// exceed 1. Scripted faults (FaultProxy.Script) take precedence.
type FaultConfig struct {
	Seed                                                               uint64 // seeds the random choice; logged by NewFaultProxy
	Rate500, Rate429, RateDrop, RateReset, RateStall, Rate401, Rate404 float64
	Stall                                                              time.Duration // stall length; 0 means StallDefault
	// Match, if set, limits faults (scripted and random) to the requests it
	// accepts; other requests are forwarded untouched and do not consume the
	// script. It must be safe for concurrent use.
	Match func(*http.Request) bool
}

// Validate reports a configuration error.
func (c FaultConfig) Validate() error {
	sum := 0.0
	for _, r := range []float64{c.Rate500, c.Rate429, c.RateDrop, c.RateReset, c.RateStall, c.Rate401, c.Rate404} {
		if r < 0 || r > 1 || r != r {
			return fmt.Errorf("couchtest: fault rate %v is not in [0, 1]", r)
		}
		sum += r
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("couchtest: fault rates add up to %v > 1", sum)
	}
	if c.Stall < 0 {
		return fmt.Errorf("couchtest: negative stall %v", c.Stall)
	}
	return nil
}

// FaultCounts counts requests seen and faults injected by a FaultProxy.
type FaultCounts struct {
	Requests  int64 // every request received
	Forwarded int64 // requests that reached the peer (including drops and stalls)
	Injected  map[Fault]int64
	// How requests authenticated (counted on arrival, faulted or not):
	// logins (POST /_session), requests with an Authorization: Basic
	// header, and requests with an AuthSession cookie.
	Logins, Basic, Cookie int64
}

// Total is the number of injected faults of all kinds.
func (c FaultCounts) Total() int64 {
	var n int64
	for _, v := range c.Injected {
		n += v
	}
	return n
}

// FaultProxy is a fault-injecting reverse proxy on 127.0.0.1.
type FaultProxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	tr     *http.Transport

	ctx    context.Context // cancelled by Close: ends stalls and in-flight upstream requests
	cancel context.CancelFunc
	wg     sync.WaitGroup // running handlers
	served chan struct{}  // closed when Serve has returned

	mu     sync.Mutex
	cfg    FaultConfig
	rng    *rand.Rand
	script []Fault
	closed bool

	requests  atomic.Int64
	forwarded atomic.Int64
	injected  [numFaults]atomic.Int64
	logins    atomic.Int64
	basic     atomic.Int64
	cookie    atomic.Int64
	scheme    string // of URL: http, or https behind a TLS listener

	closeOnce sync.Once
}

// NewFaultProxy starts a proxy in front of target (a server root such as
// Server.URL()) and closes it in t.Cleanup. The seed is logged.
func NewFaultProxy(t testing.TB, target string, cfg FaultConfig) *FaultProxy {
	t.Helper()
	p, err := StartFaultProxy(target, cfg)
	require.NoError(t, err)
	t.Logf("couchtest: fault proxy %s -> %s seed %d", p.URL(), target, cfg.Seed)
	t.Cleanup(p.Close)
	return p
}

// StartFaultProxy is NewFaultProxy for callers without a testing.TB (such as
// benchmarks); the caller must Close it.
func StartFaultProxy(target string, cfg FaultConfig) (*FaultProxy, error) {
	return startProxy(target, cfg, nil)
}

// startProxy starts a proxy listening on 127.0.0.1, with TLS when tlsCfg
// is set.
func startProxy(target string, cfg FaultConfig, tlsCfg *tls.Config) (*FaultProxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("couchtest: fault proxy target %q is not an http(s) URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("couchtest: fault proxy: %w", err)
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	p := &FaultProxy{
		target: u,
		ln:     ln,
		scheme: scheme,
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		// No transparent gzip: pouchdb-server compresses when asked and then
		// buffers continuous feeds, heartbeats included.
		tr: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DisableCompression: true},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // keep the Host the client used
		},
		Transport:     p.tr,
		FlushInterval: -1,    // stream continuous feeds
		ErrorLog:      quiet, // cut streams are the point, not news
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // client went away or the proxy is closing
			}
			http.Error(w, `{"error":"bad_gateway","reason":"fault proxy: peer unreachable"}`, http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          quiet,
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
	}
	p.served = make(chan struct{})
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's root URL (no trailing slash); paths are forwarded
// unchanged to the target.
func (p *FaultProxy) URL() string { return p.scheme + "://" + p.ln.Addr().String() }

// Script queues faults for the next matching requests, in order, ahead of
// the random ones; FaultNone entries let a request through.
func (p *FaultProxy) Script(faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script, faults...)
}

// SetConfig replaces the rates, stall length and matcher (the random sequence
// continues; the seed is not reset). An invalid configuration is refused.
func (p *FaultProxy) SetConfig(cfg FaultConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cfg.Seed = p.cfg.Seed
	p.cfg = cfg
	return nil
}

// Counts returns a snapshot of the counters.
func (p *FaultProxy) Counts() FaultCounts {
	c := FaultCounts{Requests: p.requests.Load(), Forwarded: p.forwarded.Load(), Injected: map[Fault]int64{},
		Logins: p.logins.Load(), Basic: p.basic.Load(), Cookie: p.cookie.Load()}
	for f := Fault500; f < numFaults; f++ {
		if n := p.injected[f].Load(); n > 0 {
			c.Injected[f] = n
		}
	}
	return c
}

// Close stops the proxy, aborting requests in flight, and waits for its
// handlers to return. It may be called more than once.
func (p *FaultProxy) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		_ = p.srv.Close()
		<-p.served
		p.wg.Wait()
		p.tr.CloseIdleConnections()
	})
}

// choose picks the fault for r and the stall length.
func (p *FaultProxy) choose(r *http.Request) (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stall := cmp.Or(p.cfg.Stall, StallDefault)
	if p.cfg.Match != nil && !p.cfg.Match(r) {
		return FaultNone, stall
	}
	if len(p.script) > 0 {
		f := p.script[0]
		p.script = p.script[1:]
		return f, stall
	}
	x := p.rng.Float64()
	for _, c := range []struct {
		f    Fault
		rate float64
	}{{Fault500, p.cfg.Rate500}, {Fault429, p.cfg.Rate429}, {FaultDrop, p.cfg.RateDrop}, {FaultReset, p.cfg.RateReset}, {FaultStall, p.cfg.RateStall},
		{Fault401, p.cfg.Rate401}, {Fault404, p.cfg.Rate404}} {
		if x < c.rate {
			return c.f, stall
		}
		x -= c.rate
	}
	return FaultNone, stall
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		panic(http.ErrAbortHandler)
	}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	p.requests.Add(1)
	p.countAuth(r)
	f, stall := p.choose(r)
	if f != FaultNone {
		p.injected[f].Add(1)
	}
	switch f {
	case Fault500:
		writeJSONError(w, http.StatusInternalServerError, "unknown_error", "fault proxy: injected 500")
		return
	case Fault429:
		writeJSONError(w, http.StatusTooManyRequests, "too_many_requests", "fault proxy: injected 429")
		return
	case Fault401:
		w.Header().Set("WWW-Authenticate", `Basic realm="server"`)
		writeJSONError(w, http.StatusUnauthorized, "unauthorized", "fault proxy: injected 401")
		return
	case Fault404:
		writeJSONError(w, http.StatusNotFound, "not_found", "fault proxy: injected 404")
		return
	case FaultReset:
		panic(http.ErrAbortHandler) // net/http closes the connection without a response
	case FaultStall:
		t := time.NewTimer(stall)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	case FaultDrop:
		p.forwarded.Add(1)
		p.drop(w, r)
		return
	}
	p.forwarded.Add(1)
	p.rp.ServeHTTP(w, r)
}

// countAuth counts how r authenticates.
func (p *FaultProxy) countAuth(r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/_session" {
		p.logins.Add(1)
	}
	if _, _, ok := r.BasicAuth(); ok {
		p.basic.Add(1)
	}
	if c, err := r.Cookie("AuthSession"); err == nil && c.Value != "" {
		p.cookie.Add(1)
	}
}

// drop forwards r, relays the status, headers and about half of the body,
// then aborts the connection.
func (p *FaultProxy) drop(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	// Read a bounded prefix: continuous feeds never end.
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	body := readSome(ctx, resp.Body, 64<<10)
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	// Without a length the reply is chunked, so the client sees the cut even
	// when the body is empty.
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body[:len(body)/2])
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	panic(http.ErrAbortHandler)
}

// readSome reads up to max bytes of rd, stopping early at EOF, an error or
// when ctx ends (a stream that pauses).
func readSome(ctx context.Context, rd io.ReadCloser, max int) []byte {
	type result struct{ b []byte }
	ch := make(chan result, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(rd, int64(max)))
		ch <- result{b}
	}()
	select {
	case res := <-ch:
		return res.b
	case <-ctx.Done():
		_ = rd.Close() // unblocks the reader goroutine
		res := <-ch
		return res.b
	}
}

func writeJSONError(w http.ResponseWriter, status int, errName, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":%q,"reason":%q}`+"\n", errName, reason)
}
