package frontend

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// [ssl] is checked when read: what cannot work stops the node with a line
// that names the key; CouchDB's list syntax and OpenSSL's cipher names
// are taken as a CouchDB local.ini writes them.
func TestHTTPSFromConfig(t *testing.T) {
	root := couchtest.NewCA(t, "https root")
	cert, key := couchtest.WriteKeyPair(t, root.Server(t))
	oldCert, oldKey := couchtest.WriteKeyPair(t, root.Expired(t, "old"))
	ca := root.WriteCert(t)
	on := func(kv ...string) map[string]string {
		m := map[string]string{"enable": "true", "cert_file": cert, "key_file": key}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		ssl   map[string]string
		want  string // error; "" for none
		check func(t *testing.T, h HTTPS)
	}{
		{name: "off", ssl: map[string]string{}, check: func(t *testing.T, h HTTPS) { require.False(t, h.Enable) }},
		{name: "defaults", ssl: on(), check: func(t *testing.T, h HTTPS) {
			require.Equal(t, HTTPSPortDefault, h.Port)
			require.Equal(t, uint16(tls.VersionTLS12), h.MinVersion)
			require.Equal(t, uint16(tls.VersionTLS13), h.MaxVersion)
			require.Nil(t, h.Ciphers)
		}},
		{name: "CouchDB's lists", ssl: on("tls_versions", "['tlsv1.3']", "ciphers", `["ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-AES256-SHA"]`),
			check: func(t *testing.T, h HTTPS) {
				require.Equal(t, uint16(tls.VersionTLS13), h.MinVersion)
				require.Equal(t, []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}, h.Ciphers)
			}},
		{name: "no certificate", ssl: map[string]string{"enable": "true"}, want: "[ssl] enable needs [ssl] cert_file and key_file"},
		{name: "not its key", ssl: on("key_file", oldKey), want: "[ssl] cert_file " + cert + " and key_file " + oldKey},
		{name: "expired", ssl: on("cert_file", oldCert, "key_file", oldKey), want: "[ssl] cert_file " + oldCert + " expired on"},
		{name: "old TLS", ssl: on("tls_versions", "[tlsv1, 'tlsv1.1', 'tlsv1.2']"), want: "[ssl] tls_versions: tlsv1 is not served (deprecated, RFC 8996)"},
		{name: "weak cipher", ssl: on("ciphers", "ECDHE-ECDSA-AES128-SHA256"), want: `[ssl] ciphers: "ECDHE-ECDSA-AES128-SHA256" is not a TLS 1.2 cipher suite Go deems secure`},
		{name: "verify without CA", ssl: on("verify_ssl_certificates", "true"), want: "[ssl] verify_ssl_certificates needs [ssl] cacert_file"},
		{name: "require without verify", ssl: on("fail_if_no_peer_cert", "true"), want: "[ssl] fail_if_no_peer_cert needs [ssl] verify_ssl_certificates = true"},
		{name: "clients verified", ssl: on("verify_ssl_certificates", "true", "cacert_file", ca, "fail_if_no_peer_cert", "true"),
			check: func(t *testing.T, h HTTPS) { require.True(t, h.RequireClientCert) }},
		{name: "only without enable", ssl: map[string]string{"https_only": "true"}, want: "[ssl] https_only needs [ssl] enable = true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.FromMap(map[string]map[string]string{"ssl": tc.ssl})
			require.NoError(t, err)
			h, err := HTTPSFromConfig(cfg)
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			tc.check(t, h)
		})
	}
}
