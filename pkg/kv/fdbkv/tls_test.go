//go:build fdb

package fdbkv

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// Open's check of the TLS files says which setting is wrong and what to
// do, naming the configuration key or libfdb_c's variable it came from.
func TestTLSFilesChecked(t *testing.T) {
	for _, v := range []string{"FDB_TLS_CERTIFICATE_FILE", "FDB_TLS_KEY_FILE", "FDB_TLS_CA_FILE", "FDB_TLS_VERIFY_PEERS", "FDB_TLS_PASSWORD"} {
		t.Setenv(v, "")
	}
	root := couchtest.NewCA(t, "fdb root")
	cert, key := couchtest.WriteKeyPair(t, root.Client(t, "node"))
	_, otherKey := couchtest.WriteKeyPair(t, root.Client(t, "other"))
	oldCert, oldKey := couchtest.WriteKeyPair(t, root.Expired(t, "old"))
	ca := root.WriteCert(t)
	garbage := couchtest.WriteFile(t, "garbage.pem", []byte("not pem"))
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tlsCluster := couchtest.WriteFile(t, "fdb.cluster", []byte("test:x@127.0.0.1:4500:tls\n"))
	plainCluster := couchtest.WriteFile(t, "plain.cluster", []byte("test:x@127.0.0.1:4500\n"))

	for _, tc := range []struct {
		name    string
		cluster string
		tls     TLS
		env     map[string]string
		want    string // "" for valid
	}{
		{name: "no TLS, plain cluster", cluster: plainCluster},
		{name: "valid", cluster: tlsCluster, tls: TLS{CertificateFile: cert, KeyFile: key, CAFile: ca}},
		{name: "valid, from the environment", cluster: tlsCluster, env: map[string]string{"FDB_TLS_CERTIFICATE_FILE": cert, "FDB_TLS_KEY_FILE": key, "FDB_TLS_CA_FILE": ca}},
		{name: "no certificate for :tls", cluster: tlsCluster, want: "the cluster file " + tlsCluster + " lists coordinators at :tls addresses but no client certificate is configured"},
		{name: "key without certificate", cluster: tlsCluster, tls: TLS{KeyFile: key, CAFile: ca}, want: "[fdb] tls_key_file is set but no certificate"},
		{name: "certificate without key", cluster: tlsCluster, env: map[string]string{"FDB_TLS_CERTIFICATE_FILE": cert}, tls: TLS{CAFile: ca}, want: "FDB_TLS_CERTIFICATE_FILE is set but no key"},
		{name: "no CA", cluster: tlsCluster, tls: TLS{CertificateFile: cert, KeyFile: key}, want: "no CA to check the cluster's certificates against"},
		{name: "no CA, not verifying", cluster: tlsCluster, tls: TLS{CertificateFile: cert, KeyFile: key, VerifyPeers: "Check.Valid=0"}},
		{name: "missing", cluster: tlsCluster, tls: TLS{CertificateFile: missing, KeyFile: key, CAFile: ca}, want: "[fdb] tls_certificate_file " + missing + " cannot be read: no such file or directory"},
		{name: "not its key", cluster: tlsCluster, tls: TLS{CertificateFile: cert, KeyFile: otherKey, CAFile: ca}, want: "are not a certificate and its private key"},
		{name: "expired", cluster: tlsCluster, tls: TLS{CertificateFile: oldCert, KeyFile: oldKey, CAFile: ca}, want: "the certificate " + oldCert + " ([fdb] tls_certificate_file) expired on"},
		{name: "CA not PEM", cluster: tlsCluster, tls: TLS{CertificateFile: cert, KeyFile: key, CAFile: garbage}, want: "[fdb] tls_ca_file " + garbage + " holds no PEM certificate"},
		{name: "encrypted key", cluster: tlsCluster, tls: TLS{CertificateFile: cert, KeyFile: garbage, CAFile: ca}, env: map[string]string{"FDB_TLS_PASSWORD": "pw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			err := checkTLS(tc.cluster, tc.tls, time.Now())
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrTLS)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
