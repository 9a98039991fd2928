package couch

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// PoolIdleMaxDefault is how many idle connections a shared pool keeps to
// one server.
const PoolIdleMaxDefault = 100

// Pools shares HTTP connection pools among the DBs of a process that reach
// the same server the same way: scheme, host and port, proxy, TLS
// settings (the same *tls.Config), socket options, address policy (the
// same *AddressPolicy) and connection timeout.
// Their connections are reused across replications, as CouchDB 3.x pools a
// replicator's connections per endpoint, so that a node holds about as
// many connections to a server as it has requests in flight to it, not as
// many as it has replications; credentials travel per request (Basic, or
// each DB's own session cookie), so DBs of different users share a pool.
// Each DB still bounds its own requests in flight (HTTPConnections), and
// idle connections close after IdleConnTimeout (connection_close_interval).
// A pool goes when the last DB using it is closed. The zero value is not
// usable; call NewPools. Safe for concurrent use.
type Pools struct {
	mu sync.Mutex
	m  map[poolKey]*pool
}

// NewPools returns an empty set of pools.
func NewPools() *Pools { return &Pools{m: map[poolKey]*pool{}} }

// poolKey is what DBs must share to share a pool.
type poolKey struct {
	server, proxy, socket string
	tls                   *tls.Config
	addrs                 *AddressPolicy
	timeout, idle         time.Duration
}

type pool struct {
	tr   *http.Transport
	refs int
}

// Len reports how many pools are open.
func (p *Pools) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// acquire returns the transport of the pool for a DB of ep with opts (its
// defaults filled in), made by mk when there is none, and the function
// that releases it (once).
func (p *Pools) acquire(ep Endpoint, opts Options, mk func() *http.Transport) (*http.Transport, func()) {
	k := poolKey{server: ep.URL.Scheme + "://" + strings.ToLower(ep.URL.Host), socket: fmt.Sprintf("%+v", opts.Socket),
		tls: opts.TLS, addrs: opts.Addresses, timeout: opts.ConnectionTimeout, idle: opts.IdleConnTimeout}
	if opts.Proxy != nil {
		k.proxy = opts.Proxy.String()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.m[k]
	if pl == nil {
		tr := mk()
		// The DBs bound their own requests; the pool keeps enough idle
		// connections for them to reuse.
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.MaxIdleConns = 0, PoolIdleMaxDefault, PoolIdleMaxDefault
		pl = &pool{tr: tr}
		p.m[k] = pl
	}
	pl.refs++
	return pl.tr, sync.OnceFunc(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if pl.refs--; pl.refs == 0 {
			pl.tr.CloseIdleConnections()
			delete(p.m, k)
		}
	})
}
