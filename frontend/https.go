package frontend

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// HTTPSPortDefault is [ssl] port's default, CouchDB's.
const HTTPSPortDefault = 6984

// The [ssl] keys: CouchDB's names and meanings, and https_only, fdbrep's.
var (
	keySSLEnable = config.RegisterBool("ssl", "enable", false,
		"Serve the HTTP API over HTTPS too, on [ssl] port at [chttpd] bind_address (api_frontend nodes).")
	keySSLPort = config.RegisterInt("ssl", "port", HTTPSPortDefault, 0, 65535,
		"Port of the HTTPS API; 0 picks a free port.")
	keySSLCertFile = config.RegisterString("ssl", "cert_file", "",
		"The server's certificate chain (PEM), leaf first; required with enable. Reread when it changes on disk.", nil)
	keySSLKeyFile = config.RegisterString("ssl", "key_file", "",
		"The certificate's private key (PEM, unencrypted); required with enable. Reread with cert_file.", nil)
	keySSLCACertFile = config.RegisterString("ssl", "cacert_file", "",
		"CA certificates (PEM) that client certificates must chain to; required with verify_ssl_certificates. Reread when it changes on disk.", nil)
	keySSLVerify = config.RegisterBool("ssl", "verify_ssl_certificates", false,
		"Ask clients for a certificate and refuse the connection when one is given that does not chain to cacert_file. The request is still authenticated as usual (Basic, cookie).")
	keySSLRequirePeer = config.RegisterBool("ssl", "fail_if_no_peer_cert", false,
		"With verify_ssl_certificates: refuse clients that give no certificate.")
	keySSLVersions = config.RegisterString("ssl", "tls_versions", "tlsv1.2,tlsv1.3",
		"TLS versions served: tlsv1.2, tlsv1.3 (comma-separated, or CouchDB's list [tlsv1.2, 'tlsv1.3']). tlsv1 and tlsv1.1 are refused (RFC 8996).", nil)
	keySSLCiphers = config.RegisterString("ssl", "ciphers", "",
		"TLS 1.2 cipher suites served, by OpenSSL name (ECDHE-RSA-AES128-GCM-SHA256) or IANA name (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256), comma-separated or as CouchDB's list; only suites Go deems secure. Empty: Go's defaults. TLS 1.3's suites are fixed.", nil)
	keySSLOnly = config.RegisterBool("ssl", "https_only", false,
		"fdbrep: with enable, serve the HTTP API only over HTTPS (no plain listener on [chttpd] port). [node] health_address still serves GET /_up in plain HTTP on loopback.")
)

// HTTPS is how an api_frontend node serves HTTPS ([ssl]).
type HTTPS struct {
	// Enable serves HTTPS on Port beside plain HTTP (or instead, Only).
	Enable bool
	Port   int
	Only   bool
	// CertFile and KeyFile are the server's certificate chain and key,
	// CACertFile the CAs client certificates must chain to.
	CertFile, KeyFile, CACertFile string
	// VerifyClients asks for a client certificate and checks one that is
	// given; RequireClientCert refuses a client without one.
	VerifyClients, RequireClientCert bool
	// MinVersion and MaxVersion bound the TLS versions (tls.VersionTLS12
	// or 13); Ciphers are the TLS 1.2 suites (nil: Go's defaults).
	MinVersion, MaxVersion uint16
	Ciphers                []uint16
}

// HTTPSFromConfig reads [ssl] and checks it: the files present and valid
// (a certificate with its key, within its validity; a CA with
// verify_ssl_certificates), the cipher names known.
func HTTPSFromConfig(cfg *config.Config) (HTTPS, error) {
	h := HTTPS{
		Enable:            keySSLEnable.Get(cfg),
		Port:              int(keySSLPort.Get(cfg)),
		Only:              keySSLOnly.Get(cfg),
		CertFile:          keySSLCertFile.Get(cfg),
		KeyFile:           keySSLKeyFile.Get(cfg),
		CACertFile:        keySSLCACertFile.Get(cfg),
		VerifyClients:     keySSLVerify.Get(cfg),
		RequireClientCert: keySSLRequirePeer.Get(cfg),
	}
	if !h.Enable {
		if h.Only {
			return h, errors.New("config: [ssl] https_only needs [ssl] enable = true")
		}
		return h, nil
	}
	var err error
	if h.MinVersion, h.MaxVersion, err = tlsVersions(keySSLVersions.Get(cfg)); err != nil {
		return h, err
	}
	if h.Ciphers, err = cipherSuites(keySSLCiphers.Get(cfg)); err != nil {
		return h, err
	}
	_, err = h.TLSConfig()
	return h, err
}

// erlangList splits a list given comma-separated or as CouchDB writes it
// in its ini files ([a, 'b', "c"]).
func erlangList(v string) []string {
	v = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(v), "["), "]")
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.Trim(strings.TrimSpace(item), `'"`); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// tlsVersions parses [ssl] tls_versions into the lowest and highest
// version served.
func tlsVersions(v string) (lo, hi uint16, err error) {
	for _, name := range erlangList(v) {
		var n uint16
		switch name {
		case "tlsv1.2":
			n = tls.VersionTLS12
		case "tlsv1.3":
			n = tls.VersionTLS13
		case "tlsv1", "tlsv1.1", "sslv3":
			return 0, 0, fmt.Errorf("config: [ssl] tls_versions: %s is not served (deprecated, RFC 8996): give tlsv1.2, tlsv1.3 or both", name)
		default:
			return 0, 0, fmt.Errorf("config: [ssl] tls_versions: %q is not a TLS version: give tlsv1.2, tlsv1.3 or both", name)
		}
		if lo == 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if lo == 0 {
		return 0, 0, errors.New("config: [ssl] tls_versions is empty: give tlsv1.2, tlsv1.3 or both")
	}
	return lo, hi, nil
}

// cipherSuites parses [ssl] ciphers: OpenSSL or IANA names of the suites
// Go deems secure; nil for Go's defaults.
func cipherSuites(v string) ([]uint16, error) {
	known := map[string]uint16{}
	var names []string
	for _, s := range tls.CipherSuites() {
		known[s.Name] = s.ID
		names = append(names, s.Name)
		if o := openSSLName(s.Name); o != "" {
			known[o] = s.ID
		}
	}
	var ids []uint16
	for _, name := range erlangList(v) {
		id, ok := known[name]
		if !ok {
			return nil, fmt.Errorf("config: [ssl] ciphers: %q is not a TLS 1.2 cipher suite Go deems secure; use some of %s (or their OpenSSL names)", name, strings.Join(names, ", "))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// openSSLName is OpenSSL's name of an ECDHE suite given by its IANA name
// (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: ECDHE-RSA-AES128-GCM-SHA256),
// or "" for one OpenSSL names otherwise.
func openSSLName(iana string) string {
	rest, ok := strings.CutPrefix(iana, "TLS_ECDHE_")
	if !ok {
		return ""
	}
	kx, cipher, ok := strings.Cut(rest, "_WITH_")
	if !ok {
		return ""
	}
	switch {
	case strings.HasPrefix(cipher, "CHACHA20_POLY1305"):
		return "ECDHE-" + kx + "-CHACHA20-POLY1305"
	case strings.HasPrefix(cipher, "AES_"):
		// AES_128_GCM_SHA256 -> AES128-GCM-SHA256, AES_128_CBC_SHA -> AES128-SHA
		parts := strings.Split(cipher, "_") // AES 128 GCM SHA256
		if len(parts) != 4 {
			return ""
		}
		mode := "-" + parts[2]
		if parts[2] == "CBC" {
			mode = ""
		}
		return "ECDHE-" + kx + "-AES" + parts[1] + mode + "-" + parts[3]
	}
	return ""
}

// TLSConfig returns the server's TLS configuration: the certificate and
// the client CAs are reread when their files change (checked at each
// handshake by their size and modification time), so a renewed
// certificate is served without a restart; a file that fails to load
// then (half written) leaves the last good one in use. It fails when the
// files cannot be loaded now.
func (h HTTPS) TLSConfig() (*tls.Config, error) {
	switch {
	case h.CertFile == "" || h.KeyFile == "":
		return nil, errors.New("config: [ssl] enable needs [ssl] cert_file and key_file: the server's certificate (PEM) and its private key")
	case h.VerifyClients && h.CACertFile == "":
		return nil, errors.New("config: [ssl] verify_ssl_certificates needs [ssl] cacert_file: the CAs client certificates must chain to")
	case h.RequireClientCert && !h.VerifyClients:
		return nil, errors.New("config: [ssl] fail_if_no_peer_cert needs [ssl] verify_ssl_certificates = true")
	}
	r := &reloader{certFile: h.CertFile, keyFile: h.KeyFile, caFile: h.CACertFile}
	if err := r.load(true); err != nil {
		return nil, err
	}
	base := &tls.Config{
		MinVersion:     h.MinVersion,
		MaxVersion:     h.MaxVersion,
		CipherSuites:   h.Ciphers,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.certificate() },
	}
	if h.VerifyClients {
		base.ClientAuth = tls.VerifyClientCertIfGiven
		if h.RequireClientCert {
			base.ClientAuth = tls.RequireAndVerifyClientCert
		}
		base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.GetConfigForClient = nil
			c.ClientCAs = r.clientCAs()
			return c, nil
		}
	}
	return base, nil
}

// reloader holds the certificate and client CAs of an HTTPS listener and
// rereads them when their files change.
type reloader struct {
	certFile, keyFile, caFile string

	mu    sync.Mutex
	stamp string // the files' sizes and modification times at the last load, good or not
	cert  *tls.Certificate
	cas   *x509.CertPool
}

// stampOf is the files' sizes and modification times.
func (r *reloader) stampOf() string {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile, r.caFile} {
		if f == "" {
			continue
		}
		if st, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
		} else {
			b.WriteString("-;")
		}
	}
	return b.String()
}

// load reads the files when they changed since the last load (always when
// first); a failure keeps the last good files (none when first) and is
// returned. Files that failed are read again only once they change again,
// not at every handshake.
func (r *reloader) load(first bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp := r.stampOf()
	if !first && stamp == r.stamp {
		return nil
	}
	r.stamp = stamp
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("config: [ssl] cert_file %s and key_file %s: %w (give the PEM certificate chain, leaf first, and its unencrypted PEM key)", r.certFile, r.keyFile, err)
	}
	if first && time.Now().After(cert.Leaf.NotAfter) {
		return fmt.Errorf("config: [ssl] cert_file %s expired on %s: renew it", r.certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	var cas *x509.CertPool
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return fmt.Errorf("config: [ssl] cacert_file: %w", err)
		}
		cas = x509.NewCertPool()
		if !cas.AppendCertsFromPEM(pem) {
			return fmt.Errorf("config: [ssl] cacert_file %s holds no PEM certificate", r.caFile)
		}
	}
	r.cert, r.cas = &cert, cas
	return nil
}

func (r *reloader) certificate() (*tls.Certificate, error) {
	_ = r.load(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

func (r *reloader) clientCAs() *x509.CertPool {
	_ = r.load(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cas
}
