package couch_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/youmark/pkcs8"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

const keyPassphrase = "key-passphrase-9f2"

// encryptedKeyFiles writes c's key encrypted with keyPassphrase, as
// PKCS #8 and as legacy encrypted PEM.
func encryptedKeyFiles(t *testing.T, c tls.Certificate) (pkcs8File, legacyFile string) {
	t.Helper()
	der, err := pkcs8.MarshalPrivateKey(c.PrivateKey, []byte(keyPassphrase), nil)
	require.NoError(t, err)
	pkcs8File = couchtest.WriteFile(t, "key8.pem", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: der}))
	plain, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	require.NoError(t, err)
	block, err := x509.EncryptPEMBlock(rand.Reader, "PRIVATE KEY", plain, []byte(keyPassphrase), x509.PEMCipherAES256) //nolint:staticcheck // the legacy format under test
	require.NoError(t, err)
	legacyFile = couchtest.WriteFile(t, "key-legacy.pem", pem.EncodeToMemory(block))
	return pkcs8File, legacyFile
}

// TLS settings are checked, and their files read, when the configuration
// is made; errors name the setting and never the key passphrase.
func TestTLSSettingsConfig(t *testing.T) {
	t.Parallel()
	ca := couchtest.NewCA(t, "root")
	client := ca.Client(t, "replicator")
	certFile, keyFile := couchtest.WriteKeyPair(t, client)
	other := ca.Client(t, "other")
	_, otherKey := couchtest.WriteKeyPair(t, other)
	key8, keyLegacy := encryptedKeyFiles(t, client)
	garbage := couchtest.WriteFile(t, "garbage.pem", []byte("not a certificate"))

	tests := []struct {
		name string
		s    couch.TLSSettings
		want string // "" for success
	}{
		{"defaults", couch.TLSSettings{}, ""},
		{"CA file", couch.TLSSettings{CAFile: ca.WriteCert(t)}, ""},
		{"missing CA file", couch.TLSSettings{CAFile: "/nonexistent/ca.pem"}, "ssl_trusted_certificates_file: open /nonexistent/ca.pem: no such file"},
		{"CA file without PEM", couch.TLSSettings{CAFile: garbage}, "holds no PEM certificate"},
		{"client certificate", couch.TLSSettings{CertFile: certFile, KeyFile: keyFile}, ""},
		{"certificate without key", couch.TLSSettings{CertFile: certFile}, "cert_file is set but key_file is not"},
		{"key without certificate", couch.TLSSettings{KeyFile: keyFile}, "key_file is set but cert_file is not"},
		{"password without key", couch.TLSSettings{KeyPassword: keyPassphrase}, "password is set but key_file is not"},
		{"missing key file", couch.TLSSettings{CertFile: certFile, KeyFile: "/nonexistent/key.pem"}, "key_file: open /nonexistent/key.pem"},
		{"key of another certificate", couch.TLSSettings{CertFile: certFile, KeyFile: otherKey}, "private key does not match public key"},
		{"garbage key", couch.TLSSettings{CertFile: certFile, KeyFile: garbage}, "cert_file"},
		{"PKCS #8 encrypted", couch.TLSSettings{CertFile: certFile, KeyFile: key8, KeyPassword: keyPassphrase}, ""},
		{"PKCS #8 wrong passphrase", couch.TLSSettings{CertFile: certFile, KeyFile: key8, KeyPassword: "wrong-" + keyPassphrase}, "cannot decrypt it"},
		{"PKCS #8 without passphrase", couch.TLSSettings{CertFile: certFile, KeyFile: key8}, "is encrypted: set [replicator] password"},
		{"legacy encrypted", couch.TLSSettings{CertFile: certFile, KeyFile: keyLegacy, KeyPassword: keyPassphrase}, ""},
		{"legacy wrong passphrase", couch.TLSSettings{CertFile: certFile, KeyFile: keyLegacy, KeyPassword: "wrong-" + keyPassphrase}, "cannot decrypt it"},
		{"unencrypted key, passphrase ignored", couch.TLSSettings{CertFile: certFile, KeyFile: keyFile, KeyPassword: keyPassphrase}, ""},
		{"depth too large", couch.TLSSettings{MaxDepth: couch.CertificateMaxDepthMax + 1}, "ssl_certificate_max_depth must be from 0"},
		{"verification off", couch.TLSSettings{NoVerify: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.s.Config()
			if tt.want == "" {
				require.NoError(t, err)
				require.NotNil(t, cfg)
				require.Equal(t, tt.s.NoVerify, cfg.InsecureSkipVerify)
				require.Equal(t, tt.s.CertFile != "", len(cfg.Certificates) == 1)
				return
			}
			require.ErrorIs(t, err, couch.ErrInvalidOptions)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), keyPassphrase)
		})
	}
	s := couch.TLSSettings{CertFile: certFile, KeyFile: key8, KeyPassword: keyPassphrase}
	for _, out := range []string{s.String(), fmt.Sprintf("%v %+v %#v", s, s, s)} {
		require.NotContains(t, out, keyPassphrase)
		require.Contains(t, out, "*****")
	}
}

// An https endpoint on a plain HTTP port: pouchdb-server answers the
// TLS handshake with an HTTP error, which is named; CouchDB 3.5 answers
// nothing, so the request fails when connection_timeout runs out.
func TestHTTPSToPlainPeer(t *testing.T) {
	t.Parallel()
	pouch := couchtest.StartPouchDB(t)
	couchdb := couchtest.StartCouchDB(t)
	for _, tc := range []struct {
		name string
		srv  *couchtest.Server
		is   error
		want string
	}{
		{"pouchdb-server", pouch, couch.ErrTLS, "does not speak TLS"},
		{"CouchDB", couchdb, couch.ErrTimeout, "connection_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf("%q", "https://"+tc.srv.URL()[len("http://"):]+"/db")))
			require.NoError(t, err)
			db, err := couch.NewDB(ep, couch.Options{ConnectionTimeout: time.Second, RetriesPerRequest: couch.NoRetries}, nil)
			require.NoError(t, err)
			t.Cleanup(db.Close)
			err = db.DoJSON(context.Background(), couch.Request{}, nil)
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// Endpoints behind a TLS terminator (in front of a real CouchDB 3.5, as
// its user bob) with a private CA: refused with a reason that names the
// setting to change, accepted with the CA, with verification off, and with
// the client certificate the terminator wants.
func TestTLSEndpoints(t *testing.T) {
	t.Parallel()
	srv := startBobsCouchDB(t)
	root := couchtest.NewCA(t, "root")
	caFile := root.WriteCert(t)
	plain := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t)})
	chained := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{
		Cert: root.Intermediate(t, "int1").Intermediate(t, "int2").Server(t)})
	misnamed := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t, net.IPv4(127, 0, 0, 2))})
	mutual := couchtest.NewTLSProxy(t, srv.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t), ClientCAs: root.Pool()})
	client := root.Client(t, "replicator")
	certFile, keyFile := couchtest.WriteKeyPair(t, client)
	key8, _ := encryptedKeyFiles(t, client)
	strangerCert, strangerKey := couchtest.WriteKeyPair(t, couchtest.NewCA(t, "stranger").Client(t, "replicator"))

	tests := []struct {
		name  string
		url   string
		s     couch.TLSSettings
		want  string // "" for success; else in the error, which wraps ErrTLS
		proxy *couchtest.FaultProxy
	}{
		{"system roots", plain.URL(), couch.TLSSettings{}, "certificate signed by unknown authority: set [replicator] ssl_trusted_certificates_file", plain},
		{"private CA", plain.URL(), couch.TLSSettings{CAFile: caFile}, "", plain},
		{"verification off", plain.URL(), couch.TLSSettings{NoVerify: true}, "", plain},
		{"verification off, other CA's file ignored", plain.URL(), couch.TLSSettings{NoVerify: true, CAFile: caFile}, "", plain},
		{"wrong host", misnamed.URL(), couch.TLSSettings{CAFile: caFile}, "does not name the host of its URL", misnamed},
		{"wrong host, verification off", misnamed.URL(), couch.TLSSettings{NoVerify: true}, "", misnamed},
		{"two intermediates, default depth", chained.URL(), couch.TLSSettings{CAFile: caFile}, "", chained},
		{"two intermediates, depth 2", chained.URL(), couch.TLSSettings{CAFile: caFile, MaxDepth: 2}, "", chained},
		{"two intermediates, depth 1", chained.URL(), couch.TLSSettings{CAFile: caFile, MaxDepth: 1},
			"chain has 2 intermediate certificates, more than [replicator] ssl_certificate_max_depth = 1", chained},
		{"two intermediates, depth 0", chained.URL(), couch.TLSSettings{CAFile: caFile, MaxDepth: couch.MaxDepthNone}, "ssl_certificate_max_depth = 0", chained},
		{"no client certificate", mutual.URL(), couch.TLSSettings{CAFile: caFile}, "requires a client certificate: set [replicator] cert_file and key_file", mutual},
		{"client certificate of another CA", mutual.URL(), couch.TLSSettings{CAFile: caFile, CertFile: strangerCert, KeyFile: strangerKey},
			"that of [replicator] cert_file is not", mutual},
		{"client certificate", mutual.URL(), couch.TLSSettings{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, "", mutual},
		{"client certificate, encrypted key", mutual.URL(), couch.TLSSettings{CAFile: caFile, CertFile: certFile, KeyFile: key8, KeyPassword: keyPassphrase}, "", mutual},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.s.Config()
			require.NoError(t, err)
			ep, err := couch.ParseEndpoint(json.RawMessage(fmt.Sprintf(`{"url":%q,"auth":{"basic":{"username":"bob","password":%q}}}`, tt.url+"/db", secret)))
			require.NoError(t, err)
			logs := &testutil.SyncBuffer{}
			lg := zerolog.New(logs).Level(zerolog.DebugLevel)
			db, err := couch.NewDB(ep, couch.Options{TLS: cfg, RetriesPerRequest: 10, RetryWait: time.Millisecond, Logger: &lg}, nil)
			require.NoError(t, err)
			t.Cleanup(db.Close)
			var before couchtest.FaultCounts
			if tt.proxy != nil {
				before = tt.proxy.Counts()
			}
			var info map[string]any
			err = db.DoJSON(context.Background(), couch.Request{}, &info)
			if tt.want == "" {
				require.NoError(t, err)
				require.Equal(t, "db", info["db_name"])
				return
			}
			require.ErrorIs(t, err, couch.ErrTLS, logs.String())
			require.ErrorContains(t, err, tt.want)
			requireNoSecret(t, err.Error(), logs.String())
			var rerr *couch.RequestError
			require.ErrorAs(t, err, &rerr)
			if tt.proxy != mutual {
				require.Equal(t, 1, rerr.Attempts, "a refused certificate is not retried: %s", logs.String())
			} else {
				// TLS 1.3 checks a client certificate after the client's
				// handshake is over: an attempt may fail writing its
				// request (broken pipe) before the refusal arrives, and is
				// retried. The first refusal ends the request.
				require.Less(t, rerr.Attempts, 11, logs.String())
			}
			if tt.proxy != nil {
				require.Equal(t, before.Requests, tt.proxy.Counts().Requests, "no request, so no credentials, reached the peer")
			}
		})
	}
}
