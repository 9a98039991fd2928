package couch_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// cacert_reload_interval_hours: with no ssl_trusted_certificates_file,
// https endpoints are verified against the system's roots of the moment
// (SSL_CERT_FILE and SSL_CERT_DIR stand in for the system's store here).
// A root added to the store is trusted once the roots are older than the
// interval, not before; the endpoint's name and ssl_certificate_max_depth
// are checked as Go checks them, an endpoint named by its IP address
// included.
func TestSystemRootsReload(t *testing.T) {
	srv := startBobsCouchDB(t)
	root, stranger := couchtest.NewCA(t, "root"), couchtest.NewCA(t, "stranger")
	plain := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t)})
	misnamed := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t, net.IPv4(127, 0, 0, 2))})
	chained := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{
		Cert: root.Intermediate(t, "int1").Intermediate(t, "int2").Server(t)})

	store := filepath.Join(t.TempDir(), "ca-certificates.crt")
	t.Setenv("SSL_CERT_FILE", store)
	t.Setenv("SSL_CERT_DIR", t.TempDir())
	trust := func(ca *couchtest.CA) {
		data, err := os.ReadFile(ca.WriteCert(t))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(store, data, 0o644))
	}
	getWith := func(cfg *tls.Config, base string) error {
		ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(`{"url":%q,"auth":{"basic":{"username":"bob","password":%q}}}`, base+"/db", secret)))
		require.NoError(t, err)
		db, err := couch.NewDB(ep, couch.Options{TLS: cfg, RetriesPerRequest: couch.NoRetries}, nil)
		require.NoError(t, err)
		defer db.Close()
		return db.DoJSON(context.Background(), couch.Request{}, nil)
	}
	get := func(s couch.TLSSettings, base string) error {
		cfg, err := s.Config()
		require.NoError(t, err)
		return getWith(cfg, base)
	}
	unknown := "certificate signed by unknown authority"

	trust(stranger)
	every := couch.TLSSettings{CACertReload: time.Nanosecond} // read again at each connection
	err := get(every, plain.URL())
	require.ErrorIs(t, err, couch.ErrTLS)
	require.ErrorContains(t, err, unknown)
	trust(root)
	require.NoError(t, get(every, plain.URL()), "the root added to the store is trusted")
	err = get(every, misnamed.URL())
	require.ErrorIs(t, err, couch.ErrTLS)
	require.ErrorContains(t, err, "does not name the host of its URL")
	require.NoError(t, get(every, chained.URL()))
	err = get(couch.TLSSettings{CACertReload: time.Nanosecond, MaxDepth: 1}, chained.URL())
	require.ErrorContains(t, err, "ssl_certificate_max_depth = 1")

	// Read at start-up, not again within the interval.
	trust(stranger)
	daily := couch.TLSSettings{CACertReload: 24 * time.Hour}
	cfg, err := daily.Config()
	require.NoError(t, err)
	trust(root)
	err = getWith(cfg, plain.URL())
	require.ErrorContains(t, err, unknown, "the roots are a day old at most")
	// Verification off trusts anything, whatever the store.
	require.NoError(t, get(couch.TLSSettings{NoVerify: true, CACertReload: time.Nanosecond}, misnamed.URL()))
}
