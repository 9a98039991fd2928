//go:build fdb

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/proctest"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// A node reaches a FoundationDB cluster on mutual TLS with the [fdb] tls_*
// keys or FoundationDB's own FDB_TLS_* variables. A configuration that
// cannot work stops it at once with one line that says which setting and
// what to do (no certificate for :tls coordinators, an expired
// certificate, a key that is not the certificate's); a wrong CA or a
// certificate the cluster refuses is said in the line of each probe it
// waits through, and a certificate renewed on disk is picked up without a
// restart.
func TestServeOnFDBOverTLS(t *testing.T) {
	c := proctest.StartFDB(t, proctest.FDBOptions{Processes: 1, TLS: true})
	bin := buildBinary(t)
	var env []string // this process's, without libfdb_c's TLS variables
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FDB_TLS_") {
			env = append(env, kv)
		}
	}
	env = append(env, "FDBREP_CHTTPD_AUTH__ITERATIONS=10")
	adm := &testutil.Creds{Name: "adm", Pass: "adm-pw"}
	ini := func(keys string) string {
		return writeIni(t, "[admins]\nadm = adm-pw\n[fdb]\n"+keys)
	}
	tlsKeys := func(cert, key, ca string) string {
		return "tls_certificate_file = " + cert + "\ntls_key_file = " + key + "\ntls_ca_file = " + ca + "\ntls_refresh_sec = 1\n"
	}
	serveArgs := func(ini string) []string {
		return []string{"serve", "-backend", "fdb", "-cluster-file", c.File, "-config", ini, "-bind", "127.0.0.1:0", "-log-format", "json"}
	}
	works := func(t *testing.T, p *process, db string) {
		api := "http://" + p.waitLog(t, "HTTP API listening")["addr"].(string)
		r := testutil.Do(t, "PUT", api+"/"+db, adm, nil)
		require.Equal(t, 201, r.Status, r.Raw)
		r = testutil.Do(t, "GET", api+"/"+db, adm, nil)
		require.Equal(t, 200, r.Status, r.Raw)
	}

	t.Run("refused at start", func(t *testing.T) {
		root := couchtest.NewCA(t, "another root")
		expiredCert, expiredKey := couchtest.WriteKeyPair(t, root.Expired(t, "old"))
		for _, tc := range []struct{ name, keys, want string }{
			{"no certificate", "", "lists coordinators at :tls addresses but no client certificate is configured: set [fdb] tls_certificate_file, tls_key_file and tls_ca_file"},
			{"expired", tlsKeys(expiredCert, expiredKey, c.TLSFile("ca.pem")), "the certificate " + expiredCert + " ([fdb] tls_certificate_file) expired on "},
			{"not its key", tlsKeys(c.TLSFile("cert.pem"), c.TLSFile("rogue-key.pem"), c.TLSFile("ca.pem")), "are not a certificate and its private key"},
			{"no CA", "tls_certificate_file = " + c.TLSFile("cert.pem") + "\ntls_key_file = " + c.TLSFile("key.pem") + "\n", "no CA to check the cluster's certificates against: set [fdb] tls_ca_file"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out := runCLI(t, bin, env, serveArgs(ini(tc.keys))...)
				require.Equal(t, 1, code, out)
				require.Contains(t, out, tc.want)
				t.Log(out)
			})
		}
	})

	t.Run("wrong CA", func(t *testing.T) {
		p := startProcess(t, bin, env, serveArgs(ini(tlsKeys(c.TLSFile("cert.pem"), c.TLSFile("key.pem"), c.TLSFile("rogue-ca.pem"))))...)
		// From a handshake, or (FoundationDB closes the connections of a
		// host whose handshake failed, for 9 s) from the node's own files.
		w := p.waitLog(t, "waiting for FoundationDB")
		t.Log(w["error"])
		require.Contains(t, w["error"], "CA of [fdb] tls_ca_file "+c.TLSFile("rogue-ca.pem"))
	})

	t.Run("refused, then renewed on disk", func(t *testing.T) {
		dir := t.TempDir()
		cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		install := func(from string) {
			for src, dst := range map[string]string{from + "cert.pem": cert, from + "key.pem": key} {
				b, err := os.ReadFile(c.TLSFile(src))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(dst+".new", b, 0o600))
				require.NoError(t, os.Rename(dst+".new", dst))
			}
		}
		install("rogue-")
		p := startProcess(t, bin, env, serveArgs(ini(tlsKeys(cert, key, c.TLSFile("ca.pem"))))...)
		w := p.waitLog(t, "waiting for FoundationDB")
		t.Log(w["error"])
		require.Contains(t, w["error"], "this node's certificate "+cert)
		require.Contains(t, w["error"], `issued by "fdb.sh rogue-test CA"`)
		install("")
		p.waitLog(t, "FoundationDB answers: starting")
		works(t, p, "renewed%2F_replicator")
	})

	t.Run("FoundationDB's variables", func(t *testing.T) {
		env := append(env, "FDB_TLS_CERTIFICATE_FILE="+c.TLSFile("cert.pem"), "FDB_TLS_KEY_FILE="+c.TLSFile("key.pem"), "FDB_TLS_CA_FILE="+c.TLSFile("ca.pem"))
		works(t, startProcess(t, bin, env, serveArgs(ini(""))...), "byenv%2F_replicator")
	})
}
