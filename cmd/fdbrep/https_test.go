package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// A node serves its API over HTTPS as CouchDB's [ssl] says: beside plain
// HTTP or alone, to clients that check its certificate (the CLI with
// -cacert), with client certificates when asked, and a certificate
// renewed on disk is served to new connections without a restart.
// POST /_replicate works over it.
func TestServeHTTPS(t *testing.T) {
	bin := buildBinary(t)
	root := couchtest.NewCA(t, "https root")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(c tls.Certificate) { // as an operator renews: beside, then renamed over
		cert, key := couchtest.WriteKeyPair(t, c)
		for src, dst := range map[string]string{cert: certFile, key: keyFile} {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst+".new", b, 0o600))
			require.NoError(t, os.Rename(dst+".new", dst))
		}
	}
	install(root.Server(t))
	caFile := root.WriteCert(t)
	clientCert, clientKey := couchtest.WriteKeyPair(t, root.Client(t, "cli"))
	env := append(os.Environ(), "FDBREP_ADMINS__"+strings.ToUpper(nodeAdmin)+"="+nodePass, "FDBREP_CHTTPD_AUTH__ITERATIONS=10")
	adm := &testutil.Creds{Name: nodeAdmin, Pass: nodePass}
	httpsClient := func(pool *x509.CertPool, certs ...tls.Certificate) *http.Client {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: certs}
		tr.DisableKeepAlives = true
		return &http.Client{Transport: tr, Timeout: 2 * testutil.WaitTimeout}
	}
	get := func(c *http.Client, u string) (int, error) {
		resp, err := c.Get(u)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}

	t.Run("a certificate that cannot be read stops the node before its roles start", func(t *testing.T) {
		ini := writeIni(t, "[ssl]\nenable = true\nport = 0\ncert_file = "+filepath.Join(dir, "none.pem")+"\nkey_file = "+keyFile+"\n")
		code, out := runCLI(t, bin, env, "serve", "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json", "-config", ini)
		require.NotEqual(t, 0, code, out)
		require.Contains(t, out, "[ssl] cert_file")
		require.NotContains(t, out, "replication node started")
	})

	t.Run("beside HTTP", func(t *testing.T) {
		ini := writeIni(t, "[ssl]\nenable = true\nport = 0\ncert_file = "+certFile+"\nkey_file = "+keyFile+"\n")
		p := startProcess(t, bin, env, "serve", "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json", "-config", ini)
		plain := "http://" + p.waitLog(t, "HTTP API listening")["addr"].(string)
		addr := p.waitLog(t, "HTTPS API listening")["addr"].(string)
		api := "https://" + addr
		status, err := get(httpsClient(root.Pool()), api+"/_up")
		require.NoError(t, err)
		require.Equal(t, 200, status)
		status, err = get(http.DefaultClient, plain+"/_up")
		require.NoError(t, err)
		require.Equal(t, 200, status)
		_, err = get(httpsClient(nil), api+"/_up")
		require.ErrorContains(t, err, "certificate signed by unknown authority")

		// A one-shot replication asked over HTTPS.
		peer := couchtest.StartPouchDB(t, couchtest.WithAdmin(peerAdmin, peerPass))
		peer.CreateDB(t, "src")
		peer.AddDocs(t, "src", 0, 5)
		r := testutil.DoWith(t, httpsClient(root.Pool()), "POST", api+"/_replicate", adm, map[string]any{
			"source": peer.AuthDBURL("src"), "target": peer.AuthDBURL("tgt"), "create_target": true})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, true, r.Body["ok"], r.Raw)
		require.Equal(t, 5, docCount(t, peer.AuthDBURL("tgt")))

		// The CLI, with and without the CA.
		code, out := runCLI(t, bin, clientEnv(t), "jobs", "-cluster", api, "-cacert", caFile, "-user", nodeAdmin, "-password", nodePass)
		require.Equal(t, 0, code, out)
		code, out = runCLI(t, bin, clientEnv(t), "jobs", "-cluster", api, "-user", nodeAdmin, "-password", nodePass)
		require.NotEqual(t, 0, code, out)
		require.Contains(t, out, "certificate signed by unknown authority")

		// Renewed on disk: new connections get the new certificate.
		other := couchtest.NewCA(t, "renewed root")
		install(other.Server(t))
		status, err = get(httpsClient(other.Pool()), api+"/_up")
		require.NoError(t, err)
		require.Equal(t, 200, status)
	})

	t.Run("alone, with client certificates", func(t *testing.T) {
		install(root.Server(t))
		ini := writeIni(t, "[ssl]\nenable = true\nhttps_only = true\nport = 0\ncert_file = "+certFile+"\nkey_file = "+keyFile+
			"\ncacert_file = "+caFile+"\nverify_ssl_certificates = true\nfail_if_no_peer_cert = true\n")
		p := startProcess(t, bin, env, "serve", "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json", "-config", ini)
		api := "https://" + p.waitLog(t, "HTTPS API listening")["addr"].(string)
		pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
		require.NoError(t, err)
		status, err := get(httpsClient(root.Pool(), pair), api+"/_up")
		require.NoError(t, err)
		require.Equal(t, 200, status)
		_, err = get(httpsClient(root.Pool()), api+"/_up")
		require.ErrorContains(t, err, "certificate required")
		stranger := couchtest.NewCA(t, "stranger").Client(t, "x")
		_, err = get(httpsClient(root.Pool(), stranger), api+"/_up")
		require.Error(t, err)

		code, out := runCLI(t, bin, clientEnv(t), "jobs", "-cluster", api, "-cacert", caFile, "-cert", clientCert, "-key", clientKey,
			"-user", nodeAdmin, "-password", nodePass)
		require.Equal(t, 0, code, out)
	})
}
