package couch

import (
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// systemRootsReadable: on Linux the system's roots are files, which
// loadSystemRoots reads as Go's crypto/x509 does at its first use.
const systemRootsReadable = true

// The files and directories Go's crypto/x509 reads the roots from on
// Linux, and the environment variables that replace them.
var (
	certFiles = []string{
		"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo
		"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
		"/etc/ssl/ca-bundle.pem",                            // OpenSUSE
		"/etc/pki/tls/cacert.pem",                           // OpenELEC
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
		"/etc/ssl/cert.pem",                                 // Alpine
	}
	certDirectories = []string{"/etc/ssl/certs", "/etc/pki/tls/certs"}
)

// loadSystemRoots reads the system's roots: the first of certFiles that
// exists (SSL_CERT_FILE instead, when set), and every file of
// certDirectories (SSL_CERT_DIR's, colon-separated, when set), but
// links to files of the same directory.
func loadSystemRoots() (*x509.CertPool, error) {
	roots, any := x509.NewCertPool(), false
	files := certFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	var firstErr error
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err == nil {
			any = roots.AppendCertsFromPEM(data) || any
			break
		}
		if firstErr == nil && !errors.Is(err, fs.ErrNotExist) {
			firstErr = err
		}
	}
	dirs := certDirectories
	if d := os.Getenv("SSL_CERT_DIR"); d != "" {
		dirs = strings.Split(d, ":")
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if firstErr == nil && !errors.Is(err, fs.ErrNotExist) {
				firstErr = err
			}
			continue
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink != 0 {
				if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && !strings.Contains(target, "/") {
					continue // another name of a file read already
				}
			}
			if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
				any = roots.AppendCertsFromPEM(data) || any
			}
		}
	}
	if any || firstErr == nil {
		return roots, nil
	}
	return nil, firstErr
}
