//go:build fdb

package fdbkv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// tlsSource is where a TLS setting came from, for the messages: the
// configuration's key or libfdb_c's variable.
type tlsSource struct {
	value, from string
}

// tlsFiles is a TLS with every setting resolved and labelled.
type tlsFiles struct {
	cert, key, ca, verify tlsSource
}

// resolve fills what t leaves empty from libfdb_c's environment.
func (t TLS) resolve() tlsFiles {
	pick := func(v, key, env string) tlsSource {
		if v != "" {
			return tlsSource{v, "[fdb] " + key}
		}
		return tlsSource{os.Getenv(env), env}
	}
	return tlsFiles{
		cert:   pick(t.CertificateFile, "tls_certificate_file", "FDB_TLS_CERTIFICATE_FILE"),
		key:    pick(t.KeyFile, "tls_key_file", "FDB_TLS_KEY_FILE"),
		ca:     pick(t.CAFile, "tls_ca_file", "FDB_TLS_CA_FILE"),
		verify: pick(t.VerifyPeers, "tls_verify_peers", "FDB_TLS_VERIFY_PEERS"),
	}
}

// configured reports whether a client certificate is given.
func (f tlsFiles) configured() bool { return f.cert.value != "" || f.key.value != "" }

// verifiesPeers reports whether the cluster's certificates are checked
// against the CA (FoundationDB skips it only for Check.Valid=0).
func (f tlsFiles) verifiesPeers() bool {
	return !strings.Contains(strings.ReplaceAll(f.verify.value, " ", ""), "Check.Valid=0")
}

// loaded is what check read: the key pair (nil with FDB_TLS_PASSWORD:
// an encrypted key only libfdb_c reads), the certificate and the CA pool.
type loaded struct {
	pair *tls.Certificate
	leaf *x509.Certificate
	cas  *x509.CertPool
}

// check reads and validates the files at now: readable, a certificate
// with its matching unencrypted key (or any key, which libfdb_c decrypts
// with FDB_TLS_PASSWORD), within its validity, and a CA file with at
// least one certificate. Nothing configured is valid (no TLS). The error
// is ErrTLS with one sentence that names the setting.
func (f tlsFiles) check(now time.Time) (*loaded, error) {
	if !f.configured() && f.ca.value == "" {
		return nil, nil
	}
	switch {
	case f.cert.value == "":
		return nil, fmt.Errorf("%w: %s is set but no certificate: set [fdb] tls_certificate_file (or FDB_TLS_CERTIFICATE_FILE) too", ErrTLS, f.key.from)
	case f.key.value == "":
		return nil, fmt.Errorf("%w: %s is set but no key: set [fdb] tls_key_file (or FDB_TLS_KEY_FILE) to the certificate's private key", ErrTLS, f.cert.from)
	case f.ca.value == "" && f.verifiesPeers():
		return nil, fmt.Errorf("%w: no CA to check the cluster's certificates against: set [fdb] tls_ca_file (or FDB_TLS_CA_FILE) to the CA that signed them", ErrTLS)
	}
	read := func(s tlsSource) ([]byte, error) {
		b, err := os.ReadFile(s.value)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s cannot be read: %v", ErrTLS, s.from, s.value, errors.Unwrap(err))
		}
		return b, nil
	}
	certPEM, err := read(f.cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(f.key)
	if err != nil {
		return nil, err
	}
	l := &loaded{}
	if os.Getenv("FDB_TLS_PASSWORD") != "" {
		block, _ := pem.Decode(certPEM)
		if block == nil || block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: %s %s holds no PEM certificate", ErrTLS, f.cert.from, f.cert.value)
		}
		if l.leaf, err = x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", ErrTLS, f.cert.from, f.cert.value, err)
		}
	} else {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s and %s %s are not a certificate and its private key (%v): give the PEM certificate and its unencrypted PEM key (or set FDB_TLS_PASSWORD for an encrypted one)",
				ErrTLS, f.cert.from, f.cert.value, f.key.from, f.key.value, err)
		}
		l.pair, l.leaf = &pair, pair.Leaf
	}
	switch {
	case now.After(l.leaf.NotAfter):
		return nil, fmt.Errorf("%w: the certificate %s (%s) expired on %s: renew it (the cluster refuses an expired certificate)",
			ErrTLS, f.cert.value, f.cert.from, l.leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(l.leaf.NotBefore):
		return nil, fmt.Errorf("%w: the certificate %s (%s) is not valid before %s: check this host's clock",
			ErrTLS, f.cert.value, f.cert.from, l.leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if f.ca.value != "" {
		caPEM, err := read(f.ca)
		if err != nil {
			return nil, err
		}
		l.cas = x509.NewCertPool()
		if !l.cas.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("%w: %s %s holds no PEM certificate: give the CA that signed the cluster's certificates", ErrTLS, f.ca.from, f.ca.value)
		}
	}
	return l, nil
}

// tlsCoordinators reports whether a cluster file's content lists a
// coordinator at a :tls address.
func tlsCoordinators(content string) bool {
	line := strings.TrimSpace(content)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	return strings.Contains(line, ":tls")
}

// checkTLS is Open's check of the TLS settings against the cluster
// file: the files valid, and a certificate configured when the cluster
// file lists :tls coordinators (otherwise libfdb_c retries its handshakes
// for ever and nothing says why).
func checkTLS(clusterFile string, t TLS, now time.Time) error {
	f := t.resolve()
	if _, err := f.check(now); err != nil {
		return err
	}
	if clusterFile == "" {
		clusterFile = os.Getenv("FDB_CLUSTER_FILE")
	}
	if clusterFile == "" || f.configured() {
		return nil
	}
	content, err := os.ReadFile(clusterFile)
	if err != nil || !tlsCoordinators(string(content)) {
		return nil // Explain tells a missing or unreadable cluster file
	}
	return fmt.Errorf("%w: the cluster file %s lists coordinators at :tls addresses but no client certificate is configured: "+
		"set [fdb] tls_certificate_file, tls_key_file and tls_ca_file (or FDB_TLS_CERTIFICATE_FILE, FDB_TLS_KEY_FILE and FDB_TLS_CA_FILE) "+
		"to a certificate the cluster's CA signed, its key and that CA", ErrTLS, clusterFile)
}

// tlsReplyWait is how long explainTLS waits, after a handshake, for a
// coordinator to send an alert that refuses this node's certificate
// (TLS 1.3 servers check it after the client finished).
const tlsReplyWait = time.Second

// explainTLS says why coordinators at :tls addresses, which take TCP
// connections, do not answer: this node's files no longer valid, the
// coordinator's certificate not signed by this node's CA, or this node's
// certificate refused. It shakes hands with the first coordinator of
// addrs as libfdb_c would (the chain checked, not the host name, as
// FoundationDB does) and returns "" when the handshake is accepted.
func explainTLS(ctx context.Context, addrs []string, t TLS) string {
	f := t.resolve()
	l, err := f.check(time.Now())
	if err != nil {
		return strings.TrimPrefix(err.Error(), ErrTLS.Error()+": ")
	}
	if l == nil || l.pair == nil || len(addrs) == 0 {
		return "" // no TLS, or a key only libfdb_c can decrypt
	}
	addr := addrs[0]
	var serverCert *x509.Certificate
	cfg := &tls.Config{
		Certificates:       []tls.Certificate{*l.pair},
		InsecureSkipVerify: true, // the chain is checked below, without the host name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate")
			}
			serverCert = cs.PeerCertificates[0]
			if l.cas == nil || !f.verifiesPeers() {
				return nil
			}
			return verifyChain(cs.PeerCertificates, l.cas)
		},
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: coordinatorDialTimeout}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	var unknown x509.UnknownAuthorityError
	switch {
	case errors.As(err, &unknown) || (err != nil && serverCert != nil && strings.Contains(err.Error(), "x509:")):
		return fmt.Sprintf("the coordinator at %s presents a certificate (issued by %q) that no CA of %s %s signed: set it to the CA that signed the cluster's certificates (the processes' --tls-ca-file)",
			addr, serverCert.Issuer.CommonName, f.ca.from, f.ca.value)
	case err != nil && strings.Contains(err.Error(), "remote error"):
		return refused(addr, f, l, err)
	case err != nil:
		// No certificate came: FoundationDB throttles the connections
		// of a host for 9 s after one of its handshakes failed
		// (TLS_SERVER_CONNECTION_THROTTLE_TIMEOUT), and libfdb_c's keep
		// failing. Say what this node's own files tell.
		return ownChain(f, l)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(tlsReplyWait))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil, errors.As(err, &ne) && ne.Timeout():
		return "" // accepted: the cluster answers (or not) for other reasons
	case strings.Contains(err.Error(), "remote error"):
		return refused(addr, f, l, err)
	}
	// Closed without an alert, as FoundationDB does when its
	// --tls-verify-peers rules refuse a valid chain.
	return refused(addr, f, l, fmt.Errorf("closed the connection after the handshake: %w", err))
}

// ownChain is explainTLS's sentence when no handshake told: whether this
// node's certificate chains to its own CA, which in most deployments
// signed the cluster's certificates too.
func ownChain(f tlsFiles, l *loaded) string {
	if l.cas != nil {
		chain := []*x509.Certificate{l.leaf}
		for _, der := range l.pair.Certificate[1:] {
			if c, err := x509.ParseCertificate(der); err == nil {
				chain = append(chain, c)
			}
		}
		if err := verifyChain(chain, l.cas); err != nil {
			return fmt.Sprintf("the TLS handshakes fail, and this node's certificate %s (issued by %q) is not signed by a CA of %s %s: "+
				"FoundationDB's processes and their clients trust one CA; give the CA that signed the cluster's certificates and a certificate it signed",
				f.cert.value, l.leaf.Issuer.CommonName, f.ca.from, f.ca.value)
		}
	}
	return fmt.Sprintf("the coordinators take connections but no TLS handshake completes: check that this node's certificate %s (issued by %q) is signed by a CA the cluster's processes trust (their --tls-ca-file) and meets their --tls-verify-peers rules",
		f.cert.value, l.leaf.Issuer.CommonName)
}

// verifyChain checks that chain (leaf first, then intermediates) leads to
// a root of roots, for any use and whatever the host name, as
// FoundationDB's Check.Valid=1 does.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool) error {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// refused is explainTLS's sentence for a coordinator that refused this
// node's certificate with err (a TLS alert).
func refused(addr string, f tlsFiles, l *loaded, err error) string {
	alert := err.Error()
	if i := strings.Index(alert, "remote error: "); i >= 0 {
		alert = alert[i+len("remote error: "):]
	}
	return fmt.Sprintf("the coordinator at %s refuses this node's certificate %s (%s; issued by %q, valid until %s): "+
		"use a certificate signed by a CA the cluster's processes trust (their --tls-ca-file) that meets their --tls-verify-peers rules",
		addr, f.cert.value, alert, l.leaf.Issuer.CommonName, l.leaf.NotAfter.UTC().Format(time.RFC3339))
}
