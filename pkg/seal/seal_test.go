package seal_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/seal"
)

// keyPair writes a new key pair in dir as name.key and name.pub.
func keyPair(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	k, p, err := seal.GenerateKey()
	require.NoError(t, err)
	priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	require.NoError(t, os.WriteFile(priv, k, 0o600))
	require.NoError(t, os.WriteFile(pub, p, 0o644))
	return priv, pub
}

func TestSealOpen(t *testing.T) {
	dir := t.TempDir()
	priv, pub := keyPair(t, dir, "a")
	s, err := seal.LoadPublicKey(pub)
	require.NoError(t, err)
	o, err := seal.LoadPrivateKeys(priv)
	require.NoError(t, err)
	require.Equal(t, s.ID(), o.Current().ID())
	fromPriv, err := seal.LoadPublicKey(priv)
	require.NoError(t, err)
	require.Equal(t, s.ID(), fromPriv.ID(), "a private key file gives its public key")

	ctx, bind := []byte("_replicator/doc1 source"), []byte("https://db.example:443")
	v, err := s.Seal("s3cret:pass@word", ctx, bind)
	require.NoError(t, err)
	require.True(t, seal.IsSealed(v))
	require.NotContains(t, v, "s3cret")
	id, ok := seal.KeyID(v)
	require.True(t, ok)
	require.Equal(t, s.ID(), id)
	require.True(t, seal.Bound(v))
	v2, err := s.Seal("s3cret:pass@word", ctx, bind)
	require.NoError(t, err)
	require.NotEqual(t, v, v2, "each seal is fresh")

	got, err := o.Open(v, ctx, bind)
	require.NoError(t, err)
	require.Equal(t, "s3cret:pass@word", got)

	_, err = o.Open(v, []byte("_replicator/doc2 source"), bind)
	require.ErrorIs(t, err, seal.ErrCorrupt, "another context does not open it")
	_, err = o.Open(v, ctx, []byte("http://evil.example:80"))
	require.ErrorIs(t, err, seal.ErrCorrupt, "another binding does not open it")
	_, err = o.Open(strings.Replace(v, ".b:", ":", 1), ctx, nil)
	require.ErrorIs(t, err, seal.ErrCorrupt, "a bound value passed off as one sealed before bindings does not open")
	tampered := v[:len(v)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(v, "AA")]
	_, err = o.Open(tampered, ctx, bind)
	require.ErrorIs(t, err, seal.ErrCorrupt)
	_, err = o.Open("plain", ctx, bind)
	require.ErrorIs(t, err, seal.ErrCorrupt)
	_, err = o.Open(seal.Prefix+s.ID()+":!!", ctx, bind)
	require.ErrorIs(t, err, seal.ErrCorrupt)

	other, _ := keyPair(t, dir, "b")
	ob, err := seal.LoadPrivateKeys(other)
	require.NoError(t, err)
	_, err = ob.Open(v, ctx, bind)
	require.ErrorIs(t, err, seal.ErrNoKey)
	require.Contains(t, err.Error(), s.ID(), "the error names the key the value needs")
}

// Rotation: a node holding the new key first and the old one second opens
// both and reseals the old values to the new key.
func TestReseal(t *testing.T) {
	dir := t.TempDir()
	oldPriv, oldPub := keyPair(t, dir, "old")
	newPriv, _ := keyPair(t, dir, "new")
	s, err := seal.LoadPublicKey(oldPub)
	require.NoError(t, err)
	bind := []byte("https://db.example:443")
	v, err := s.Seal("pw", nil, bind)
	require.NoError(t, err)
	o, err := seal.LoadPrivateKeys(newPriv, oldPriv)
	require.NoError(t, err)
	require.True(t, o.Stale(v))
	require.True(t, o.Holds(v))
	newOnly, err := seal.LoadPrivateKeys(newPriv)
	require.NoError(t, err)
	require.False(t, newOnly.Holds(v), "sealed to a key it lacks")
	require.False(t, newOnly.Holds("pw"), "not sealed")
	_, err = o.Reseal(v, nil, []byte("http://evil.example:80"))
	require.ErrorIs(t, err, seal.ErrCorrupt, "resealing does not change the binding")
	r, err := o.Reseal(v, nil, bind)
	require.NoError(t, err)
	require.False(t, o.Stale(r))
	require.True(t, seal.Bound(r))
	id, _ := seal.KeyID(r)
	require.Equal(t, o.Current().ID(), id)
	got, err := o.Open(r, nil, bind)
	require.NoError(t, err)
	require.Equal(t, "pw", got)
	_, err = o.Open(r, nil, []byte("http://evil.example:80"))
	require.ErrorIs(t, err, seal.ErrCorrupt, "the binding moved with the value")
	same, err := o.Reseal(r, nil, bind)
	require.NoError(t, err)
	require.Equal(t, r, same, "a current value is left as it is")
	onlyNew, err := seal.LoadPrivateKeys(newPriv)
	require.NoError(t, err)
	_, err = onlyNew.Open(v, nil, bind)
	require.ErrorIs(t, err, seal.ErrNoKey, "once the old key is dropped, its values need resealing first")
}

// legacyValue was sealed by fdbrep before bindings existed, to the key of
// testdata/legacy.key, under context "ctx", with plaintext "S3rvicePW".
const legacyValue = "fdbrep-sealed:v1:2d122f77d088e017:UTkplM4ZEvW7iulTBy8_DZEHlI3uoOV54i4vXddEWh9WUEhfVndf-0IE3j264M0RTR6_ulHRlv02"

// A value sealed before bindings existed opens under its context whatever
// the binding, and Reseal binds it, to the current key as it is.
func TestLegacyValue(t *testing.T) {
	o, err := seal.LoadPrivateKeys("testdata/legacy.key")
	require.NoError(t, err)
	require.False(t, seal.Bound(legacyValue))
	require.False(t, o.Stale(legacyValue))
	id, _ := seal.KeyID(legacyValue)
	require.Equal(t, o.Current().ID(), id)
	for _, bind := range []string{"", "https://db.example:443", "http://evil.example:80"} {
		got, err := o.Open(legacyValue, []byte("ctx"), []byte(bind))
		require.NoError(t, err)
		require.Equal(t, "S3rvicePW", got)
	}
	_, err = o.Open(legacyValue, []byte("another"), nil)
	require.ErrorIs(t, err, seal.ErrCorrupt)

	bind := []byte("https://db.example:443")
	r, err := o.Reseal(legacyValue, []byte("ctx"), bind)
	require.NoError(t, err)
	require.True(t, seal.Bound(r))
	got, err := o.Open(r, []byte("ctx"), bind)
	require.NoError(t, err)
	require.Equal(t, "S3rvicePW", got)
	_, err = o.Open(r, []byte("ctx"), []byte("http://evil.example:80"))
	require.ErrorIs(t, err, seal.ErrCorrupt, "bound by the reseal")
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv, pub := keyPair(t, dir, "a")
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(ec)
	require.NoError(t, err)
	ecFile := filepath.Join(dir, "ec.key")
	require.NoError(t, os.WriteFile(ecFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, []byte("not pem"), 0o600))

	for _, tc := range []struct {
		name, file, want string
		private          bool
	}{
		{"missing", filepath.Join(dir, "none"), "no such file", true},
		{"not PEM", junk, "no PEM block", true},
		{"public key as private", pub, `"PUBLIC KEY" block`, true},
		{"not X25519", ecFile, "not an X25519 private key", true},
		{"not X25519 public", ecFile, "not an X25519 private key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.private {
				_, err = seal.LoadPrivateKeys(priv, tc.file)
			} else {
				_, err = seal.LoadPublicKey(tc.file)
			}
			require.ErrorIs(t, err, seal.ErrKeyFile)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = seal.LoadPrivateKeys()
	require.ErrorIs(t, err, seal.ErrKeyFile)
}

// Keys made by OpenSSL, as docs/DEPLOY.md says to make them, load.
func TestOpenSSLKeys(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "seal.key"), filepath.Join(dir, "seal.pub")
	out, err := exec.Command("openssl", "genpkey", "-algorithm", "X25519", "-out", priv).CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command("openssl", "pkey", "-in", priv, "-pubout", "-out", pub).CombinedOutput()
	require.NoError(t, err, string(out))
	s, err := seal.LoadPublicKey(pub)
	require.NoError(t, err)
	o, err := seal.LoadPrivateKeys(priv)
	require.NoError(t, err)
	v, err := s.Seal("pw", []byte("c"), []byte("b"))
	require.NoError(t, err)
	got, err := o.Open(v, []byte("c"), []byte("b"))
	require.NoError(t, err)
	require.Equal(t, "pw", got)
}
