package couchtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CertLifetime is how long the certificates a CA issues are valid (from an
// hour ago, so that clock skew does not matter).
const CertLifetime = 24 * time.Hour

// CA is a certificate authority made for one test: a root (NewCA) or an
// intermediate (Intermediate) that issues server certificates for
// 127.0.0.1 and client certificates. Keys are ECDSA P-256.
type CA struct {
	Cert  *x509.Certificate
	key   crypto.Signer
	chain []*x509.Certificate // this CA and the intermediates above it, up to (not including) the root
}

var serial atomic.Int64

// NewCA makes a root CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	cert := sign(t, tmpl, tmpl, key.Public(), key)
	return &CA{Cert: cert, key: key}
}

// LoadCA is the root CA of certFile and keyFile (PEM; the key PKCS #8, as
// OpenSSL writes it), made by another tool (../shared/fdb's fdb.sh), to
// issue certificates it signs.
func LoadCA(t testing.TB, certFile, keyFile string) *CA {
	t.Helper()
	block := func(path string) []byte {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		b, _ := pem.Decode(raw)
		require.NotNil(t, b, "%s holds no PEM block", path)
		return b.Bytes
	}
	cert, err := x509.ParseCertificate(block(certFile))
	require.NoError(t, err)
	key, err := x509.ParsePKCS8PrivateKey(block(keyFile))
	require.NoError(t, err)
	signer, ok := key.(crypto.Signer)
	require.True(t, ok, "%s is not a signing key", keyFile)
	return &CA{Cert: cert, key: signer}
}

// Intermediate makes a CA signed by ca.
func (ca *CA) Intermediate(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	cert := sign(t, tmpl, ca.Cert, key.Public(), ca.key)
	return &CA{Cert: cert, key: key, chain: append([]*x509.Certificate{cert}, ca.chain...)}
}

// Server issues a certificate for the IP addresses given (127.0.0.1 when
// none), with the intermediates up to the root, for a TLS server.
func (ca *CA) Server(t testing.TB, ips ...net.IP) tls.Certificate {
	t.Helper()
	if len(ips) == 0 {
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	tmpl := template("server")
	tmpl.IPAddresses = ips
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return ca.issue(t, tmpl)
}

// Client issues a client certificate for name.
func (ca *CA) Client(t testing.TB, name string) tls.Certificate {
	t.Helper()
	tmpl := template(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(t, tmpl)
}

// Peer issues a certificate for name at ips that serves both ends of a
// connection, as a FoundationDB process's or client's does.
func (ca *CA) Peer(t testing.TB, name string, ips ...net.IP) tls.Certificate {
	t.Helper()
	tmpl := template(name)
	tmpl.IPAddresses = ips
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	return ca.issue(t, tmpl)
}

// Expired issues a client certificate for name that expired an hour ago.
func (ca *CA) Expired(t testing.TB, name string) tls.Certificate {
	t.Helper()
	tmpl := template(name)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(t, tmpl)
}

func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) tls.Certificate {
	key := newKey(t)
	cert := sign(t, tmpl, ca.Cert, key.Public(), ca.key)
	out := tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	for _, c := range ca.chain {
		out.Certificate = append(out.Certificate, c.Raw)
	}
	return out
}

// Pool is a pool holding this CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteCert writes this CA's certificate as PEM into a temporary file and
// returns its path (an ssl_trusted_certificates_file).
func (ca *CA) WriteCert(t testing.TB) string {
	t.Helper()
	return WriteFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}))
}

// WriteKeyPair writes c's certificate chain and its private key (PKCS #8)
// as PEM into temporary files (a cert_file and a key_file).
func WriteKeyPair(t testing.TB, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	var certs []byte
	for _, der := range c.Certificate {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return WriteFile(t, "cert.pem", certs), WriteFile(t, "key.pem", KeyPEM(t, c))
}

// KeyPEM is c's private key as unencrypted PKCS #8 PEM.
func KeyPEM(t testing.TB, c tls.Certificate) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// WriteFile writes data into a new file name in a temporary directory and
// returns its path.
func WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o600))
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key
}

func template(name string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"fdbrep tests"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CertLifetime),
	}
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}
