package couch

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/youmark/pkcs8"
)

// TLS defaults, after CouchDB's [replicator] section.
const (
	// VerifyCertificatesDefault is verify_ssl_certificates. CouchDB 3.x
	// defaults to false; fdbrep verifies by default (see TLSSettings).
	VerifyCertificatesDefault = true
	// CertificateMaxDepthDefault is ssl_certificate_max_depth: how many
	// intermediate certificates may stand between an endpoint's
	// certificate and a trusted root.
	CertificateMaxDepthDefault = 3
	// CertificateMaxDepthMax bounds ssl_certificate_max_depth.
	CertificateMaxDepthMax = 100
)

// MaxDepthNone, as TLSSettings.MaxDepth, allows no intermediate
// certificate: a trusted root must sign the endpoint's certificate itself
// (0 means the default, as for every settings field).
const MaxDepthNone = -1

// TLSSettings are CouchDB's [replicator] settings for https endpoints, one
// set per node (CouchDB has no per-replication override). Config turns them
// into a *tls.Config for Options.TLS, reading every file once, so that a
// missing or unreadable file is an error at start-up rather than a failed
// replication later.
//
// Certificates are verified unless NoVerify is set: the endpoint's chain
// must lead to a root of CAFile (or of the system's roots when CAFile is
// empty), name the endpoint's host, and hold at most MaxDepth intermediate
// certificates. CouchDB 3.x does not verify by default; fdbrep does,
// because the replicator sends the endpoint's password (in a Basic header
// or a _session login) over the connection, and an unverified peer may be
// anyone on the path.
type TLSSettings struct {
	// NoVerify is verify_ssl_certificates = false: any certificate is
	// accepted (the connection is encrypted, not authenticated).
	NoVerify bool
	// CAFile is ssl_trusted_certificates_file: PEM certificates trusted as
	// roots instead of the system's.
	CAFile string
	// MaxDepth is ssl_certificate_max_depth: intermediate certificates
	// allowed (0: CertificateMaxDepthDefault; MaxDepthNone: none).
	MaxDepth int
	// CertFile and KeyFile are cert_file and key_file: the client
	// certificate (PEM, with its intermediates) and its private key (PEM:
	// PKCS #1, PKCS #8 or SEC 1; encrypted PKCS #8 or legacy encrypted PEM
	// with KeyPassword). Set both or neither.
	CertFile, KeyFile string
	// KeyPassword is password: the passphrase of an encrypted KeyFile. It
	// never appears in errors, logs or String.
	KeyPassword string
	// CACertReload is cacert_reload_interval_hours: with CAFile empty,
	// certificates are verified against the system's roots of the
	// moment, read again when a connection finds them older than this (0:
	// read once, by Go, as the process starts). It has effect on Linux,
	// where the roots are files; elsewhere Go asks the system.
	CACertReload time.Duration
}

// String prints the settings with the key password hidden.
func (s TLSSettings) String() string {
	pw := ""
	if s.KeyPassword != "" {
		pw = "*****"
	}
	return fmt.Sprintf("{NoVerify:%t CAFile:%q MaxDepth:%d CertFile:%q KeyFile:%q KeyPassword:%q CACertReload:%v}",
		s.NoVerify, s.CAFile, s.maxDepth(), s.CertFile, s.KeyFile, pw, s.CACertReload)
}

// GoString is String (for %#v).
func (s TLSSettings) GoString() string { return "couch.TLSSettings" + s.String() }

// maxDepth is MaxDepth with its default filled in.
func (s TLSSettings) maxDepth() int {
	switch {
	case s.MaxDepth == 0:
		return CertificateMaxDepthDefault
	case s.MaxDepth < 0:
		return 0
	}
	return s.MaxDepth
}

// Config validates the settings, reads the files and returns the TLS
// configuration of every https endpoint. Errors wrap ErrInvalidOptions,
// name the setting and the file, and never contain the key password.
func (s TLSSettings) Config() (*tls.Config, error) {
	if s.MaxDepth > CertificateMaxDepthMax || s.MaxDepth < MaxDepthNone {
		return nil, invalidOptions("[replicator] ssl_certificate_max_depth must be from 0 to %d, got %d", CertificateMaxDepthMax, s.MaxDepth)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.CAFile != "" {
		pool, err := readCAFile(s.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case s.CertFile != "" && s.KeyFile != "":
		cert, err := readKeyPair(s.CertFile, s.KeyFile, s.KeyPassword)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	case s.CertFile != "":
		return nil, invalidOptions("[replicator] cert_file is set but key_file is not: set both or neither")
	case s.KeyFile != "":
		return nil, invalidOptions("[replicator] key_file is set but cert_file is not: set both or neither")
	case s.KeyPassword != "":
		return nil, invalidOptions("[replicator] password is set but key_file is not (it is the passphrase of key_file)")
	}
	if s.NoVerify {
		cfg.InsecureSkipVerify = true
		return cfg, nil
	}
	var roots *systemRoots
	if s.CAFile == "" && s.CACertReload > 0 {
		var err error
		if roots, err = newSystemRoots(s.CACertReload); err != nil {
			return nil, err
		}
	}
	if roots != nil {
		// Go's handshake would verify against the roots it read once:
		// VerifyConnection verifies the chain and the name itself,
		// against the roots of the moment, as Go's would (NewDB tells it
		// the host of an endpoint named by its IP address, which sends
		// no server name).
		cfg.InsecureSkipVerify = true
	}
	depth := s.maxDepth()
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if roots != nil {
			chains, err := roots.verify(cs)
			if err != nil {
				return err
			}
			cs.VerifiedChains = chains
		}
		// The chains Go verified run from the endpoint's certificate to a
		// root; one within the depth is enough.
		least := 0
		for i, chain := range cs.VerifiedChains {
			if n := max(len(chain)-2, 0); i == 0 || n < least {
				least = n
			}
		}
		if len(cs.VerifiedChains) > 0 && least > depth {
			return &depthError{got: least, max: depth}
		}
		return nil
	}
	return cfg, nil
}

// readCAFile reads a PEM bundle of trusted roots.
func readCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, invalidOptions("[replicator] ssl_trusted_certificates_file: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, invalidOptions("[replicator] ssl_trusted_certificates_file %q holds no PEM certificate", path)
	}
	return pool, nil
}

// readKeyPair reads a client certificate and its key, decrypting the key
// with password when it is encrypted.
func readKeyPair(certFile, keyFile, password string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, invalidOptions("[replicator] cert_file: %v", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, invalidOptions("[replicator] key_file: %v", err)
	}
	if keyPEM, err = decryptKey(keyFile, keyPEM, password); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, invalidOptions("[replicator] cert_file %q and key_file %q: %v", certFile, keyFile, err)
	}
	return cert, nil
}

// decryptKey returns the first private key of keyPEM as unencrypted PEM.
// Encrypted PKCS #8 ("ENCRYPTED PRIVATE KEY", what current OpenSSL
// writes) and legacy encrypted PEM (Proc-Type: 4,ENCRYPTED, which
// Erlang, and so CouchDB, also reads) are decrypted with password; an
// unencrypted key is returned as it is, whatever the password.
func decryptKey(keyFile string, keyPEM []byte, password string) ([]byte, error) {
	rest := keyPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return keyPEM, nil // tls.X509KeyPair reports the missing key
		}
		if !strings.HasSuffix(block.Type, "PRIVATE KEY") {
			continue
		}
		encrypted := block.Type == "ENCRYPTED PRIVATE KEY" || x509.IsEncryptedPEMBlock(block) //nolint:staticcheck // legacy format CouchDB accepts
		switch {
		case !encrypted:
			return keyPEM, nil
		case password == "":
			return nil, invalidOptions("[replicator] key_file %q is encrypted: set [replicator] password to its passphrase", keyFile)
		case block.Type == "ENCRYPTED PRIVATE KEY":
			key, err := pkcs8.ParsePKCS8PrivateKey(block.Bytes, []byte(password))
			if err != nil {
				return nil, invalidOptions("[replicator] key_file %q: cannot decrypt it with [replicator] password (wrong passphrase or unsupported cipher)", keyFile)
			}
			der, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return nil, invalidOptions("[replicator] key_file %q: %v", keyFile, err)
			}
			return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
		default:
			der, err := x509.DecryptPEMBlock(block, []byte(password)) //nolint:staticcheck // legacy format CouchDB accepts
			if err == nil && !parsesAsKey(der) {
				// The legacy format has no integrity check: about one wrong
				// passphrase in 256 passes the padding check and yields
				// garbage instead of an error.
				err = x509.IncorrectPasswordError
			}
			if err != nil {
				return nil, invalidOptions("[replicator] key_file %q: cannot decrypt it with [replicator] password (wrong passphrase)", keyFile)
			}
			return pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der}), nil
		}
	}
}

// parsesAsKey reports whether der is a private key in one of the DER
// forms a PEM file holds (PKCS #1, PKCS #8 or SEC 1).
func parsesAsKey(der []byte) bool {
	if _, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		return true
	}
	_, err := x509.ParseECPrivateKey(der)
	return err == nil
}

// depthError is a verified chain longer than ssl_certificate_max_depth.
type depthError struct{ got, max int }

func (e *depthError) Error() string {
	return fmt.Sprintf("certificate chain has %d intermediate certificates, more than [replicator] ssl_certificate_max_depth = %d", e.got, e.max)
}

// tlsError is a TLS handshake that failed, with what to do about it.
type tlsError struct {
	msg string
	err error
}

func (e *tlsError) Error() string { return "couch: TLS: " + e.msg }

// Unwrap returns ErrTLS and the handshake's own error.
func (e *tlsError) Unwrap() []error { return []error{ErrTLS, e.err} }

// tlsFailure returns err as a *tlsError, naming the setting that decides
// it, when err is a refused certificate or another TLS handshake failure;
// otherwise nil. clientCert tells whether a client certificate is
// configured.
func tlsFailure(err error, clientCert bool) error {
	var (
		depth   *depthError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		verify  *tls.CertificateVerificationError
		record  tls.RecordHeaderError
		op      *net.OpError
	)
	var msg string
	switch {
	case errors.As(err, &depth):
		msg = "the endpoint's " + depth.Error()
	case errors.As(err, &unknown):
		msg = "certificate signed by unknown authority: set [replicator] ssl_trusted_certificates_file to a PEM file holding the endpoint's CA certificate"
	case errors.As(err, &host):
		msg = fmt.Sprintf("the endpoint's certificate does not name the host of its URL (%v)", host)
	case errors.As(err, &invalid):
		msg = fmt.Sprintf("the endpoint's certificate is refused (%v)", invalid)
	case errors.As(err, &verify):
		msg = fmt.Sprintf("the endpoint's certificate is refused (%v)", verify.Err)
	case errors.As(err, &record) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		msg = "the endpoint does not speak TLS: is its URL http:// rather than https://?"
	case errors.As(err, &op) && op.Op == "remote error":
		alert := op.Err.Error()
		switch {
		case strings.Contains(alert, "certificate required") && clientCert:
			// Go sends a client certificate only when its issuer is one
			// the endpoint asked for.
			msg = "the endpoint requires a client certificate issued by a CA it trusts, and that of [replicator] cert_file is not"
		case strings.Contains(alert, "certificate required"):
			msg = "the endpoint requires a client certificate: set [replicator] cert_file and key_file"
		case strings.Contains(alert, "certificate"):
			msg = fmt.Sprintf("the endpoint refused the client certificate of [replicator] cert_file (remote error: %s)", alert)
		default:
			msg = fmt.Sprintf("the endpoint refused the TLS handshake (remote error: %s)", alert)
		}
	default:
		return nil
	}
	return &tlsError{msg: msg, err: err}
}
