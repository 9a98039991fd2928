//go:build fdb && linux

package deploy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/proctest"
	"github.com/fdbrep/fdbrep/deploy"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/seal"
)

// hostTLS writes a certificate and key of their own for node name at ip,
// signed by the cluster's CA (fdb.sh's ca.pem and ca.key), as DEPLOY.md
// says each host gets, and returns the host variables that point the
// node's [fdb] tls_* at them.
func (d *deployment) hostTLS(t *testing.T, name, ip string) map[string]string {
	t.Helper()
	ca := couchtest.LoadCA(t, d.fdb.TLSFile("ca.pem"), d.fdb.TLSFile("ca.key"))
	cert, key := couchtest.WriteKeyPair(t, ca.Peer(t, name, net.ParseIP(ip)))
	return tlsVariables(cert, key, d.fdb.TLSFile("ca.pem"))
}

// sealKey is the sealing key file a host of role holds (DEPLOY.md): the
// public key on frontends, the private key on replication hosts; one pair
// for the deployment.
func (d *deployment) sealKey(t *testing.T, role string) string {
	if d.sealPub == "" {
		priv, pub, err := seal.GenerateKey()
		require.NoError(t, err)
		d.sealPub, d.sealPriv = filepath.Join(d.dir, "seal.pub"), filepath.Join(d.dir, "seal.key")
		require.NoError(t, os.WriteFile(d.sealPub, pub, 0o644))
		require.NoError(t, os.WriteFile(d.sealPriv, priv, 0o600))
	}
	if role == config.RoleAPIFrontend {
		return d.sealPub
	}
	return d.sealPriv
}

// tlsVariables are the host variables of deploy.TLSVariables.
func tlsVariables(cert, key, ca string) map[string]string {
	return map[string]string{"FDBREP_FDB__TLS_CERTIFICATE_FILE": cert, "FDBREP_FDB__TLS_KEY_FILE": key, "FDBREP_FDB__TLS_CA_FILE": ca}
}

// checkStrangerRefused starts a node on a frontend's host, which the
// firewall lets reach FoundationDB, with the role file and the cluster's
// CA but a certificate another CA signed (fdb.sh's rogue-cert.pem):
// FoundationDB refuses it, and the node says so in its "waiting for
// FoundationDB" lines, naming its certificate, and never comes up.
func (d *deployment) checkStrangerRefused(t *testing.T) {
	defer d.phase(t, "1b. a host with another CA's certificate is refused by FoundationDB")()
	h := d.nodes["fe1"].host
	clusterFile := filepath.Join(d.dir, "stranger", "fdb.cluster")
	raw, err := os.ReadFile(d.fdb.File)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(clusterFile), 0o755))
	require.NoError(t, os.WriteFile(clusterFile, raw, 0o644))
	own := tlsVariables(d.fdb.TLSFile("rogue-cert.pem"), d.fdb.TLSFile("rogue-key.pem"), d.fdb.TLSFile("ca.pem"))
	own["FDBREP_NODE__NAME"], own["FDBREP_FDB__CLUSTER_FILE"] = "stranger", clusterFile
	own[deploy.SealVariables[config.RoleReplication]] = d.sealKey(t, config.RoleReplication)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			env = append(env, kv)
		}
	}
	for k, v := range own {
		env = append(env, k+"="+v)
	}
	// The replication role's file: on a frontend's host it opens no port
	// the frontend uses (its health port is on loopback).
	args := h.exec(d.bin, "serve", "-config", d.roleFile(config.RoleReplication))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(env, timingEnv...)
	p := proctest.Start(t, "stranger", cmd)
	defer p.Kill()
	want := "this node's certificate " + d.fdb.TLSFile("rogue-cert.pem")
	proctest.WaitUntil(t, time.Now().Add(testutil.WaitTimeout), "the stranger says FoundationDB refuses its certificate", func() bool {
		if p.Exited() {
			t.Fatalf("the stranger exited:\n%s", p.Tail())
		}
		return len(p.Find("waiting for FoundationDB", "error", want)) > 0
	})
	t.Logf("the stranger: %s", p.Find("waiting for FoundationDB", "error", want)[0].Str("error"))
	require.Empty(t, p.Find("fdbrep node up"), "a node FoundationDB refuses never comes up")
}
