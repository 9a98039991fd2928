//go:build !linux

package couch

import "crypto/x509"

// systemRootsReadable: elsewhere than on Linux, Go asks the system itself
// to verify (macOS, Windows) or reads its roots once (the BSDs):
// cacert_reload_interval_hours has no effect.
const systemRootsReadable = false

func loadSystemRoots() (*x509.CertPool, error) { return x509.SystemCertPool() }
