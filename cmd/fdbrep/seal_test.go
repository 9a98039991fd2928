package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/node"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// The line a node prints when it makes the data directory's sealing key.
const sealKeyCreated = "fdbrep: no sealing key was configured, so this one was created"

// sealNode is a node serve runs on a data directory for the sealing
// tests, with an admin.
type sealNode struct {
	base string
	logs *testutil.SyncBuffer
	stop func()
}

func startSealNode(t *testing.T, dir string, args ...string) sealNode {
	t.Helper()
	t.Setenv("FDBREP_ADMINS__"+strings.ToUpper(nodeAdmin), nodePass)
	t.Setenv("FDBREP_CHTTPD_AUTH__ITERATIONS", "10")
	t.Setenv("FDBREP_REPLICATOR__INTERVAL_SEC", "1") // the reseal pass steps at each interval
	args = append([]string{"-data-dir", dir, "-bind", "127.0.0.1:0", "-log-format", "json"}, args...)
	addr, logs, stop := background(t, "serve", func(ctx context.Context, logs io.Writer, ready chan<- string) error {
		return serve(ctx, args, logs, ready)
	})
	return sealNode{base: "http://" + addr, logs: logs, stop: stop}
}

var sealAdmin = &testutil.Creds{Name: nodeAdmin, Pass: nodePass}

// putCredentialsDoc writes a _replicator document whose endpoints carry
// password, and checks that reads show it as *****.
func putCredentialsDoc(t *testing.T, base, id, password string, sealed bool) {
	t.Helper()
	src := "http://u:" + password + "@127.0.0.1:9/src"
	r := testutil.Do(t, http.MethodPut, base+"/_replicator/"+id, sealAdmin, map[string]any{"source": src, "target": src + "2"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	r = testutil.Do(t, http.MethodGet, base+"/_replicator/"+id, sealAdmin, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, sealed, !strings.Contains(r.Raw, password), "a sealed credential reads as *****: %s", r.Raw)
}

// sealedKeyID is the key id the stored document id's source credential
// is sealed with ("" in the clear), read from the store in dir.
func sealedKeyID(t *testing.T, dir, id string) string {
	t.Helper()
	db, err := embedded.Open(embedded.Options{Dir: dir})
	require.NoError(t, err)
	defer db.Close()
	d, err := repdb.New(db, repdb.Options{}).ReadDoc(context.Background(), "_replicator", id)
	require.NoError(t, err)
	u, err := url.Parse(d.Body["source"].(string))
	require.NoError(t, err)
	pw, _ := u.User.Password()
	kid, _ := seal.KeyID(pw)
	return kid
}

// make run seals credentials by default: a node with both roles on a data
// directory, with no key configured, makes a key there at its first start
// and says so once; every credential is sealed with it (reads show *****,
// nothing in the store's files holds one in the clear); the next start
// uses the same key.
func TestDataDirSealsByDefault(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, node.SealKeyFile)
	n := startSealNode(t, dir)
	require.Equal(t, 1, strings.Count(n.logs.String(), sealKeyCreated), n.logs.String())
	require.NotContains(t, n.logs.String(), "seal_public_key_file is not set", "no warning")
	fi, err := os.Stat(keyFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	key, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	r := testutil.Do(t, http.MethodGet, n.base+"/_node/_local/_config/replicator/seal_private_key_files", sealAdmin, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Contains(t, r.Raw, keyFile)
	putCredentialsDoc(t, n.base, "first", "pw-first-start-s3cret", true)
	n.stop()

	n = startSealNode(t, dir)
	require.NotContains(t, n.logs.String(), sealKeyCreated, "said once")
	putCredentialsDoc(t, n.base, "second", "pw-second-start-s3cret", true)
	n.stop()
	again, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	require.Equal(t, key, again, "the same key")

	s, err := seal.LoadPublicKey(keyFile)
	require.NoError(t, err)
	for _, id := range []string{"first", "second"} {
		require.Equal(t, s.ID(), sealedKeyID(t, dir, id), "%s is sealed to the data directory's key", id)
	}
	db, err := embedded.Open(embedded.Options{Dir: dir})
	require.NoError(t, err)
	defer db.Close()
	keys, files := kvtest.RequireNotStored(t, db, dir, []byte("pw-first-start-s3cret"), []byte("pw-second-start-s3cret"))
	require.Positive(t, keys)
	require.Positive(t, files)
}

// A store that holds credentials in the clear (written before a key was
// configured: here by a frontend-only node, which makes no key) has them
// sealed by the reseal pass once a node with both roles made the key.
func TestDataDirKeySealsAnOlderStore(t *testing.T) {
	dir := t.TempDir()
	n := startSealNode(t, dir, "-roles", "api_frontend")
	require.Contains(t, n.logs.String(), "seal_public_key_file is not set", "a frontend alone makes no key")
	putCredentialsDoc(t, n.base, "older", "pw-older-s3cret", false)
	n.stop()
	require.NoFileExists(t, filepath.Join(dir, node.SealKeyFile))
	require.Empty(t, sealedKeyID(t, dir, "older"), "stored in the clear")

	n = startSealNode(t, dir)
	require.Contains(t, n.logs.String(), sealKeyCreated)
	testutil.Eventually(t, "a reseal pass ended", func() bool { return strings.Contains(n.logs.String(), scheduler.MsgResealEnded) })
	r := testutil.Do(t, http.MethodGet, n.base+"/_replicator/older", sealAdmin, nil)
	require.NotContains(t, r.Raw, "pw-older-s3cret")
	n.stop()
	require.NotEmpty(t, sealedKeyID(t, dir, "older"))
	// The store's records; its files may keep the older values until
	// compaction rewrites them.
	db, err := embedded.Open(embedded.Options{Dir: dir})
	require.NoError(t, err)
	defer db.Close()
	kvtest.RequireNotStored(t, db, "", []byte("pw-older-s3cret"))
}
