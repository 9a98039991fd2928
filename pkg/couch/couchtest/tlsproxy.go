package couchtest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"
)

// TLSProxyConfig configures NewTLSProxy.
type TLSProxyConfig struct {
	// Cert is the server certificate, with its intermediates (see
	// CA.Server).
	Cert tls.Certificate
	// ClientCAs, when set, makes the proxy require a client certificate
	// issued by one of them (tls.RequireAndVerifyClientCert).
	ClientCAs *x509.CertPool
	// Faults are injected as by NewFaultProxy (none by default).
	Faults FaultConfig
}

// NewTLSProxy starts a TLS terminator on 127.0.0.1 in front of target (a
// plain-HTTP server root such as Server.URL()): a FaultProxy whose URL is
// https://127.0.0.1:port. It closes in t.Cleanup. Handshake failures are
// not logged: refused certificates are what tests look for.
func NewTLSProxy(t testing.TB, target string, cfg TLSProxyConfig) *FaultProxy {
	t.Helper()
	tc := &tls.Config{Certificates: []tls.Certificate{cfg.Cert}, MinVersion: tls.VersionTLS12}
	if cfg.ClientCAs != nil {
		tc.ClientCAs, tc.ClientAuth = cfg.ClientCAs, tls.RequireAndVerifyClientCert
	}
	p, err := startProxy(target, cfg.Faults, tc)
	require.NoError(t, err)
	t.Logf("couchtest: TLS proxy %s -> %s (client certificates required: %t)", p.URL(), target, cfg.ClientCAs != nil)
	t.Cleanup(p.Close)
	return p
}
