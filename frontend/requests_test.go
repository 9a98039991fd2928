package frontend

import (
	"bytes"
	"compress/gzip"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
)

func TestGzipBodiesAndChangesFilter(t *testing.T) {
	e := newEnv(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"source":"http://a/b","target":"http://c/d"}`))
	require.NoError(t, zw.Close())
	r := e.do("PUT", "/_replicator/gz", asAdmin, buf.Bytes(), "Content-Encoding", "gzip")
	require.Equal(t, 201, r.Status, r.Raw)
	requireError(t, e.do("PUT", "/_replicator/gz2", asAdmin, []byte("not gzip"), "Content-Encoding", "gzip"), 400, "bad_request")
	requireError(t, e.do("PUT", "/_replicator/gz2", asAdmin, "{}", "Content-Encoding", "br"), 415, "bad_content_type")
	// A gzip bomb is cut at the size limit.
	buf.Reset()
	zw = gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"x":"`))
	_, _ = zw.Write(bytes.Repeat([]byte("a"), 4<<20))
	_, _ = zw.Write([]byte(`"}`))
	require.NoError(t, zw.Close())
	requireError(t, e.do("PUT", "/_replicator/bomb", asAdmin, buf.Bytes(), "Content-Encoding", "gzip"), 413, "too_large")

	require.Equal(t, 201, e.do("PUT", "/_replicator/other", asAdmin, repDoc()).Status)
	r = e.do("POST", "/_replicator/_changes?filter=_doc_ids", asAdmin, map[string]any{"doc_ids": []string{"gz"}})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Len(t, r.Body["results"], 1)
	r = e.do("GET", `/_replicator/_changes?filter=_doc_ids&doc_ids=%5B%22other%22%5D`, asAdmin, nil)
	require.Len(t, r.Body["results"], 1)
	requireError(t, e.do("GET", "/_replicator/_changes?filter=ddoc/f", asAdmin, nil), 400, "bad_request")
}

func TestOptionsFromConfig(t *testing.T) {
	cfg, err := config.FromMap(map[string]map[string]string{
		"admins":              {"root": "pw"},
		"users":               {"u": "-pbkdf2-" + mustHex(t, "upw", "sha", "salt", 3) + ",salt,3"},
		"user_roles":          {"u": "a,b"},
		"chttpd_auth":         {"iterations": "3", "secret": "s3", "timeout": "60", "auth_cache_size": "0"},
		"chttpd":              {"max_json_depth": "5", "admin_only_all_dbs": "false", "trusted_proxies": "10.0.0.7, 192.168.1.0/24,::1"},
		"chttpd_auth_lockout": {"mode": "warn", "threshold": "3", "max_lifetime": "60000", "max_objects": "7"},
	})
	require.NoError(t, err)
	o, plain, err := OptionsFromConfig(cfg)
	require.NoError(t, err)
	require.Equal(t, Lockout{Mode: LockoutWarn, Threshold: 3, MaxLifetime: time.Minute, MaxObjects: 7}, o.Lockout)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("192.168.1.0/24"),
		netip.MustParsePrefix("::1/128")}, o.TrustedProxies)
	require.Equal(t, []string{"root"}, plain)
	require.Equal(t, []byte("s3"), o.Secret)
	require.Equal(t, time.Minute, o.SessionTimeout)
	require.Equal(t, 5, o.MaxJSONDepth)
	require.True(t, o.PublicAllDBs)
	require.Equal(t, -1, o.AuthCacheSize)
	require.Equal(t, []string{"a", "b"}, o.Accounts.byName["u"].roles)
	ok, err := verifyPassword(o.Accounts.byName["u"].hash, "upw")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = verifyPassword(o.Accounts.byName["root"].hash, "pw")
	require.NoError(t, err)
	require.True(t, ok)
}

// [chttpd] trusted_proxies takes addresses and networks only.
func TestTrustedProxiesConfig(t *testing.T) {
	_, err := config.FromMap(map[string]map[string]string{"chttpd": {"trusted_proxies": "10.0.0.1,lb.example"}})
	require.ErrorIs(t, err, config.ErrInvalidValue)
	require.ErrorContains(t, err, `[chttpd] trusted_proxies: "lb.example" is neither an address`)
}
