package couch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"time"
)

// CACertReloadIntervalDefault is cacert_reload_interval_hours (CouchDB
// 3.5.1's): how old the system's CA certificates may be when a connection
// is verified against them before they are read again.
const CACertReloadIntervalDefault = 24 * time.Hour

// systemRoots are the system's CA certificates, read again when a
// verification finds them older than every (CouchDB's cacert_get):
// certificates added to or removed from the system's store are trusted,
// or no longer, within that time, without a restart.
type systemRoots struct {
	every time.Duration
	mu    sync.Mutex
	pool  *x509.CertPool
	at    time.Time
}

// newSystemRoots reads the system's roots; nil when this platform's are
// not files fdbrep can read again (Go's own then serve, read once, or
// asked of the system at each verification).
func newSystemRoots(every time.Duration) (*systemRoots, error) {
	if !systemRootsReadable {
		return nil, nil
	}
	pool, err := loadSystemRoots()
	if err != nil {
		return nil, invalidOptions("reading the system's CA certificates: %v", err)
	}
	return &systemRoots{every: every, pool: pool, at: time.Now()}, nil
}

// get returns the roots, read again first when they are older than
// every; a reading that fails keeps the roots read before.
func (r *systemRoots) get() *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.at) >= r.every {
		if pool, err := loadSystemRoots(); err == nil {
			r.pool = pool
		}
		r.at = now
	}
	return r.pool
}

// errNoServerName is a connection whose server name is unknown: its
// certificate cannot be checked against it.
var errNoServerName = errors.New("no server name to check the certificate against")

// verify checks the peer's chain against the roots of the moment and its
// name against cs.ServerName, as Go's handshake does against
// tls.Config.RootCAs, and returns the verified chains.
func (r *systemRoots) verify(cs tls.ConnectionState) ([][]*x509.Certificate, error) {
	if cs.ServerName == "" {
		return nil, errNoServerName
	}
	if len(cs.PeerCertificates) == 0 {
		return nil, errors.New("the endpoint sent no certificate")
	}
	opts := x509.VerifyOptions{DNSName: cs.ServerName, Roots: r.get(), Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	chains, err := cs.PeerCertificates[0].Verify(opts)
	if err != nil {
		return nil, &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return chains, nil
}

// serverNamed returns a copy of cfg (the transport adds to it: HTTP/2)
// whose VerifyConnection, if any, is told host as the server name of a
// connection that sent none: an endpoint named by its IP address.
func serverNamed(cfg *tls.Config, host string) *tls.Config {
	cfg = cfg.Clone()
	if cfg == nil || cfg.VerifyConnection == nil {
		return cfg
	}
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if cs.ServerName == "" {
			cs.ServerName = host
		}
		return verify(cs)
	}
	return cfg
}
