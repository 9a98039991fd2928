package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/seal"
)

// SealKeys writes a fresh sealing key pair (package seal) into a
// temporary directory of t and returns the paths of its public and private
// key files.
func SealKeys(t testing.TB) (public, private string) {
	t.Helper()
	priv, pub, err := seal.GenerateKey()
	require.NoError(t, err)
	dir := t.TempDir()
	public, private = filepath.Join(dir, "seal.pub"), filepath.Join(dir, "seal.key")
	require.NoError(t, os.WriteFile(public, pub, 0o644))
	require.NoError(t, os.WriteFile(private, priv, 0o600))
	return public, private
}
